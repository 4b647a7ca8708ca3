"""Ground-truth labels of generated micro-world steps (docs/design.md §6: exact factual-error labels).

A step is parsed into ``(subject, relation, object)`` and checked against the knowledge base:

* ``correct``     — a true fact, and the one the chain needs next;
* ``wrong``       — a false statement (its ``error_kind`` is the split of the fact it got wrong:
  ``mislearned``, ``conflicting``, ``unseen`` (HELD-OUT), ``evidence_only`` or ``known``);
* ``off_chain``   — a true fact, but not the ``(subject, relation)`` the question needs next;
* ``unparseable`` — not a fact sentence of the world (``error_kind = parse``).

"Needs next" follows the model's own chain: step *i* must be about the object of the model's step
*i − 1* (the question's head entity for step 1) with the question's *i*-th relation.
"""

from __future__ import annotations

from dataclasses import dataclass

from envs.core.microworld.kb import KnowledgeBase, parse_sentence
from envs.core.microworld.questions import Question

SPLIT_TO_KIND = {"held_out": "unseen", "mislearned": "mislearned", "conflicting": "conflicting",
                 "evidence_only": "evidence_only", "known": "known"}


@dataclass(frozen=True)
class StepLabel:
    """The verdict on one step."""

    label: str                    # correct | wrong | off_chain | unparseable | answer_correct | answer_wrong
    error_kind: str | None        # for non-correct labels: unseen | mislearned | ... | parse | off_chain
    fact_id: str | None           # the KB fact about the step's (subject, relation), if any
    split: str | None             # that fact's split
    subject: str | None = None
    relation: str | None = None
    object: str | None = None

    @property
    def is_error(self) -> bool:
        return self.label not in ("correct", "answer_correct")


def label_step(kb: KnowledgeBase, content: str, expected: tuple[str, str] | None) -> StepLabel:
    """Label one step's content (the line without ``Step k :``) given the expected ``(subject, relation)``."""
    parsed = parse_sentence(content)
    if parsed is None:
        return StepLabel("unparseable", "parse", None, None)
    s, r, o = parsed
    fact = kb.get(s, r)
    if fact is None:
        if s not in kb.entity_type or o not in kb.entity_type:
            return StepLabel("unparseable", "parse", None, None, s, r, o)
        return StepLabel("wrong", "known", None, None, s, r, o)  # a relation the entity does not have
    if fact.object != o:
        return StepLabel("wrong", SPLIT_TO_KIND[fact.split], fact.id, fact.split, s, r, o)
    if expected is not None and (s, r) != tuple(expected):
        return StepLabel("off_chain", "off_chain", fact.id, fact.split, s, r, o)
    return StepLabel("correct", None, fact.id, fact.split, s, r, o)


def label_chain(kb: KnowledgeBase, question: Question, contents: list[str], answer: str | None
                ) -> tuple[list[StepLabel], bool]:
    """Labels of every step of a generated chain, and whether the final answer equals the gold answer.

    Args:
        kb: the world.
        question: the question (head and relation path).
        contents: the content of each ``Step`` line in order (without the ``Answer`` line).
        answer: the content of the ``Answer`` line (``None`` if the model never answered).
    """
    labels: list[StepLabel] = []
    cur = question.head
    for i, c in enumerate(contents):
        rel = question.path[i] if i < len(question.path) else None
        lab = label_step(kb, c, (cur, rel) if rel else None)
        if rel is None and lab.label == "correct":
            lab = StepLabel("off_chain", "off_chain", lab.fact_id, lab.split, lab.subject, lab.relation, lab.object)
        labels.append(lab)
        cur = lab.object if lab.object is not None else cur
    gold = gold_answer(kb, question)
    return labels, (answer is not None and answer.strip() == gold)


def gold_answer(kb: KnowledgeBase, question: Question) -> str:
    """The true answer entity."""
    cur = question.head
    for rel in question.path:
        f = kb.get(cur, rel)
        if f is None:
            raise ValueError(f"question '{question.id}' has no gold chain in this KB")
        cur = f.object
    return cur
