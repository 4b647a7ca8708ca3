"""Horizon counterfactual labels (WarmStartOptions.horizon, docs/design.md §5 "Counterfactual labels"): each branch cut
H steps past its decision and scored by the task's partial quality there. On a short microworld_chain they equal the
exact labels wherever the branch keeps π₀'s sub-question boundaries, cost fewer generated tokens per decision, leave
the trajectory cache as the exact labels find it; a bad horizon and a task without partial quality are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envs.core.config import ConfigError
from envs.env_config import EnvConfig
from train.warmstart import WarmStartOptions

QUESTIONS = [0, 1, 2, 3]
H = 4  # hops + 1: the rest of a 3-hop sub-question from any of its decisions


def _chain(cache) -> EnvConfig:
    """2 three-hop sub-questions per chain (8 steps and a spare line each), λ of calls 0.1."""
    return EnvConfig.from_preset("microworld", {
        "task": "microworld_chain", "split": "train", "rsus_components": ["ent"],
        "chain": {"questions": 2, "hops": 3, "count": len(QUESTIONS), "seed": 0}, "max_steps": 10,
        "max_retrievals_per_question": 4, "costs": {"retrieval_calls": 0.1}, "cache_path": str(cache)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The exact labels and the horizon-H labels, each from a cold cache with its generated tokens counted; then the
    exact labels again on the horizon run's cache, and labels of a horizon past every chain's end."""
    from envs.components import build_components
    from eval.perf.scaling_costs import Meter
    from train.counterfactual import counterfactual_labels

    tmp = tmp_path_factory.mktemp("horizon")
    comps = build_components(_chain(tmp / "c.sqlite"))
    out = {}

    def label(name, cache, horizon):
        m = Meter()
        with m.running(comps):
            data = counterfactual_labels(_chain(tmp / cache), QUESTIONS,
                                         WarmStartOptions(enabled=True, batch_envs=4, horizon=horizon), 0.1,
                                         tmp / name, components=comps, progress=False)
        out[name] = (data, m.tokens / len(data["y"]))

    label("exact", "exact.sqlite", None)
    label("horizon", "horizon.sqlite", H)
    label("exact_after_horizon", "horizon.sqlite", None)  # the cache the horizon branches wrote to
    label("past_the_end", "exact.sqlite", 64)
    return tmp, comps, out


def _lines(row: dict) -> list[str]:
    """A π₀ = never branch's accepted lines (one retrieval per step: the regenerated line stands)."""
    return [d["regenerated"] if d["action"][0] else d["step"] for d in row["decisions"]]


def test_horizon_labels_equal_the_exact_ones_where_the_sub_questions_keep_their_steps(runs):
    tmp, comps, out = runs
    exact, horizon = out["exact"][0], out["horizon"][0]
    np.testing.assert_array_equal(horizon["question"], exact["question"])
    base = {q: _answer_steps(row) for q, row in _never_rows(tmp, comps).items()}
    branches: dict[int, dict[int, dict]] = {}  # step -> question -> the exact branch flipped there (its whole row)
    same = []
    for i, (q, k) in enumerate(zip(exact["question"].tolist(), _steps(exact["question"]))):
        if k not in branches:
            lines = (tmp / "exact" / "labels" / f"flip_{k}.jsonl").read_text().splitlines()
            branches[k] = {r["question_index"]: r for r in map(json.loads, lines)}
        if _answer_steps(branches[k][q]) == base[q]:  # the flip moved no sub-question's answer line
            same.append(i)
    assert len(same) >= 0.5 * len(exact["y"])  # most flips keep the sub-questions' boundaries
    np.testing.assert_allclose(horizon["delta"][same], exact["delta"][same], atol=1e-9)
    np.testing.assert_array_equal(horizon["y"][same], exact["y"][same])
    assert np.mean(horizon["y"] == exact["y"]) >= 0.9
    # a horizon past every chain's end is the exact labels, outcomes and all
    past = out["past_the_end"][0]
    for key in ("delta", "y", "w", "q_base", "c_base", "q_accept", "c_accept", "q_modes", "c_modes", "base_reward"):
        np.testing.assert_allclose(past[key], exact[key], atol=1e-12, err_msg=key)


def _answer_steps(row: dict) -> list[int]:
    """The steps of a π₀ = never branch's answer lines."""
    from agents.reasoners.chained import is_sub_answer

    return [j for j, line in enumerate(_lines(row), 1) if is_sub_answer(line)]


def _steps(questions: np.ndarray) -> list[int]:
    """Each labelled decision's step (π₀ = never: one decision per step, in (question, step) order)."""
    out, prev, k = [], None, 0
    for q in questions.tolist():
        k = k + 1 if q == prev else 1
        prev = q
        out.append(k)
    return out


def _never_rows(tmp, comps) -> dict[int, dict]:
    """π₀'s (never's) whole episodes (cached by the exact labels: nothing generated)."""
    from policies.triggers import NeverTrigger
    from train.evaluate import evaluate_policy

    res = evaluate_policy(NeverTrigger(), _chain(tmp / "exact.sqlite"), QUESTIONS, batch_size=4, components=comps,
                          return_episodes=True)
    return {e["question_index"]: e for e in res["episodes"]}


def test_horizon_labels_cost_fewer_tokens_and_keep_their_outcomes_consistent(runs):
    from train.conditioning import labels_at

    tmp, _, out = runs
    (_, tok_exact), (horizon, tok_horizon) = out["exact"], out["horizon"]
    assert 0 < tok_horizon < tok_exact  # generation stops at step k+H
    assert out["past_the_end"][1] == 0  # (its branches were all cached by the exact run)
    # OUTCOME_KEYS are the cut branches': the labels at the run's λ are arithmetic on them
    again = labels_at(horizon, np.full((len(horizon["y"]), 1), 0.1))
    np.testing.assert_allclose(again["delta"], horizon["delta"], atol=1e-9)
    np.testing.assert_array_equal(again["y"], horizon["y"])
    assert np.all((horizon["q_accept"] >= 0) & (horizon["q_accept"] <= 1))
    # the cut branches are rows of their own, marked as stopped, never among the exact ones
    stopped = [(int(f.stem.split("_")[1]), r) for f in (tmp / "horizon" / "labels" / f"horizon{H}").glob("flip_*.jsonl")
               for r in map(json.loads, f.read_text().splitlines()) if r["answer_status"] == "stopped"]
    assert stopped and all(r["truncated"] and r["steps"] == k + H - 1 for k, r in stopped)  # decided until k+H-1
    assert not list((tmp / "horizon" / "labels").glob("flip_*.jsonl"))


def test_the_exact_labels_are_unchanged_on_a_cache_the_horizon_labels_wrote(runs):
    _, _, out = runs
    exact, again = out["exact"][0], out["exact_after_horizon"][0]
    for key in ("delta", "y", "q_base", "c_base", "q_accept", "c_accept", "q_modes", "c_modes", "base_reward"):
        np.testing.assert_array_equal(again[key], exact[key], err_msg=key)


def test_partial_quality_of_a_whole_chain_is_its_quality(runs):
    from train.counterfactual import window_outcome

    tmp, comps, _ = runs
    for q, row in _never_rows(tmp, comps).items():
        if row["answer_status"] != "answered":
            continue
        lines = _lines(row)
        assert comps.partial_quality(comps.questions[q], lines) == row["quality"]
        qw, rw, _ = window_outcome(row, len(lines), ["retrieval_calls"], 1,
                                   lambda ls, q_=q: comps.partial_quality(comps.questions[q_], ls))
        assert (qw, rw) == pytest.approx((row["quality"], row["reward"]))


def test_the_env_stops_an_episode_once_its_step_is_generated(runs):
    from envs.env_config import EnvConfig
    from envs.retrieval_env import EnvUsageError, RetrievalTimingEnv

    tmp, comps, _ = runs
    env = RetrievalTimingEnv(_chain(tmp / "exact.sqlite"), components=comps)
    _, info = env.reset(options={"question_index": 0, "stop_at_step": 3})
    steps = []
    done = False
    while not done:
        _, r, te, tr, info = env.step(0)
        steps.append(info["step_index"])
        done = te or tr
    assert (te, tr, info["answer_status"], steps) == (False, True, "stopped", [2, 3])
    assert info["quality"] == comps.partial_quality(comps.questions[0], [d["step"] for d in info["episode"]]
                                                    + [info["step_text"]])
    for bad in (1, 2.0, True):
        with pytest.raises(EnvUsageError, match="stop_at_step must be an integer >= 2"):
            env.reset(options={"question_index": 0, "stop_at_step": bad})
    env.close()
    plain = RetrievalTimingEnv(EnvConfig.from_dict({"rsus_components": ["ent"], "cache_path": None}))
    with pytest.raises(EnvUsageError, match="task 'microworld' has none"):
        plain.reset(options={"question_index": 0, "stop_at_step": 3})
    plain.close()


@pytest.mark.parametrize("value,says", [
    (0, "horizon must be an integer >= 1"), (-2, "set warmstart.horizon: null or e.g. 4"),
    ("x", "key 'horizon' must be an integer"), (True, "key 'horizon' must be an integer"),
])
def test_a_bad_horizon_is_a_clear_error(value, says):
    with pytest.raises(ConfigError, match=says):
        WarmStartOptions.from_dict({"horizon": value})


def test_a_horizon_is_for_counterfactual_labels_and_recorded_with_the_warm_start(tmp_path):
    from train.config import resume_changes
    from train.warmstart import finished_warmstart

    with pytest.raises(ConfigError, match="horizon applies to kind 'counterfactual' only"):
        WarmStartOptions.from_dict({"kind": "dagger", "horizon": 4})
    assert WarmStartOptions.from_dict({"horizon": 4}).horizon == 4 and WarmStartOptions().horizon is None
    # a run recorded before the key existed resumes unchanged with the exact labels
    assert resume_changes({"warmstart": {"dtype": "float32"}}, {"warmstart": {"dtype": "float32", "horizon": None}}) \
        == []
    # a finished warm start fitted on another horizon's labels is not reused
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "spec.json").write_text(json.dumps({"spec": {"n_modes": 1}}))
    (tmp_path / "summary.json").write_text(json.dumps({"behavior": WarmStartOptions(horizon=4).to_dict()}))
    cfg = EnvConfig.from_dict({"rsus_components": ["ent"]})
    with pytest.raises(ConfigError, match="labels of horizon 4 .* warmstart.horizon None"):
        finished_warmstart(tmp_path, cfg, WarmStartOptions())
    assert finished_warmstart(tmp_path, cfg, WarmStartOptions(horizon=4)) == tmp_path / "policy"


def test_a_task_without_partial_quality_refuses_a_horizon(tmp_path):
    from train.counterfactual import counterfactual_labels

    env = EnvConfig.from_preset("microworld", {"split": "train", "rsus_components": ["ent"],
                                               "cache_path": str(tmp_path / "c.sqlite")})
    with pytest.raises(ConfigError, match="warmstart.horizon = 2: task 'microworld' has no partial quality"):
        counterfactual_labels(env, [0, 1], WarmStartOptions(enabled=True, horizon=2), 0.1, tmp_path / "ws",
                              progress=False)
    assert not (tmp_path / "ws").exists()  # refused before any episode
