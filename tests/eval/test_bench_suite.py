"""``kairos bench suite``: every config validated before anything runs, one summary table; and (slow) one seed
benchmark of each answer kind end to end through its own config on a handful of questions with SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _needs import needs_smollm2

from envs.core.config import ConfigError
from eval.bench.suite import SuiteConfig, load_suite, render_markdown, summary_rows

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suite_seed_benchmarks.yaml"


def _write(path: Path, obj) -> Path:
    path.write_text(yaml.safe_dump(obj, allow_unicode=True))
    return path


def test_every_benchmark_config_is_checked_before_the_first_runs(tmp_path):
    suite, benches = load_suite(str(SUITE))
    assert [b.name for b in benches] == ["musique", "hotpotqa", "medmcqa", "medqa", "mmlu_pro_health", "pubmedqa"]
    assert all(b.env.answer_closing for b in benches)
    bad = yaml.safe_load((REPO / "configs" / "seed" / "pubmedqa.yaml").read_text())
    bad["env"]["max_stepz"] = 4  # a typo in the LAST benchmark
    cfgs = [str(REPO / "configs" / "seed" / "musique.yaml"), str(_write(tmp_path / "bad.yaml", bad))]
    with pytest.raises(ConfigError, match="max_stepz"):
        load_suite(str(_write(tmp_path / "suite.yaml", {"name": "s", "benchmarks": cfgs})))
    with pytest.raises(ConfigError, match="does not exist"):
        load_suite(str(_write(tmp_path / "s2.yaml", {"name": "s", "benchmarks": ["configs/nope.yaml"]})))
    with pytest.raises(ConfigError, match="empty"):
        SuiteConfig.from_dict({"name": "s", "benchmarks": []})
    _, moved = load_suite(str(SUITE), out=str(tmp_path / "o"), overrides=["dev=0:2", "test=2:4"])
    assert moved[0].out_dir == str(tmp_path / "o" / "musique") and moved[0].test == "2:4"
    _, off = load_suite(str(SUITE), overrides=["env.answer_closing=false"])  # a dotted key reaches the env
    assert not any(b.env.answer_closing for b in off)
    with pytest.raises(ConfigError, match="'name' is not a mapping"):
        load_suite(str(SUITE), overrides=["name.x=1"])


def test_summary_table_names_each_benchmark_metric():
    s = {"a": {"setup": {"quality_metric": "f1", "n_test": 3, "task": "musique"},
               "methods": {"CoT": {"accuracy": 0.25, "calls": 0.0, "harm_rate": None, "no_answer_share": 0.5}}},
         "b": {"setup": {"quality_metric": "acc", "n_test": 4, "task": "medqa"},
               "methods": {"CoT": {"accuracy": 0.5, "calls": 0.0, "no_answer_share": 0.0},
                           "IRCoT": {"accuracy": 0.75, "calls": 3.5, "harm_rate": 0.25, "no_answer_share": 0.25}}}}
    t = summary_rows(s)
    md = render_markdown("x", t)
    assert "a (F1, n=3)" in md and "b (accuracy, n=4)" in md
    assert "| IRCoT | – | 0.750 / 3.50 / 0.250 |" in md and "| CoT | 0.500 | 0.000 |" in md


#: retrieval at every step (kind always): the seed configs' IRCoT[step query, 1 passage, ≤4] row
IRCOT = "IRCoT[step query, 1 passage, ≤4]"


@pytest.mark.slow
@needs_smollm2
def test_one_seed_benchmark_per_answer_kind_runs_end_to_end_from_its_config(tmp_path):
    from envs.core.data.loaders import shared_data_dir
    from eval.bench.suite import run_suite

    if not (shared_data_dir() / "medqa").is_dir():
        pytest.skip(f"shared real data not available under {shared_data_dir()}")
    raw = yaml.safe_load(SUITE.read_text())
    benches = []
    # one benchmark per answer kind (extractive with unanswerable questions left out, multiple choice, yes/no/maybe):
    # the six configs are all validated by the fast test above; running three keeps CI inside its budget
    shipped = [b for b in raw["benchmarks"] if Path(b).stem in ("musique", "medqa", "pubmedqa")]
    assert len(shipped) == 3, raw["benchmarks"]
    for b in shipped:  # each config as shipped, on a handful of questions, its cache in tmp
        cfg = yaml.safe_load((REPO / b).read_text())
        cfg["env"]["cache_path"] = str(tmp_path / f"{cfg['name']}.sqlite")
        cfg["n_resamples"] = 200
        # the two extremes — closed book, and a retrieval at every step: every env, retrieval and answer path of
        # the config (threshold calibration, the other rows' code path, is covered on the micro-world)
        cfg["methods"] = [m for m in cfg["methods"] if m["name"] in ("CoT", IRCOT)]
        benches.append(str(_write(tmp_path / f"{cfg['name']}.yaml", cfg)))
    suite_path = _write(tmp_path / "suite.yaml", {"name": "smoke", "benchmarks": benches,
                                                  # two steps: the retrieve-every-step path runs twice per
                                                  # question (SmolLM2 decoding is the test's whole cost)
                                                  "overrides": ["dev=0:1", "test=1:3", "env.max_steps=2"]})
    suite, cfgs = load_suite(str(suite_path), out=str(tmp_path / "out"))
    s = run_suite(suite, cfgs)
    assert list(s["benchmarks"]) == ["musique", "medqa", "pubmedqa"]
    assert {b["metric"] for b in s["benchmarks"].values()} == {"F1", "accuracy"}
    for name in s["benchmarks"]:
        summary = json.loads((tmp_path / "out" / name / "summary.json").read_text())
        assert summary["setup"]["answer_closing"] is True
        cot = summary["methods"]["CoT"]
        assert cot["n"] == 2 and cot["no_answer_share"] is not None and set(cot["metrics"])
        assert summary["methods"][IRCOT]["calls"] > 0 and summary["methods"][IRCOT]["n"] == 2
    assert (tmp_path / "out" / "summary.md").is_file()
