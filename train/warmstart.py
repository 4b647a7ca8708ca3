"""Supervised warm start from counterfactual step labels (docs/design.md §5 "Counterfactual labels", §6).

The trajectory cache makes every decision's counterfactual cheap: greedy decoding is deterministic, so the
episode that differs from a behaviour policy π₀ at exactly one decision is a pure function of the question and
that decision. For each training question this module, top to bottom:

1. runs π₀ (``never`` by default — docs/design.md §6's "rest of the policy fixed"; or a threshold trigger) and records
   the observation of every decision it meets;
2. for each decision ``k`` of that path, runs the episode that takes the *other* action at ``k`` and follows π₀
   everywhere else (one batched :func:`train.evaluate.evaluate_policy` run per step index, resumable JSONL);
3. labels decision ``k`` with the episode rewards ``R = quality − λ·calls`` of the two branches:
   ``ΔR_k = R(retrieve at k) − R(accept at k)``, target ``y = 1[ΔR_k > 0]``, weight ``|ΔR_k|`` (cost-sensitive:
   a decision that changes nothing but the cost weighs λ, one that flips the answer weighs 1 ± λ). The greedy
   policy of this classifier is one exact policy-improvement step over π₀ on the states π₀ visits;
   With QueryGen actions (``env_config.querygen``), the retrieve branch is run once per query mode: ``ΔR_k`` is
   the best mode's, and the mode head's target is the mode with the highest branch reward (ties: the mode with the
   higher mean branch reward where retrieving pays, :func:`mode_targets`), weighted by the spread of the modes'
   rewards (zero where the mode changes nothing);
4. fits the policy network itself (the same :class:`policies.rl.net.PolicyNet` the RLModule wraps, so REINFORCE
   continues from it): the content PCA (only with ``model.content_dim > 0``) and the input statistics on the
   labelled observations, then weighted BCE on the
   retrieve head (+ MSE of the value head on π₀'s reward), the epoch kept by validation gain over π₀ on held-out
   questions (+ the mode head's weighted cross-entropy with QueryGen);
5. exports it (``<out_dir>/warmstart/policy``) with a ``summary.json``.

Measured on the micro-world (2,000 questions, π₀ = never, λ = 0.1; see docs/results.md): 9,125 labelled decisions
(828 positive) in 215 s on 2 CPUs from a cold cache; the classifier alone gains +0.110 reward over the best
fixed trigger on held-out questions, and REINFORCE from it +0.141.

Example (the micro-world's labels for the first 64 training questions, in seconds)::

    >>> from envs.env_config import EnvConfig  # doctest: +SKIP
    >>> from train.warmstart import WarmStartOptions, run_warmstart  # doctest: +SKIP
    >>> env = EnvConfig.from_preset("microworld", {"split": "train", "rsus_components": ["ent"],
    ...                                            "signals": ["pulse", "output", "rsus", "content"]})  # doctest: +SKIP
    >>> run_warmstart(env, WarmStartOptions(enabled=True, questions=64), "runs/ws", model_config={})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.core.config import ConfigBase, ConfigError, helpf

if TYPE_CHECKING:
    from envs.env_config import EnvConfig

log = logging.getLogger(__name__)


#: ``WarmStartOptions.kind``: how the decisions to fit are chosen and labelled
WARMSTART_KINDS = ("counterfactual", "dagger")
#: the runner of each warm-start kind but 'counterfactual' (this module's own), registered by the module that
#: implements it — train.dagger registers 'dagger' on import (it imports this module, so this one may not import it)
KIND_RUNNERS: dict[str, Any] = {}


@dataclass
class WarmStartOptions(ConfigBase):
    """Counterfactual labels → supervised policy → REINFORCE (``TrainConfig.warmstart``); ``kind: dagger``: the
    exact oracle's labels at the policy's own states instead (:mod:`train.dagger`)."""

    enabled: bool = helpf(False, "label training questions counterfactually and fit the policy before REINFORCE")
    kind: str = helpf("counterfactual", "counterfactual: label π₀'s decisions by the two episodes that differ there "
                                        "| dagger: label the decisions the policy itself visits with the exact cache "
                                        "oracle's action values, over `rounds` rounds (train.dagger)")
    rounds: int = helpf(3, "dagger: rounds of roll out → label → refit on every round's labels; round 0 rolls out "
                           "π₀ (`behavior`), each later round the policy fitted in the round before", ge=1)
    max_leaves: int = helpf(4096, "dagger: leaves the oracle's search may list below one action (reaching it is an "
                                  "error: that label would not be exact)", ge=1)
    questions: int | None = helpf(2000, "training questions to label: the first N of the env's split (null: all)")
    behavior: str = helpf("never", "π₀ whose decisions are labelled: never | threshold")
    signal: str = helpf("minprob", "behavior threshold: the signal (info['signals'] name)")
    direction: str = helpf("below", "behavior threshold: retrieve when the signal is below | above")
    threshold: float | None = helpf(None, "behavior threshold: the value")
    lam: float | None = helpf(None, "λ_retrieval of the labels' reward (default: the curriculum's final λ)")
    epochs: int = helpf(40, "passes over the labelled decisions")
    lr: float = helpf(3e-3, "Adam learning rate")
    weight_decay: float = helpf(1e-4, "AdamW weight decay")
    batch_size: int = helpf(256, "decisions per gradient step")
    val_share: float = helpf(0.1, "share of the labelled questions held out to choose the epoch")
    dtype: str = helpf("float32", "float type of the fit: float32 | float64 — float64 keeps the fit the same on "
                                  "CPUs of other instruction sets (float32's last-bit differences grow over the "
                                  "epochs into another classifier: `kairos bench drift`); the export is float32")
    batch_envs: int = helpf(16, "questions in flight per batched generation call while labelling")
    workers: int = helpf(1, "processes labelling contiguous shards of the questions in parallel (one CPU and one "
                            "model copy each; the labels are the same for any number)")

    def validate(self) -> None:
        if self.kind not in WARMSTART_KINDS:
            raise ConfigError(f"WarmStartOptions: kind must be one of {', '.join(WARMSTART_KINDS)}, got '{self.kind}' "
                              "(counterfactual: one-decision counterfactuals of π₀; dagger: the oracle's labels at "
                              "the policy's own states)")
        if self.dtype not in ("float32", "float64"):
            raise ConfigError(f"WarmStartOptions: dtype must be float32 or float64, got '{self.dtype}'")
        if self.behavior not in ("never", "threshold"):
            raise ConfigError(f"WarmStartOptions: behavior must be never or threshold, got '{self.behavior}'")
        if self.behavior == "threshold" and self.threshold is None:
            raise ConfigError("WarmStartOptions: behavior 'threshold' needs 'threshold' (and signal, direction)")
        if self.direction not in ("below", "above"):
            raise ConfigError(f"WarmStartOptions: direction must be below or above, got '{self.direction}'")
        if self.questions is not None and self.questions < 2:
            raise ConfigError(f"WarmStartOptions: questions must be >= 2 (or null), got {self.questions}")
        if not 0.0 < self.val_share < 1.0:
            raise ConfigError(f"WarmStartOptions: val_share must be in (0, 1), got {self.val_share}")
        if self.lam is not None and not (np.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError(f"WarmStartOptions: lam must be a finite number >= 0, got {self.lam}")
        if self.epochs < 1 or self.lr <= 0 or self.batch_size < 1 or self.batch_envs < 1 or self.workers < 1:
            raise ConfigError("WarmStartOptions: epochs, batch_size, batch_envs, workers must be >= 1 and lr > 0")


# ---------------------------------------------------------------- triggers used for labelling
def behavior_trigger(opts: WarmStartOptions):
    """π₀ of the options."""
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
#: (:func:`train.conditioning.labels_at`; a cost-conditioned policy's warm start draws λ per decision)
OUTCOME_KEYS = ("q_base", "c_base", "q_accept", "c_accept", "q_modes", "c_modes")


def branch_outcome(episode: dict[str, Any], cost_names: list[str]) -> tuple[float, np.ndarray]:
    """An episode row's ``(quality, raw cost totals in cost_names order)`` (its decisions' ``costs`` summed)."""
    tot = np.zeros(len(cost_names))
    for d in episode["decisions"]:
        costs = d.get("costs") or {}
        for i, c in enumerate(cost_names):
            tot[i] += float(costs.get(c, 0.0))
    return float(episode["quality"]), tot


def outcome_arrays(base: list[tuple], accept: list[tuple], modes: list[list[tuple]]) -> dict[str, np.ndarray]:
    """:data:`OUTCOME_KEYS` arrays of N decisions' outcomes: ``q_*`` [N] (``q_modes`` [N, M]), ``c_*`` [N, C]
    (``c_modes`` [N, M, C])."""
    return {"q_base": np.array([b[0] for b in base]), "c_base": np.stack([b[1] for b in base]),
            "q_accept": np.array([a[0] for a in accept]), "c_accept": np.stack([a[1] for a in accept]),
            "q_modes": np.array([[m[0] for m in ms] for ms in modes]),
            "c_modes": np.stack([np.stack([m[1] for m in ms]) for ms in modes])}


def counterfactual_labels(env_config: EnvConfig, questions: list[int], opts: WarmStartOptions, lam: float,
                          out_dir: Path, components=None, progress: bool = True) -> dict[str, Any]:
    """Observations and counterfactual labels of π₀'s decisions on ``questions`` (see the module docstring).

    Returns ``{"obs": {field: [N, d]}, "y", "w", "delta", "delta_modes", "base_action", "base_reward",
    "question"}`` arrays over the N labelled decisions, in (question, step) order. ``delta_modes[:, m]`` is
    ``R(retrieve at k with mode m) − R(accept at k)`` — one column (the env's default mode) without QueryGen;
    ``delta`` is its row maximum. With ``opts.workers > 1`` the questions are cut into that many contiguous
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


def contiguous_shards(questions: list[int], n: int) -> list[list[int]]:
    """``questions`` cut into ``n`` contiguous shards of near-equal size, in order."""
    bounds = np.linspace(0, len(questions), n + 1).round().astype(int)
    return [questions[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def map_shards(fn, args: list[tuple]) -> list[Any]:
    """``[fn(*a) for a in args]``, each call in its own spawned process (one torch thread each; the processes log as
    the driver does), the results in the order of ``args``. A failing call (or a dead worker) stops the others and
    its error is raised here."""
    import concurrent.futures as cf
    import multiprocessing as mp

    root = logging.getLogger()  # the workers log as the driver does (it may have configured nothing)
    log_level = root.getEffectiveLevel() if root.handlers else None
    pool = cf.ProcessPoolExecutor(len(args), mp_context=mp.get_context("spawn"), initializer=_init_worker,
                                  initargs=(log_level,))
    try:
        futures = [pool.submit(fn, *a) for a in args]
        cf.wait(futures, return_when=cf.FIRST_EXCEPTION)  # a failing shard (or a dead worker) ends the wait
        return [f.result() for f in futures]  # its error is raised here; else in shard order
    except BaseException:
        for proc in list(getattr(pool, "_processes", {}).values()):  # stop the shards still working
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _init_worker(log_level: int | None) -> None:
    import torch

    torch.set_num_threads(1)  # one CPU per labelling process
    if log_level is not None:
        logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s[pid %(process)d]: %(message)s",
                            datefmt="%H:%M:%S")


def _label_shard(cfg, questions: list[int], opts: WarmStartOptions, out_dir: Path, comps,
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
        res = evaluate_policy(first_mode(FlipAt(base, k)), cfg, qs, batch_size=opts.batch_envs, components=comps,
                              return_episodes=True, jsonl_path=out_dir / "labels" / f"flip_{k}.jsonl",
                              progress=f"warm start: counterfactual at step {k}" if progress else None)
        for e in res["episodes"]:
            flip_reward[(e["question_index"], k)] = float(e["reward"])
            flip_out[(e["question_index"], k)] = branch_outcome(e, cost_names)
        for m in range(1, len(modes)):  # QueryGen: the retrieve branch once more per further mode
            res = evaluate_policy(RetrieveWithModeAt(base, k, m), cfg, qs, batch_size=opts.batch_envs,
                                  components=comps, return_episodes=True,
                                  jsonl_path=out_dir / "labels" / f"retrieve_{k}_mode{m}.jsonl",
                                  progress=f"warm start: step {k}, mode {modes[m]}" if progress else None)
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
            r_accept, r_retrieve = (rb, rf) if a == 0 else (rf, rb)
            r_modes = [r_retrieve] + [mode_reward[(q, k[0], m)] for m in range(1, len(modes))]
            o_accept, o_retrieve = (base_out, flip_out[(q, k[0])]) if a == 0 else (flip_out[(q, k[0])], base_out)
            o_modes = [o_retrieve] + [mode_out[(q, k[0], m)] for m in range(1, len(modes))]
            rows.append((q, obs, a, rb, [r - r_accept for r in r_modes],  # R(retrieve at k, mode m) − R(accept)
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


# ---------------------------------------------------------------- fitting
def decision_gain(p_retrieve: np.ndarray, data: dict[str, Any], idx: np.ndarray, threshold: float = 0.5,
                  mode: np.ndarray | None = None) -> float:
    """Mean per-question reward gained over π₀ by taking the classifier's action at each labelled decision
    (each decision judged alone, the rest π₀): Σ_k ΔR_k·(1[p_k > t] − a_k) / questions. With QueryGen labels
    (``delta_modes``) and the classifier's ``mode`` per decision: Σ_k 1[p_k > t]·ΔR_k,mode_k − a_k·ΔR_k,0 (π₀
    retrieves with the first mode)."""
    dm = data.get("delta_modes")
    dm = np.asarray(data["delta"], dtype=np.float64)[:, None] if dm is None else dm
    act = (p_retrieve[idx] > threshold).astype(np.float64)
    chosen = dm[idx, 0] if mode is None else dm[idx, mode[idx]]
    gain = chosen * act - dm[idx, 0] * data["base_action"][idx]
    return float(gain.sum() / max(1, len(np.unique(data["question"][idx]))))


def mode_targets(delta_modes: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The mode head's target and weight per labelled decision: the best mode's index, weighted by the spread of
    the modes' values there (0 where every mode ties). Where several modes tie for best, the one with the higher
    mean value over the decisions where retrieving pays (``y > 0``; all decisions without ``y``) is the target —
    not the first listed, which would hand every tie to the head's first mode (a generator tied with ``info_need``
    at most decisions and better on average was learned as ``info_need``). Ties of the means: list order.

    Example:
        >>> dm = np.array([[0.9, 0.9, 0.9], [0.9, 0.0, 0.9], [0.0, 0.0, 0.9], [0.9, 0.0, 0.9], [0.9, 0.0, 0.5]])
        >>> target, weight = mode_targets(dm)  # mode 2 ties mode 0 at rows 0, 1, 3 and is better on average
        >>> target.tolist(), [round(float(x), 2) for x in weight]
        ([2, 2, 2, 2, 0], [0.0, 0.9, 0.9, 0.9, 0.9])
    """
    dm = np.asarray(delta_modes, dtype=np.float64)
    pays = dm if y is None or not np.any(np.asarray(y) > 0) else dm[np.asarray(y) > 0]
    mean = pays.mean(axis=0)
    rank = np.empty(len(mean), dtype=np.float64)  # 0 = the highest mean; stable: equal means keep list order
    rank[np.argsort(-mean, kind="stable")] = np.arange(len(mean))
    best = dm >= dm.max(axis=1, keepdims=True) - 1e-12
    target = np.where(best, rank[None, :], np.inf).argmin(axis=1)
    weight = (dm.max(axis=1) - dm.min(axis=1)).astype(np.float32)
    return target.astype(np.int64), weight


def fit_policy(data: dict[str, Any], spec, opts: WarmStartOptions, seed: int = 0, sampler=None):
    """The warm-started :class:`PolicyNet` and its fitting log (see the module docstring, item 4); fitted in
    ``opts.dtype`` (the network, its input statistics and the data), returned in float32. ``sampler``: a
    :class:`train.conditioning.CostSampler` — a cost-conditioned policy, each decision's λ drawn afresh every epoch
    (its observed ``costs`` field and its labels follow), validated on one fixed draw."""
    import torch

    if opts.dtype == "float32":
        return _fit_policy(data, spec, opts, seed, sampler)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        wide = {**data, "obs": {k: np.asarray(v, dtype=np.float64) for k, v in data["obs"].items()},
                **{k: np.asarray(data[k], dtype=np.float64) for k in ("y", "w", "base_reward")}}
        net, fit = _fit_policy(wide, spec, opts, seed, sampler)
    finally:
        torch.set_default_dtype(before)
    return net.float(), fit


class _Targets:
    """The fit's targets as tensors — the labels at the labelling λ, or (with a cost sampler) at λ drawn per
    decision: :meth:`redraw` before every epoch (the validation rows keep one fixed draw)."""

    def __init__(self, data: dict[str, Any], obs: dict, sampler, rng: np.random.Generator, val: np.ndarray):
        import torch

        self.data, self.obs, self.sampler, self.with_modes = data, obs, sampler, False
        dm = data.get("delta_modes")
        self.with_modes = dm is not None and dm.shape[1] > 1
        self.val, self.val_weights = val, (sampler.draw(rng, len(val)) if sampler is not None else None)
        self.dtype = torch.get_default_dtype()
        self._set(data)

    def _set(self, labels: dict[str, Any]) -> None:
        import torch

        self.labels = {**self.data, **labels}
        self.y, self.w = (torch.as_tensor(np.asarray(labels[k]), dtype=self.dtype) for k in ("y", "w"))
        self.ret = torch.as_tensor(np.asarray(labels["base_reward"]), dtype=self.dtype)
        if self.with_modes:  # the mode head: the best mode's index, weighted by how much the mode matters there
            mode_y, mode_w = mode_targets(labels["delta_modes"], labels["y"])
            self.mode_y, self.mode_w = torch.as_tensor(mode_y), torch.as_tensor(mode_w, dtype=self.dtype)

    def redraw(self, rng: np.random.Generator) -> None:
        """New λ for every training decision (its ``costs`` field and labels); the validation rows keep theirs."""
        import torch

        from train.conditioning import labels_at

        if self.sampler is None:
            return
        weights = self.sampler.draw(rng, len(self.data["y"]))
        weights[self.val] = self.val_weights
        self._set(labels_at(self.data, weights))
        self.obs["costs"] = torch.as_tensor(self.sampler.features(weights), dtype=self.dtype)


def _fit_policy(data: dict[str, Any], spec, opts: WarmStartOptions, seed: int = 0, sampler=None):
    import torch

    from policies.rl.net import PolicyNet

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    qs = np.unique(data["question"])
    val_q = set(rng.choice(qs, size=max(1, int(round(opts.val_share * len(qs)))), replace=False).tolist())
    is_val = np.array([q in val_q for q in data["question"]])
    tr, va = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    obs = {k: torch.as_tensor(v) for k, v in data["obs"].items() if k in spec.fields}
    if sampler is not None and "costs" not in spec.fields:
        raise ValueError("fit_policy: a cost sampler needs a policy that observes 'costs' (env observe_costs)")
    t = _Targets(data, obs, sampler, rng, va)
    t.redraw(rng)  # the input statistics see the drawn λ
    net = PolicyNet(spec)
    sub = {k: v[torch.as_tensor(tr)] for k, v in obs.items()}
    net.fit_reducers(sub)
    net.update_normalizer(sub)
    dm = data.get("delta_modes")
    if t.with_modes != (net.query_head is not None) or (t.with_modes and dm.shape[1] != spec.n_modes):
        raise ValueError(f"fit_policy: the labels have {1 if dm is None else dm.shape[1]} query mode(s), the policy's "
                         f"query head {spec.n_modes} (label and train with the same env querygen / query_modes)")
    opt = torch.optim.AdamW(net.parameters(), lr=opts.lr, weight_decay=opts.weight_decay)
    best = (-np.inf, None, -1)
    history = []

    def probs(idx: np.ndarray) -> np.ndarray:
        net.eval()
        with torch.no_grad():
            out = net.forward_heads({k: v[torch.as_tensor(idx)] for k, v in obs.items()})
        net.train()
        if t.with_modes:
            mode_all[idx] = out["mode_logits"].argmax(-1).numpy()
        return torch.softmax(out["retrieve_logits"], -1)[:, 1].numpy()

    p_all = np.zeros(len(data["y"]))
    mode_all = np.zeros(len(data["y"]), dtype=np.int64) if t.with_modes else None
    for epoch in range(opts.epochs):
        if epoch:
            t.redraw(rng)
        perm = rng.permutation(tr)
        total = 0.0
        for i in range(0, len(perm), opts.batch_size):
            b = torch.as_tensor(perm[i:i + opts.batch_size])
            out = net.forward_heads({k: v[b] for k, v in obs.items()})
            logit = out["retrieve_logits"][:, 1] - out["retrieve_logits"][:, 0]
            bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, t.y[b], weight=t.w[b], reduction="sum")
            loss = bce / t.w[b].sum().clamp_min(1e-8) + 0.5 * torch.mean((out["value"] - t.ret[b]) ** 2)
            if t.with_modes:
                ce = torch.nn.functional.cross_entropy(out["mode_logits"], t.mode_y[b], reduction="none")
                loss = loss + (ce * t.mode_w[b]).sum() / t.mode_w[b].sum().clamp_min(1e-8)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(b)
        p_all[va] = probs(va)
        g = decision_gain(p_all, t.labels, va, mode=mode_all)
        history.append({"epoch": epoch + 1, "train_loss": total / max(1, len(tr)), "val_gain": g})
        if g > best[0]:
            best = (g, {k: v.detach().clone() for k, v in net.state_dict().items()}, epoch + 1)
    net.load_state_dict(best[1])
    net.eval()
    p_all[tr] = probs(tr)
    p_all[va] = probs(va)
    return net, {"best_epoch": best[2], "val_gain_per_question": best[0],
                 "train_gain_per_question": decision_gain(p_all, t.labels, tr, mode=mode_all), "history": history,
                 "n_train_questions": int(len(qs) - len(val_q)), "n_val_questions": int(len(val_q))}


# ---------------------------------------------------------------- the whole step
def finished_warmstart(out: Path, cfg: EnvConfig, opts: WarmStartOptions,
                       cost_ranges: dict[str, tuple[float, float]] | None = None) -> Path | None:
    """The exported policy of a finished warm start in ``out`` (its ``summary.json`` present), ``None`` when there
    is none; one of another kind or for another number of query modes is an error (delete it or use another
    out_dir)."""
    import json

    if not ((out / "summary.json").is_file() and (out / "policy" / "spec.json").is_file()):
        return None
    n_modes = len(cfg.query_modes) if cfg.querygen else 1
    saved = json.loads((out / "policy" / "spec.json").read_text())["spec"].get("n_modes", 1)
    if saved != n_modes:
        raise ConfigError(f"warm start: {out / 'policy'} was fitted for {saved} query mode(s), this run has "
                          f"{n_modes} (querygen / query_modes changed): delete {out} or use another out_dir")
    saved_opts = json.loads((out / "summary.json").read_text()).get("behavior") or {}
    kind = saved_opts.get("kind", "counterfactual")
    if kind != opts.kind:
        raise ConfigError(f"warm start: {out} holds a finished '{kind}' warm start, this run asks for "
                          f"warmstart.kind '{opts.kind}': delete {out} or use another out_dir")
    dtype = saved_opts.get("dtype", "float32")
    if dtype != opts.dtype:
        raise ConfigError(f"warm start: {out} holds a warm start fitted in {dtype}, this run asks for "
                          f"warmstart.dtype '{opts.dtype}': delete {out} or use another out_dir")
    saved_ranges = {k: tuple(v) for k, v in (json.loads((out / "summary.json").read_text()).get("cost_ranges")
                                             or {}).items()}
    if saved_ranges != dict(cost_ranges or {}):
        raise ConfigError(f"warm start: {out} holds a warm start fitted over the cost ranges {saved_ranges or 'none'}, "
                          f"this run draws {dict(cost_ranges or {}) or 'none'}: delete {out} or use another out_dir")
    log.info("warm start: reusing %s", out / "policy")
    return out / "policy"


def run_warmstart(env_config: EnvConfig, opts: WarmStartOptions, out_dir: str | Path,
                  model_config: dict[str, Any], lam: float = 0.1, seed: int = 0, progress: bool = True,
                  cost_ranges: dict[str, tuple[float, float]] | None = None) -> Path:
    """Label, fit and export; returns the exported policy directory (``<out_dir>/policy``). A finished
    warm start (its ``summary.json`` present) is reused; an interrupted one resumes its label files.
    ``cost_ranges``: a cost-conditioned policy (the env's ``observe_costs``) — each decision's λ of these costs is
    drawn from ``(low, high)`` every epoch (:mod:`train.conditioning`)."""
    import torch

    from envs.components import build_components
    from envs.core.io import write_json
    from envs.retrieval_env import RetrievalTimingEnv
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces

    out = Path(out_dir)
    cfg = env_config.replace(max_questions=None)
    cost_ranges = {k: (float(a), float(b)) for k, (a, b) in (cost_ranges or {}).items()}
    done = finished_warmstart(out, cfg, opts, cost_ranges)
    if done is not None:
        return done
    if opts.kind != "counterfactual" and cfg.observe_costs:
        raise ConfigError(f"warmstart.kind '{opts.kind}': a cost-conditioned policy (env observe_costs) is warm-started "
                          "from counterfactual labels only (kind: counterfactual)")
    if opts.kind != "counterfactual":  # another kind's runner, registered by its module (train.dagger: 'dagger')
        runner = KIND_RUNNERS.get(opts.kind)
        if runner is None:
            raise ConfigError(f"WarmStartOptions.kind '{opts.kind}': no runner registered; import its module first "
                              "(kind 'dagger': import train.dagger — python -m train does)")
        return runner(cfg, opts, out, model_config, lam=opts.lam if opts.lam is not None else lam, seed=seed,
                      progress=progress)
    t0 = time.perf_counter()
    lam = opts.lam if opts.lam is not None else lam
    comps = build_components(cfg)
    n_split = len(comps.questions)
    n = n_split if opts.questions is None else min(int(opts.questions), n_split)
    data = counterfactual_labels(cfg, list(range(n)), opts, lam, out, components=comps, progress=progress)
    env = RetrievalTimingEnv(cfg, components=comps)
    spec = spec_from_spaces(env.observation_space, env.action_space, model_config)
    env.close()
    from train.conditioning import cost_sampler

    sampler = cost_sampler(data, {**cfg.costs, "retrieval_calls": lam}, cost_ranges, list(cfg.observe_costs))
    with torch.random.fork_rng():
        net, fit = fit_policy(data, spec, opts, seed=seed, sampler=sampler)
    path = export_policy(net, out / "policy", heads=("retrieve", "query", "value"),
                         extra={"name": "warmstart", "warmstart": {"lambda": lam, "behavior": opts.behavior}},
                         env_config=cfg.to_dict())
    summary = {"questions": n, "decisions": int(len(data["y"])), "positives": int(data["y"].sum()),
               "lambda": lam, **({"cost_ranges": cost_ranges} if cost_ranges else {}),
               "behavior": opts.to_dict(), "behavior_reward": data["behavior_reward"],
               "behavior_accuracy": data["behavior_accuracy"], "behavior_calls": data["behavior_calls"],
               "seconds": round(time.perf_counter() - t0, 1), **fit}
    if len(data["modes"]) > 1:  # QueryGen: how often each mode is the best retrieve branch where retrieving pays
        dm = data["delta_modes"][data["y"] > 0]
        target = mode_targets(dm)[0]  # the mode head's targets (ties: the mode with the higher mean value)
        summary["best_mode_where_retrieval_pays"] = {m: int((target == i).sum()) for i, m in enumerate(data["modes"])}
        summary["tied_for_best_where_retrieval_pays"] = {
            m: int((dm[:, i] >= dm.max(axis=1) - 1e-12).sum()) for i, m in enumerate(data["modes"])}
        summary["positives_by_mode"] = {m: int((dm[:, i] > 0).sum()) for i, m in enumerate(data["modes"])}
    write_json(out / "summary.json", summary)
    log.info("warm start: %d decisions of %d questions (%d positive), val gain over π₀ %+.4f reward/question "
             "(epoch %d), %.0f s", summary["decisions"], n, summary["positives"], fit["val_gain_per_question"],
             fit["best_epoch"], summary["seconds"])
    (out / "labels").mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "labels" / "decisions.npz", question=data["question"], delta=data["delta"],
                        delta_modes=data["delta_modes"], modes=np.array(data["modes"]),
                        base_action=data["base_action"])
    return path
