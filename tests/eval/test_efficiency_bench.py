"""``kairos bench efficiency``: KV reuse and prefetch change the cost, never the output; the per-call table."""

import argparse
import json

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")


def _args(tmp_path, **kw):
    base = dict(train_config="configs/experiments/microworld/train_microworld.yaml", set=["max_questions=16"], parts=["ttft"], split=None,
                questions="0:8", max_steps=3, repeats=1, policy=None, flare_threshold=None, calib="0:8", batch=1,
                out=str(tmp_path))
    return argparse.Namespace(**{**base, **kw})


def test_kv_reuse_bench_on_the_microworld(tmp_path):
    from eval.perf.efficiency import run

    assert run(_args(tmp_path)) == 0
    res = json.loads((tmp_path / "efficiency.json").read_text())
    m = res["kv_reuse"]
    assert m["states"] > 0 and m["same_output"] == m["states"]  # with and without the cache: the same step
    for row in m["rows"]:
        # the live state caches its whole prefix but the last token; the evidence is what is left to prefill
        assert row["cached_tokens"] == row["prefix_tokens"] - 1 and row["evidence_tokens"] > 0
        assert row["ttft_reuse"] > 0 and row["ttft_fresh"] > 0
    assert (tmp_path / "efficiency.md").read_text().count("|") > 10


def test_kv_reuse_off_and_prefetch_on_change_no_outcome():
    """The naive setting (prompt re-encoded after an injection, every query searched) and KV reuse + prefetch give
    the same episodes; the namespace (what the trajectory cache keys on) is the same; prefetch answers lookups."""
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from policies.triggers import TRIGGERS
    from train.evaluate import evaluate_policy

    base = {"split": "dev", "query_modes": ["info_need", "step"], "signals": ["output"]}
    runs, spaces = {}, {}
    for name, over in {"naive": {"kv_reuse": False}, "fast": {"kv_reuse": True, "prefetch": True}}.items():
        comps = build_components(EnvConfig.from_dict({**base, **over}))
        r = evaluate_policy(TRIGGERS.make("always"), comps.config, list(range(12)), batch_size=4, components=comps,
                            return_episodes=True)
        runs[name] = [(e["answer"], e["calls"], [(d["step"], d.get("query"), d.get("passage_ids"))
                                                  for d in e["decisions"]]) for e in r["episodes"]]
        spaces[name] = comps.namespace
        if comps.prefetcher is not None:
            comps.prefetcher.wait()
            st = comps.retriever.stats
            assert st.lookups == sum(e["calls"] for e in r["episodes"]) and st.prefetched > 0
            assert st.prefetch_hits > 0  # the next hop's info_need query was searched ahead
        else:
            assert not hasattr(comps.retriever, "stats")  # naive: no query cache in front of the index
    assert runs["naive"] == runs["fast"] and sum(c for _, c, _ in runs["naive"]) > 12
    assert spaces["naive"] == spaces["fast"]


IRCOT = "IRCoT[step query, 1 passage, ≤4]"


def test_efficiency_table_on_the_microworld(tmp_path):
    from eval.perf.efficiency import SETTINGS, run

    assert run(_args(tmp_path, parts=["table"], questions="0:4", flare_threshold=0.5, batch=2,
                     set=["max_questions=16", "split=dev"])) == 0
    res = json.loads((tmp_path / "efficiency.json").read_text())["table"]
    assert [(r["setting"], r["method"]) for r in res["rows"]] == [
        (s, m) for s, _ in SETTINGS for m in ("CoT", "SingleRAG[1 passage]", IRCOT, "FLARE[unmasked]")]
    by = {(r["setting"], r["method"]): r for r in res["rows"]}
    for s, _ in SETTINGS:
        assert by[(s, IRCOT)]["calls"] > 0 and "seconds_per_call" in by[(s, IRCOT)]
        assert "seconds_per_call" not in by[(s, "CoT")]  # no calls
    # KV reuse and prefetch never change an outcome; compression ran (a micro-world fact is one sentence: all kept)
    for m in ("SingleRAG[1 passage]", IRCOT, "FLARE[unmasked]"):
        assert by[("naive", m)]["accuracy"] == by[("KV reuse", m)]["accuracy"] == by[("prefetch", m)]["accuracy"]
        assert by[("naive", m)]["calls"] == by[("prefetch", m)]["calls"]
    comp = by[("compression", IRCOT)]
    assert comp["tokens_before"] > 0 and comp["tokens_after"] == comp["tokens_before"]
    assert by[("naive", IRCOT)]["tokens_before"] == 0  # no compression there
    assert "prefetch_hit_rate" in by[("prefetch", IRCOT)] and "prefetch_hit_rate" not in by[("naive", IRCOT)]
    assert "per_call_ratio[all on]" in res["summary"][IRCOT]
    assert "Efficiency table" in (tmp_path / "efficiency.md").read_text()
