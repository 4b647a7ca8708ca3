"""SeaKR's two hooks (Yao et al., 2024): self-aware re-ranking and self-aware refinement by EigenScore.

* :class:`EigenScoreRerank` (``EnvConfig.rerank: eigenscore``) — a retrieval selector: every top-k passage not
  used yet in the question regenerates the step (the step's earlier evidence + that passage; all candidates in one
  batched generation and one batched EigenScore sampling); the passage whose regenerated step has the lowest
  EigenScore is the one injected (ties: the retriever's order). The retrieval pays every candidate's regeneration.
* :class:`SelfRefine` (``EnvConfig.self_refine: eigenscore``) — after the regeneration, the original step stands
  when its EigenScore (inconsistency of sampled continuations) is the lower of the two.

Registered in :mod:`envs.hooks` under ``eigenscore``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from envs.episode import Episode, RecordJob, StepRecord
from envs.hooks import FirstUnused, conditioned_state, fit_evidence


class EigenScoreRerank(FirstUnused):
    """SeaKR's self-aware re-ranking (see the module docstring). Fills each re-ranked job's passage, evidence,
    step, states and features, and its ``rerank`` log: each candidate's score, the passage chosen, the tokens and
    seconds of every candidate's regeneration (which the retrieval pays; ``injected`` counts every candidate's
    passage)."""

    def select(self, c: Any, cfg: Any, eps: list[Episode], jobs: list[RecordJob], ranked: list[list]) -> None:
        from agents.retrievers.base import SelectionConfig, select_passages

        t0 = time.perf_counter()
        cands = []  # (job index, passage)
        for j, (ep, hits) in enumerate(zip(eps, ranked)):
            cands += [(j, p) for p in select_passages(hits, ep.used, SelectionConfig(top_k=cfg.top_k,
                                                                                       n_inject=cfg.top_k))]
        if not cands:
            return
        texts, cut = [], []
        for j, p in cands:  # each candidate bounded by the reasoner's context window (counted, logged)
            t, n = fit_evidence(c, jobs[j].before, tuple(eps[j].record.evidence), [p.text], c.question_id(eps[j].q))
            texts.append(t[0])
            cut.append(n)
        conds = [conditioned_state(c, cfg, jobs[j].before, tuple(eps[j].record.evidence) + (t,))
                 for (j, p), t in zip(cands, texts)]
        outs = c.reasoner.next_step(conds)
        c.precompute([step for step, _ in outs], conds)
        best: dict[int, tuple] = {}
        scores: dict[int, list] = {}
        tokens: dict[int, int] = {}
        injected: dict[int, int] = {}
        for (j, p), text, n_cut, cond, (step, after) in zip(cands, texts, cut, conds, outs):
            features = c.features(step, cond)
            score = features[1].get("eigenscore", float("inf"))
            scores.setdefault(j, []).append([p.id, score])
            tokens[j] = tokens.get(j, 0) + step.n_tokens
            injected[j] = injected.get(j, 0) + len(text.split())
            if j not in best or score < best[j][0]:
                best[j] = (score, p, cond, step, after, features, text, n_cut)
        share = (time.perf_counter() - t0) / len(best)  # charged to the re-ranked records alone
        for j, (_, p, cond, step, after, features, text, n_cut) in best.items():
            job = jobs[j]
            job.passages = [p]
            job.inject(tuple(eps[j].record.evidence), [p], [text])
            job.truncated = n_cut
            job.injected = injected[j]
            job.cond, job.step, job.after, job.features = cond, step, after, features
            job.generation_tokens, job.generation_seconds = tokens[j], share
            job.rerank = {"candidates": scores[j], "chosen": p.id, "tokens_generated": tokens[j], "seconds": share}


class SelfRefine:
    """SeaKR's self-aware refinement: keep the original step when its EigenScore is lower than the
    evidence-conditioned one's (a retrieval that injected nothing, or a score that could not be computed on either
    side, keeps the regenerated step). The info says which one stood (``refined``: original | augmented)."""

    def __call__(self, original: StepRecord, regenerated: StepRecord) -> tuple[StepRecord, str]:
        if regenerated.passage_ids and keeps_original(original, regenerated):
            return original, "original"
        return regenerated, "augmented"


def keeps_original(original: StepRecord, regenerated: StepRecord) -> bool:
    """Whether the original step's EigenScore is the lower of the two (both finite)."""
    old, new = original.signals.get("eigenscore"), regenerated.signals.get("eigenscore")
    return old is not None and new is not None and bool(np.isfinite(old) and np.isfinite(new)) and old < new


__all__ = ["EigenScoreRerank", "SelfRefine", "keeps_original"]
