"""The records of many env copies' action prefixes: the trajectory cache, else batched generation.

:func:`make_records` is what every phase of the decision loop calls (``kind``: start | retrieve | next | close).
For the copies whose record is not cached it reads, top to bottom:

1. the state each record is generated from (:func:`_job`: the question's start, the current step's before/after
   state, or "Answer:" written for the reasoner);
2. for a retrieval (:func:`_retrieve`): the queries → ONE batched search → the selector's passages → the
   listeners (prefetch) → the evidence transform (compression) → the evidence injected — the hooks of
   :class:`envs.hooks.LoopHooks`, chosen from the config when the components were built;
3. ONE batched generation of the steps still to generate (a retrieval with nothing new to inject keeps its step;
   a selector may have generated its step already), and their signals' batched work;
4. the new records (:func:`_record`: features, labels, what they cost), cached in one put.

Copies at the same (question, action prefix) in one call (a question's group rollouts, ``train.groups``) get one
record, made once, as if the others had found it in the cache.

``seconds`` of a new record: its copy's own work plus its share of the batched calls.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from envs.episode import Episode, RecordJob, StepRecord
from envs.hooks import conditioned_state, fit_evidence


def make_records(c: Any, cfg: Any, cache: Any, eps: list[Episode], kind: str,
                 modes: list[int] | None = None) -> list[StepRecord]:
    """The record of each episode's current action prefix (see the module docstring). ``c``: the components the
    episodes' envs share, ``cfg``: their :class:`~envs.env_config.EnvConfig`, ``cache``: their trajectory cache;
    ``modes``: each retrieval's query mode."""
    if not eps:
        return []
    modes = modes or [0] * len(eps)
    out: list[StepRecord | None] = cache.get_many([(c.question_id(ep.q), ep.prefix) for ep in eps])
    for ep, rec in zip(eps, out):
        if rec is not None:
            ep.before = ep.after = None  # rebuilt from the record's snapshots only if we generate again
    miss = [i for i, r in enumerate(out) if r is None]
    if not miss:
        return out  # type: ignore[return-value]
    # copies at the same (question, prefix) in one call — a question's group rollouts side by side — share one
    # record, made once: the record is a pure function of its key (what the cache rests on); the others take it
    # as a cache hit
    first: dict[tuple, int] = {}
    same = [(i, first.setdefault((c.question_id(eps[i].q), eps[i].prefix), i)) for i in miss]
    miss = sorted(first.values())
    t0 = time.perf_counter()
    todo = [eps[i] for i in miss]
    jobs = [_job(c, cfg, ep, kind) for ep in todo]
    if kind == "retrieve":
        _retrieve(c, cfg, todo, jobs, [modes[i] for i in miss])
    gen = [job for job in jobs if (kind != "retrieve" or job.passage_ids) and job.step is None]
    for job in gen:  # a step is generated from its conditioned state (a regeneration: the state with the evidence)
        job.cond = conditioned_state(c, cfg, job.before, job.evidence) if kind == "retrieve" else job.before
    # the copies' own work so far (a selector's own generation is charged to its records alone)
    own = (time.perf_counter() - t0 - sum(job.generation_seconds or 0.0 for job in jobs)) / len(miss)
    _generate(c, gen)
    new = []
    for i, ep, job in zip(miss, todo, jobs):
        out[i] = rec = _record(c, ep, job, own)
        new.append((c.question_id(ep.q), ep.prefix, rec))
    cache.put_many(new)
    for i, j in same:
        if i != j:
            out[i] = out[j]
            eps[i].before = eps[i].after = None
    spent = c.phase_seconds.setdefault(kind, [0.0, 0])  # wall time of this phase's new records (efficiency bench)
    spent[0] += time.perf_counter() - t0
    spent[1] += len(miss)
    return out  # type: ignore[return-value]


def _job(c: Any, cfg: Any, ep: Episode, kind: str) -> RecordJob:
    """Where the record of ``kind`` is generated from: its state before the step, and the chain's position."""
    rec = ep.record
    if kind == "start":
        return RecordJob(c.reasoner.start(c.question_text(ep.q)), None)
    if kind == "next":
        return RecordJob(ep.state("after", c.reasoner), rec.chain_object)
    if kind == "close":  # "Answer:" written for the reasoner after the last step — or in place of an unusable
        # answer line (empty, repeated header), so the closing line replaces it
        if rec.is_answer:  # its own before-state, with the evidence it was regenerated with
            state = ep.state("before", c.reasoner)
            if rec.evidence:
                state = c.reasoner.with_evidence(state, list(rec.evidence), cfg.injection)
        else:
            state = ep.state("after", c.reasoner)
        return RecordJob(c.reasoner.with_answer_prompt(state), rec.chain_before if rec.is_answer else rec.chain_object)
    return RecordJob(ep.state("before", c.reasoner), rec.chain_before)  # retrieve: the step again, with evidence


def _retrieve(c: Any, cfg: Any, eps: list[Episode], jobs: list[RecordJob], modes: list[int]) -> None:
    """Queries → one batched search → the passages to inject (the selector) → the listeners → the evidence."""
    for ep, job, mode in zip(eps, jobs, modes):
        job.query = _query(c, ep, mode)
    ranked = c.retriever.search([job.query for job in jobs], k=cfg.top_k)
    for job, hits in zip(jobs, ranked):
        job.ranked_ids = tuple(p.id for p in hits[: cfg.top_k])
    hooks = c.hooks
    hooks.selector.select(c, cfg, eps, jobs, ranked)
    for ep, job in zip(eps, jobs):
        if job.passages:  # e.g. the next step's likely queries, searched while this step regenerates
            for listener in hooks.listeners:
                listener.after_retrieval(job.passages, c.question_text(ep.q))
        if job.step is None:  # (a selector that regenerated the step has injected its evidence already)
            texts = [p.text for p in job.passages]
            if texts:
                # bounded by the reasoner's context window (cut, logged, counted in info["evidence_truncated"]) —
                # before the evidence transform too: compression reads the passages with the model
                earlier, qid = tuple(ep.record.evidence), c.question_id(ep.q)
                texts, job.truncated = fit_evidence(c, job.before, earlier, texts, qid)
                texts, job.compression = hooks.evidence(c, cfg, job.before, texts, ep.record.text)
                texts, cut = fit_evidence(c, job.before, earlier, texts, qid)
                job.truncated = job.truncated or cut
            job.inject(tuple(ep.record.evidence), job.passages, texts)


def _query(c: Any, ep: Episode, mode: int) -> str:
    """The query of the current step in query mode ``mode`` (QueryGen's formulations; DRAGIN's QFS reads the
    reasoner's attention over the text)."""
    context: dict[str, Any] = {"prior_steps": list(ep.accepted_steps)}
    if ep.record.tokens is not None:  # FLARE's masked query drops the step's low-probability tokens
        context["token_probs"] = ep.record.tokens
    if c.querygen.modes[mode] == "qfs":
        context["qfs"] = c.qfs(c.question_text(ep.q), list(ep.accepted_steps), ep.record.text)
    return c.querygen(ep.record.text, {"question": c.question_text(ep.q), "context": context}, mode)


def _generate(c: Any, jobs: list[RecordJob]) -> None:
    """One batched generation of ``jobs``' steps from their conditioned states, then their signals' batched work
    (EigenScore's samples): the signals that continue from the state (k-sample consistency, EigenScore) sample from
    that same state. RSUS's verbal confidence is asked inside the generation call, after each new step, by a reasoner
    whose ``confidence`` is set (:mod:`agents.reasoners.confidence`): batched the same way, its cost in the step's."""
    for job, (step, after) in zip(jobs, c.reasoner.next_step([job.cond for job in jobs]) if jobs else []):
        job.step, job.after = step, after
    c.precompute([job.step for job in jobs], [job.cond for job in jobs])


def _record(c: Any, ep: Episode, job: RecordJob, own: float) -> StepRecord:
    """The record of one job (the episode's live states move to its step); ``own``: the job's share of the
    batched work so far."""
    if job.step is None:  # nothing new to inject (every top-k passage was used): the step stands as it was
        return dataclasses.replace(ep.record, query=job.query, passage_ids=(), tokens_injected=0, n_tokens=0,
                                   ranked_ids=job.ranked_ids, compression=None, rerank=None, evidence_truncated=0)
    t1 = time.perf_counter()
    step, before, after = job.step, job.before, job.after
    feats, scalars, mask = job.features or c.features(step, job.cond)
    label = error_kind = chain_object = None
    if c.has_labels:
        label, error_kind, chain_object = c.task.label(ep.q, ep.n_accepted + 1, job.chain_before, step.content,
                                                       step.is_answer)
    ep.before, ep.after = before, after
    paid = (job.generation_seconds if job.generation_seconds is not None
            else float(getattr(step, "seconds", 0.0) or 0.0))
    return StepRecord(text=step.text, content=step.content, is_answer=step.is_answer,
                      n_tokens=job.generation_tokens if job.generation_tokens is not None else step.n_tokens,
                      seconds=own + (time.perf_counter() - t1) + paid, features=feats, signals=scalars, mask=mask,
                      before=c.reasoner.snapshot(before), after=c.reasoner.snapshot(after), evidence=job.evidence,
                      query=job.query, passage_ids=job.passage_ids, tokens_injected=job.injected,
                      ranked_ids=job.ranked_ids, label=label, error_kind=error_kind, chain_before=job.chain_before,
                      chain_object=chain_object, compression=job.compression, rerank=job.rerank,
                      # (a reasoner service bounds the evidence next to the model: its step says how many it cut)
                      evidence_truncated=job.truncated or int((step.meta or {}).get("evidence_truncated", 0)),
                      final=step.is_answer or bool(getattr(after, "done", False)),
                      # the side question's reply (its tokens and seconds are in the step's): a replay does not ask
                      verbal_confidence=(step.meta or {}).get("confidence_reply"),
                      tokens=_token_probs(c, step))


def _token_probs(c: Any, step: Any) -> tuple | None:
    """The step's ``(piece, probability)`` per content token when a query mode of the env reads them (FLARE's
    masked query), else ``None`` (the records of every other env stay as they were). A reasoner that gives no token
    probabilities is an error naming it, never a query built from something else."""
    from agents.query import needs_token_probs

    if not needs_token_probs(c.querygen.modes):
        return None
    from agents.reasoners.base import token_probs

    return token_probs(step, f"reasoner '{c.config.reasoner}'")


__all__ = ["make_records"]
