"""``kairos bench policies`` end to end on the tiny world: calibration, skips, resume, statistics, report."""

import json

import numpy as np
import pytest

from envs.core.config import ConfigError
from eval.bench.policies import BenchConfig, auto_grid, parse_slice, retrieval_rate, run_bench


def _cfg(tmp_path, methods, **kw):
    # the shipped world: competent enough that steps carry signals (the tiny world writes empty steps)
    env = {"split": "dev", "rsus_components": ["ent"], "cache_path": str(tmp_path / "cache.sqlite")}
    return BenchConfig.from_dict({"name": "tiny", "out_dir": str(tmp_path / "bench"), "env": env, "dev": "0:6",
                                  "test": "6:16", "n_resamples": 300, "methods": methods, "group_by": ["hops", "chain_kind"],
                                  **kw})


def _export_random_policy(tmp_path):
    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    env = make_env("microworld", {"rsus_components": ["ent"]})
    spec = spec_from_spaces(env.observation_space, env.action_space, {"arch": "mlp"})
    return export_policy(PolicyNet(spec), tmp_path / "policy")


IRCOT, FLARE = "IRCoT[step query, 1 passage, ≤4]", "FLARE[unmasked]"  # the variants (kinds always, threshold)
METHODS = [{"name": "CoT", "kind": "never"}, {"name": IRCOT, "kind": "always"},
           {"name": FLARE, "kind": "threshold", "signal": "minprob", "direction": "below"},
           {"name": "DRAGIN", "kind": "threshold", "signal": "rind", "direction": "above"},
           {"name": "Random", "kind": "random", "match": FLARE, "seeds": 2},
           {"name": "Oracle", "kind": "oracle"}, {"name": "CacheOracle", "kind": "cache_oracle"},
           {"name": "IRCoT[step query, 1 passage, ≤4, front]", "kind": "always", "env": {"injection": "front"}}]


@pytest.mark.slow
def test_bench_runs_calibrates_skips_and_resumes(tmp_path):
    import shutil

    policy = _export_random_policy(tmp_path)
    for it in ("iter_0001", "iter_0002"):  # a run's snapshots: selected among on dev
        shutil.copytree(policy, tmp_path / "snapshots" / it)
    methods = METHODS + [{"name": "learned", "kind": "learned", "lam": 0.1, "path": str(policy),
                          "select_on_dev": True}]
    cfg = _cfg(tmp_path, methods)
    s = run_bench(cfg)
    out = tmp_path / "bench"
    for f in ("summary.json", "report.md", "report.html", "pareto.png", "accuracy.png"):
        assert (out / f).is_file(), f
    assert set(s["methods"]) == {"CoT", IRCOT, FLARE, "Random", "Oracle", "CacheOracle", "learned",
                                 "IRCoT[step query, 1 passage, ≤4, front]"}
    assert s["methods"]["IRCoT[step query, 1 passage, ≤4, front]"]["calls"] > 0
    # the cache oracle is the best action sequence per question: no policy beats its reward
    assert s["methods"]["CacheOracle"]["reward"] >= max(v["reward"] for v in s["methods"].values()) - 1e-9
    assert "DRAGIN" in s["skipped"] and "rind" in s["skipped"]["DRAGIN"]
    assert any("Skipped DRAGIN" in n for n in s["notes"])
    assert s["methods"]["CoT"]["calls"] == 0 and s["methods"][IRCOT]["calls"] > 0
    assert 0.0 <= s["methods"][IRCOT]["recall_at_k"] <= 1.0 and s["methods"]["CoT"]["recall_at_k"] is None
    fl = s["methods"][FLARE]
    cal = s["calibration"][FLARE]
    best = max(cal["sweep"], key=lambda r: (r["reward"], -r["calls"]))
    assert fl["threshold"] == best["threshold"] and fl["curve"]
    assert all(m["n"] == 10 for m in s["methods"].values())
    assert {c["method"] for c in s["comparisons"]} == set(s["methods"]) - {"CoT"}
    assert len(s["calibration"]["learned"]["candidates"]) == 3
    assert s["calibration"]["learned"]["chosen"] in {c["path"] for c in s["calibration"]["learned"]["candidates"]}
    assert s["breakdowns"]["by hops"]
    assert set(s["breakdowns"]["by chain_kind"]) <= {"known", "unseen", "mislearned", "conflicting", "evidence_only"}
    rows = [json.loads(x) for x in (out / "per_question" / "test" / "CoT.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and {"decisions", "answer", "tokens", "seconds", "quality"} <= set(rows[0])
    assert rows[0]["decisions"] and "signals" in rows[0]["decisions"][0]
    # resume: a torn last line is redone, finished questions are not; same results
    p = out / "per_question" / "test" / "IRCoT_step_query__1_passage___4_.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    s2 = run_bench(cfg)
    assert len(p.read_text().splitlines()) == 10
    for k in s["methods"]:
        assert s2["methods"][k]["accuracy"] == pytest.approx(s["methods"][k]["accuracy"])
        assert s2["methods"][k]["calls"] == pytest.approx(s["methods"][k]["calls"])
    # the same out_dir with another λ (or env) is refused, not mixed
    with pytest.raises(ConfigError, match="lambda_retrieval"):
        run_bench(cfg.replace(lambda_retrieval=0.2))


def test_learned_querygen_rows_choose_the_mode_with_the_policy(tmp_path):
    """A learned row with ``querygen: true`` runs the env with QueryGen actions in every path — plain, selected on
    dev among snapshots, calibrated — so the policy's own mode head picks each query, by the mode's name: the bench
    env lists the modes in another order than the training env did."""
    import shutil

    import torch

    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    env_cfg = {"rsus_components": ["ent"], "query_modes": ["info_need", "step"], "querygen": True}
    env = make_env("microworld", env_cfg)
    net = PolicyNet(spec_from_spaces(env.observation_space, env.action_space,
                                     {"arch": "mlp", "query_modes": ["info_need", "step"]}))
    env.close()
    with torch.no_grad():  # always retrieve, always with the second mode ('step')
        net.retrieve_head.bias.copy_(torch.tensor([-5.0, 5.0]))
        net.query_head.bias.copy_(torch.tensor([-5.0, 5.0]))
    policy = export_policy(net, tmp_path / "run" / "policy", heads=("retrieve", "query"))
    shutil.copytree(policy, tmp_path / "run" / "snapshots" / "iter_0001")
    row = {"kind": "learned", "lam": 0.1, "path": str(policy), "querygen": True}
    cfg = _cfg(tmp_path, [{"name": "CoT", "kind": "never"}, {**row, "name": "qg"},
                          {**row, "name": "qg-selected", "select_on_dev": True},
                          {**row, "name": "qg-calibrated", "calibrate": True, "thresholds": [0.5]}],
               env={"split": "dev", "rsus_components": ["ent"], "query_modes": ["step", "info_need"],
                    "cache_path": str(tmp_path / "cache.sqlite")}, dev="0:3", test="3:6")
    s = run_bench(cfg)
    for name in ("qg", "qg-selected", "qg-calibrated"):
        assert s["methods"][name]["calls"] > 0 and s["methods"][name]["query_mode"] == "policy's QueryGen head"
        files = list((tmp_path / "bench" / "per_question" / "test").glob(f"{name}*.jsonl"))
        rows = [json.loads(x) for f in files for x in f.read_text().splitlines()]
        modes = {d["action"][1] for r in rows for d in r["decisions"] if d["action"][0] == 1}
        assert modes == {0}, (name, modes)  # the policy's 'step' is the bench env's mode 0
    from policies.rl.export import LearnedTrigger

    with pytest.raises(ValueError, match=r"lack \['info_need'\]"):
        LearnedTrigger.load(policy).bind_modes(["step", "question_step"])


def test_learned_rows_at_realm_retrieves_tau_on_pi(tmp_path):
    """``fixed_threshold`` is ReaLM-Retrieve's decision rule a = 1[π(s) > τ]: a policy whose π(retrieve) is 0.6 at
    every step retrieves at the greedy 0.5 and never at τ = 0.65, plain and with snapshots selected on dev at τ; the
    row reports its τ. It and ``calibrate`` both set the threshold: one of them is an error naming the row."""
    import shutil

    import torch

    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    env = make_env("microworld", {"rsus_components": ["ent"]})
    net = PolicyNet(spec_from_spaces(env.observation_space, env.action_space, {"arch": "mlp"}))
    env.close()
    with torch.no_grad():  # π(retrieve) = e^0.405 / (1 + e^0.405) ≈ 0.6, whatever the observation
        net.retrieve_head.weight.zero_()
        net.retrieve_head.bias.copy_(torch.tensor([0.0, 0.405]))
    policy = export_policy(net, tmp_path / "run" / "policy")
    shutil.copytree(policy, tmp_path / "run" / "snapshots" / "iter_0001")
    row = {"kind": "learned", "lam": 0.1, "path": str(policy)}
    s = run_bench(_cfg(tmp_path, [{"name": "CoT", "kind": "never"}, {**row, "name": "greedy"},
                                  {**row, "name": "tau", "fixed_threshold": 0.65},
                                  {**row, "name": "tau-selected", "fixed_threshold": 0.65, "select_on_dev": True}],
                       dev="0:3", test="3:6"))
    assert s["methods"]["greedy"]["calls"] > 0
    for name in ("tau", "tau-selected"):
        assert s["methods"][name]["calls"] == 0 and s["methods"][name]["threshold"] == 0.65, name
    assert len(s["calibration"]["tau-selected"]["candidates"]) == 2
    with pytest.raises(ConfigError, match="'both': fixed_threshold and calibrate both set"):
        _cfg(tmp_path, [{**row, "name": "both", "fixed_threshold": 0.65, "calibrate": True}])
    with pytest.raises(ConfigError, match=r"'one': fixed_threshold is a probability threshold in \[0, 1\), got 1.0"):
        _cfg(tmp_path, [{**row, "name": "one", "fixed_threshold": 1.0}])


def test_bench_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="overlap"):
        _cfg(tmp_path, METHODS, dev="0:10", test="5:20")
    with pytest.raises(ConfigError, match="reference 'X'"):
        _cfg(tmp_path, METHODS, reference="X")
    with pytest.raises(ConfigError, match="unknown method 'Nope'"):
        _cfg(tmp_path, [{"name": "CoT", "kind": "never"},
                                    {"name": "R", "kind": "random", "match": "Nope"}])
    with pytest.raises(ConfigError, match="bogus"):
        _cfg(tmp_path, METHODS, bogus=1)
    with pytest.raises(ConfigError, match="BenchConfig.env: unknown config key 'top_kk'"):
        _cfg(tmp_path, METHODS, env={"task": "microworld", "top_kk": 2})
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['F'\].env: unknown config key 'injektion'"):
        _cfg(tmp_path, [*METHODS, {"name": "F", "kind": "always", "env": {"injektion": "front"}}])
    with pytest.raises(ConfigError, match="'test' must look like"):
        parse_slice("10-20", "test")
    assert list(parse_slice("0:250:50", "dev")) == [0, 50, 100, 150, 200]
    _cfg(tmp_path, METHODS, dev="0:20:4", test="1:20:2")  # interleaved slices that do not share a question
    with pytest.raises(ConfigError, match="overlap"):
        _cfg(tmp_path, METHODS, dev="0:20:5", test="1:20:2")
    with pytest.raises(FileNotFoundError, match="no exported policy"):
        run_bench(_cfg(tmp_path, [{"name": "CoT", "kind": "never"},
                                              {"name": "L", "kind": "learned", "path": str(tmp_path / "none")}]))


def test_auto_grid_and_rate():
    rows = [{"calls": 1, "decisions": [{"signals": {"minprob": v}} for v in (0.2, 0.5, 0.99)]},
            {"calls": 0, "decisions": [{"signals": {"minprob": 1.0}}]}]
    g = auto_grid(rows, "minprob", "below")
    assert g == sorted(g) and g[0] > 0.2 and len(g) >= 3
    assert auto_grid(rows, "absent", "below") == []
    assert retrieval_rate(rows) == pytest.approx(1 / 4)
    assert np.isfinite(auto_grid(rows, "minprob", "above")).all()


@pytest.mark.slow
def test_query_modes_are_calibrated_on_dev_and_the_best_fixed_is_chosen_on_dev(tmp_path):
    """A threshold trigger calibrated over (mode, threshold) keeps the dev-best pair; a fixed query mode reaches the
    env as the QueryGen action (same cache namespace); the best fixed trigger is the dev-best one; the oracle-gap
    fraction and the harm rate are reported."""
    modes = ["step", "info_need"]
    methods = [{"name": "CoT", "kind": "never"},
               {"name": FLARE, "kind": "threshold", "signal": "minprob", "direction": "below"},
               {"name": "MinProb[q]", "kind": "threshold", "signal": "minprob", "direction": "below",
                "query_modes": ["all"]},
               {"name": "IRCoT[info_need query, 1 passage, ≤4]", "kind": "always", "query_mode": "info_need"},
               {"name": "learned", "kind": "learned", "path": str(_export_random_policy(tmp_path)),
                "query_mode": "info_need", "calibrate": True, "thresholds": [0.3, 0.7]},
               {"name": "CacheOracle", "kind": "cache_oracle"},
               {"name": "CacheOracle[any]", "kind": "cache_oracle", "query_modes": ["all"]}]
    cfg = _cfg(tmp_path, methods, env={"split": "dev", "rsus_components": ["ent"], "query_modes": modes,
                                       "cache_path": str(tmp_path / "cache.sqlite")}, test="6:12", test_curves=False)
    s = run_bench(cfg)
    cal = s["calibration"]["MinProb[q]"]
    # the grid once per mode; the never-fire point once, first, with no mode (it retrieves nothing)
    assert {r["mode"] for r in cal["sweep"][1:]} == set(modes) and cal["sweep"][0]["mode"] is None
    assert cal["sweep"][0]["threshold"] == "never" and cal["sweep"][0]["calls"] == 0
    best = max(cal["sweep"], key=lambda r: (r["reward"], -r["calls"]))
    assert (cal["mode"], cal["chosen"]) == (best["mode"], best["threshold"])
    assert s["methods"]["MinProb[q]"]["query_mode"] == (None if best["threshold"] == "never" else best["mode"])
    assert {r["mode"] for r in s["calibration"][FLARE]["sweep"]} == {None}
    # the fixed mode is what the env retrieved with
    path, = (tmp_path / "bench" / "per_question" / "test").glob("IRCoT_info_need_query_*greedy.jsonl")
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert all(d["action"][1] == 1 for r in rows for d in r["decisions"] if d["action"][0] == 1)
    fixed = [k for k, v in s["methods"].items() if v["kind"] == "fixed"]
    assert s["best_fixed"] == max(fixed, key=lambda k: (s["calibration"][k]["dev_reward"],
                                                        -s["calibration"][k]["dev_calls"]))
    assert s["calibration"]["learned"]["chosen"] in (0.3, 0.7)
    g = s["oracle_gap"]["learned"]
    assert g["lo"] <= g["fraction"] <= g["hi"] or not np.isfinite(g["fraction"])
    assert any("oracle-gap fraction" in n for n in s["notes"])
    # searching the query modes too can only raise the ceiling
    assert s["methods"]["CacheOracle[any]"]["reward"] >= s["methods"]["CacheOracle"]["reward"] - 1e-9
    assert s["methods"]["CacheOracle[any]"]["reward"] >= max(v["reward"] for v in s["methods"].values()) - 1e-9
    assert s["methods"]["CoT"]["harm_rate"] is None
    assert 0.0 <= s["methods"][FLARE]["harm_rate"] <= 1.0


def test_mode_errors(tmp_path):
    with pytest.raises(ConfigError, match="query mode 'nope'"):
        _cfg(tmp_path, [{"name": "CoT", "kind": "never"},
                        {"name": "F", "kind": "threshold", "signal": "minprob", "query_mode": "nope"}])
    with pytest.raises(ConfigError, match=r"methods\['CoT'\]\.query_modes: unknown config key 'query_modes' for a "
                                          r"'never' method \(a key of kind threshold, cache_oracle; valid keys: "):
        _cfg(tmp_path, [{"name": "CoT", "kind": "never", "query_modes": ["all"]}])
    with pytest.raises(ConfigError, match="takes no 'env' override"):
        run_bench(_cfg(tmp_path, [{"name": "CoT", "kind": "never"},
                                  {"name": "O", "kind": "cache_oracle", "env": {"injection": "front"}}]))


def test_bench_input_errors_name_the_file_line_or_key(tmp_path):
    from eval.bench.policies import load_config

    bad = tmp_path / "b.yaml"
    bad.write_text("name: x\nmethods:\n  - {name: CoT, kind: never\n")
    with pytest.raises(ConfigError, match=r"b.yaml:\d+:\d+: invalid YAML"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(tmp_path / "none.yaml"))
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="unknown signal 'minporb'"):
        run_bench(_cfg(tmp_path, [{"name": "CoT", "kind": "never"},
                                  {"name": "F", "kind": "threshold", "signal": "minporb"}]))


def test_single_rag_retrieves_once_with_the_question(tmp_path):
    cfg = _cfg(tmp_path, [{"name": "CoT", "kind": "never"}, {"name": "SingleRAG[1 passage]", "kind": "single", "k": 1},
                          {"name": "SingleRAG", "kind": "single", "k": 3, "injection": "front"}],
               dev="0:2", test="2:5", test_curves=False)
    s = run_bench(cfg)
    assert s["methods"]["SingleRAG[1 passage]"]["calls"] == s["methods"]["SingleRAG"]["calls"] == 1.0
    assert s["methods"]["SingleRAG"]["k"] == 3
    per_q = tmp_path / "bench" / "per_question" / "test"
    top3 = [json.loads(x) for x in (per_q / "SingleRAG_question_.jsonl").read_text().splitlines()]
    assert all(len(r["decisions"][0]["passage_ids"]) == 3 for r in top3)
    rows = [json.loads(x) for x in (per_q / "SingleRAG_1_passage__question_.jsonl").read_text().splitlines()]
    assert all(len(r["decisions"][0]["passage_ids"]) == 1 for r in rows)
    from envs.registration import make_env

    env = make_env("microworld", {"split": "dev", "rsus_components": ["ent"]})
    for r in rows:
        _, info = env.reset(options={"question_index": r["question_index"]})
        first = r["decisions"][0]
        assert first["action"][0] == 1 and first["query"] == info["question"]  # the question, at step 1
        assert all(d["action"][0] == 0 for d in r["decisions"][1:])


def test_recall_at_k_of_the_ranked_lists_per_call():
    """Recall@k: per retrieval call, the share of the question's gold passages in the top-k list; averaged over
    calls; None when a call's list was not recorded, or nothing was retrieved."""
    from types import SimpleNamespace

    from eval.bench.summary import _recall_at_k

    gold = {0: ["a", "b"], 1: ["c"], 2: []}
    runner = SimpleNamespace(components=SimpleNamespace(questions=[0, 1, 2], gold_passages=lambda q: gold[q]))
    rows = [{"question_index": 0, "decisions": [{"action": [1, 0], "ranked_ids": ["a", "x", "y"]},
                                                {"action": [0, 0]},
                                                {"action": [1, 0], "ranked_ids": ["b", "a", "z"]}]},
            {"question_index": 1, "decisions": [{"action": [1, 0], "ranked_ids": ["x", "y", "z"]}]},
            {"question_index": 2, "decisions": [{"action": [1, 0], "ranked_ids": ["q"]}]}]  # no gold: not counted
    assert _recall_at_k(runner, rows) == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert _recall_at_k(runner, [{"question_index": 0, "decisions": [{"action": [0, 0]}]}]) is None
    rows[1]["decisions"][0].pop("ranked_ids")
    assert _recall_at_k(runner, rows) is None


def test_a_method_env_tag_hashes_the_keys_as_given():
    """A method's per-question files are named by a hash of its env overrides: typing them keeps the names (and so
    the finished results an out_dir holds)."""
    from eval.bench.policies import Runner

    cfg = BenchConfig.from_dict({"methods": [
        {"name": "CoT", "kind": "never"}, {"name": "F", "kind": "always", "env": {"injection": "front"}},
        {"name": "D", "kind": "always", "env": {"signals": ["output", "rind"], "query_modes": ["qfs"]}},
        {"name": "R", "kind": "always", "env": {"rsus_components": ["ent", "cons"],
                                                "rsus_options": {"cons_only_at_markers": False}}}]})
    assert [Runner.env_tag(m.env) for m in cfg.methods[1:]] == ["c22355d7", "e50b0bb9", "7cc371fe"]
    assert BenchConfig.from_dict(cfg.to_dict()) == cfg


def test_oracle_gap_per_group_is_the_gap_fraction_on_each_groups_questions():
    """The oracle-gap breakdown: per chain kind, the learned row's fraction of the gap between
    the best fixed trigger and the ceiling on that group's questions alone, with its calls beside the oracle's and
    the fixed trigger's; a group where the ceiling is no better than the fixed trigger has no fraction; the report
    renders it as its own table."""
    from types import SimpleNamespace

    from eval.bench.report import render_markdown
    from eval.bench.summary import _gap_breakdowns

    kinds = {0: "unseen", 1: "unseen", 2: "conflicting", 3: "conflicting"}
    qs = [SimpleNamespace(chain_kind=kinds[i]) for i in range(4)]
    runner = SimpleNamespace(components=SimpleNamespace(questions=qs, task=None))

    def eps(rewards, calls):
        return {"episodes": [{"question_index": i, "reward": r, "calls": c}
                             for i, (r, c) in enumerate(zip(rewards, calls))]}

    results = {"fixed": eps([0.0, 0.0, 0.5, 0.5], [1, 1, 0, 0]),
               "oracle": eps([1.0, 1.0, 0.5, 0.5], [1, 1, 0, 0]),
               "learned": eps([1.0, 0.0, 0.5, 0.5], [1, 2, 1, 0])}
    cfg = BenchConfig.from_dict({"group_by": ["chain_kind"], "n_resamples": 200,
                                 "methods": [{"name": "CoT", "kind": "never"}]})
    out = _gap_breakdowns(cfg, runner, results, ["learned"], "fixed", "oracle")
    unseen, conflicting = out["by chain_kind"]["unseen"]["learned"], out["by chain_kind"]["conflicting"]["learned"]
    assert unseen["fraction"] == pytest.approx(0.5) and unseen["n"] == 2
    assert unseen["lo"] <= 0.5 <= unseen["hi"]
    assert (unseen["calls"], unseen["oracle_calls"], unseen["fixed_calls"]) == (1.5, 1.0, 1.0)
    assert np.isnan(conflicting["fraction"]) and conflicting["calls"] == 0.5  # no gap to close there
    assert _gap_breakdowns(cfg, runner, results, ["learned"], None, "oracle") == {}

    md = render_markdown({"methods": {}, "oracle_gap_by": out, "best_fixed": "fixed", "oracle": "oracle"}, {})
    assert "## Oracle-gap fraction by chain_kind" in md
    unseen_row = next(line for line in md.splitlines() if line.startswith("| unseen"))
    assert "0.50 [" in unseen_row and unseen_row.rstrip(" |").endswith("/ 1.50")
    assert "– (gap 0.000) / 0.50" in next(line for line in md.splitlines() if line.startswith("| conflicting"))
    # a gap too small to divide by (the ceiling 0.01 above the fixed trigger): no fraction, the gap said instead
    results["oracle"]["episodes"][2]["reward"] = 0.52
    tiny = _gap_breakdowns(cfg, runner, results, ["learned"], "fixed", "oracle")["by chain_kind"]["conflicting"]
    assert np.isnan(tiny["learned"]["fraction"]) and tiny["learned"]["gap"] == pytest.approx(0.01)
