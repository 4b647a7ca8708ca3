"""kairos bench engine at smoke size: both backends through the env, vLLM alone on the recorded rounds with and without
capture, the agreement and every figure of the table (the full-size figures are in docs/results.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _needs import needs_hotpotqa, needs_smollm2, needs_vllm


def test_agreement_names_the_first_differing_step():
    from eval.perf.engine import agreement

    ag = agreement({"0": ["a", "b"], "1": ["a", "b"], "2": ["a"]}, {"0": ["a", "b"], "1": ["a", "c"], "2": ["a", "x"]})
    assert ag["identical"] == 1 and ag["n"] == 3
    assert ag["differ"] == [{"question": "1", "step": 2}, {"question": "2", "step": 2}]


@pytest.mark.slow
@needs_vllm
@needs_smollm2
@needs_hotpotqa
def test_the_engine_benchmark_runs_end_to_end(tmp_path):
    out = tmp_path / "engine"
    r = subprocess.run([sys.executable, "-m", "eval.cli", "bench", "engine", "--questions", "dev[0:4]",
                        "--batch-sizes", "2", "--max-steps", "2", "--max-step-tokens", "12", "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((out / "engine_bench.json").read_text())
    by = {x["backend"]: x for x in rep["runs"]}
    assert set(by) == {"hf", "vllm"} and by["hf"]["decisions"] == by["vllm"]["decisions"] > 0
    assert {x["capture"] for x in rep["raw"]} == {False, True}
    # vLLM alone replayed the same prompts and generated the same tokens the env's engine did
    assert all(x["tokens"] == by["vllm"]["engine_generated_tokens"] for x in rep["raw"])
    s = rep["summary"]["2"]
    assert s["chain_agreement"] == 1.0  # float32: the same greedy chains
    assert s["episodes_speedup"] > 0 and s["kairos_vs_engine"] > 0 and "capture_overhead" in s
    assert "| 2 | vllm |" in (out / "engine_bench.md").read_text()
