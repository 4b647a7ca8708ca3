"""The retrieval step's named hooks: what a method changes in the loop without a branch in it.

A retrieval in :func:`envs.engine.make_records` runs the same generic path for every method — queries, one batched
search, *select*, *tell the listeners*, *transform the evidence*, one batched regeneration — and
:func:`envs.retrieval_env.step_batch` then asks *after regeneration* which step stands. Each italic word is a hook:

=====================  ===========================================  ======================================  ==============
hook                   protocol                                     default                                 chosen by
=====================  ===========================================  ======================================  ==============
retrieval selector     :class:`RetrievalSelector`                   :class:`FirstUnused` (PUlSE protocol)   ``rerank``
evidence transform     :class:`EvidenceTransform`                   :class:`AsRetrieved`                    ``compress_evidence``
after regeneration     :class:`AfterRegeneration`                   :class:`KeepRegenerated`                ``self_refine``
retrieval listeners    ``after_retrieval(passages, question)``      none                                    ``prefetch``
=====================  ===========================================  ======================================  ==============

:class:`LoopHooks` holds one of each; :meth:`LoopHooks.from_config` picks them from an :class:`EnvConfig` once,
when the components are built (``Components.hooks``). The registries name the implementations:
:data:`RETRIEVAL_SELECTORS` (``eigenscore``: SeaKR's self-aware re-ranking, :class:`envs.seakr.EigenScoreRerank`),
:data:`AFTER_REGENERATION` (``eigenscore``: SeaKR's self-aware refinement, :class:`envs.seakr.SelfRefine`) and
:data:`EVIDENCE_TRANSFORMS` (``compress``: :func:`agents.compression.compress_evidence`). A new method registers
its hook and names it in the config (``rerank: my_selector``; the name enters the trajectory-cache namespace), or
hands the components its own ``LoopHooks``. (``cfg`` in the hooks is the env's :class:`~envs.env_config.EnvConfig`,
which names the hooks' registries: this module does not import it.)

Example — a selector that always injects the retriever's top passage, used or not:

    >>> from envs.hooks import RETRIEVAL_SELECTORS, FirstUnused
    >>> @RETRIEVAL_SELECTORS.register("top1_doctest")
    ... class TopOne(FirstUnused):
    ...     def choose(self, cfg, ep, hits):
    ...         return list(hits[:1])
    >>> RETRIEVAL_SELECTORS.make("top1_doctest").choose(None, None, ["p1", "p2"])
    ['p1']
    >>> _ = RETRIEVAL_SELECTORS.unregister("top1_doctest")
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from envs.core.registry import Registry
from envs.episode import Episode, RecordJob, StepRecord

log = logging.getLogger(__name__)


@runtime_checkable
class RetrievalSelector(Protocol):
    """Chooses the passages a retrieval injects from its ranked hits: sets each job's ``passages``. A selector may
    also inject and regenerate itself (set the job's ``passage_ids`` … ``step``, :class:`~envs.episode.RecordJob`):
    the loop then skips that job's evidence transform and generation."""

    def select(self, c: Any, cfg: Any, eps: list[Episode], jobs: list[RecordJob], ranked: list[list]) -> None:
        ...


@runtime_checkable
class EvidenceTransform(Protocol):
    """Rewrites the passages' texts before they are injected: ``(texts, log)`` (``log``: ``None`` or a dict kept
    in the record's ``compression`` and the info). Called only with at least one text."""

    def __call__(self, c: Any, cfg: Any, before: Any, texts: list[str], step_text: str
                 ) -> tuple[list[str], dict | None]:
        ...


@runtime_checkable
class AfterRegeneration(Protocol):
    """After a retrieval regenerated the step: ``(the step that stands, label)`` — ``original`` or ``regenerated``
    (the same objects), and the label the info reports as ``refined`` (``None``: no such key)."""

    def __call__(self, original: StepRecord, regenerated: StepRecord) -> tuple[StepRecord, str | None]:
        ...


#: retrieval selectors by name (``EnvConfig.rerank``; unset: :class:`FirstUnused`)
RETRIEVAL_SELECTORS: Registry[Any] = Registry("retrieval selector")
#: evidence transforms by name (``EnvConfig.compress_evidence``: ``compress``; off: :class:`AsRetrieved`)
EVIDENCE_TRANSFORMS: Registry[Any] = Registry("evidence transform")
#: after-regeneration hooks by name (``EnvConfig.self_refine``; unset: :class:`KeepRegenerated`)
AFTER_REGENERATION: Registry[Any] = Registry("after-regeneration hook")


# ------------------------------------------------------------------------------------------------- the defaults
@RETRIEVAL_SELECTORS.register("first_unused")
class FirstUnused:
    """The first ``passages_per_retrieval`` of the top-k passages not injected yet for this question (none when
    every one was), within the episode's ``max_evidence_passages`` (IRCoT's cap on the paragraphs it collects)."""

    def choose(self, cfg: Any, ep: Episode, hits: list) -> list:
        from agents.retrievers.base import SelectionConfig, select_passages

        n = int(getattr(cfg, "passages_per_retrieval", 1))
        fresh = select_passages(hits, ep.used, SelectionConfig(top_k=cfg.top_k, n_inject=n))
        cap = getattr(cfg, "max_evidence_passages", None)
        return fresh if cap is None else fresh[: max(0, int(cap) - len(set(ep.used)))]

    def select(self, c: Any, cfg: Any, eps: list[Episode], jobs: list[RecordJob], ranked: list[list]) -> None:
        for ep, job, hits in zip(eps, jobs, ranked):
            job.passages = self.choose(cfg, ep, hits)


@EVIDENCE_TRANSFORMS.register("none")
class AsRetrieved:
    """The passages injected whole."""

    def __call__(self, c, cfg, before, texts, step_text):
        return texts, None


@EVIDENCE_TRANSFORMS.register("compress")
class Compress:
    """Only the sentences the flagged step attends to (relative importance >= ``tau_rel``;
    :func:`agents.compression.compress_evidence`)."""

    def __call__(self, c, cfg, before, texts, step_text):
        from agents.compression import compress_evidence

        return compress_evidence(c.reasoner, before, texts, step_text, cfg.tau_rel)


@AFTER_REGENERATION.register("keep")
class KeepRegenerated:
    """The regenerated step stands (no ``refined`` in the info)."""

    def __call__(self, original, regenerated):
        return regenerated, None


RETRIEVAL_SELECTORS.register_path("eigenscore", "envs.seakr:EigenScoreRerank")
AFTER_REGENERATION.register_path("eigenscore", "envs.seakr:SelfRefine")


# -------------------------------------------------------------------------------------------------- one of each
@dataclass(frozen=True)
class LoopHooks:
    """The hooks one set of components runs (:meth:`from_config`; ``dataclasses.replace`` swaps one)."""

    selector: Any = field(default_factory=FirstUnused)
    evidence: Any = field(default_factory=AsRetrieved)
    after_regeneration: Any = field(default_factory=KeepRegenerated)
    listeners: tuple = ()  # objects with after_retrieval(passages, question): the prefetcher

    @classmethod
    def from_config(cls, config: Any, prefetcher: Any = None) -> LoopHooks:
        """The hooks ``config`` names (its ``prefetcher``, when it prefetches, listens to the retrievals)."""
        return cls(selector=RETRIEVAL_SELECTORS.make(config.rerank or "first_unused"),
                   evidence=EVIDENCE_TRANSFORMS.make("compress" if config.compress_evidence else "none"),
                   after_regeneration=AFTER_REGENERATION.make(config.self_refine or "keep"),
                   listeners=(prefetcher,) if prefetcher is not None else ())


def fit_evidence(c: Any, before: Any, earlier: tuple[str, ...], texts: list[str], where: str = ""
                 ) -> tuple[list[str], int]:
    """``texts`` cut to fit the reasoner's context window after ``before`` and the step's ``earlier`` evidence
    (:func:`agents.reasoners.base.fit_evidence`; every backend says its window): ``(texts, passages cut)``. A cut is
    logged (a warning naming the window and the tokens dropped) and counted in the step's ``info["evidence_truncated"]``
    — evidence is truncated, never refused, so a long passage still informs the step."""
    from agents.reasoners.base import fit_evidence as fit

    out, note = fit(c.reasoner, before, tuple(earlier), list(texts))
    if note:
        log.warning("%sevidence cut to fit the reasoner's context window of %d tokens: %d passage(s) truncated, %d "
                    "token(s) dropped", f"{where}: " if where else "", note["window"], note["truncated"],
                    note["tokens_dropped"])
    return out, int(note.get("truncated", 0))


def conditioned_state(c: Any, cfg: Any, before: Any, evidence: tuple[str, ...]) -> Any:
    """The state a regenerated step is generated from: ``before`` with the evidence injected (``kv_reuse: false``:
    the whole prompt encoded again, as the naive integration does — same output)."""
    cond = c.reasoner.with_evidence(before, list(evidence), cfg.injection)
    return cond if cfg.kv_reuse else c.reasoner.restore(c.reasoner.snapshot(cond))


__all__ = ["AFTER_REGENERATION", "EVIDENCE_TRANSFORMS", "RETRIEVAL_SELECTORS", "AfterRegeneration", "AsRetrieved",
           "Compress", "EvidenceTransform", "FirstUnused", "KeepRegenerated", "LoopHooks", "RetrievalSelector",
           "conditioned_state", "fit_evidence"]
