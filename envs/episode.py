"""The state of the decision loop, typed: what one env copy knows (:class:`Episode`), what the cache stores for one
action prefix (:class:`StepRecord`), and the two short-lived pieces the loop passes between its phases — one
decision being carried out (:class:`Decision`, :func:`envs.retrieval_env.step_batch`) and one record being made
(:class:`RecordJob`, :func:`envs.engine.make_records`).

A newcomer's map: ``reset`` builds an :class:`Episode` and its first :class:`StepRecord`; each ``step`` turns an
action into a :class:`Decision`, which may need new records (a retrieval's regenerated step, the next step, the
closing answer) — each one a :class:`RecordJob` until it is a :class:`StepRecord` in the cache.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.segmentation import parse_header
from envs.costs import CostEvent
from envs.records import serializable


@serializable("StepRecord")
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
    ranked_ids: tuple[str, ...] = ()            # the retriever's top-k for this retrieval, best first (Recall@k)
    label: str | None = None
    error_kind: str | None = None
    chain_before: str | None = None             # micro-world: where the model's chain stood before the step
    chain_object: str | None = None             # ... and after it
    final: bool = False                         # the reasoner ended the text here (answer line or end-of-text)
    compression: dict | None = None             # evidence compression of this retrieval (sentences, tokens)
    rerank: dict | None = None                  # SeaKR's re-ranking: each candidate passage's EigenScore
    evidence_truncated: int = 0                 # passages of this retrieval cut to fit the context window
    verbal_confidence: dict | None = None       # RSUS's U_verb asked after the step: reply, value, tokens, seconds
    tokens: tuple | None = None                 # (piece, probability) per content token: kept only when a query
    #                                             mode reads them (FLARE's masked query; agents.query.needs_token_probs)


@dataclass
class Episode:
    """Everything one env copy knows about its current question (reset builds it, the loop advances it)."""

    q: Any                                      # the question (task object)
    qidx: int                                   # its index in the env's questions
    record: StepRecord | None = None            # the current step: the one the next decision is about
    prefix: tuple = ()                          # the actions so far ("a" accept, "r<mode>" retrieve): the cache key
    before: Any = None                          # live reasoner state the current step was generated from ...
    after: Any = None                           # ... and after it (None: rebuilt from the record's snapshots)
    n_accepted: int = 0
    accepted_steps: list[str] = field(default_factory=list)
    retrievals: int = 0
    retrievals_this_step: int = 0
    tokens: int = 0                             # generated + injected
    seconds: float = 0.0                        # measured generation seconds of the records on this path
    since_retrieval: int = 0
    used: list[str] = field(default_factory=list)  # passage ids injected so far (never injected twice)
    log: list[dict[str, Any]] = field(default_factory=list)  # per decision, returned in the final info
    episode_feats: dict[str, tuple] = field(default_factory=dict)  # per-episode observation fields
    answer: StepRecord | None = None            # at the end: the record whose content is scored (None: no answer)
    answer_status: str | None = None            # at the end: answered | closed (by answer_closing) | none |
    #                                             stopped (at stop_at)
    stop_at: int | None = None                  # reset's stop_at_step: stop once this step is generated
    done: str | None = None                     # terminated | truncated once the episode ended (step() refused)

    def fork(self) -> Episode:
        """A copy that advances on its own from here (a branch of the decision tree: the cache oracle's search steps
        each child of a prefix from a fork instead of replaying the prefix). The live reasoner states are dropped —
        rebuilt from the record's snapshots when a step is generated, as after a cache hit."""
        return dataclasses.replace(self, before=None, after=None, accepted_steps=list(self.accepted_steps),
                                   used=list(self.used), log=list(self.log), episode_feats=dict(self.episode_feats))

    def state(self, which: str, reasoner) -> Any:
        """The live reasoner state ``before`` / ``after`` the current step (restored from the record's snapshot
        when the live one was dropped: a cache hit, or a step that stood over its regeneration)."""
        live = self.before if which == "before" else self.after
        return live if live is not None else reasoner.restore(getattr(self.record, which))


@dataclass
class Decision:
    """One env copy's decision while :func:`envs.retrieval_env.step_batch` carries it out (phase by phase)."""

    retrieve: int                               # 1: retrieve (after the caps), 0: accept
    mode: int                                   # the query mode asked for
    capped: bool                                # a retrieval over a cap, turned into an accept
    step: StepRecord                            # the step decided about
    event: CostEvent                            # what it cost so far (the phases add to it)
    retrieved: dict[str, Any] = field(default_factory=lambda: {"query": None, "passage_ids": []})  # info / log
    done: tuple[bool, bool] = (False, False)    # (terminated, truncated)
    regenerated: str | None = None              # the step that stands after a retrieval (info and the log)


@dataclass
class RecordJob:
    """One record :func:`envs.engine.make_records` makes (a cache miss): where it is generated from, and — for a
    retrieval — what was asked, found and injected. A retrieval selector that regenerates the step itself (SeaKR's
    re-ranking) fills ``step`` … ``features``, and what that generation paid, before the batched generation (which
    then skips the job)."""

    before: Any                                 # the reasoner state the step is generated from (without evidence)
    chain_before: str | None                    # micro-world: where the model's chain stands before the step
    # -- a retrieval
    query: str | None = None
    ranked_ids: tuple[str, ...] = ()            # the retriever's top-k, best first
    passages: list = field(default_factory=list)  # the passages the selector chose (RetrievedPassage)
    passage_ids: tuple[str, ...] = ()           # ... injected
    evidence: tuple[str, ...] = ()              # all evidence of the step: earlier + this retrieval's (transformed)
    injected: int = 0                           # whitespace tokens injected
    compression: dict | None = None             # the evidence transform's log (compression)
    rerank: dict | None = None                  # the selector's log (SeaKR's re-ranking)
    truncated: int = 0                          # passages cut to fit the reasoner's context window
    # -- the generation
    cond: Any = None                            # the state generated from (with the evidence for a retrieval)
    step: Any = None                            # the generated step (None: not generated yet)
    after: Any = None                           # the state after it
    features: tuple | None = None               # (features, scalars, mask) when already computed
    generation_tokens: int | None = None        # tokens paid when more than the step's own (every candidate's)
    generation_seconds: float | None = None     # seconds paid by a selector's own generation (not shared)

    def inject(self, earlier: tuple[str, ...], passages: list, texts: list[str]) -> None:
        """Record the passages injected (``texts``: their text as injected) after the step's ``earlier`` evidence."""
        self.passage_ids = tuple(p.id for p in passages)
        self.evidence = tuple(earlier) + tuple(texts)
        self.injected = sum(len(t.split()) for t in texts)


def usable_answer(rec: StepRecord | None) -> bool:
    """Whether a step is a usable final answer: an ``Answer`` line with content that is not another answer
    header (``Answer:`` with nothing after it, or ``Answer: Answer: …``, are no answer)."""
    if rec is None or not rec.is_answer or not rec.content.strip():
        return False
    h = parse_header(rec.content.strip())
    return not (h is not None and h.kind == "answer")


__all__ = ["Decision", "Episode", "RecordJob", "StepRecord", "usable_answer"]
