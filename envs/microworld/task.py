"""The micro-world as an env task: questions of a split, ground-truth step labels, answer quality."""

from __future__ import annotations

from envs.core.microworld.labels import gold_answer, label_step
from envs.core.microworld.questions import Question


def holdout_facts(kb, share: float, seed: int) -> set[str]:
    """A seeded ``share`` of the world's facts, held out of training for a fact-disjoint split.

    Facts are drawn as units: a spouse pair (stated both ways) is one unit, so neither direction of a held-out
    marriage can appear in a training chain."""
    import numpy as np

    units: dict[tuple, list[str]] = {}
    for f in sorted(kb.facts, key=lambda f: f.id):
        key = ("spouse", *sorted((f.subject, f.object))) if f.relation == "spouse" else (f.id,)
        units.setdefault(key, []).append(f.id)
    keys = sorted(units)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(keys), size=int(round(share * len(keys))), replace=False)
    return {fid for i in chosen for fid in units[keys[int(i)]]}


class MicroWorldTask:
    """Questions of one split of a loaded micro-world.

    ``fact_holdout`` (``EnvConfig.fact_holdout``: a :class:`~envs.env_config.FactHoldout` or its dict ``{"share",
    "seed", "keep"}``) makes a **fact-disjoint** condition: a seeded share of the
    facts is held out; ``keep: train`` keeps the split's questions whose gold chain uses none of them (a training
    pool), ``keep: test`` those whose chain uses at least one (every such question hinges on a fact no training
    chain states, so memorising content cannot help)."""

    #: the quality is answer accuracy (1 when the answer names the gold entity)
    quality_metric = "acc"

    def __init__(self, world, split: str = "train", fact_holdout=None):
        if split not in world.questions:
            raise ValueError(f"unknown micro-world split '{split}' (valid: {', '.join(world.questions)})")
        self.world, self.kb = world, world.kb
        self.questions: list[Question] = list(world.questions[split])
        self.held_out: set[str] = set()
        if fact_holdout is not None and not isinstance(fact_holdout, dict):
            fact_holdout = fact_holdout.to_dict()  # the typed setting
        if fact_holdout:
            self.held_out = holdout_facts(self.kb, float(fact_holdout["share"]), int(fact_holdout.get("seed", 0)))
            test = fact_holdout.get("keep", "train") == "test"
            self.questions = [q for q in self.questions
                              if bool(self.held_out & set(self.gold_passages(q))) == test]

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
