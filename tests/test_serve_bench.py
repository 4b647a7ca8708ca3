"""``kairos bench serve`` end to end at a small size: the server under concurrent ``openai`` requests, no errors,
requests batched, the same answers with 1 and 2 replicas, the table and JSON written."""

import json
import subprocess
import sys

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]


def test_the_load_benchmark_at_a_small_size(tmp_path):
    pytest.importorskip("openai")
    r = subprocess.run([sys.executable, "-m", "eval", "bench", "serve", "--requests", "12", "--bursts", "1",
                        "--replicas", "1", "2", "--warmup", "2", "--batch-wait-timeout-s", "0.2",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "serve_bench.json").read_text())
    assert res["answers_equal_across_configs"] and res["machine"]["cores"] and res["command"].startswith(
        "kairos bench serve --requests 12")
    one, two = res["configs"]
    assert (one["replicas"], two["replicas"], two["replicas_seen"]) == (1, 2, 2)
    for c in (one, two):
        assert c["requests"] == 12 and c["errors"] == 0 and 0 < c["p50_s"] <= c["p95_s"] <= c["max_s"]
        assert c["requests_per_s"] > 0 and c["batches"] >= 1
    assert one["mean_batch_size"] > 1 and one["states_per_generation_call"] > 1
    md = (tmp_path / "serve_bench.md").read_text()
    assert md.count("\n") == 4 and "| 2 | 12 | 0 |" in md
    assert "kairos serve under load" in r.stdout
