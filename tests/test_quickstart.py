"""The README's main job runs end to end (world check → training → benchmark → report), at smoke size."""

import json
import subprocess
import sys

import pytest
import yaml

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]


def test_quickstart_trains_benchmarks_and_reports(tmp_path):
    from envs.core.config import read_yaml_mapping
    from eval.quickstart import PROXY_CONFIG, RETRIEVER_CONFIG, TRAIN_CONFIG

    train = read_yaml_mapping(TRAIN_CONFIG)  # the recipe the main job trains (its base chain merged)
    train.update(iterations=2, checkpoint_every=1)
    train["algo"]["episodes_per_batch"] = 16
    train["env_config"].update(max_questions=32, cache_path=str(tmp_path / "train_cache.sqlite"))
    train["warmstart"].update(questions=24, epochs=3)
    bench = read_yaml_mapping("configs/bench_microworld.yaml")
    bench["env"]["cache_path"] = str(tmp_path / "bench_cache.sqlite")
    bench.update(dev="0:10", test="10:26", n_resamples=500, test_curves=False, lambdas=[0.1, 0.3])
    keep = {"CoT", "IRCoT", "FLARE", "FLARE[unmasked]", "FLARE[q: dev]", "DRAGIN[step-level]", "SeaKR[no rerank]",
            "PUlSE-step[q: step, θ: dev]", "Random", "Oracle[info_need]", "CacheOracle[q: info_need, step]"}
    bench["methods"] = [m for m in bench["methods"] if m["name"] in keep or m["kind"] == "learned"]
    proxy = yaml.safe_load(open(PROXY_CONFIG))  # the U_verb proxy the recipe reads, at smoke size
    proxy.update(n_questions=40, n_eval_questions=20, n_boot=50, max_epochs=5)
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(proxy))
    colbert = read_yaml_mapping(RETRIEVER_CONFIG)  # the ColBERT checkpoint and PLAID index, at smoke size
    colbert["checkpoint"].update(steps=2, bsize=4)
    (tmp_path / "colbert.yaml").write_text(yaml.safe_dump(colbert))
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(train))
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(bench))
    out = tmp_path / "qs"
    cmd = [sys.executable, "-m", "eval", "quickstart", "--out", str(out), "--n", "16",
           "--train-config", str(tmp_path / "train.yaml"), "--bench-config", str(tmp_path / "bench.yaml"),
           "--proxy-config", str(tmp_path / "proxy.yaml"), "--retriever-config", str(tmp_path / "colbert.yaml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"report: {(out / 'report.md').resolve()}" in r.stdout
    head = out / "bench" / "lambda=0.1"  # the headline's benchmark; one per λ beside it
    assert f"html:   {(head / 'report.html').resolve()}" in r.stdout and "--lambda 0.3" in r.stdout
    report = (out / "report.md").read_text()
    for name in ("FLARE", "learned", "Random", "Oracle", "| DRAGIN[step-level] |", "| SeaKR[no rerank] |"):
        assert name in report
    assert "Skipped" not in report
    # it opens with every budget: the frontier plot and, per λ, the one policy against the best fixed trigger there
    assert report.index("## Every budget") < report.index("## The headline: λ = 0.1") < report.index("## 1.")
    assert "![accuracy vs retrieval calls at every budget](bench/frontier.png)" in report
    assert (out / "bench" / "frontier.png").is_file() and (out / "bench" / "lambda=0.3" / "summary.json").is_file()
    budgets = json.loads((out / "bench" / "budgets.json").read_text())
    assert budgets["lambdas"] == [0.1, 0.3] and budgets["groups"]["conditioned (widening)"]["conditioned"]
    # the headline: the learned policy against the best fixed trigger, and the share of the oracle gap it closes
    name = "conditioned[QueryGen](λ: 0.5→[0.02, 0.5])(s0)"
    assert f"{name} − best fixed" in report and "fraction of the oracle gap closed" in report
    assert "(ceiling: CacheOracle[q: info_need, step])" in report
    # and where it falls short: the gap fraction per chain kind, its calls beside the oracle's (issue 36 item 5)
    assert "Oracle-gap fraction per chain kind" in report and "| chain kind | n | oracle calls |" in report
    s = json.loads((head / "summary.json").read_text())
    assert s["methods"]["CoT"]["calls"] == 0.0 and s["methods"]["IRCoT"]["calls"] > 1.0  # as published
    flare = s["methods"]["FLARE"]  # masked queries, unless 10 dev questions chose its never-fire point (no query)
    assert flare["query_mode"] == (None if flare["threshold"] == "never" else "masked:0.4")
    sweep = s["calibration"]["FLARE"]["sweep"]  # every threshold of its sweep queried with the masked step
    assert {r["mode"] for r in sweep if r["threshold"] != "never"} == {"masked:0.4"} and s["methods"]["IRCoT"]["k"] == 2
    assert not s["skipped"] and s["methods"]["DRAGIN[step-level]"]["query_mode"] == "qfs"  # its env's default mode
    by_kind = s["oracle_gap_by"]["by chain_kind"]
    assert sum(g[name]["n"] for g in by_kind.values()) == 16
    learned = s["methods"][name]
    assert learned["n"] == 16 and learned["query_mode"] == "policy's QueryGen head"
    assert (out / "train" / "policy_trigger" / "spec.json").is_file() and (out / "train" / "curves.png").is_file()
    assert (head / "report.html").is_file() and "[bench/lambda=0.1/report.html]" in report
    # the recipe's RSUS reads the proxy this job trained (into its own folder): the policy records it, the benchmark
    # ran every method in that env, and a rerun keeps it
    mine = str(out / "probes" / "rsus_proxy")
    assert (out / "probes" / "rsus_proxy" / "probe.json").is_file() and "U_verb proxy" in report
    spec = json.loads((out / "train" / "policy_trigger" / "spec.json").read_text())
    assert spec["env_config"]["rsus_components"] == ["verb", "ent"]
    assert spec["env_config"]["observe_costs"] == ["retrieval_calls"]  # the policy reads λ
    assert spec["env_config"]["rsus_options"]["verb_proxy"] == mine
    cfg = json.loads((head / "config.json").read_text())
    assert cfg["env"]["rsus_options"]["verb_proxy"] == mine and "runs/probes/rsus_proxy" not in json.dumps(cfg)
    assert json.loads((out / "timings.json").read_text())["proxy_s"] > 0
    # ... and retrieves through the ColBERT checkpoint and PLAID index this job built into its own folder
    assert (out / "colbert" / "index" / "kairos_index.json").is_file() and "ColBERT checkpoint and PLAID index" in report
    assert cfg["env"]["retriever"] == "colbert" and cfg["env"]["index_path"] == str(out / "colbert" / "index")
    assert spec["env_config"]["index_path"] == str(out / "colbert" / "index")
    m = json.loads((out / "microworld_eval.json").read_text())
    assert m["targets"]["known_recall>=0.95"]["met"]

    # a rerun keeps the proxy and the finished policy; a rerun with another proxy config refuses before any work
    # (its policy was trained on the old proxy's observations), naming the training folder
    proxy_json = (out / "probes" / "rsus_proxy" / "probe.json").read_bytes()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "U_verb proxy: kept the one this job trained before" in r.stderr and "nothing to train" in r.stderr
    assert "ColBERT: kept the checkpoint and index this job built before" in r.stderr
    assert (out / "probes" / "rsus_proxy" / "probe.json").read_bytes() == proxy_json
    proxy["max_epochs"] = 4
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(proxy))
    colbert = read_yaml_mapping(RETRIEVER_CONFIG)  # the ColBERT checkpoint and PLAID index, at smoke size
    colbert["checkpoint"].update(steps=2, bsize=4)
    (tmp_path / "colbert.yaml").write_text(yaml.safe_dump(colbert))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and f"remove {out / 'train'} and {out / 'bench'}" in r.stderr, r.stderr[-3000:]
    assert "train/checkpoints" in r.stderr and "bench/lambda=0.1/per_question" in r.stderr
    assert "[1/4]" not in r.stderr  # refused before the world check
    assert (out / "probes" / "rsus_proxy" / "probe.json").read_bytes() == proxy_json
