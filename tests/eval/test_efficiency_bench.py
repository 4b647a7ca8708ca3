"""``kairos bench efficiency``: KV-cache reuse after an injection changes the cost, never the output."""

import argparse
import json

import pytest

from envs.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")


def test_kv_reuse_bench_on_the_microworld(tmp_path):
    from eval.efficiency_bench import run

    args = argparse.Namespace(train_config="configs/train_microworld.yaml", set=["max_questions=16"], questions=8,
                              max_steps=3, repeats=1, out=str(tmp_path))
    assert run(args) == 0
    res = json.loads((tmp_path / "efficiency.json").read_text())
    m = res["kv_reuse"]
    assert m["states"] > 0 and m["same_output"] == m["states"]  # with and without the cache: the same step
    for row in m["rows"]:
        # the live state caches its whole prefix but the last token; the evidence is what is left to prefill
        assert row["cached_tokens"] == row["prefix_tokens"] - 1 and row["evidence_tokens"] > 0
        assert row["ttft_reuse"] > 0 and row["ttft_fresh"] > 0
    assert (tmp_path / "efficiency.md").read_text().count("|") > 10
