"""DAgger warm start: imitation of the exact cache oracle at the policy's own states (docs/design.md §7).

The counterfactual warm start (:mod:`train.warmstart`) labels the decisions of the closed-book behaviour π₀, each by
the two episodes that differ there and follow π₀ elsewhere: one policy-improvement step over π₀, on π₀'s states.
The learned policy then meets states π₀ never visits (after its own retrievals), and nothing told it what is best
there. DAgger (Ross, Gordon & Bagnell 2011) asks the expert at the learner's own states; the expert here is exact —
the trajectory cache holds every branch, and the cache oracle's branch and bound finds the best continuation of any
action prefix (:func:`envs.oracle.oracle_action_values`). With the loss weighted by what a wrong action costs under
the oracle's continuation it is AggreVaTe (Ross & Bagnell 2014). Top to bottom, for ``rounds`` rounds:

1. roll out a policy greedily on the first ``questions`` training questions, recording the observation at every
   decision and the actions taken before it (round 0: π₀ — ``behavior``, never by default; round r > 0: the policy
   fitted in round r − 1);
2. label every decision not labelled in an earlier round with the oracle's action values at λ: ``Q*(s, a)`` = the
   best leaf reward ``quality − λ·calls`` reachable below action ``a``; the retrieve head's target is the oracle's
   action (retrieve or not: :func:`envs.oracle.best_leaf`'s tie rule), weighted by
   ``|max_m Q*(s, retrieve m) − Q*(s, accept)|``; with QueryGen actions the mode head's target is the best mode,
   weighted by the spread of the modes' values (``delta_modes``: the same label format as the counterfactual warm
   start, so the same fit reads it). A decision where the retrieval caps leave only accept is not a choice: skipped;
3. fit the policy on the labels of every round so far (:func:`train.policy_fit.fit_policy`: the same network, fit and
   epoch selection as the counterfactual warm start; its validation gain is then the gain over accepting at each
   labelled state under the oracle's continuation) and export it (``dagger/round_<r>/policy``).

The last round's policy is the warm start (``<out_dir>/policy``); its greedy rollout on the same questions is
reported too. Resumable per round: a round's labels (``dagger/round_<r>/labels.npz`` + ``round.json``) and its fit
(``policy/`` + ``fit.json``) are reused when present, and the trajectory cache keeps every branch generated. With
``workers > 1`` each round's rollout and labels run in that many processes on contiguous shards of the questions
(the labels are the same for any number: they depend on the question and the prefix alone).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.core.config import ConfigError

if TYPE_CHECKING:
    from envs.env_config import EnvConfig
    from train.warmstart import WarmStartOptions

log = logging.getLogger(__name__)


class TrajectoryRecorder:
    """A policy that also records the observation of each of its decisions, in order, per question id (shallow
    copies — one per episode — share the log)."""

    def __init__(self, trigger, log_: dict[str, list[dict[str, np.ndarray]]]):
        self.trigger, self.log = trigger, log_
        self.name = getattr(trigger, "name", "policy")

    def __copy__(self):  # evaluate_policy copies the policy per episode: copy the wrapped one too
        return TrajectoryRecorder(copy.copy(self.trigger), self.log)

    def reset(self, seed: int | None = None) -> None:
        self.trigger.reset(seed)

    def bind_modes(self, env_modes: list[str]) -> None:
        if callable(getattr(self.trigger, "bind_modes", None)):
            self.trigger.bind_modes(env_modes)

    def decide(self, observation, info):
        self.log.setdefault(info["question_id"], []).append(
            {k: np.asarray(v, dtype=np.float32).copy() for k, v in observation.items()})
        return self.trigger.decide(observation, info)


def taken(decision: dict[str, Any], querygen: bool) -> Any:
    """The action a logged decision carried out (a capped retrieval is an accept), as the oracle's search writes it:
    ``0`` / ``1``, or ``(0, 0)`` / ``(1, mode)`` with QueryGen actions."""
    r, m = (int(x) for x in decision["action"])
    if querygen:
        return (1, m) if r else (0, 0)
    return r


def state_key(question: int, prefix: tuple) -> str:
    """A decision's name across rounds: the question and the actions before it."""
    return f"{int(question)}|" + ",".join(str(x) for a in prefix for x in (a if isinstance(a, tuple) else (a,)))


def rollout_policy(cfg: EnvConfig, opts: WarmStartOptions, policy: str | None):
    """Round 0's π₀ (``policy`` None; its own retrievals with the first query mode), else the exported policy at
    ``policy``, greedy."""
    from policies.rl.export import LearnedTrigger
    from policies.triggers import FixedModeTrigger
    from train.counterfactual import behavior_trigger

    if policy is not None:
        return LearnedTrigger.load(policy, querygen=bool(cfg.querygen))
    base = behavior_trigger(opts)
    return FixedModeTrigger(base, 0, cfg.query_modes[0]) if cfg.querygen else base


def dagger_round(cfg, questions: list[int], opts: WarmStartOptions, policy: str | None, known: set[str],
                 lam: float, comps=None, progress: bool = True, label: bool = True) -> dict[str, Any]:
    """One round on ``questions`` (``cfg``: the EnvConfig, its λ of retrieval calls ``lam``; in a worker its dict):
    the rollout of ``policy`` (:func:`rollout_policy`) and, with ``label``, the oracle's labels of every decision it
    visits whose :func:`state_key` is not in ``known``. Returns the rollout's means and the labelled rows."""
    from tqdm.auto import tqdm

    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.oracle import oracle_action_values
    from envs.vector import BatchedRetrievalEnv
    from train.evaluate import evaluate_policy

    cfg = cfg if isinstance(cfg, EnvConfig) else EnvConfig.from_dict(cfg)
    comps = comps or build_components(cfg)
    seen: dict[str, list] = {}
    t0 = time.perf_counter()
    r = evaluate_policy(TrajectoryRecorder(rollout_policy(cfg, opts, policy), seen), cfg, questions,
                        batch_size=opts.batch_envs, components=comps, return_episodes=True,
                        progress="dagger: rollout" if progress else None)
    out: dict[str, Any] = {"n": len(questions), "reward": float(r["reward"]), "accuracy": float(r["accuracy"]),
                           "calls": float(r["calls_per_question"]), "rollout_seconds": time.perf_counter() - t0}
    if not label:
        return out
    rows = []  # (question, prefix, observation, action taken, episode reward)
    for e in r["episodes"]:
        acts = [taken(d, cfg.querygen) for d in e["decisions"]]
        obs = seen.get(e["question_id"], [])
        if len(obs) != len(acts):
            raise RuntimeError(f"dagger: question {e['question_index']}: {len(obs)} recorded observations for "
                               f"{len(acts)} decisions")
        for k, (o, a) in enumerate(zip(obs, acts)):
            if state_key(e["question_index"], tuple(acts[:k])) not in known:
                rows.append((e["question_index"], tuple(acts[:k]), o, a, float(e["reward"])))
    out["visited"] = sum(len(e["decisions"]) for e in r["episodes"])
    t1 = time.perf_counter()
    modes = list(range(len(cfg.query_modes))) if cfg.querygen else None
    venv = BatchedRetrievalEnv(opts.batch_envs, cfg, components=comps)
    try:
        with tqdm(desc="dagger: oracle labels (branch and bound)", unit="leaf", leave=False,
                  disable=not progress) as bar:
            values = oracle_action_values(venv, [(q, p) for q, p, *_ in rows], lam, modes=modes,
                                          max_leaves=opts.max_leaves, progress=bar)
    finally:
        venv.close()
    out["label_seconds"] = time.perf_counter() - t1
    keep = [i for i, sv in enumerate(values) if len(sv.actions) > 1]  # the caps left only accept: no choice
    out["no_choice"] = len(rows) - len(keep)
    out["rows"] = [(rows[i], values[i]) for i in keep]
    return out


def label_arrays(rows: list[tuple], querygen: bool, n_modes: int) -> dict[str, Any]:
    """The labelled rows of a round as the arrays :func:`train.policy_fit.fit_policy` reads (plus what they came
    from: the state keys, the oracle's and the rollout's actions); ``n_modes``: the retrieve actions per state."""
    fields = list(rows[0][0][2]) if rows else []
    dm = np.array([[v - sv.values[0] for v in sv.values[1:]] for _, sv in rows], dtype=np.float64).reshape(
        len(rows), n_modes)
    oracle = [sv.action for _, sv in rows]
    rollout = [r[3] for r, _ in rows]
    first = (lambda a: int(a[0])) if querygen else int
    mode = (lambda a: int(a[1])) if querygen else (lambda a: 0)
    delta = dm.max(axis=1) if len(rows) else np.zeros(0)
    return {"obs": {f: np.stack([r[2][f] for r, _ in rows]) for f in fields},
            "question": np.array([r[0] for r, _ in rows], dtype=np.int64),
            "state": np.array([state_key(r[0], r[1]) for r, _ in rows]),
            "delta_modes": dm, "delta": delta, "w": np.abs(delta).astype(np.float32),
            "y": np.array([first(a) for a in oracle], dtype=np.float32),
            "oracle_mode": np.array([mode(a) for a in oracle], dtype=np.int64),
            "rollout_action": np.array([first(a) for a in rollout], dtype=np.int64),
            "rollout_mode": np.array([mode(a) for a in rollout], dtype=np.int64),
            "base_reward": np.array([r[4] for r, _ in rows], dtype=np.float32)}


def save_labels(path: Path, data: dict[str, Any]) -> None:
    from envs.core.io import atomic_open

    arrays = {k: v for k, v in data.items() if k != "obs"}
    arrays.update({f"obs.{f}": v for f, v in data["obs"].items()})
    with atomic_open(path, "wb") as f:
        np.savez_compressed(f, **arrays)


def load_labels(path: Path) -> dict[str, Any]:
    with np.load(path) as z:
        data = {k: z[k] for k in z.files if not k.startswith("obs.")}
        data["obs"] = {k[4:]: z[k] for k in z.files if k.startswith("obs.")}
    return data


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The labels of several rounds (or shards) as one data set, in order."""
    parts = [p for p in parts if len(p["question"])]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "obs"}
    out["obs"] = {f: np.concatenate([p["obs"][f] for p in parts]) for f in parts[0]["obs"]}
    out["base_action"] = np.zeros(len(out["question"]), dtype=np.int64)  # fit_policy's gain: over accepting
    return out


def run_round(cfg: EnvConfig, questions: list[int], opts: WarmStartOptions, policy: str | None, known: set[str],
              lam: float, comps, progress: bool, label: bool = True) -> dict[str, Any]:
    """:func:`dagger_round` over ``opts.workers`` processes (contiguous shards), or here with one."""
    from train.shards import contiguous_shards, map_shards

    n = min(opts.workers, len(questions))
    if n <= 1:
        parts = [dagger_round(cfg, questions, opts, policy, known, lam, comps, progress, label)]
    else:
        parts = map_shards(dagger_round, [(cfg.to_dict(), shard, opts, policy, known, lam, None, progress and i == 0,
                                           label) for i, shard in enumerate(contiguous_shards(questions, n))])
    w = np.array([p["n"] for p in parts], dtype=np.float64)
    out: dict[str, Any] = {k: float(np.dot(w, [p[k] for p in parts]) / w.sum()) for k in ("reward", "accuracy", "calls")}
    for k in ("rollout_seconds", "label_seconds"):  # wall time: the slowest shard's
        if k in parts[0]:
            out[k] = round(max(p[k] for p in parts), 1)
    if label:
        out["visited"] = sum(p["visited"] for p in parts)
        out["no_choice"] = sum(p["no_choice"] for p in parts)
        out["rows"] = [row for p in parts for row in p["rows"]]
    return out


def run_dagger(cfg: EnvConfig, opts: WarmStartOptions, out: Path, model_config: dict[str, Any], lam: float,
               seed: int = 0, progress: bool = True) -> Path:
    """The DAgger warm start (module docstring) into ``out``; returns the exported policy (``<out>/policy``)."""
    import torch

    from envs.components import build_components
    from envs.core.io import write_json
    from envs.retrieval_env import RetrievalTimingEnv
    from policies.rl.export import export_policy, load_policy
    from policies.rl.module import spec_from_spaces
    from train.policy_fit import fit_policy

    t0 = time.perf_counter()
    cfg = cfg.replace(costs={**cfg.costs, "retrieval_calls": lam}, max_questions=None)
    comps = build_components(cfg)
    n_split = len(comps.questions)
    questions = list(range(n_split if opts.questions is None else min(int(opts.questions), n_split)))
    env = RetrievalTimingEnv(cfg, components=comps)
    spec = spec_from_spaces(env.observation_space, env.action_space, model_config)
    env.close()
    labels: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    policy: str | None = None
    net = None
    made_with = {"lambda": lam, "questions": len(questions), "behavior": opts.behavior,
                 "threshold": opts.threshold, "modes": list(cfg.query_modes) if cfg.querygen else None}
    for r in range(opts.rounds):
        rdir = out / "dagger" / f"round_{r}"
        if (rdir / "labels.npz").is_file() and (rdir / "round.json").is_file():
            stats = json.loads((rdir / "round.json").read_text())
            changed = {k: (stats.get(k), v) for k, v in made_with.items() if stats.get(k) != v}
            if changed:
                raise ConfigError(f"dagger: {rdir} was labelled with other settings ("
                                  + ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                                  + f"): delete {out / 'dagger'} (the trajectory cache keeps the branches) or use "
                                  "another out_dir")
            labels.append(load_labels(rdir / "labels.npz"))
            log.info("dagger round %d: reusing %d labelled decisions of %s", r, len(labels[-1]["question"]), rdir)
        else:
            known = {str(s) for d in labels for s in d["state"]}
            log.info("dagger round %d: rolling out %s on %d questions, labelling its new decisions (λ = %g)", r,
                     policy or f"π₀ = {opts.behavior}", len(questions), lam)
            stats = run_round(cfg, questions, opts, policy, known, lam, comps, progress)
            rows = stats.pop("rows")
            if not rows and not labels:
                raise ConfigError("dagger: the rollout met no decision with a choice to label (every decision "
                                  "capped?)")
            labels.append(label_arrays(rows, bool(cfg.querygen), len(cfg.query_modes) if cfg.querygen else 1))
            stats.update(policy=policy or f"behavior: {opts.behavior}", new_decisions=len(rows),
                         new_positives=int(labels[-1]["y"].sum()), **made_with)
            save_labels(rdir / "labels.npz", labels[-1])
            write_json(rdir / "round.json", stats)
        if (rdir / "policy" / "spec.json").is_file() and (rdir / "fit.json").is_file():
            net, _ = load_policy(rdir / "policy")
            fit = json.loads((rdir / "fit.json").read_text())
        else:
            t1 = time.perf_counter()
            data = merge(labels)
            with torch.random.fork_rng():
                net, fit = fit_policy(data, spec, opts, seed=seed)
            fit = {"decisions": int(len(data["question"])), "positives": int(data["y"].sum()),
                   "fit_seconds": round(time.perf_counter() - t1, 1), **fit}
            export_policy(net, rdir / "policy", heads=("retrieve", "query", "value"),
                          extra={"name": f"dagger-round{r}"}, env_config=cfg.to_dict())
            write_json(rdir / "fit.json", fit)
        policy = str(rdir / "policy")
        rounds.append({"round": r, **stats, **{k: v for k, v in fit.items() if k != "history"}})
        log.info("dagger round %d: rollout reward %.3f (accuracy %.3f, %.2f calls); %d new decisions labelled (%d "
                 "retrieve), fitted on %d: val gain %+.4f/question (epoch %d)", r, stats["reward"],
                 stats["accuracy"], stats["calls"], stats["new_decisions"], stats["new_positives"], fit["decisions"],
                 fit["val_gain_per_question"], fit["best_epoch"])
    final = run_round(cfg, questions, opts, policy, set(), lam, comps, progress, label=False)
    path = export_policy(net, out / "policy", heads=("retrieve", "query", "value"),
                         extra={"name": "warmstart", "warmstart": {"lambda": lam, "kind": "dagger",
                                                                   "rounds": opts.rounds, "behavior": opts.behavior}},
                         env_config=cfg.to_dict())
    summary = {"kind": "dagger", "questions": len(questions), "rounds": rounds, "lambda": lam,
               "decisions": rounds[-1]["decisions"], "positives": rounds[-1]["positives"],
               "final_rollout": final, "behavior": opts.to_dict(), "seconds": round(time.perf_counter() - t0, 1)}
    write_json(out / "summary.json", summary)
    log.info("dagger: %d rounds, %d labelled decisions; the final policy's rollout on the training questions: reward "
             "%.3f (accuracy %.3f, %.2f calls); %.0f s", opts.rounds, summary["decisions"], final["reward"],
             final["accuracy"], final["calls"], summary["seconds"])
    return path


def _register() -> None:
    from train.warmstart import KIND_RUNNERS

    KIND_RUNNERS["dagger"] = run_dagger


_register()
