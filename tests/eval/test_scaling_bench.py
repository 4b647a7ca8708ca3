"""kairos bench scaling and the micro-world's long chains (task microworld_chain): the chain's ground truth (every
sub-answer graded, every step labelled against its own sub-question), the env running a chain end to end, the
power-law fit, the bench at a tiny size through the CLI and a bad flag's one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _needs import needs_hotpotqa, needs_smollm2, needs_vllm

from envs.core.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world():
    from envs.core.microworld.artifact import load_artifact

    return load_artifact(with_model=False)


def _task(world, questions=3, count=4):
    from envs.env_config import ChainSettings
    from envs.microworld.chain import ChainTask

    return ChainTask(world, "train", ChainSettings(questions=questions, hops=3, count=count))


def test_a_chain_grades_every_sub_answer(world):
    from envs.core.microworld.labels import gold_answer

    task = _task(world)
    q = task.questions[0]
    assert len(q.parts) == 3 and all(p.hops == 3 for p in q.parts) and len(task.questions) == 4
    gold = [gold_answer(world.kb, p) for p in q.parts]
    assert task.quality(q, " ; ".join(gold)) == 1.0
    assert task.metrics(q, " ; ".join(gold)) == {"acc": 1.0, "all_correct": 1.0}
    wrong = next(e for e in world.kb.entities["person"] + world.kb.entities["city"] if e != gold[1])
    assert task.quality(q, " ; ".join([gold[0], wrong, gold[2]])) == pytest.approx(2 / 3)  # a wrong sub-answer
    assert task.metrics(q, " ; ".join([gold[0], wrong, gold[2]]))["all_correct"] == 0.0
    assert task.quality(q, gold[0]) == pytest.approx(1 / 3)  # sub-questions not reached count as wrong
    assert task.metrics(q, None) == {"acc": 0.0, "all_correct": 0.0}
    assert len({c.id for c in task.questions}) == 4 and " | " in q.text


def test_every_step_is_labelled_against_its_own_sub_question(world):
    from envs.core.microworld.labels import gold_answer
    from envs.core.microworld.questions import gold_chain

    task = _task(world, questions=2, count=2)
    q = task.questions[0]
    pos, step, answers = None, 0, []
    for i, part in enumerate(q.parts):
        for fact in gold_chain(world.kb, part):
            step += 1
            label, kind, pos = task.label(q, step, pos, fact.sentence, False)
            assert (label, kind) == ("correct", None)
        step += 1
        answers.append(gold_answer(world.kb, part))
        if i < len(q.parts) - 1:  # a sub-answer line: a step of the chain
            assert task.label(q, step, pos, "Answer : Nobody", False)[:2] == ("answer_wrong", "answer")
            label, kind, pos = task.label(q, step, pos, "Answer : " + answers[-1], False)
            assert (label, kind, pos) == ("answer_correct", None, f"1@{step + 1}/")
        else:  # the chain's answer line: every sub-answer; labelled for the last sub-question
            assert task.label(q, step, pos, " ; ".join(answers), True)[:2] == ("answer_correct", None)
            assert task.label(q, step, pos, answers[0] + " ; Nobody", True)[:2] == ("answer_wrong", "answer")
    # the first sub-question's first fact, stated where the second sub-question's first step is due: off its chain
    first, second = gold_chain(world.kb, q.parts[0])[0], gold_chain(world.kb, q.parts[1])[0]
    start = q.parts[0].hops + 2
    if (first.subject, first.relation) != (second.subject, second.relation):
        assert task.label(q, start, f"1@{start}/", first.sentence, False)[0] == "off_chain"


def test_the_env_runs_a_chain_of_sub_questions_end_to_end():
    from envs.env_config import EnvConfig
    from envs.retrieval_env import RetrievalTimingEnv

    cfg = EnvConfig.from_dict({"task": "microworld_chain", "max_steps": 10, "rsus_components": ["ent"],
                               "chain": {"questions": 2, "hops": 3, "count": 3}})
    env = RetrievalTimingEnv(cfg)
    obs, info = env.reset(options={"question_index": 0})
    labels, done, steps = [info.get("label")], False, 0
    while not done:
        obs, r, te, tr, info = env.step(1 if steps == 1 else 0)
        steps += 1
        done = te or tr
        labels.append(info.get("label"))
    q = env.c.task.questions[0]
    assert info["answer_status"] in ("answered", "closed") and info["retrievals"] == 1
    assert len(info["answer_content"].split(" ; ")) == 2
    assert info["quality"] == env.c.task.quality(q, info["answer_content"])
    assert info["metrics"]["acc"] == info["quality"]
    assert sum(lab in ("answer_correct", "answer_wrong") for lab in labels) >= 2  # one per sub-question
    assert steps >= 8  # 2 sub-questions x (3 steps + the answer line)
    env.close()


def test_chain_settings_errors_say_the_fix():
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="chain holds the settings of task 'microworld_chain'"):
        EnvConfig.from_dict({"task": "microworld", "chain": {"questions": 2}})
    with pytest.raises(ConfigError, match="set max_steps: 16 or more"):
        EnvConfig.from_dict({"task": "microworld_chain", "max_steps": 8, "chain": {"questions": 4, "hops": 3}})
    with pytest.raises(ConfigError, match="questions' must be >= 1"):
        EnvConfig.from_dict({"task": "microworld_chain", "chain": {"questions": 0}})
    assert "chain" not in EnvConfig().to_dict()  # unset: every other env's dict (and cache namespace) as before


def test_distractors_name_no_entity_of_the_world(world):
    from envs.core.microworld.corpus import distractor_passages

    ds = distractor_passages(world.kb, 700, seed=1)
    assert len(ds) == 700 and len({t for _, t in ds}) == 700
    assert not any(w in world.kb.entity_type for _, t in ds for w in t.split())
    assert distractor_passages(world.kb, 50, seed=1) == ds[:50]  # seeded


def test_the_power_law_fit_recovers_the_exponent():
    from eval.perf.scaling_report import fit_axis, fit_power_law

    rng = np.random.default_rng(0)
    x = np.array([4, 8, 16, 32, 64], dtype=float)
    y = 0.7 * x ** 1.8 * np.exp(rng.normal(0, 0.03, size=x.size))
    f = fit_power_law(list(x), list(y))
    assert f["exponent"] == pytest.approx(1.8, abs=0.05) and f["r2"] > 0.99 and f["n"] == 5
    assert fit_power_law([4], [1.0])["exponent"] is None
    fits = fit_axis([4, 8, 16], {"labels": [{"wall_s": 1.0}, {"wall_s": 4.0}, {"skipped": "over budget"}]},
                    ["wall_s"])
    assert fits["labels"]["wall_s"]["exponent"] == pytest.approx(2.0) and fits["labels"]["wall_s"]["n"] == 2
    assert fits["labels"]["wall_s"]["ratio_to_baseline"] == [1.0, 4.0]


def test_returns_to_go_follow_each_episode():
    from eval.perf.scaling_costs import returns_to_go

    assert returns_to_go([(3, -0.1), (5, 0.0), (3, 1.0), (5, -0.1), (5, 0.5)]) == [0.9, 0.4, 1.0, 0.4, 0.5]


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "eval.cli", "bench", "scaling", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("flag,value,says", [
    ("--chain-lengths", "4,x", "--chain-lengths '4,x' is not a comma-separated list of integers"),
    ("--chain-lengths", "6", "6 steps is not a multiple of hops + 1 = 4"),
    ("--size", "0", "key 'size' must be > 0"),
    ("--costs", "episode,nope", "unknown 'nope'"),
    ("--labels-horizon", "0", "key 'labels_horizon' must be >= 1"),
    ("--render-only", None, "--render-only: no "),
])
def test_a_bad_flag_is_one_error_line(flag, value, says, tmp_path):
    r = _cli(*([flag] if value is None else [flag, value]), "--out", str(tmp_path / "s"), timeout=120)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("kairos bench: error:"), r.stderr


def test_the_chain_length_axis_through_the_cli_in_seconds(tmp_path):
    out = tmp_path / "scaling"
    r = _cli("--axes", "chain_length", "--costs", "episode,labels", "--chain-lengths", "4,8", "--length-chains", "2",
             "--batch", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    cl = json.loads((out / "scaling_bench.json").read_text())["axes"]["chain_length"]
    labels, episode = cl["points"]["labels"], cl["points"]["episode"]
    assert labels[1]["tokens"] > labels[0]["tokens"] > 0 and labels[1]["cache_bytes"] > 0
    assert episode[0]["unit"] == "episode" and episode[1]["steps"] > episode[0]["steps"]
    assert cl["fits"]["labels"]["tokens"]["exponent"] > cl["fits"]["episode"]["tokens"]["exponent"] > 0
    assert (out / "scaling_chain_length.png").is_file() and "| labels (per question) | generated tokens |" in \
        (out / "scaling_bench.md").read_text()
    (out / "scaling_bench.md").unlink()
    assert _cli("--render-only", "--out", str(out)).returncode == 0 and (out / "scaling_bench.md").is_file()


def test_the_horizon_labels_beside_the_exact_ones_on_the_chain_length_axis(tmp_path):
    """labels_horizon: fewer generated tokens per decision than the exact labels once the chain is longer than the
    horizon, and where both ran their agreement (y and ΔR) in the JSON and the Markdown."""
    out = tmp_path / "scaling"
    r = _cli("--axes", "chain_length", "--costs", "labels,labels_horizon", "--chain-lengths", "4,8",
             "--length-chains", "2", "--labels-horizon", "2", "--batch", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((out / "scaling_bench.json").read_text())
    assert rep["config"]["labels_horizon"] == 2
    cl = rep["axes"]["chain_length"]
    exact, horizon = cl["points"]["labels"], cl["points"]["labels_horizon"]
    assert all(h["horizon"] == 2 and h["decisions"] == e["decisions"] for e, h in zip(exact, horizon))
    assert horizon[1]["tokens_per_decision"] < exact[1]["tokens_per_decision"]
    assert all(0.0 <= h["agreement_y"] <= 1.0 and 0.0 <= h["delta_equal_share"] <= 1.0 for h in horizon)
    assert all(h["delta_corr"] is None or -1.0 <= h["delta_corr"] <= 1.0 for h in horizon)
    assert not any("_labels" in row for rows in cl["points"].values() for row in rows)
    assert "tokens_per_decision" in cl["fits"]["labels_horizon"]
    md = (out / "scaling_bench.md").read_text()
    assert "| labels_horizon (per question) | tokens / decision |" in md
    assert "- labels_horizon (H = 2) at steps 8: y agrees with the exact labels on" in md


def test_the_scaling_bench_defaults_measure_the_horizon_labels():
    from eval.perf.scaling import ScalingBenchConfig

    cfg = ScalingBenchConfig()
    assert "labels_horizon" in cfg.costs and cfg.labels_horizon is None and cfg.horizon == cfg.hops + 1 == 4
    assert ScalingBenchConfig.from_dict({"labels_horizon": 6}).horizon == 6
    assert ScalingBenchConfig.from_dict({"hops": 2, "chain_lengths": [3, 6], "questions_length": 6,
                                         "corpus_length": 3}).horizon == 3


@pytest.mark.slow
def test_the_scaling_bench_runs_end_to_end_at_a_tiny_size(tmp_path):
    out = tmp_path / "scaling"
    r = _cli("--size", "0.02", "--chain-lengths", "4,8", "--length-chains", "2", "--max-retrievals", "1",
             "--question-counts", "100,200", "--corpus-sizes", "400,800", "--corpus-chains", "2", "--batch", "4",
             "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((out / "scaling_bench.json").read_text())
    assert set(rep["axes"]) == {"chain_length", "questions", "corpus"}
    cl = rep["axes"]["chain_length"]
    assert set(cl["points"]) == {"episode", "labels", "labels_horizon", "oracle", "oracle_labels", "reinforce",
                                 "benchmark"}
    assert all("skipped" not in r for rows in cl["points"].values() for r in rows)
    assert cl["points"]["oracle"][1]["leaves"] > cl["points"]["oracle"][0]["leaves"] >= 1
    assert cl["points"]["reinforce"][0]["unit"] == "iteration" and cl["points"]["reinforce"][0]["decisions"] > 0
    assert rep["axes"]["questions"]["sizes"] == [2, 4]
    corpus = rep["axes"]["corpus"]
    assert set(corpus["points"]) == {"bm25 index", "bm25 search", "bm25 episode"}
    assert corpus["points"]["bm25 index"][1]["index_bytes"] > corpus["points"]["bm25 index"][0]["index_bytes"]
    assert any("PLAID (colbert) masked" in m for m in corpus["masked"])
    md = (out / "scaling_bench.md").read_text()
    assert "exponent" in md and "PLAID (colbert) masked" in md
    assert all((out / f"scaling_{a}.png").is_file() for a in rep["axes"])


def test_a_real_models_chains_are_measured_along_the_chain_length_axis_only(tmp_path):
    r = _cli("--env-from", "configs/experiments/long_chains/train_hotpotqa_thinking16_vllm.yaml",
             "--out", str(tmp_path / "s"), timeout=120)  # the default axes include questions and corpus
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "with env_from" in lines[0] and "axes: [chain_length]" in lines[0]
    r = _cli("--env-from", str(tmp_path / "nope.yaml"), "--axes", "chain_length", "--out", str(tmp_path / "s"),
             timeout=120)
    assert r.returncode == 2 and "nope.yaml" in r.stderr


@pytest.mark.slow
@needs_vllm
@needs_smollm2
@needs_hotpotqa
def test_smollm2_on_vllm_chains_forced_to_each_length_with_the_prefix_cache_hit_rate(tmp_path):
    """The real-model path of the scaling bench: SmolLM2 on vLLM writes a free-form thinking passage that budget
    forcing holds to each length exactly, and every measurement reports vLLM's prefix-cache hit rate."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text("base: " + str(ROOT / "configs/experiments/long_chains/train_hotpotqa_thinking16_vllm.yaml")
                   + "\nenv_config: {max_step_tokens: 12, signals: [output], rsus_components: []}\n")
    out = tmp_path / "scaling"
    r = _cli("--env-from", str(cfg), "--axes", "chain_length", "--costs", "episode,labels", "--chain-lengths", "2,4",
             "--length-chains", "2", "--out", str(out), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    cl = json.loads((out / "scaling_bench.json").read_text())["axes"]["chain_length"]
    episode, labels = cl["points"]["episode"], cl["points"]["labels"]
    assert [row["steps"] for row in episode] == [2.0, 4.0]  # budget forcing: no chain ends before its length
    assert [row["decisions"] for row in labels] == [2.0, 4.0]
    assert all(0.5 < row["prefix_hit_rate"] <= 1.0 and row["forwards"] > 0 for row in episode + labels)
    assert "| labels (per question) | prefix-cache hit rate |" in (out / "scaling_bench.md").read_text()
