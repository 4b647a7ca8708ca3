"""Questions, gold chains and training documents of the micro-world.

A question is a head entity plus a relation path (``("father", "mother", "birthplace")``). Its gold chain
follows the *true* facts; the LM's training chains follow the facts *as trained* (MISLEARNED facts with
their false object, CONFLICTING facts with one of their two versions).

Chain format (the product's step format, word-level tokens separated by spaces)::

    Question : Where was Mira 's father born ?
    Step 1 : Mira 's father is Tovan .
    Step 2 : Tovan was born in Kasford .
    Answer : Kasford <eos>

Evidence lines (``Evidence : <fact sentence>``) stand before the question (``front`` mode) or right before
the step they support (``step`` mode).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from envs.core.microworld.config import PERSON_RELATIONS, LMTrainConfig
from envs.core.microworld.kb import RELATION_TYPES, Fact, KnowledgeBase, render_fact

EOS = "<eos>"
NL = "\n"


@dataclass(frozen=True)
class Question:
    """A compositional question: start at ``head``, follow ``path``."""

    head: str
    path: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.head}/{'.'.join(self.path)}"

    @property
    def hops(self) -> int:
        return len(self.path)

    @property
    def text(self) -> str:
        return question_text(self.head, self.path)


def question_text(head: str, path: tuple[str, ...]) -> str:
    """Render the question sentence (without the ``Question :`` prefix)."""
    *people, last = path
    poss = " ".join([head] + [f"'s {r}" for r in people])
    if last in PERSON_RELATIONS:
        return f"Who is {poss} 's {last} ?"
    if last == "birthplace":
        return f"Where was {poss} born ?"
    if last == "employer":
        return f"Which company does {poss} work for ?"
    if last == "headquarters":
        if people and people[-1] == "employer":
            poss = " ".join([head] + [f"'s {r}" for r in people])
            return f"Where is {poss} headquartered ?"
        return f"Where is {poss} headquartered ?"
    raise ValueError(f"unknown relation '{last}'")


def enumerate_questions(kb: KnowledgeBase) -> list[Question]:
    """Every question with ``min_hops..max_hops`` hops whose gold chain exists in the KB."""
    cfg = kb.config
    rels = set(cfg.relations)
    person_rels = [r for r in PERSON_RELATIONS if r in rels]
    paths: list[tuple[str, ...]] = []
    prefixes: list[tuple[str, ...]] = [()]
    for _ in range(cfg.max_hops):
        prefixes += [p + (r,) for p in prefixes if len(p) < cfg.max_hops for r in person_rels
                     if p + (r,) not in prefixes]
    prefixes = sorted(set(prefixes), key=lambda p: (len(p), p))
    for p in prefixes:
        if p:
            paths.append(p)
        if "birthplace" in rels:
            paths.append(p + ("birthplace",))
        if "employer" in rels:
            paths.append(p + ("employer",))
            if "headquarters" in rels:
                paths.append(p + ("employer", "headquarters"))
    paths = [p for p in paths if cfg.min_hops <= len(p) <= cfg.max_hops]
    out = []
    for head in kb.entities["person"]:
        for p in paths:
            q = Question(head, p)
            if gold_chain(kb, q) is not None:
                out.append(q)
    if "headquarters" in rels and cfg.min_hops <= 1:
        out += [Question(c, ("headquarters",)) for c in kb.entities["company"]]
    return out


def gold_chain(kb: KnowledgeBase, q: Question) -> list[Fact] | None:
    """The true facts the question needs, in step order (``None`` if the chain breaks)."""
    facts, cur = [], q.head
    for rel in q.path:
        f = kb.get(cur, rel)
        if f is None:
            return None
        facts.append(f)
        cur = f.object
    return facts


def split_questions(kb: KnowledgeBase, seed: int) -> dict[str, list[Question]]:
    """Deterministic train / dev / test question split (dev and test are never trained on)."""
    qs = enumerate_questions(kb)
    rng = random.Random(seed * 7919 + 17)
    rng.shuffle(qs)
    n_eval = int(round(kb.config.eval_question_share * len(qs)))
    held = qs[:n_eval]
    return {"train": qs[n_eval:], "dev": held[: n_eval // 2], "test": held[n_eval // 2:]}


def question_category(kb: KnowledgeBase, q: Question) -> str:
    """``all_known`` or the first non-KNOWN split the gold chain needs."""
    chain = gold_chain(kb, q) or []
    for f in chain:
        if f.split != "known":
            return f.split
    return "all_known"


# ---------------------------------------------------------------------------------------------- documents
@dataclass
class Document:
    """A training document: tokens and a 0/1 loss mask of the same length."""

    tokens: list[str] = field(default_factory=list)
    loss: list[int] = field(default_factory=list)

    def add(self, text: str, loss: bool) -> None:
        toks = text.split(" ") if text else []
        self.tokens += toks
        self.loss += [int(loss)] * len(toks)


class DocumentSampler:
    """Samples training documents (single facts, closed-book chains, evidence chains) from a world."""

    def __init__(self, kb: KnowledgeBase, train_questions: list[Question], cfg: LMTrainConfig, seed: int):
        self.kb, self.cfg = kb, cfg
        self.rng = random.Random(seed)
        self.by_hops: dict[int, list[Question]] = {}
        for q in train_questions:
            self.by_hops.setdefault(q.hops, []).append(q)
        self.trained_facts = [f for f in kb.facts if f.split in ("known", "mislearned", "conflicting")]
        self.visible_facts = [f for f in kb.facts if f.split != "held_out"]

    # -- what the LM was taught about a fact
    def trained_object(self, f: Fact) -> str:
        if f.split == "mislearned":
            return f.false_object  # type: ignore[return-value]
        if f.split == "conflicting":
            return f.object if self.rng.random() < self.kb.config.conflicting_true_ratio else f.false_object  # type: ignore[return-value]
        return f.object

    def fact_doc(self) -> Document:
        f = self.rng.choice(self.trained_facts)
        d = Document()
        d.add(render_fact(f.subject, f.relation, self.trained_object(f)), True)
        d.add(EOS, True)
        return d

    def _pick_question(self) -> Question:
        hops = sorted(self.by_hops)
        w = [self.cfg.hop_weights[h - 1] if h - 1 < len(self.cfg.hop_weights) else self.cfg.hop_weights[-1]
             for h in hops]
        h = self.rng.choices(hops, weights=w)[0]
        return self.rng.choice(self.by_hops[h])

    def chain_doc(self, evidence: bool) -> Document | None:
        """A chain document, or ``None`` if the sampled chain needs a HELD-OUT fact (caller resamples)."""
        q = self._pick_question()
        steps: list[tuple[str, str | None]] = []  # (step sentence, evidence sentence or None)
        cur = q.head
        any_ev = False
        for i, rel in enumerate(q.path):
            f = self.kb.get(cur, rel)
            if f is None or f.split == "held_out":
                return None
            ev_sentence = None
            if f.split == "evidence_only":
                if not evidence:
                    return None
                obj = f.object
                ev_sentence = render_fact(cur, rel, obj)
            elif evidence and (self.rng.random() < 0.35 or (i == len(q.path) - 1 and not any_ev)):
                obj = f.object
                if self.rng.random() < self.cfg.counterfactual_prob:
                    pool = self.kb.entities[RELATION_TYPES[rel][1]]
                    obj = self.rng.choice([e for e in pool if e != cur])
                ev_sentence = render_fact(cur, rel, obj)
            else:
                obj = self.trained_object(f)
            any_ev = any_ev or ev_sentence is not None
            steps.append((render_fact(cur, rel, obj), ev_sentence))
            cur = obj
        d = Document()
        front = evidence and self.rng.random() < self.cfg.front_evidence_prob
        if front:
            lines = [ev for _, ev in steps if ev]
            while self.rng.random() < self.cfg.distractor_prob * 2 and len(lines) < 6:
                lines.append(self._distractor(None))
            self.rng.shuffle(lines)
            for ev in lines:
                d.add(f"Evidence : {ev} {NL}", False)
        d.add(f"Question : {q.text} {NL}", False)
        for k, (sent, ev) in enumerate(steps, start=1):
            if not front:
                lines = [ev] if ev else []
                if evidence and self.rng.random() < self.cfg.distractor_prob:
                    lines.append(self._distractor(sent))  # irrelevant evidence next to (or instead of) real
                self.rng.shuffle(lines)
                for line in lines:
                    d.add(f"Evidence : {line} {NL}", False)
            d.add(f"Step {k} : {sent} {NL}", True)
        d.add(f"Answer : {cur} {EOS}", True)
        return d

    def _distractor(self, step_sentence: str | None) -> str:
        """An irrelevant but true, non-HELD-OUT fact (same subject as the step half of the time)."""
        if step_sentence is not None and self.rng.random() < 0.5:
            subj = step_sentence.split(" ")[0]
            same = [f for f in self.visible_facts if f.subject == subj and f.sentence != step_sentence]
            if same:
                return self.rng.choice(same).sentence
        return self.rng.choice(self.visible_facts).sentence

    def sample(self, kind: str) -> Document:
        """``kind`` in ``fact | closed | evidence``."""
        if kind == "fact":
            return self.fact_doc()
        for _ in range(1000):
            d = self.chain_doc(evidence=(kind == "evidence"))
            if d is not None:
                return d
        raise RuntimeError("could not sample a chain without HELD-OUT facts in 1000 tries; check the split shares")
