"""The micro-world as an env task: questions of a split, ground-truth step labels, answer quality."""

from __future__ import annotations

from envs.microworld.labels import gold_answer, label_step
from envs.microworld.questions import Question


class MicroWorldTask:
    """Questions of one split of a loaded micro-world."""

    def __init__(self, world, split: str = "train"):
        if split not in world.questions:
            raise ValueError(f"unknown micro-world split '{split}' (valid: {', '.join(world.questions)})")
        self.world, self.kb = world, world.kb
        self.questions: list[Question] = list(world.questions[split])

    def question_id(self, q: Question) -> str:
        return q.id

    def question_text(self, q: Question) -> str:
        return q.text

    #: chain kinds from most to least "dangerous": the first split found on a question's gold chain names it
    CHAIN_KIND_ORDER = ("mislearned", "conflicting", "held_out", "evidence_only", "known")

    def question_attr(self, q: Question, name: str):
        """Grouping attributes for benchmark breakdowns: ``hops`` and ``chain_kind`` — the most dangerous
        fact split on the gold chain (``mislearned`` > ``conflicting`` > ``held_out`` (unseen) >
        ``evidence_only`` > ``known``), i.e. the kind of missing fact the question hinges on."""
        if name == "hops":
            return q.hops
        if name == "chain_kind":
            splits, cur = set(), q.head
            for rel in q.path:
                f = self.kb.get(cur, rel)
                if f is None:
                    return "no_chain"
                splits.add(f.split)
                cur = f.object
            kind = next((k for k in self.CHAIN_KIND_ORDER if k in splits), "known")
            return "unseen" if kind == "held_out" else kind
        return None

    def gold_passages(self, q: Question) -> list[str]:
        """Ids of the corpus passages (facts) on the question's gold chain, in hop order."""
        out, cur = [], q.head
        for rel in q.path:
            f = self.kb.get(cur, rel)
            if f is None:
                return out
            out.append(f.id)
            cur = f.object
        return out

    def quality(self, q: Question, answer_content: str) -> float:
        """Exact match of the answer entity."""
        return float(answer_content.strip() == gold_answer(self.kb, q))

    def label(self, q: Question, step_number: int, chain_object: str | None, content: str, is_answer: bool
              ) -> tuple[str, str | None, str | None]:
        """``(label, error_kind, new chain object)`` of a step given where the model's chain stands."""
        if is_answer:
            ok = self.quality(q, content) > 0
            return ("answer_correct" if ok else "answer_wrong"), (None if ok else "answer"), chain_object
        cur = chain_object or q.head
        rel = q.path[step_number - 1] if step_number - 1 < len(q.path) else None
        lab = label_step(self.kb, content, (cur, rel) if rel else None)
        label = lab.label
        if rel is None and label == "correct":
            label = "off_chain"
        return label, lab.error_kind if label != "correct" else None, lab.object or cur
