"""The benchmark at every budget: one benchmark per λ (fixed triggers calibrated at each), a cost-conditioned policy
told each λ, one snapshot chosen over every budget, and the frontier summary (curves, gaps, area)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from envs.core.config import ConfigError
from eval.bench.budgets import frontier_area
from eval.bench.policies import BenchConfig, run_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))


def _cfg(tmp_path, policy, **kw):
    env = {"split": "dev", "rsus_components": ["ent"], "signals": ["output"], "observe_costs": ["retrieval_calls"],
           "cache_path": str(tmp_path / "cache.sqlite")}
    methods = [{"name": "CoT", "kind": "never"},
               {"name": "FLARE[unmasked]", "kind": "threshold", "signal": "minprob", "direction": "below"},
               {"name": "CacheOracle", "kind": "cache_oracle"},
               {"name": "budget(s0)", "kind": "learned", "path": str(policy), "select_on_dev": True,
                "group": "budget"},
               {"name": "at 0.4", "kind": "learned", "path": str(policy), "lam": 0.4, "group": "at 0.4"}]
    return BenchConfig.from_dict({"name": "budgets", "out_dir": str(tmp_path / "bench"), "env": env, "dev": "0:6",
                                  "test": "6:18", "n_resamples": 200, "methods": methods, **kw})


def test_config_errors():
    with pytest.raises(ConfigError, match="must include lambda_retrieval"):
        BenchConfig.from_dict({"lambdas": [0.2, 0.3], "methods": [{"name": "CoT", "kind": "never"}]})
    with pytest.raises(ConfigError, match="twice"):
        BenchConfig.from_dict({"lambdas": [0.1, 0.1], "methods": [{"name": "CoT", "kind": "never"}]})
    with pytest.raises(ConfigError, match="reuse_episodes_from 'nowhere' is not a benchmark's folder"):
        BenchConfig.from_dict({"reuse_episodes_from": "nowhere", "methods": [{"name": "CoT", "kind": "never"}]})
    with pytest.raises(ConfigError, match="compare entry"):
        BenchConfig.from_dict({"compare": [["a", "b"]], "methods": [{"name": "CoT", "kind": "never"}]})


def test_frontier_area_is_zero_for_the_same_curve_and_signed():
    pts = [(0.0, 0.5), (1.0, 0.8), (2.0, 0.9)]
    assert frontier_area(pts, pts)["area"] == pytest.approx(0.0)
    assert frontier_area([(0.0, 0.4), (2.0, 0.7)], pts)["area"] < 0
    assert frontier_area([(3.0, 1.0)], pts)["area"] is None  # no calls range in common


@pytest.mark.slow
def test_one_policy_at_every_budget_against_fixed_triggers_calibrated_at_each(tmp_path, caplog):
    import logging

    from test_conditioning import _budget_policy

    caplog.set_level(logging.DEBUG, logger="eval.bench.policies")

    policy = _budget_policy(tmp_path)  # retrieves exactly when λ < 0.2
    shutil.copytree(policy, tmp_path / "snapshots" / "iter_0001")  # a candidate snapshot for the selection
    cfg = _cfg(tmp_path, policy, lambdas=[0.05, 0.4], lambda_retrieval=0.05)
    s = run_bench(cfg)
    out = tmp_path / "bench"
    assert s["setup"]["lambda_retrieval"] == 0.05 and "budgets" in s
    for f in ("budgets.json", "budgets.md", "frontier.png", "lambda=0.05/summary.json", "lambda=0.4/summary.json"):
        assert (out / f).is_file(), f
    b = json.loads((out / "budgets.json").read_text())
    cheap, dear = b["per_lambda"]["0.05"], b["per_lambda"]["0.4"]
    assert b["groups"]["budget"]["conditioned"] and not b["groups"]["at 0.4"]["conditioned"]
    assert cheap["groups"]["budget"]["calls"] > 0 and dear["groups"]["budget"]["calls"] == 0  # it reads λ
    assert "vs_best_fixed" in cheap["groups"]["budget"] and "gap" in cheap["groups"]["budget"]
    # the specialist trained at 0.4 is compared at 0.4 only
    assert list(dear["vs_specialist"]) == ["budget vs at 0.4"] and not cheap["vs_specialist"]
    assert b["selection"]["budget(s0)"]["chosen"] in (str(policy), str(tmp_path / "snapshots" / "iter_0001"))
    assert len(b["curves"]["learned"]["budget"]) == 2 and len(b["curves"]["oracle"]) == 2
    assert "FLARE[unmasked]" in b["curves"]["fixed"] and b["area"]["budget"]["range"] is not None
    # each λ's benchmark calibrated its fixed triggers at its own λ
    for lam in ("0.05", "0.4"):
        one = json.loads((out / f"lambda={lam}" / "summary.json").read_text())
        assert one["setup"]["lambda_retrieval"] == float(lam)
        assert one["methods"]["budget(s0)"]["calls"] == (cheap if lam == "0.05" else dear)["groups"]["budget"]["calls"]
    # a fixed trigger's episodes ran once, at the first λ: the later λ holds them with rewards at its own λ; the
    # policy that reads λ ran again
    def rows(lam, split, pattern):
        (f,) = (out / f"lambda={lam}" / "per_question" / split).glob(pattern)
        return sorted((json.loads(x) for x in f.read_text().splitlines()), key=lambda r: r["question_index"])

    for split in ("dev", "test"):
        a, b = rows("0.05", split, "FLARE_unmasked__never.jsonl"), rows("0.4", split, "FLARE_unmasked__never.jsonl")
        assert [r["decisions"][-1]["step"] for r in a] == [r["decisions"][-1]["step"] for r in b]
        assert all(r["reward"] == pytest.approx(r["quality"] - 0.4 * r["calls"]) for r in b)
    copied = [r.getMessage() for r in caplog.records if "copied from" in r.getMessage()]
    assert copied and all("lambda=0.4" in c and ".w" not in c.split(":")[0] for c in copied)
    assert any("FLARE_unmasked__never.jsonl" in c for c in copied)
    assert [r["calls"] for r in rows("0.4", "test", "budget_s0_*.w*.jsonl")] != \
        [r["calls"] for r in rows("0.05", "test", "budget_s0_*.w*.jsonl")]
    # an application names one λ's folder; the top folder says which exist
    from eval.bench.policies import evaluated_policy

    with pytest.raises(FileNotFoundError, match="lambda=0.05"):
        evaluated_policy(out, "budget(s0)")
    env, trigger, _ = evaluated_policy(out / "lambda=0.4", "budget(s0)")
    assert env.costs["retrieval_calls"] == 0.4


def test_a_run_at_another_lambda_is_copied_with_its_rewards_recomputed_only_when_they_reproduce(tmp_path):
    from types import SimpleNamespace

    from eval.bench.runner import Runner, rewarded

    def row(q, quality, calls):
        decisions = [{"step": f"s{i}", "costs": {"retrieval_calls": float(i < calls)}} for i in range(3)]
        return {"question_index": q, "quality": quality, "calls": calls, "decisions": decisions}

    fp = {"namespace": "ns", "split": "dev", "episode": {"answer_closing": True}}
    src = tmp_path / "lambda=0.1" / "per_question"
    src.mkdir(parents=True)
    (src / "fingerprint.json").write_text(json.dumps({**fp, "lambda_retrieval": 0.1}))
    at_01 = rewarded([row(0, 1.0, 1), row(1, 0.0, 2), row(2, float("nan"), 0)], {"retrieval_calls": 0.1})
    assert [r["reward"] for r in at_01][:2] == [pytest.approx(0.9), pytest.approx(-0.2)]
    assert at_01[2]["reward"] == 0.0  # an ungraded answer (NaN quality) adds nothing: the costs alone
    (src / "dev").mkdir()
    (src / "dev" / "T.jsonl").write_text("".join(json.dumps(r) + "\n" for r in at_01))
    me = SimpleNamespace(fingerprint={**fp, "lambda_retrieval": 0.3})

    dest = tmp_path / "lambda=0.3" / "dev" / "T.jsonl"
    assert Runner._reuse(me, src / "dev" / "T.jsonl", dest, range(3), {"retrieval_calls": 0.3})
    got = [json.loads(x) for x in dest.read_text().splitlines()]
    assert [r["reward"] for r in got][:2] == [pytest.approx(0.7), pytest.approx(-0.6)]
    assert [d["reward"] for d in got[1]["decisions"]] == [pytest.approx(-0.3), pytest.approx(-0.3), 0.0]
    # not copied: an existing file, a question the source lacks, another env, rewards it does not reproduce
    assert not Runner._reuse(me, src / "dev" / "T.jsonl", dest, range(3), {"retrieval_calls": 0.3})
    other = tmp_path / "other" / "T.jsonl"
    assert not Runner._reuse(me, src / "dev" / "T.jsonl", other, range(4), {"retrieval_calls": 0.3})
    assert not Runner._reuse(SimpleNamespace(fingerprint={**fp, "split": "test"}), src / "dev" / "T.jsonl", other,
                             range(3), {"retrieval_calls": 0.3})
    at_01[0]["reward"] = 0.5
    (src / "dev" / "T.jsonl").write_text("".join(json.dumps(r) + "\n" for r in at_01))
    assert not Runner._reuse(me, src / "dev" / "T.jsonl", other, range(3), {"retrieval_calls": 0.3})
    assert not other.exists()
