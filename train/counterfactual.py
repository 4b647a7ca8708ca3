"""Counterfactual step labels of a behaviour policy's decisions (docs/design.md §5 "Counterfactual labels"):
steps 1–3 of the counterfactual warm start (:mod:`train.warmstart`).

The trajectory cache makes every decision's counterfactual cheap: greedy decoding is deterministic, so the
episode that differs from a behaviour policy π₀ at exactly one decision is a pure function of the question and
that decision. :func:`counterfactual_labels` runs π₀ on each question, recording the observation of every decision
it meets (:class:`Recorder`); runs, for each decision ``k`` of that path, the episode that takes the other action
at ``k`` and follows π₀ everywhere else (:class:`FlipAt`; with QueryGen actions the retrieve branch once per query
mode, :class:`RetrieveWithModeAt`); and labels ``k`` with ``ΔR_k = R(retrieve at k) − R(accept at k)``, target
``y = 1[ΔR_k > 0]``, weight ``|ΔR_k|``. Each branch's quality and raw costs are kept as well (:data:`OUTCOME_KEYS`),
so the labels at any λ are arithmetic (:func:`train.conditioning.labels_at`). With several workers the questions
are labelled in contiguous shards, one process each (:mod:`train.shards`); the labels are the same for any number.

**Horizon labels** (``opts.horizon = H``; ``None``: the exact labels above). An exact branch is continued to the
answer, so a question of ``n`` steps costs O(n²) generated tokens. With a horizon the branch of decision ``k`` is
generated only until step ``k+H`` (or its own end, whichever comes first: :func:`train.evaluate.evaluate_policy`'s
``stop_at_step``, nothing after it generated) and labelled
``ΔR_k^H = [Q_branch(k+H) − Q_base(k+H)] − Σ_c λ_c·[c_branch − c_base](decisions before step k+H)``, where ``Q(t)``
is the task's partial quality of the lines written once step ``t`` is generated (its optional
``partial_quality(question, lines)``; an episode that ended before ``t``: its final quality, costs and reward) and
the base side is read off π₀'s own full episode (:func:`window_outcome`, no new generation). Both sides' costs cover
the same decisions, each with the generation it caused (steps up to ``k+H``). Where the later steps do not depend on
the decision (microworld_chain: the later sub-questions, each from a fresh context), ``ΔR_k^H`` equals the exact
``ΔR_k`` once ``k+H`` reaches the answer line of ``k``'s sub-question in both branches. A task without partial
quality refuses a horizon (:class:`ConfigError`). The branches' rows go to ``labels/horizon<H>/``, apart from the exact
ones; the trajectory cache only ever holds the records of real action prefixes (a stopped branch writes no closing
answer), so the exact labels on the same cache are unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.core.config import ConfigError
from train.shards import contiguous_shards, map_shards

if TYPE_CHECKING:
    from envs.env_config import EnvConfig

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- triggers used for labelling
def behavior_trigger(opts):
    """π₀ of the options (a :class:`train.warmstart.WarmStartOptions`)."""
    from policies.triggers import NeverTrigger, ThresholdTrigger

    if opts.behavior == "never":
        return NeverTrigger()
    return ThresholdTrigger(opts.signal, float(opts.threshold), opts.direction, name="behavior")


def decision_key(info: dict[str, Any]) -> tuple[int, int]:
    """``(step index, retrievals already made on this step)``: names one decision of an episode."""
    return int(info["step_index"]), int(info.get("retrievals_this_step", 0))


class Recorder:
    """π₀ that also records each decision's observation and action (shallow copies share the log)."""

    def __init__(self, base, log_: dict):
        self.base, self.log, self.name = base, log_, "behavior"

    def reset(self, seed: int | None = None) -> None:
        self.base.reset(seed)

    def decide(self, observation, info):
        a = int(self.base.decide(observation, info))
        self.log[(info["question_id"], decision_key(info))] = (
            {k: np.asarray(v, dtype=np.float32).copy() for k, v in observation.items()}, a)
        return a


class FlipAt:
    """π₀ with the decision at step ``k`` (its first, before any retrieval there) reversed."""

    def __init__(self, base, k: int):
        self.base, self.k, self.name = base, int(k), f"flip@{k}"

    def reset(self, seed: int | None = None) -> None:
        self.base.reset(seed)

    def decide(self, observation, info):
        a = int(self.base.decide(observation, info))
        return 1 - a if decision_key(info) == (self.k, 0) else a


class RetrieveWithModeAt:
    """π₀ (its own retrievals with the first query mode) that retrieves at step ``k`` with query mode ``mode``:
    the retrieve branch of decision ``k`` for one QueryGen mode. Returns QueryGen actions ``(retrieve, mode)``."""

    def __init__(self, base, k: int, mode: int):
        self.base, self.k, self.mode, self.name = base, int(k), int(mode), f"retrieve@{k}[mode {mode}]"

    def reset(self, seed: int | None = None) -> None:
        self.base.reset(seed)

    def decide(self, observation, info):
        a = int(self.base.decide(observation, info))
        return (1, self.mode) if decision_key(info) == (self.k, 0) else (a, 0)


# ---------------------------------------------------------------- labels
#: each labelled decision's branch outcomes (quality and raw cost totals per cost of ``cost_names``): π₀'s episode
#: (``base``), the accept branch and each query mode's retrieve branch — the labels at any λ
#: (:func:`train.conditioning.labels_at`; a cost-conditioned policy's warm start draws λ per decision). With a
#: horizon H each is the branch cut at step k+H: ``q_*`` its partial quality Q(k+H) (the final quality where it ended
#: before), ``c_*`` the costs of its decisions before step k+H (π₀'s side read off its full episode), so that
#: ``labels_at`` gives the horizon labels ``ΔR_k^H`` (and its ``base_reward`` π₀'s reward within that window)
OUTCOME_KEYS = ("q_base", "c_base", "q_accept", "c_accept", "q_modes", "c_modes")


def branch_outcome(episode: dict[str, Any], cost_names: list[str]) -> tuple[float, np.ndarray]:
    """An episode row's ``(quality, raw cost totals in cost_names order)`` (its decisions' ``costs`` summed)."""
    tot = np.zeros(len(cost_names))
    for d in episode["decisions"]:
        costs = d.get("costs") or {}
        for i, c in enumerate(cost_names):
            tot[i] += float(costs.get(c, 0.0))
    return float(episode["quality"]), tot


def window_outcome(episode: dict[str, Any], step: int, cost_names: list[str], max_retrievals_per_step: int,
                   partial_quality) -> tuple[float, float, np.ndarray]:
    """An episode row's ``(quality, reward, raw cost totals)`` at the horizon ``step``: ``Q(step)`` — the partial
    quality (``partial_quality(lines)``) of its accepted lines before ``step`` and ``step``'s line as generated —,
    ``Q(step)`` plus the rewards of its decisions before ``step``, and their raw costs: what the episode stopped
    once ``step`` is generated gets and pays (:func:`train.evaluate.evaluate_policy`'s ``stop_at_step``). An
    episode with no decision at ``step`` (it ended before) gives its final ``(quality, reward, costs)``. The steps
    are read off the decision log with the env's accept rule (a retrieval is accepted once the step has
    ``max_retrievals_per_step`` of them; the line that stands is then its ``regenerated`` one).

    >>> log = [{"action": [0, 0], "step": "s1", "costs": {"c": 0.0}, "reward": 0.0},
    ...        {"action": [1, 0], "step": "s2", "regenerated": "s2'", "costs": {"c": 1.0}, "reward": -0.1},
    ...        {"action": [0, 0], "step": "s3", "costs": {"c": 0.0}, "reward": 1.0}]
    >>> row = {"decisions": log, "quality": 1.0, "reward": 0.9}
    >>> q, r, c = window_outcome(row, 3, ["c"], 1, lambda lines: len(lines) / 10)
    >>> q, round(r, 6), c
    (0.3, 0.2, array([1.]))
    >>> window_outcome(row, 4, ["c"], 1, len)
    (1.0, 0.9, array([1.]))
    """
    lines: list[str] = []
    reward, tot, this_step = 0.0, np.zeros(len(cost_names)), 0
    for d in episode["decisions"]:
        if len(lines) + 1 == step and this_step == 0:  # the first decision about `step`: the window ends here
            q = float(partial_quality([*lines, d["step"]]))
            return q, reward + q, tot
        costs = d.get("costs") or {}
        tot += [float(costs.get(c, 0.0)) for c in cost_names]
        reward += float(d["reward"])
        if int(d["action"][0]):  # a retrieval: the step stands once it has max_retrievals_per_step of them
            this_step += 1
            if this_step < max_retrievals_per_step:
                continue
            lines.append(d["regenerated"])
        else:
            lines.append(d["step"])
        this_step = 0
    return float(episode["quality"]), float(episode["reward"]), branch_outcome(episode, cost_names)[1]


def outcome_arrays(base: list[tuple], accept: list[tuple], modes: list[list[tuple]]) -> dict[str, np.ndarray]:
    """:data:`OUTCOME_KEYS` arrays of N decisions' outcomes: ``q_*`` [N] (``q_modes`` [N, M]), ``c_*`` [N, C]
    (``c_modes`` [N, M, C])."""
    return {"q_base": np.array([b[0] for b in base]), "c_base": np.stack([b[1] for b in base]),
            "q_accept": np.array([a[0] for a in accept]), "c_accept": np.stack([a[1] for a in accept]),
            "q_modes": np.array([[m[0] for m in ms] for ms in modes]),
            "c_modes": np.stack([np.stack([m[1] for m in ms]) for ms in modes])}


def counterfactual_labels(env_config: EnvConfig, questions: list[int], opts, lam: float,
                          out_dir: Path, components=None, progress: bool = True) -> dict[str, Any]:
    """Observations and counterfactual labels of π₀'s decisions on ``questions`` (see the module docstring;
    ``opts``: the :class:`train.warmstart.WarmStartOptions`).

    Returns ``{"obs": {field: [N, d]}, "y", "w", "delta", "delta_modes", "base_action", "base_reward",
    "question"}`` arrays over the N labelled decisions, in (question, step) order. ``delta_modes[:, m]`` is
    ``R(retrieve at k with mode m) − R(accept at k)`` — one column (the env's default mode) without QueryGen;
    ``delta`` is its row maximum. With ``opts.horizon = H`` they are the horizon labels ``ΔR_k^H`` (the module
    docstring; :data:`OUTCOME_KEYS` the cut branches'), ``base_reward`` still π₀'s whole episode's. With
    ``opts.workers > 1`` the questions are cut into that many contiguous
    shards, each labelled by its own process (its own reasoner; the trajectory cache is shared through its
    SQLite file) and the rows concatenated in question order: a question's labels depend on nothing but the
    question (greedy decoding), so they equal the one-process labels; the observations are equal up to the float
    rounding of a batched forward pass (as for another ``batch_envs``). ``env_config``: the env (its own λ of
    retrieval calls replaced by ``lam``; the whole split)."""
    from envs.components import build_components

    cfg = env_config.replace(costs={**env_config.costs, "retrieval_calls": lam}, max_questions=None)
    comps = components or build_components(cfg)
    if opts.behavior == "threshold" and opts.signal not in comps.scalar_names():
        raise ConfigError(f"WarmStartOptions.signal '{opts.signal}' is not produced by this env (available: "
                          f"{', '.join(comps.scalar_names())})")
    if opts.horizon is not None and not comps.has_partial_quality:
        raise ConfigError(f"warmstart.horizon = {opts.horizon}: task '{cfg.task}' has no partial quality "
                          "(partial_quality) to score a branch cut at step k+H; set warmstart.horizon: null (the exact "
                          "labels) or use a task that has one (microworld_chain)")
    bad = [q for q in questions if not 0 <= q < len(comps.questions)]
    if bad:  # on the driver, before any worker starts
        raise ConfigError(f"warm start: question indices {bad[:5]} are outside the '{cfg.split}' split "
                          f"(0 … {len(comps.questions) - 1})")
    n_shards = min(opts.workers, len(questions))
    if n_shards <= 1:
        return _label_shard(cfg, questions, opts, out_dir, comps, progress)
    shards = contiguous_shards(questions, n_shards)
    log.info("warm start: %d questions in %d shards (%s), one process each", len(questions), n_shards,
             ", ".join(str(len(s)) for s in shards))
    parts = map_shards(_label_shard, [(cfg.to_dict(), shard, opts, out_dir / f"shard{i}", None, progress and i == 0)
                                      for i, shard in enumerate(shards)])
    n = np.array([len(s) for s in shards], dtype=np.float64)
    merged = {"obs": {f: np.concatenate([p["obs"][f] for p in parts]) for f in parts[0]["obs"]},
              "modes": parts[0]["modes"], "cost_names": parts[0]["cost_names"]}
    for key in ("y", "w", "delta", "delta_modes", "base_action", "base_reward", "question", *OUTCOME_KEYS):
        merged[key] = np.concatenate([p[key] for p in parts])
    for key in ("behavior_reward", "behavior_accuracy", "behavior_calls"):  # means over each shard's questions
        merged[key] = float(np.dot(n, [p[key] for p in parts]) / n.sum())
    return merged


def _label_shard(cfg, questions: list[int], opts, out_dir: Path, comps,
                 progress: bool) -> dict[str, Any]:
    """:func:`counterfactual_labels` of one process (``cfg``: the EnvConfig or, in a worker, its dict)."""
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from policies.triggers import FixedModeTrigger
    from train.evaluate import evaluate_policy

    cfg = cfg if isinstance(cfg, EnvConfig) else EnvConfig.from_dict(cfg)
    comps = comps or build_components(cfg)
    base = behavior_trigger(opts)
    modes = list(cfg.query_modes) if cfg.querygen else list(cfg.query_modes[:1])
    horizon = opts.horizon
    # the branches' rows (resumable JSONL): a horizon's cut branches apart from the exact ones
    rows_dir = out_dir / "labels" / (f"horizon{horizon}" if horizon is not None else "")

    def first_mode(trigger):  # with QueryGen actions: π₀'s own retrievals use the first mode (the env's default)
        return FixedModeTrigger(trigger, 0, modes[0]) if cfg.querygen else trigger

    seen: dict = {}
    log.info("warm start: %s episodes on %d questions (λ = %g)", opts.behavior, len(questions),
             cfg.costs["retrieval_calls"])
    desc = "warm start: behavior episodes" if progress else None
    r0 = evaluate_policy(first_mode(Recorder(base, seen)), cfg, questions, batch_size=opts.batch_envs,
                         components=comps, return_episodes=True, progress=desc)
    by_q = {e["question_index"]: e for e in r0["episodes"]}
    qid_of = {q: by_q[q]["question_id"] for q in questions}
    by_qid: dict[str, list[tuple[int, int]]] = {}
    for qid, k in seen:
        by_qid.setdefault(qid, []).append(k)
    keys = {q: sorted(by_qid.get(qid_of[q], [])) for q in questions}
    flip_reward: dict[tuple[int, int], float] = {}
    mode_reward: dict[tuple[int, int, int], float] = {}  # (question, step, mode ≥ 1) -> R(retrieve there with it)
    cost_names = list(cfg.costs)
    flip_out: dict[tuple[int, int], tuple] = {}  # each branch's (quality, raw cost totals): labels at any λ
    mode_out: dict[tuple[int, int, int], tuple] = {}
    max_k = max((k[0] for ks in keys.values() for k in ks if k[1] == 0), default=0)
    for k in range(1, max_k + 1):
        qs = [q for q in questions if (k, 0) in keys[q]]
        log.info("warm start: counterfactual episodes at step %d (%d questions)", k, len(qs))
        stop = k + horizon if horizon is not None else None  # the branch generated until step k+H, no further
        res = evaluate_policy(first_mode(FlipAt(base, k)), cfg, qs, batch_size=opts.batch_envs, components=comps,
                              return_episodes=True, jsonl_path=rows_dir / f"flip_{k}.jsonl",
                              progress=f"warm start: counterfactual at step {k}" if progress else None,
                              stop_at_step=stop)
        for e in res["episodes"]:
            flip_reward[(e["question_index"], k)] = float(e["reward"])
            flip_out[(e["question_index"], k)] = branch_outcome(e, cost_names)
        for m in range(1, len(modes)):  # QueryGen: the retrieve branch once more per further mode
            res = evaluate_policy(RetrieveWithModeAt(base, k, m), cfg, qs, batch_size=opts.batch_envs,
                                  components=comps, return_episodes=True,
                                  jsonl_path=rows_dir / f"retrieve_{k}_mode{m}.jsonl",
                                  progress=f"warm start: step {k}, mode {modes[m]}" if progress else None,
                                  stop_at_step=stop)
            for e in res["episodes"]:
                mode_reward[(e["question_index"], k, m)] = float(e["reward"])
                mode_out[(e["question_index"], k, m)] = branch_outcome(e, cost_names)
    rows = []
    for q in questions:
        base_out = branch_outcome(by_q[q], cost_names)
        for k in keys[q]:
            if k[1] != 0:
                continue  # a second decision on a step (retrieval caps > 1) has no single-flip branch here
            obs, a = seen[(qid_of[q], k)]
            rb, rf = float(by_q[q]["reward"]), flip_reward[(q, k[0])]
            if horizon is not None:  # π₀'s side at step k+H, read off its full episode (no new generation)
                qw, rb, cw = window_outcome(by_q[q], k[0] + horizon, cost_names, cfg.max_retrievals_per_step,
                                            lambda lines, q_=q: comps.partial_quality(comps.questions[q_], lines))
                base_out = (qw, cw)
            r_accept, r_retrieve = (rb, rf) if a == 0 else (rf, rb)
            r_modes = [r_retrieve] + [mode_reward[(q, k[0], m)] for m in range(1, len(modes))]
            o_accept, o_retrieve = (base_out, flip_out[(q, k[0])]) if a == 0 else (flip_out[(q, k[0])], base_out)
            o_modes = [o_retrieve] + [mode_out[(q, k[0], m)] for m in range(1, len(modes))]
            rows.append((q, obs, a, float(by_q[q]["reward"]),  # π₀'s reward: its whole episode's
                         [r - r_accept for r in r_modes],  # R(retrieve at k, mode m) − R(accept)
                         base_out, o_accept, o_modes))
    if not rows:
        raise ConfigError("warm start: the behavior policy made no decisions on the labelled questions")
    fields = list(rows[0][1])
    delta_modes = np.array([r[4] for r in rows], dtype=np.float64)
    delta = delta_modes.max(axis=1)
    return {"obs": {f: np.stack([r[1][f] for r in rows]) for f in fields},
            **outcome_arrays([r[5] for r in rows], [r[6] for r in rows], [r[7] for r in rows]),
            "cost_names": cost_names,
            "y": (delta > 0).astype(np.float32), "w": np.abs(delta).astype(np.float32), "delta": delta,
            "delta_modes": delta_modes, "modes": modes,
            "base_action": np.array([r[2] for r in rows], dtype=np.int64),
            "base_reward": np.array([r[3] for r in rows], dtype=np.float32),
            "question": np.array([r[0] for r in rows], dtype=np.int64),
            "behavior_reward": float(r0["reward"]), "behavior_accuracy": float(r0["accuracy"]),
            "behavior_calls": float(r0["calls_per_question"])}
