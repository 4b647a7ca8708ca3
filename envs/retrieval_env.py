"""``RetrievalTimingEnv``: reasoning-with-retrieval as an episodic contextual bandit (docs/design.md §1, §5).

One episode = one question; one env step = one decision about the step just generated:

* action ``0`` (or ``(0, m)``): accept the step; the reasoner writes the next one;
* action ``1`` (or ``(1, m)``): build a query (query mode ``m`` with QueryGen, else the default mode),
  retrieve the top-k, inject the first passage not used before for this question, and regenerate the
  step. Once the per-step retrieval cap is reached the regenerated step is accepted automatically. With
  ``self_refine: eigenscore`` (SeaKR's self-aware refinement) the original step stands instead when its
  EigenScore is the lower of the two (the retrieval still counts; ``info["refined"]`` says which one stood).
  With ``rerank: eigenscore`` (SeaKR's self-aware re-ranking) every unused top-k passage regenerates the step
  and the one whose step has the lowest EigenScore is injected (``info["rerank"]``: each candidate's score).

The episode terminates when an accepted step is the final ``Answer`` line, and is truncated after
``max_steps`` accepted steps; a further ``step()`` is refused (:class:`ResetNeeded`) until ``reset()``, and so are
``reset(options=…)`` with an unknown key or a ``question_index`` that is not a plain integer in range
(:class:`EnvUsageError`). Evidence is cut to fit the reasoner's context window (logged; ``info["evidence_truncated"]``). Reward per decision is ``−Σ λ_c · cost_c``, plus the answer quality at the end.
A chain that ends without a usable answer line (truncated, ended without one, ``Answer:`` with nothing after
it) is asked for the answer once (``answer_closing``, the way IRCoT closes with "So the answer is": the reasoner
continues after a written ``Answer:``); its tokens and seconds count in the last decision's cost, and the final
info says how the episode ended (``answer_status``: answered | closed | none; stopped: ``reset``'s
``stop_at_step``) beside every answer metric.

Outcomes are cached by ``(question, action prefix)`` in a :class:`~envs.trajectory_cache.TrajectoryCache`;
greedy decoding makes them deterministic, so a warm cache replays episodes without running the LM.

The heavy parts (reasoner, retriever, signals) are built by :mod:`envs.components` from the config; tests
can inject their own through ``components=``.

The decision loop is batch-first (Gymnasium's vector envs are the model): :func:`step_batch` advances many env
copies that share one set of components, one short function per phase — :func:`_decide` (actions and caps) →
:func:`_retrieve` (the retrievals: cache, else queries, ONE batched search and ONE batched generation) →
:func:`_accept` and :func:`_continue` (the accepts, then the next steps and closing answers: cache, else ONE
batched generation each) → :func:`_outcome` (costs, quality, reward and info). The records come from
:func:`envs.engine.make_records`; what a method changes in a retrieval (the passage selector, the evidence
transform, what stands after the regeneration, prefetch) is a hook of :mod:`envs.hooks`, not a branch here.
:meth:`RetrievalTimingEnv.step` is the loop's ``n = 1`` view and :class:`envs.vector.BatchedRetrievalEnv` its
``n``-copy view. Per-question state lives in one :class:`~envs.episode.Episode`; one decision in flight in a
:class:`~envs.episode.Decision`.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.cache_service import open_cache
from envs.costs import CostEvent, CostModel, check_ranges, cost_feature, draw_weight, modelled_seconds
from envs.engine import make_records
from envs.env_config import EnvConfig
from envs.env_signals import observation_groups
from envs.episode import Decision, Episode, StepRecord, usable_answer
from envs.observation import episode_fields

log = logging.getLogger(__name__)

HISTORY_DIM = 4  # step index, retrievals so far, tokens so far (/100), steps since last retrieval

__all__ = ["HISTORY_DIM", "RESET_OPTIONS", "EnvUsageError", "Episode", "ResetNeeded", "RetrievalTimingEnv",
           "observation_dims",
           "StepRecord", "reset_batch", "step_batch", "usable_answer"]

def observation_dims(config: EnvConfig, feature_dims: dict[str, int]) -> dict[str, int]:
    """Every observation field and its size, as the env's ``Dict`` space holds them (the signal groups, ``history``,
    ``costs`` when the env's policy observes its cost weights, ``mask``): what a saved policy is checked against."""
    groups = observation_groups(config, feature_dims)
    return {**groups, "history": HISTORY_DIM,
            **({"costs": len(config.observe_costs)} if config.observe_costs else {}), "mask": len(groups)}


#: the keys ``reset(options=…)`` understands (anything else is an :class:`EnvUsageError`): ``question_index``,
#: ``cost_weights`` — ``{cost: λ}`` paid from this episode on (a budget given per question at run time) — and
#: ``stop_at_step`` — an integer N >= 2: the episode stops once step N is generated, before the decision about it
#: (truncated, ``answer_status`` 'stopped', no answer closing, nothing after step N generated; its quality is the
#: task's ``partial_quality`` of the lines written: the horizon labels of :mod:`train.counterfactual`)
RESET_OPTIONS = ("question_index", "cost_weights", "stop_at_step")


class EnvUsageError(ValueError):
    """The env was called in a way it does not support (bad ``reset`` options, an action outside the space)."""


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """``step()`` before ``reset()``, or after the episode ended (``terminated`` or ``truncated``): call ``reset()``."""


def _question_index(options: dict | None, n: int) -> int | None:
    """``options["question_index"]`` checked: a plain integer (not a bool, not a float) in ``[0, n)``; ``None``
    when no options or no index is given. Unknown option keys are an error, never ignored."""
    if options is None:
        return None
    if not isinstance(options, dict):
        raise EnvUsageError(f"reset(options=…) must be a dict (keys: {', '.join(RESET_OPTIONS)}), got "
                            f"{type(options).__name__} {options!r}")
    unknown = [k for k in options if k not in RESET_OPTIONS]
    if unknown:
        raise EnvUsageError(f"reset(options=…): unknown key {unknown[0]!r} (valid: {', '.join(RESET_OPTIONS)})")
    idx = options.get("question_index")
    if idx is None:
        return None
    if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, numbers.Integral):
        raise EnvUsageError(f"reset(options=…): question_index must be an integer in [0, {n}), got "
                            f"{type(idx).__name__} {idx!r}")
    if not 0 <= int(idx) < n:
        raise EnvUsageError(f"reset(options=…): question_index {int(idx)} out of range [0, {n})")
    return int(idx)


def _stop_at(e: RetrievalTimingEnv, options: dict | None) -> int | None:
    """``options["stop_at_step"]`` checked: an integer >= 2 on a task with partial quality; ``None`` when unset."""
    n = (options or {}).get("stop_at_step")
    if n is None:
        return None
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or int(n) < 2:
        raise EnvUsageError(f"reset(options=…): stop_at_step must be an integer >= 2 (step 1 is generated by reset and "
                            f"decided about), got {type(n).__name__} {n!r}")
    if not e.c.has_partial_quality:
        raise EnvUsageError(f"reset(options=…): stop_at_step needs a task with partial quality (partial_quality); "
                            f"task '{e.config.task}' has none")
    return int(n)


# ----------------------------------------------------------------------------------------- the decision loop
def reset_batch(envs: list[RetrievalTimingEnv], seeds: list[int | None] | None = None,
                options: list[dict | None] | None = None) -> list[tuple[dict, dict]]:
    """Start a question in each env (they share components and cache): ``[(obs, info)]``."""
    n = len(envs)
    seeds, options = seeds or [None] * n, options or [None] * n
    # 1. each copy draws its question with its own RNG (or takes options["question_index"])
    for e, seed, opts in zip(envs, seeds, options):
        if e.closed:
            raise EnvUsageError("reset() on a closed env (close() released its trajectory cache): make a new env")
        gym.Env.reset(e, seed=seed)
        questions = e.c.questions[: e.config.max_questions or None]
        idx = _question_index(opts, len(questions))
        if idx is None:
            idx = int(e.np_random.integers(len(questions)))
        e.ep = Episode(q=questions[idx], qidx=idx, stop_at=_stop_at(e, opts))
        if opts and opts.get("cost_weights") is not None:  # (a falsy non-mapping such as 0 is refused, not skipped)
            try:
                e.set_cost_weights(opts["cost_weights"])
            except (TypeError, ValueError) as err:
                raise EnvUsageError(f"reset(options=…): cost_weights: {err}") from None
        if e.cost_ranges:  # a cost-conditioned policy's training: this episode's λ, drawn (and observed)
            e.costs.set_weights({c: draw_weight(e.np_random, lo, hi) for c, (lo, hi) in e.cost_ranges.items()})
    # 2. the first step of every question: cache, else one batched generation
    for e, rec in zip(envs, _records(envs, "start")):
        ep = e.ep
        # episode-level content: the question's embedding is the context embedding of the first step
        ep.episode_feats = {g: (rec.features[src], rec.mask[src]) for g, src in episode_fields().items()
                            if g in e.groups}
        ep.tokens += rec.n_tokens
        ep.seconds += rec.seconds
        ep.record = rec
    return [(e._obs(), e._info(costs={k: 0.0 for k in e.costs.costs})) for e in envs]


def step_batch(envs: list[RetrievalTimingEnv], actions: list[Any]) -> list[tuple[dict, float, bool, bool, dict]]:
    """One decision in each env (they share components and cache): ``[(obs, reward, terminated, truncated,
    info)]``, exactly what each env's own ``step`` returns."""
    decided = [_decide(e, action) for e, action in zip(envs, actions)]  # 1. actions and caps
    _retrieve(envs, decided)                                            # 2. retrievals: the step regenerated
    more = _accept(envs, decided)                                       # 3. accepts ...
    for kind in ("next", "close"):                                      # ... then the next steps, closing answers
        _continue(envs, decided, kind, more[kind])
    return [_outcome(e, d) for e, d in zip(envs, decided)]              # 4. costs, quality, reward, info


def _records(envs: list[RetrievalTimingEnv], kind: str, modes: list[int] | None = None) -> list[StepRecord]:
    """The record of each env's current action prefix (:func:`envs.engine.make_records` over their episodes)."""
    if not envs:
        return []
    e = envs[0]
    return make_records(e.c, e.config, e.cache, [x.ep for x in envs], kind, modes)


def _decide(e: RetrievalTimingEnv, action: Any) -> Decision:
    """Phase 1: validate the action; split it into (retrieve?, query mode); a retrieval over a cap becomes an
    accept."""
    if e.closed:
        raise EnvUsageError("step() on a closed env (close() released its trajectory cache): make a new env")
    if getattr(e, "ep", None) is None or e.ep.record is None:
        raise ResetNeeded("call reset() before step()")
    if e.ep.done:
        raise ResetNeeded(f"step() after the episode ended ({e.ep.done}, question {e.c.question_id(e.ep.q)}): call "
                          "reset() to start the next question")
    try:
        ok = e.action_space.contains(e._normalise_action(action))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise EnvUsageError(f"action {action!r} is outside the action space {e.action_space}")
    retrieve, mode = e._split_action(action)
    ep, cfg = e.ep, e.config
    capped = bool(retrieve) and (ep.retrievals_this_step >= cfg.max_retrievals_per_step
                                 or ep.retrievals >= cfg.max_retrievals_per_question)
    return Decision(retrieve=int(retrieve and not capped), mode=mode, capped=capped, step=ep.record,
                    event=CostEvent(step_index=ep.n_accepted + 1))


def _retrieve(envs: list[RetrievalTimingEnv], decided: list[Decision]) -> None:
    """Phase 2: regenerate the current step with evidence (cache, else queries → one batched search → one batched
    generation); at the per-step cap the regenerated step is accepted in phase 3."""
    rix = [i for i, d in enumerate(decided) if d.retrieve]
    for i in rix:
        envs[i].ep.prefix += (f"r{decided[i].mode}",)
    for i, rec in zip(rix, _records([envs[i] for i in rix], "retrieve", [decided[i].mode for i in rix])):
        _retrieved(envs[i], decided[i], rec)


def _retrieved(e: RetrievalTimingEnv, d: Decision, rec: StepRecord) -> None:
    """One retrieval's bookkeeping: what it injected and cost; then the after-regeneration hook says which step
    stands (SeaKR's refinement may keep the original)."""
    ep = e.ep
    ep.retrievals += 1
    ep.retrievals_this_step += 1
    ep.since_retrieval = 0
    ep.used += list(rec.passage_ids)
    d.retrieved = {"query": rec.query, "passage_ids": list(rec.passage_ids),
                   **({"compression": rec.compression} if rec.compression is not None else {}),
                   **({"rerank": rec.rerank} if rec.rerank is not None else {}),
                   **({"ranked_ids": list(rec.ranked_ids)} if rec.ranked_ids else {}),  # (the log only)
                   "evidence_truncated": int(getattr(rec, "evidence_truncated", 0) or 0)}
    d.event = CostEvent(retrieved=True, n_passages=len(rec.passage_ids), tokens_generated=rec.n_tokens,
                        tokens_injected=rec.tokens_injected, seconds_measured=rec.seconds,
                        step_index=ep.n_accepted + 1)
    ep.tokens += rec.n_tokens + rec.tokens_injected
    ep.seconds += rec.seconds
    stands, refined = e.c.hooks.after_regeneration(d.step, rec)
    ep.record = stands
    if stands is not rec:  # the live states are the regenerated step's: rebuilt from the snapshots if needed
        ep.before = ep.after = None
    if refined is not None:
        d.retrieved["refined"] = refined
    d.regenerated = ep.record.text  # the step that stands after the retrieval (info and the log)


def _accept(envs: list[RetrievalTimingEnv], decided: list[Decision]) -> dict[str, list[int]]:
    """Phase 3: the step stands; the episode ends at the answer (or ``max_steps``), else the next step is due. An
    episode that ends without a usable answer line is asked for the answer once (``answer_closing``). Returns the
    envs that need a ``next`` step and those that need a ``close`` (the answer) record."""
    more: dict[str, list[int]] = {"next": [], "close": []}
    for i, (e, d) in enumerate(zip(envs, decided)):
        if not d.retrieve or e.ep.retrievals_this_step >= e.config.max_retrievals_per_step:
            kind = _accept_one(e, d)
            if kind is not None:
                more[kind].append(i)
    return more


def _accept_one(e: RetrievalTimingEnv, d: Decision) -> str | None:
    """One accept: ``next`` (generate the next step), ``close`` (ask for the answer) or ``None`` (the episode is
    done and its answer known)."""
    ep, cfg = e.ep, e.config
    ep.n_accepted += 1
    ep.accepted_steps.append(ep.record.text)
    ep.retrievals_this_step = 0
    ep.since_retrieval += 1
    if ep.record.is_answer or ep.record.final:
        d.done = (True, False)
    elif ep.n_accepted >= cfg.max_steps:
        d.done = (False, True)
    else:
        ep.prefix += ("a",)
        return "next"
    if usable_answer(ep.record):
        ep.answer, ep.answer_status = ep.record, "answered"
    elif cfg.answer_closing and e.c.can_close:
        ep.prefix += ("c",)
        return "close"
    else:  # no closing: the last line is scored as it stands (a truncated chain has no answer)
        ep.answer, ep.answer_status = (ep.record if d.done[0] else None), "none"
    return None


def _continue(envs: list[RetrievalTimingEnv], decided: list[Decision], kind: str, ix: list[int]) -> None:
    """The records after the accepts (``kind``: next | close; cache, else one batched generation); their tokens
    and seconds count in the decision's cost. A closing record is the answer when it is a usable one."""
    for i, rec in zip(ix, _records([envs[i] for i in ix], kind)):
        ep, d = envs[i].ep, decided[i]
        ep.tokens += rec.n_tokens
        ep.seconds += rec.seconds
        ep.record = rec
        d.event = dataclasses.replace(d.event, tokens_generated=d.event.tokens_generated + rec.n_tokens,
                                      seconds_measured=d.event.seconds_measured + rec.seconds)
        if kind == "next" and ep.stop_at is not None and ep.n_accepted + 1 >= ep.stop_at:
            d.done, ep.answer, ep.answer_status = (False, True), None, "stopped"  # reset's stop_at_step
        if kind == "close":
            ep.answer = rec if usable_answer(rec) else None
            ep.answer_status = "closed" if ep.answer is not None else "none"
            if ep.answer is None:
                log.debug("%s: no usable answer after closing: %r", envs[i].c.question_id(ep.q), rec.text)


def _outcome(e: RetrievalTimingEnv, d: Decision) -> tuple[dict, float, bool, bool, dict]:
    """Phase 4: the decision's costs, the answer quality at the end, the reward, the log entry and the info."""
    ep, (terminated, truncated) = e.ep, d.done
    if terminated or truncated:  # the episode is over: a further step() is refused (ResetNeeded)
        ep.done = "terminated" if terminated else "truncated"
    penalty, raw = e.costs(dataclasses.replace(d.event, seconds_modelled=modelled_seconds(d.event)))
    reward, quality = -penalty, None
    if ep.answer_status == "stopped":  # stop_at_step: the partial quality of the lines written so far
        quality = e.c.partial_quality(ep.q, [*ep.accepted_steps, ep.record.text])
        if e.c.graded:
            reward += quality
    elif terminated or truncated:
        quality = e.c.quality(ep.q, ep.answer)  # NaN for an ungraded task (no gold answers) ...
        if e.c.graded:  # ... whose reward reports the costs alone
            reward += quality
    ep.log.append({"action": [d.retrieve, int(d.mode)], "capped": d.capped, "step": d.step.text,
                   "label": d.step.label, "signals": d.step.signals, **d.retrieved,
                   **({"regenerated": d.regenerated} if d.regenerated is not None else {}), "costs": raw,
                   "reward": reward})
    info = e._info(costs=raw, capped=d.capped, quality=quality, retrieved=d.retrieved, regenerated=d.regenerated)
    return e._obs(), float(reward), terminated, truncated, info


class RetrievalTimingEnv(gym.Env):
    """The retrieval-timing environment. See the module docstring for the contract.

    Args:
        config: an :class:`EnvConfig` or a dict of its fields.
        components: optional prebuilt :class:`envs.components.Components` (reasoner, retriever, ...).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, config: EnvConfig | dict | None = None, components=None, render_mode: str | None = None):
        super().__init__()
        self.config = config if isinstance(config, EnvConfig) else EnvConfig.from_dict(config or {})
        if components is None:
            from envs.components import build_components

            components = build_components(self.config)
        self.c = components
        self.render_mode = render_mode
        self.costs = CostModel(self.config.costs, self.config.cost_params)
        self.cache = open_cache(self.config, self.c.namespace)
        dims = observation_groups(self.config, self.c.feature_dims)  # group -> dim (records' + episode groups)
        obs = {g: spaces.Box(-np.inf, np.inf, shape=(d,), dtype=np.float32) for g, d in dims.items()}
        obs["history"] = spaces.Box(0.0, np.inf, shape=(HISTORY_DIM,), dtype=np.float32)
        if self.config.observe_costs:  # a cost-conditioned policy reads the budget: log(λ + 0.01) per cost
            obs["costs"] = spaces.Box(-np.inf, np.inf, shape=(len(self.config.observe_costs),), dtype=np.float32)
        obs["mask"] = spaces.Box(0.0, 1.0, shape=(len(dims),), dtype=np.float32)
        self.observation_space = spaces.Dict(obs)
        self.groups = list(dims)
        n_modes = len(self.config.query_modes)
        self.action_space = (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(n_modes))) if self.config.querygen
                             else spaces.Discrete(2))
        self.ep: Episode | None = None  # the current question's state (reset builds it)
        self.cost_ranges: dict[str, tuple[float, float]] = {}  # cost -> (low, high) each reset draws λ from
        self.closed = False  # close() released the cache: reset() and step() are refused after it

    # ------------------------------------------------------------------ runtime knobs
    def set_cost_weights(self, weights: dict[str, float]) -> None:
        """Change λ of some costs (curricula call this on every env runner)."""
        self.costs.set_weights(weights)

    def get_cost_weights(self) -> dict[str, float]:
        return dict(self.costs.weights)

    def set_cost_ranges(self, ranges: dict[str, tuple[float, float]]) -> None:
        """From the next ``reset`` on, each episode draws these costs' λ log-uniformly from ``(low, high)`` with
        the env's RNG (a cost-conditioned policy's curriculum calls this on every env runner; ``{}`` stops drawing:
        the weights then stay as the last episode drew them until ``set_cost_weights``)."""
        self.cost_ranges = check_ranges(ranges, list(self.costs.costs))

    # ------------------------------------------------------------------ gym API: the n = 1 view of the loop
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return reset_batch([self], [seed], [options])[0]

    def step(self, action):
        return step_batch([self], [action])[0]

    # ------------------------------------------------------------------ internals
    def _normalise_action(self, action):
        if self.config.querygen:
            if isinstance(action, (tuple, list, np.ndarray)) and len(action) == 2:
                return (int(action[0]), int(action[1]))
            return action
        if isinstance(action, np.ndarray) and action.shape == ():
            return int(action)
        return action

    def _split_action(self, action) -> tuple[int, int]:
        a = self._normalise_action(action)
        if self.config.querygen:
            return int(a[0]), int(a[1])
        return int(a), 0

    def _obs(self) -> dict[str, np.ndarray]:
        ep = self.ep
        rec = ep.record
        feats = {**{g: (rec.features[g], rec.mask[g]) for g in rec.features}, **ep.episode_feats}
        obs = {g: np.asarray(feats[g][0], dtype=np.float32) for g in self.groups}
        obs["history"] = np.array([ep.n_accepted + 1, ep.retrievals, ep.tokens / 100.0,
                                   ep.since_retrieval], dtype=np.float32)
        if self.config.observe_costs:
            obs["costs"] = np.array([cost_feature(self.costs.weights[c]) for c in self.config.observe_costs],
                                    dtype=np.float32)
        obs["mask"] = np.array([feats[g][1] for g in self.groups], dtype=np.float32)
        return obs

    def _info(self, costs: dict[str, float], capped: bool = False, quality: float | None = None,
              retrieved: dict[str, Any] | None = None, regenerated: str | None = None) -> dict[str, Any]:
        """``info``: the current step (text, signals, label), what the last action cost and retrieved (with
        ``regenerated_step``: the step's text after the evidence; ``evidence_truncated``: the passages of this
        retrieval cut to fit the reasoner's context window, 0 when none), the episode's tokens and seconds so far; at the
        end the answer (``answer``: the last line, ``answer_content``: what is scored, ``None`` without a usable
        answer) and its ``quality`` — NaN for an ungraded task, whose ``metrics`` are empty. With RSUS's U_verb asked
        of the model: ``verbal_confidence`` (the side question's reply, value, tokens, seconds); ``masked_reasons``:
        why a masked signal is masked, where known (``u_verb``)."""
        retrieved = retrieved or {"query": None, "passage_ids": []}
        ep = self.ep
        rec = ep.record
        info = {
            "question_id": self.c.question_id(ep.q),
            "question": self.c.question_text(ep.q),
            "step_index": ep.n_accepted + 1,
            "step_text": rec.text,
            "is_answer": rec.is_answer,
            "signals": dict(rec.signals),
            "masked_signals": [n for n in self.c.scalar_names() if n not in rec.signals],
            "costs": costs,
            "cost_weights": dict(self.costs.weights),
            "retrievals": ep.retrievals,
            "retrievals_this_step": ep.retrievals_this_step,
            "query": retrieved["query"],
            "passage_ids": retrieved["passage_ids"],
            "capped": capped,
            "evidence_truncated": int(retrieved.get("evidence_truncated", 0)),  # passages cut to fit the context
            **({"compression": retrieved["compression"]} if "compression" in retrieved else {}),
            **({"refined": retrieved["refined"]} if "refined" in retrieved else {}),
            **({"rerank": retrieved["rerank"]} if "rerank" in retrieved else {}),
            **({"regenerated_step": regenerated} if regenerated is not None else {}),
            "action_prefix": ",".join(ep.prefix),
            "tokens": ep.tokens,
            "seconds": round(ep.seconds, 6),
        }
        if rec.verbal_confidence is not None:  # RSUS's U_verb asked after the step (its cost is in the step's)
            info["verbal_confidence"] = dict(rec.verbal_confidence)
        reasons = self._masked_reasons(rec, info["masked_signals"])
        if reasons:
            info["masked_reasons"] = reasons
        if rec.label is not None:
            info["label"] = rec.label
            info["error_kind"] = rec.error_kind
        if quality is not None:
            info["quality"] = quality
            info["metrics"] = (self.c.metrics(ep.q, ep.answer) if ep.answer_status != "stopped"
                               else {self.c.quality_metric: quality})  # stopped: the partial quality alone
            info["answer"] = rec.text
            info["answer_content"] = ep.answer.content if ep.answer is not None else None
            info["answer_status"] = ep.answer_status
            info["episode"] = list(ep.log)
        return info

    def _masked_reasons(self, rec, masked: list[str]) -> dict[str, str]:
        """Why a masked signal is masked, where the env knows: U_verb — the model's reply stated no usable
        confidence, or the backend cannot be asked."""
        if "u_verb" not in masked:
            return {}
        why = (rec.verbal_confidence or {}).get("masked") or getattr(self.c, "verb_unavailable", None)
        return {"u_verb": why} if why else {}

    def render(self):
        ep = self.ep
        if self.render_mode == "ansi" and ep is not None and ep.record is not None:
            return f"[{self.c.question_id(ep.q)} | step {ep.n_accepted + 1}] {ep.record.text}"
        return None

    def close(self):
        self.closed = True
        self.cache.close()
