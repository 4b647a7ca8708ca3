"""The micro-world retrieval corpus: every true fact sentence as a passage."""

from __future__ import annotations

from envs.core.microworld.kb import KnowledgeBase


def fact_corpus(kb: KnowledgeBase, distractors: list[tuple[str, str]] | None = None):
    """A :class:`envs.core.data.types.Corpus` of all true facts (id = fact id, title = subject).

    MISLEARNED and CONFLICTING facts appear with their TRUE object (the corpus is the ground truth).
    """
    from envs.core.data.types import Corpus, Passage

    passages = [Passage(id=f.id, title=f.subject, text=f.sentence) for f in kb.facts]
    for i, (title, text) in enumerate(distractors or []):
        passages.append(Passage(id=f"D{i:04d}", title=title, text=text))
    return Corpus.from_passages(passages, source=f"microworld(seed={kb.config.seed})")


def distractor_passages(kb: KnowledgeBase, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` distractor passages ``(title, text)`` for a larger corpus around ``kb``'s facts: true fact sentences of
    other seeded worlds (``kb``'s config with other seeds) that name none of ``kb``'s entities, one per (subject,
    relation) — so they look like the world's facts to a retriever but change no answer and contradict nothing.

    Example:
        >>> from envs.core.microworld.config import WorldConfig
        >>> kb = KnowledgeBase.generate(WorldConfig(seed=0))
        >>> ds = distractor_passages(kb, 500)
        >>> len(ds), len({t for _, t in ds}), any(w in kb.entity_type for _, t in ds for w in t.split())
        (500, 500, False)
    """
    import random

    own = set(kb.entity_type)
    rng = random.Random(f"distractors/{kb.config.seed}/{seed}")
    seen: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    while len(out) < n:
        other = KnowledgeBase.generate(kb.config.replace(seed=rng.randrange(1 << 30)))
        for f in other.facts:
            if f.subject in own or f.object in own or (f.subject, f.relation) in seen:
                continue
            seen.add((f.subject, f.relation))
            out.append((f.subject, f.sentence))
            if len(out) == n:
                break
    return out
