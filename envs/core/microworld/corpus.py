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
