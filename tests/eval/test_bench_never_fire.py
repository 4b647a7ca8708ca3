"""The never-fire point of every threshold sweep (never retrieve: CoT) competes on dev: where retrieval does not pay
the calibrated trigger — and the best fixed trigger — is CoT's row, reported as threshold ``never``; where it pays a
real threshold is still chosen; the files the bench writes stay strict JSON."""

import json
import math
from types import SimpleNamespace

import pytest

from eval.bench import calibration
from eval.bench.methods import MethodSpec, RunContext
from eval.bench.policies import BenchConfig, evaluated_policy, run_bench
from policies.triggers import ThresholdTrigger

INFO = {"signals": {"minprob": 0.2}, "masked_signals": []}
MASKED = {"signals": {"minprob": 0.2}, "masked_signals": ["minprob"]}


def _strict(text: str):
    def refuse(const):
        raise ValueError(f"not strict JSON: {const}")

    return json.loads(text, parse_constant=refuse)


def test_the_never_point_is_a_threshold_no_value_crosses():
    assert calibration.signal_threshold("never", "below") == -math.inf
    assert calibration.signal_threshold("never", "above") == math.inf
    assert calibration.threshold_label("never") == "never" and calibration.threshold_label(0.25) == "0.25"
    for direction in ("below", "above"):
        t = MethodSpec.from_dict({"name": "F", "signal": "minprob", "direction": direction}).make_trigger("never")
        assert t.never_fires and t.decide(None, INFO) == 0 and "never retrieve" in t.describe()
    # never fires on a masked step either (on_masked=retrieve would fire there at any finite threshold)
    assert ThresholdTrigger("minprob", -math.inf, "below", on_masked="retrieve").decide(None, MASKED) == 0
    assert ThresholdTrigger("minprob", 0.1, "below", on_masked="retrieve").decide(None, MASKED) == 1
    # −inf with "above" is the opposite: it fires at every finite value
    assert not ThresholdTrigger("minprob", -math.inf, "above").never_fires
    assert ThresholdTrigger("minprob", -math.inf, "above").decide(None, INFO) == 1


class FakeRunner:
    """Dev/test results as a function of the threshold: retrieving at threshold t costs ``2t`` calls and adds
    ``gain · 2t`` quality over CoT's 0.5."""

    def __init__(self, gain: float, lam: float = 0.1, test_curves: bool = True):
        self.gain, self.lam = gain, lam
        self.cfg = SimpleNamespace(test_curves=test_curves, lambda_retrieval=lam)
        self.env_config = SimpleNamespace(query_modes=["step", "info_need"])
        self.runs: list[tuple[str, str, str | None]] = []

    def scalars_of(self, env):
        return {"minprob"}

    def run(self, trigger, split, questions, tag=None, querygen=False, env=None, mode=None):
        self.runs.append((split, tag, mode))
        calls = 0.0 if trigger.never_fires else 2 * trigger.threshold
        acc = 0.5 + self.gain * calls
        return {"accuracy": acc, "calls_per_question": calls, "reward": acc - self.lam * calls, "episodes": []}


def _ctx(runner):
    return RunContext(runner, {"episodes": []}, range(0, 4), range(4, 8), {}, {}, runner.lam)


def test_user_thresholds_get_the_never_point_and_it_wins_when_retrieval_does_not_pay():
    m = MethodSpec.from_dict({"name": "F", "signal": "minprob", "thresholds": [0.2, 0.4], "query_modes": ["all"]})
    runner = FakeRunner(gain=0.0)  # retrieval adds no quality: every call loses λ
    ctx = _ctx(runner)
    res = m.run(ctx)
    cal = ctx.calib["F"]
    assert cal["grid"] == ["never", 0.2, 0.4] and cal["chosen"] == "never" and cal["mode"] is None
    # the never point runs once, first, with no query mode; the grid once per mode
    assert [(s["threshold"], s["mode"]) for s in cal["sweep"]] == [
        ("never", None), (0.2, "step"), (0.4, "step"), (0.2, "info_need"), (0.4, "info_need")]
    assert cal["dev_reward"] == 0.5 and cal["dev_calls"] == 0.0
    assert res["threshold"] == "never" and res["query_mode"] is None and res["calls_per_question"] == 0.0
    assert ("test", "F@never", None) in runner.runs
    # the test curve starts at the never point (0 calls)
    assert res["curve"][0] == {"threshold": "never", "accuracy": 0.5, "calls": 0.0}
    assert [c["threshold"] for c in res["curve"]] == ["never", 0.2, 0.4]
    # replay: the trigger an application runs never fires
    _, t, mode, _ = m.replay(None, _strict(json.dumps(cal)))
    assert t.never_fires and mode is None


def test_exact_ties_go_to_never_and_a_paying_threshold_is_chosen():
    m = MethodSpec.from_dict({"name": "F", "signal": "minprob", "thresholds": [0.25, 0.5]})
    ctx = _ctx(FakeRunner(gain=0.25, lam=0.25))  # every point has CoT's reward exactly: fewer calls wins
    m.run(ctx)
    assert {s["reward"] for s in ctx.calib["F"]["sweep"]} == {0.5} and ctx.calib["F"]["chosen"] == "never"
    ctx = _ctx(FakeRunner(gain=0.5, lam=0.25))  # each call earns more than λ: the most calls win
    res = m.run(ctx)
    assert ctx.calib["F"]["chosen"] == 0.5 and res["threshold"] == 0.5 and res["query_mode"] is None


def test_a_fixed_threshold_is_run_as_published_without_a_never_point():
    m = MethodSpec.from_dict({"name": "RSUS", "signal": "minprob", "fixed_threshold": 0.3, "thresholds": [0.2]})
    ctx = _ctx(FakeRunner(gain=0.0, test_curves=False))
    res = m.run(ctx)
    assert [s["threshold"] for s in ctx.calib["RSUS"]["sweep"]] == [0.3]
    assert res["threshold"] == 0.3 and res["calls_per_question"] == pytest.approx(0.6)


# ------------------------------------------------------------------------- end to end on the shipped world
def _cfg(tmp_path, lam, methods, **kw):
    env = {"split": "dev", "rsus_components": ["ent"], "cache_path": str(tmp_path / "cache.sqlite")}
    return BenchConfig.from_dict({"name": "never-fire", "out_dir": str(tmp_path / f"bench{lam:g}"), "env": env,
                                  "dev": "0:6", "test": "6:16", "n_resamples": 200, "lambda_retrieval": lam,
                                  "methods": methods, **kw})


def test_where_no_call_pays_on_dev_the_row_is_cot_and_the_files_are_strict_json(tmp_path):
    methods = [{"name": "CoT", "kind": "never"},
               {"name": "FLARE", "kind": "threshold", "signal": "minprob", "direction": "below"},
               {"name": "MinProb@0.999", "kind": "threshold", "signal": "minprob", "direction": "below",
                "fixed_threshold": 0.999, "curve": False}]
    cfg = _cfg(tmp_path, 1.0, methods)  # λ = 1: a call costs a whole answer, none pays
    s = run_bench(cfg)
    out = tmp_path / "bench1"
    fl, cot = s["methods"]["FLARE"], s["methods"]["CoT"]
    assert s["calibration"]["FLARE"]["chosen"] == "never" and fl["threshold"] == "never"
    assert s["calibration"]["FLARE"]["sweep"][0]["threshold"] == "never"
    assert fl["kind"] == "fixed" and fl["query_mode"] is None
    for k in ("accuracy", "calls", "reward", "tokens"):
        assert fl[k] == cot[k], k
    per_q = {name: {r["question_index"]: (r["quality"], r["calls"], r["answer"]) for r in
                    map(json.loads, (out / "per_question" / "test" / f"{file}.jsonl").read_text().splitlines())}
             for name, file in (("CoT", "CoT"), ("FLARE", "FLARE_never"))}
    assert per_q["FLARE"] == per_q["CoT"]
    # the test curve has the never point at 0 calls (CoT's accuracy) and the grid beyond it
    assert fl["curve"][0] == {"threshold": "never", "accuracy": cot["accuracy"], "calls": 0.0}
    assert len(fl["curve"]) > 1
    # the best fixed trigger is chosen on dev: the never-fire row beats the published point that retrieves
    assert s["calibration"]["MinProb@0.999"]["chosen"] == 0.999
    assert s["methods"]["MinProb@0.999"]["calls"] > 0
    assert s["best_fixed"] == "FLARE"
    assert any(n.startswith("Best fixed trigger") and "never-fire point" in n for n in s["notes"])
    assert any(n.startswith("Calibrated to never fire") and "FLARE" in n for n in s["notes"])
    assert "| never |" in (out / "report.md").read_text()
    # strict JSON: summary, config, fingerprint and every per-question row
    files = [p for p in out.rglob("*") if p.suffix in (".json", ".jsonl")]
    assert {"summary.json", "config.json", "fingerprint.json"} <= {p.name for p in files}
    for p in files:
        for line in ([p.read_text()] if p.suffix == ".json" else p.read_text().splitlines()):
            _strict(line)
    # an application replays what was evaluated: a trigger that never fires
    _, trigger, _ = evaluated_policy(out, "FLARE")
    assert trigger.never_fires


def test_where_retrieval_pays_on_dev_a_real_threshold_is_chosen(tmp_path):
    methods = [{"name": "CoT", "kind": "never"},
               {"name": "FLARE", "kind": "threshold", "signal": "minprob", "direction": "below"}]
    s = run_bench(_cfg(tmp_path, 0.1, methods, test_curves=False))
    cal = s["calibration"]["FLARE"]
    never = cal["sweep"][0]
    assert never["threshold"] == "never" and never["calls"] == 0.0
    assert isinstance(cal["chosen"], float) and s["methods"]["FLARE"]["threshold"] == cal["chosen"]
    assert cal["dev_reward"] > never["reward"] and s["methods"]["FLARE"]["calls"] > 0
    assert not any(n.startswith("Calibrated to never fire") for n in s["notes"])
