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
   policy of this classifier is one exact policy-improvement step over π₀ on the states π₀ visits. With
   ``horizon: H`` the branches are generated only until step ``k+H`` and scored by the task's partial quality
   there (:mod:`train.counterfactual`: O(H) tokens per decision instead of O(n));
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

Steps 1–3 are :mod:`train.counterfactual` (:func:`counterfactual_labels`), step 4 is :mod:`train.policy_fit`
(:func:`fit_policy`); this module holds the options and runs the whole step (:func:`run_warmstart`).

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
from train.counterfactual import OUTCOME_KEYS, counterfactual_labels, decision_key  # noqa: F401  (re-exported)
from train.policy_fit import decision_gain, fit_policy, mode_targets  # noqa: F401  (re-exported)
from train.shards import map_shards  # noqa: F401  (re-exported: eval.detection.labels imports it from here)

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
    horizon: int | None = helpf(None, "counterfactual: null — exact labels, each branch continued to the answer "
                                      "(O(n²) tokens per question of n steps) | H >= 1 — each branch generated only "
                                      "until step k+H, labelled by the task's partial quality there "
                                      "(train.counterfactual; needs a task with partial_quality: microworld_chain)")

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
        if self.horizon is not None and (isinstance(self.horizon, bool) or not isinstance(self.horizon, int)
                                         or self.horizon < 1):
            raise ConfigError(f"WarmStartOptions: horizon must be an integer >= 1 (steps each counterfactual branch "
                              f"is generated past its decision) or null for the exact labels, got {self.horizon!r}: "
                              "set warmstart.horizon: null or e.g. 4")
        if self.horizon is not None and self.kind != "counterfactual":
            raise ConfigError(f"WarmStartOptions: horizon applies to kind 'counterfactual' only (kind '{self.kind}' "
                              "labels with the exact oracle): set warmstart.horizon: null")
        if self.epochs < 1 or self.lr <= 0 or self.batch_size < 1 or self.batch_envs < 1 or self.workers < 1:
            raise ConfigError("WarmStartOptions: epochs, batch_size, batch_envs, workers must be >= 1 and lr > 0")


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
    horizon = saved_opts.get("horizon")
    if horizon != opts.horizon:
        raise ConfigError(f"warm start: {out} holds a warm start fitted on labels of horizon {horizon} (null: exact), "
                          f"this run asks for warmstart.horizon {opts.horizon}: delete {out} or use another out_dir")
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
