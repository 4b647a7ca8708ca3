"""``RetrievalTimingEnv``: reasoning-with-retrieval as an episodic contextual bandit (DESIGN §1, §5).

One episode = one question; one env step = one decision about the step just generated:

* action ``0`` (or ``(0, m)``): accept the step; the reasoner writes the next one;
* action ``1`` (or ``(1, m)``): build a query (query mode ``m`` with QueryGen, else the default mode),
  retrieve the top-k, inject the first passage not used before for this question, and regenerate the
  step. Once the per-step retrieval cap is reached the regenerated step is accepted automatically.

The episode terminates when an accepted step is the final ``Answer`` line, and is truncated after
``max_steps`` accepted steps. Reward per decision is ``−Σ λ_c · cost_c``, plus the answer quality at the end.

Outcomes are cached by ``(question, action prefix)`` in a :class:`~envs.trajectory_cache.TrajectoryCache`;
greedy decoding makes them deterministic, so a warm cache replays episodes without running the LM.

The heavy parts (reasoner, retriever, signals) are built by :mod:`envs.components` from the config; tests
can inject their own through ``components=``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.reasoners.base import BranchingReasoner
from envs.components import episode_fields, observation_groups
from envs.costs import CostEvent, CostModel, modelled_seconds
from envs.env_config import EnvConfig
from envs.trajectory_cache import TrajectoryCache

log = logging.getLogger(__name__)

HISTORY_DIM = 4  # step index, retrievals so far, tokens so far (/100), steps since last retrieval


@dataclass
class StepRecord:
    """What the cache stores for one (question, action prefix): the current step and how it came about."""

    text: str
    content: str
    is_answer: bool
    n_tokens: int
    seconds: float
    features: dict[str, np.ndarray]             # observation groups (pulse, output, rsus, coe)
    signals: dict[str, float]                   # scalar signals by name (for threshold triggers, logs)
    mask: dict[str, float]                      # observation group -> 1 real / 0 masked
    before: dict | None = None                  # reasoner snapshot the step was generated from
    after: dict | None = None                   # reasoner snapshot after the step
    evidence: tuple[str, ...] = ()              # evidence injected for this step so far
    query: str | None = None
    passage_ids: tuple[str, ...] = ()
    tokens_injected: int = 0
    label: str | None = None
    error_kind: str | None = None
    chain_before: str | None = None             # micro-world: where the model's chain stood before the step
    chain_object: str | None = None             # ... and after it
    final: bool = False                         # the reasoner ended the text here (answer line or end-of-text)
    compression: dict | None = None             # evidence compression of this retrieval (sentences, tokens)


def execute_requests(reasoner, requests: list[tuple]) -> list[tuple]:
    """Serve generation requests of many envs with as few batched reasoner calls as possible.

    A request is ``("next", state)`` or ``("regen", state, evidence, mode)``; the result of each is
    ``(step, state_after)``, in request order. Reasoners with ``with_evidence`` serve both kinds in ONE
    batched call; others get one ``next_step`` call plus one ``regenerate`` call per injection mode.
    """
    if isinstance(reasoner, BranchingReasoner):
        states = [r[1] if r[0] == "next" else reasoner.with_evidence(r[1], r[2], r[3]) for r in requests]
        return reasoner.next_step(states)
    out: list[tuple | None] = [None] * len(requests)
    nxt = [i for i, r in enumerate(requests) if r[0] == "next"]
    if nxt:
        for i, res in zip(nxt, reasoner.next_step([requests[i][1] for i in nxt])):
            out[i] = res
    for mode in sorted({r[3] for r in requests if r[0] == "regen"}):
        idx = [i for i, r in enumerate(requests) if r[0] == "regen" and r[3] == mode]
        res = reasoner.regenerate([requests[i][1] for i in idx], [requests[i][2] for i in idx], mode=mode)
        for i, x in zip(idx, res):
            out[i] = x
    return out  # type: ignore[return-value]


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
        self.cache = TrajectoryCache(self.config.cache_path, namespace=self.c.namespace)
        dims = observation_groups(self.config, self.c.feature_dims)  # group -> dim (records' + episode groups)
        obs = {g: spaces.Box(-np.inf, np.inf, shape=(d,), dtype=np.float32) for g, d in dims.items()}
        obs["history"] = spaces.Box(0.0, np.inf, shape=(HISTORY_DIM,), dtype=np.float32)
        obs["mask"] = spaces.Box(0.0, 1.0, shape=(len(dims),), dtype=np.float32)
        self.observation_space = spaces.Dict(obs)
        self.groups = list(dims)
        n_modes = len(self.config.query_modes)
        self.action_space = (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(n_modes))) if self.config.querygen
                             else spaces.Discrete(2))
        self._q = None
        self._record: StepRecord | None = None

    # ------------------------------------------------------------------ runtime knobs
    def set_cost_weights(self, weights: dict[str, float]) -> None:
        """Change λ of some costs (curricula call this on every env runner)."""
        self.costs.set_weights(weights)

    def get_cost_weights(self) -> dict[str, float]:
        return dict(self.costs.weights)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self._drive(self.reset_gen(seed=seed, options=options))

    def step(self, action):
        return self._drive(self.step_gen(action))

    # The env logic is written as generators that *yield* generation requests and receive their results,
    # so that a batcher (:class:`envs.vector.BatchedRetrievalEnv`) can serve many env copies with one
    # batched reasoner call; :meth:`_drive` serves a single env.
    def _drive(self, gen):
        try:
            req = next(gen)
            while True:
                req = gen.send(execute_requests(self.c.reasoner, [req])[0])
        except StopIteration as stop:
            return stop.value

    def reset_gen(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        questions = self.c.questions[: self.config.max_questions or None]
        if "question_index" in options:
            idx = int(options["question_index"])
            if not 0 <= idx < len(questions):
                raise ValueError(f"question_index {idx} out of range [0, {len(questions)})")
        else:
            idx = int(self.np_random.integers(len(questions)))
        self._q = questions[idx]
        self._qidx = idx
        self._prefix: tuple = ()
        self._before = self._after = None
        self._n_accepted = 0
        self._accepted_steps: list[str] = []
        self._retrievals = 0
        self._retrievals_this_step = 0
        self._tokens = 0
        self._seconds = 0.0  # measured generation seconds of the records on this path (as first generated)
        self._since_retrieval = 0
        self._used: list[str] = []
        self._episode: list[dict[str, Any]] = []
        rec = yield from self._get_or_generate(kind="start")
        # episode-level content: the question's embedding is the context embedding of the first step
        self._episode_feats = {g: (rec.features[src], rec.mask[src]) for g, src in episode_fields().items()
                               if g in self.groups}
        self._tokens += rec.n_tokens
        self._seconds += rec.seconds
        self._record = rec
        return self._obs(), self._info(costs={k: 0.0 for k in self.costs.costs})

    def step_gen(self, action):
        if self._record is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(self._normalise_action(action)):
            raise ValueError(f"action {action!r} is outside the action space {self.action_space}")
        retrieve, mode = self._split_action(action)
        if retrieve and (self._retrievals_this_step >= self.config.max_retrievals_per_step
                         or self._retrievals >= self.config.max_retrievals_per_question):
            retrieve = 0  # over a cap: the decision becomes "accept" (reported in info["capped"])
            capped = True
        else:
            capped = False
        cur = self._record
        terminated = truncated = False
        retrieved: dict[str, Any] = {"query": None, "passage_ids": []}
        if retrieve:
            self._prefix = self._prefix + (f"r{mode}",)
            rec = yield from self._get_or_generate(kind="retrieve", mode=mode)
            self._retrievals += 1
            self._retrievals_this_step += 1
            self._since_retrieval = 0
            self._used += list(rec.passage_ids)
            retrieved = {"query": rec.query, "passage_ids": list(rec.passage_ids)}
            if rec.compression is not None:
                retrieved["compression"] = rec.compression
            event = CostEvent(retrieved=True, n_passages=len(rec.passage_ids), tokens_generated=rec.n_tokens,
                              tokens_injected=rec.tokens_injected, seconds_measured=rec.seconds,
                              seconds_modelled=0.0, step_index=self._n_accepted + 1)
            self._tokens += rec.n_tokens + rec.tokens_injected
            self._seconds += rec.seconds
            self._record = rec
            if self._retrievals_this_step >= self.config.max_retrievals_per_step:
                # the regenerated step is accepted: move on (one decision per step)
                terminated, truncated, event = yield from self._accept(event)
        else:
            event = CostEvent(step_index=self._n_accepted + 1)
            terminated, truncated, event = yield from self._accept(event)
        event = CostEvent(**{**event.__dict__, "seconds_modelled": modelled_seconds(event)})
        penalty, raw = self.costs(event)
        reward = -penalty
        quality = None
        if terminated or truncated:
            quality = self.c.quality(self._q, self._record if terminated else None)
            reward += quality
        self._episode.append({"action": [int(retrieve), int(mode)], "capped": capped, "step": cur.text,
                              "label": cur.label, "signals": cur.signals, **retrieved, "costs": raw,
                              "reward": reward})
        info = self._info(costs=raw, capped=capped, quality=quality, retrieved=retrieved)
        return self._obs(), float(reward), terminated, truncated, info

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

    def _accept(self, event: CostEvent):
        """Accept the current step; generate the next one unless the episode ends."""
        cur = self._record
        self._n_accepted += 1
        self._accepted_steps.append(cur.text)
        self._retrievals_this_step = 0
        self._since_retrieval += 1
        if cur.is_answer or cur.final:
            return True, False, event
        if self._n_accepted >= self.config.max_steps:
            return False, True, event
        yield from ()
        self._prefix = self._prefix + ("a",)
        rec = yield from self._get_or_generate(kind="next")
        self._tokens += rec.n_tokens
        self._seconds += rec.seconds
        self._record = rec
        event = CostEvent(**{**event.__dict__, "tokens_generated": event.tokens_generated + rec.n_tokens,
                             "seconds_measured": event.seconds_measured + rec.seconds})
        return False, False, event

    def _get_or_generate(self, kind: str, mode: int = 0) -> StepRecord:
        """The record of the current action prefix: from the cache, else generated (and cached)."""
        qid = self.c.question_id(self._q)
        hit = self.cache.get(qid, self._prefix)
        if hit is not None:
            self._before = self._after = None  # rebuilt from the record's snapshots only if we generate again
            return hit
        rec = yield from self._generate(kind, mode)  # rec.seconds: this record's own share (see _generate)
        self.cache.put(qid, self._prefix, rec)
        return rec

    def _state(self, which: str):
        """The live reasoner state before/after the current step (restored from its snapshot if needed)."""
        live = self._before if which == "before" else self._after
        if live is not None:
            return live
        snap = getattr(self._record, which)
        return self.c.reasoner.restore(snap)

    def _generate(self, kind: str, mode: int) -> StepRecord:
        """A new record: state, query + retrieval (retrieve), one generation request (yielded: the batched
        call serves it), signals and label. ``seconds`` = this env's own work (query, retrieval, signals) plus
        the reasoner's per-sequence share of the batched generation call."""
        r, c = self.c.reasoner, self.c
        t_own = time.perf_counter()
        question = c.question_text(self._q)
        query, passage_ids, evidence, injected, compression = None, (), (), 0, None
        if kind == "start":
            before = r.start(question)
            chain_before = None
        elif kind == "next":
            before = self._state("after")
            chain_before = self._record.chain_object
        elif kind == "retrieve":
            before = self._state("before")
            chain_before = self._record.chain_before
            query = c.querygen(self._record.text, {"question": question,
                                                   "context": {"prior_steps": list(self._accepted_steps)}}, mode)
            from agents.retrievers.base import SelectionConfig, select_passages

            ranked = c.retriever.search([query], k=self.config.top_k)[0]
            chosen = select_passages(ranked, self._used, SelectionConfig(top_k=self.config.top_k))
            passage_ids = tuple(p.id for p in chosen)
            new_texts = [p.text for p in chosen]
            if self.config.compress_evidence and new_texts:
                from agents.compression import compress_evidence

                new_texts, compression = compress_evidence(r, before, new_texts, self._record.text,
                                                           self.config.tau_rel)
            evidence = tuple(self._record.evidence) + tuple(new_texts)
            injected = sum(len(t.split()) for t in new_texts)
        else:  # pragma: no cover - internal
            raise ValueError(kind)
        own = time.perf_counter() - t_own
        if kind == "retrieve" and not passage_ids:
            # nothing new to inject (every top-k passage was used): the step stands as it was
            (step, after) = (None, None)
        elif kind == "retrieve":
            step, after = yield ("regen", before, list(evidence), self.config.injection)
        else:
            step, after = yield ("next", before)
        t_own = time.perf_counter()
        if step is None:
            yield from ()
            prev = self._record
            rec = StepRecord(**{**prev.__dict__, "query": query, "passage_ids": (), "tokens_injected": 0,
                                "n_tokens": 0})
            return rec
        feats, scalars, mask = c.features(step, before)
        label = error_kind = chain_object = None
        if hasattr(c.task, "label"):
            label, error_kind, chain_object = c.task.label(self._q, self._n_accepted + 1, chain_before,
                                                           step.content, step.is_answer)
        self._before, self._after = before, after
        seconds = own + (time.perf_counter() - t_own) + float(getattr(step, "seconds", 0.0) or 0.0)
        return StepRecord(text=step.text, content=step.content, is_answer=step.is_answer, n_tokens=step.n_tokens,
                          seconds=seconds, features=feats, signals=scalars, mask=mask,
                          before=r.snapshot(before), after=r.snapshot(after), evidence=evidence, query=query,
                          passage_ids=passage_ids, tokens_injected=injected, label=label, error_kind=error_kind,
                          chain_before=chain_before, chain_object=chain_object, compression=compression,
                          final=step.is_answer or bool(getattr(after, "done", False)))

    def _obs(self) -> dict[str, np.ndarray]:
        rec = self._record
        feats = {**{g: (rec.features[g], rec.mask[g]) for g in rec.features}, **self._episode_feats}
        obs = {g: np.asarray(feats[g][0], dtype=np.float32) for g in self.groups}
        obs["history"] = np.array([self._n_accepted + 1, self._retrievals, self._tokens / 100.0,
                                   self._since_retrieval], dtype=np.float32)
        obs["mask"] = np.array([feats[g][1] for g in self.groups], dtype=np.float32)
        return obs

    def _info(self, costs: dict[str, float], capped: bool = False, quality: float | None = None,
              retrieved: dict[str, Any] | None = None) -> dict[str, Any]:
        """``info``: the current step (text, signals, label) and what the last action cost and retrieved."""
        retrieved = retrieved or {"query": None, "passage_ids": []}
        rec = self._record
        info = {
            "question_id": self.c.question_id(self._q),
            "question": self.c.question_text(self._q),
            "step_index": self._n_accepted + 1,
            "step_text": rec.text,
            "is_answer": rec.is_answer,
            "signals": dict(rec.signals),
            "masked_signals": [n for n in self.c.scalar_names() if n not in rec.signals],
            "costs": costs,
            "cost_weights": dict(self.costs.weights),
            "retrievals": self._retrievals,
            "retrievals_this_step": self._retrievals_this_step,
            "query": retrieved["query"],
            "passage_ids": retrieved["passage_ids"],
            "capped": capped,
            **({"compression": retrieved["compression"]} if "compression" in retrieved else {}),
            "action_prefix": ",".join(self._prefix),
        }
        if rec.label is not None:
            info["label"] = rec.label
            info["error_kind"] = rec.error_kind
        if quality is not None:
            info["quality"] = quality
            info["answer"] = rec.text
            info["tokens"] = self._tokens
            info["seconds"] = round(self._seconds, 6)
            info["episode"] = list(self._episode)
        return info

    def render(self):
        if self.render_mode == "ansi" and self._record is not None:
            return f"[{self.c.question_id(self._q)} | step {self._n_accepted + 1}] {self._record.text}"
        return None

    def close(self):
        self.cache.close()
