"""``BenchConfig.workers``: helper processes fill the per-question files; the benchmark's numbers are those of a
one-process run, every method runs in exactly one process, and a helper's failure only costs time."""

import json

import pytest

from eval.bench import parallel
from eval.bench.policies import BenchConfig, run_bench

FLARE = "FLARE[unmasked]"
METHODS = [{"name": "CoT", "kind": "never"}, {"name": "IRCoT[step query, 1 passage, ≤4]", "kind": "always"},
           {"name": FLARE, "kind": "threshold", "signal": "minprob", "direction": "below"},
           {"name": "Entropy", "kind": "threshold", "signal": "entropy", "direction": "above"},
           {"name": "Random", "kind": "random", "match": FLARE, "seeds": 2},
           {"name": "CacheOracle", "kind": "cache_oracle"}]


def _cfg(tmp_path, name, workers):
    env = {"split": "dev", "rsus_components": ["ent"], "cache_path": str(tmp_path / f"{name}.sqlite")}
    return BenchConfig.from_dict({"name": name, "out_dir": str(tmp_path / name), "env": env, "dev": "0:6",
                                  "test": "6:14", "n_resamples": 200, "methods": METHODS, "workers": workers,
                                  "test_curves": False})


def _numbers(s):
    keep = ("accuracy", "calls", "reward", "threshold", "harm_rate")
    return {k: {f: v[f] for f in keep} for k, v in s["methods"].items()}, s["best_fixed"]


def test_claims_are_exclusive_and_random_is_never_shared(tmp_path):
    assert parallel.claim(tmp_path, "FLARE") and not parallel.claim(tmp_path, "FLARE")
    assert parallel.claim(tmp_path, "Entropy")
    cfg = _cfg(tmp_path, "x", 2)
    assert [m.name for m in parallel.shareable(cfg.methods)] == [m["name"] for m in METHODS if m["name"] != "Random"]
    with pytest.raises(Exception, match="workers"):
        _cfg(tmp_path, "y", 0)


@pytest.mark.slow
def test_two_workers_give_the_one_process_numbers(tmp_path, caplog):
    one = run_bench(_cfg(tmp_path, "one", 1))
    caplog.set_level("INFO")
    two = run_bench(_cfg(tmp_path, "two", 2))
    assert _numbers(two) == _numbers(one)
    assert "1 helper process(es)" in caplog.text
    assert not parallel.claims_dir(tmp_path / "two").exists()  # cleaned up
    # every run file of the two-worker benchmark was written once, completely (no two writers)
    for f in (tmp_path / "two" / "per_question").rglob("*.jsonl"):
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        ids = [r["question_index"] for r in rows]
        assert len(ids) == len(set(ids)), f
    # rerun on the finished folder: everything read back, the same numbers
    assert _numbers(run_bench(_cfg(tmp_path, "two", 2))) == _numbers(one)
