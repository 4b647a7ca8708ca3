"""The micro-world's long chains (task ``microworld_chain``): one episode walks through several micro-world questions
in turn, so a chain has as many steps as a long reasoning chain, with its ground truth kept.

The world's questions have at most 5 hops. A chain question is ``k`` sub-questions of ``h`` hops each
(:class:`~envs.env_config.ChainSettings`: ``questions``, ``hops``), drawn from the split's questions with that many
hops; the micro-world LM answers them one after the other (:class:`agents.reasoners.chained.ChainedReasoner`), each
step one reasoning step of the LM and one retrieval decision — a chain of ``k × (h + 1)`` steps (each sub-question's
``h`` steps and its answer line): 4, 8, …, 64 steps at ``h = 3`` and ``k = 1, 2, …, 16``. So the counterfactual
labels and the oracle continue every branch through all the remaining sub-questions, as on any long chain.

Ground truth, per sub-question:

* **quality** (the env's reward): the share of sub-answers that are the sub-question's gold answer (exact match of
  the answer entity, as on the micro-world); ``all_correct`` beside it in the task's metrics;
* **step labels**: every step is labelled against its own sub-question (where the model's chain stands in it:
  :meth:`envs.microworld.task.MicroWorldTask.label`), a sub-question's answer line as ``answer_correct`` /
  ``answer_wrong`` for its own gold answer.

``chain.distractors`` grows the corpus with true facts of other seeded worlds that name none of this world's
entities (:func:`envs.core.microworld.corpus.distractor_passages`): a retrieval searches 10³–10⁵ passages, the
answers stay the same.

Example (a chain of 2 three-hop sub-questions, 8 steps)::

    >>> from envs.env_config import EnvConfig                                                   # doctest: +SKIP
    >>> from envs.retrieval_env import RetrievalTimingEnv                                       # doctest: +SKIP
    >>> env = RetrievalTimingEnv(EnvConfig(task="microworld_chain", max_steps=8,
    ...                                    chain={"questions": 2, "hops": 3}))                 # doctest: +SKIP
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from agents.reasoners.chained import (
    ANSWER_SEPARATOR,
    QUESTION_SEPARATOR,
    is_sub_answer,
    split_answers,
    sub_answer,
)
from envs.core.microworld.labels import gold_answer
from envs.core.microworld.questions import Question
from envs.microworld.task import MicroWorldTask


@dataclass(frozen=True)
class ChainQuestion:
    """A chain of micro-world questions answered in turn."""

    parts: tuple[Question, ...]

    @property
    def id(self) -> str:
        return "+".join(q.id for q in self.parts)

    @property
    def text(self) -> str:
        return QUESTION_SEPARATOR.join(q.text for q in self.parts)

    @property
    def hops(self) -> int:
        return sum(q.hops for q in self.parts)


def draw_chains(pool: list[Question], k: int, count: int | None, seed: int) -> list[ChainQuestion]:
    """Chains of ``k`` distinct sub-questions from ``pool`` (see :class:`~envs.env_config.ChainSettings.count`): the
    seeded shuffle cut into disjoint chains while they last, then further distinct chains by seeded draws.

    >>> qs = [Question(f"P{i}", ("father",)) for i in range(5)]
    >>> [c.id for c in draw_chains(qs, 2, None, 0)]
    ['P2/father+P3/father', 'P0/father+P1/father']
    >>> len(draw_chains(qs, 2, 7, 0)), len({c.id for c in draw_chains(qs, 2, 7, 0)})
    (7, 7)
    """
    if len(pool) < k:
        raise ValueError(f"chain.questions = {k} needs at least {k} sub-questions in the pool, which has {len(pool)}")
    rng = random.Random(f"chains/{seed}")
    order = list(pool)
    rng.shuffle(order)
    disjoint = [ChainQuestion(tuple(order[i:i + k])) for i in range(0, len(order) - k + 1, k)]
    if count is None or count <= len(disjoint):
        return disjoint[:count] if count is not None else disjoint
    distinct = _distinct_chains(len(pool), k)
    if count > distinct:
        raise ValueError(f"chain.count = {count} exceeds the {distinct} distinct chains of {k} sub-question(s) the "
                         f"pool of {len(pool)} makes; lower chain.count or raise chain.questions")
    chains, seen = list(disjoint), {c.id for c in disjoint}
    while len(chains) < count:
        c = ChainQuestion(tuple(rng.sample(pool, k)))
        if c.id not in seen:
            seen.add(c.id)
            chains.append(c)
    return chains


def _distinct_chains(n: int, k: int) -> int:
    """Ordered chains of ``k`` distinct sub-questions out of ``n``: n·(n−1)·…·(n−k+1)."""
    out = 1
    for i in range(k):
        out *= n - i
    return out


#: where a chain's labelling stands between steps (``EnvConfig`` records' ``chain_object``): the sub-question, the
#: step the sub-question began at, and the model's chain object inside it
_POSITION = re.compile(r"^(\d+)@(\d+)/(.*)$")


def _position(part: int, start: int, obj: str | None) -> str:
    return f"{part}@{start}/{obj or ''}"


def _parse_position(text: str | None) -> tuple[int, int, str | None]:
    m = _POSITION.match(text or "")
    if m is None:
        return 0, 1, None
    return int(m.group(1)), int(m.group(2)), m.group(3) or None


class ChainTask:
    """Chain questions of one split of a loaded micro-world (see the module docstring); ``chain``: the
    :class:`~envs.env_config.ChainSettings`."""

    #: the quality is the share of correct sub-answers
    quality_metric = "acc"

    def __init__(self, world: Any, split: str, chain: Any):
        self.sub = MicroWorldTask(world, split)
        self.world, self.kb, self.chain = world, world.kb, chain
        pool = [q for q in self.sub.questions if q.hops == chain.hops]
        if not pool:
            have = sorted({q.hops for q in self.sub.questions})
            raise ValueError(f"EnvConfig.chain.hops = {chain.hops}: split '{split}' has no question with that many "
                             f"hops (it has {', '.join(map(str, have))}); set chain.hops to one of them")
        self.questions: list[ChainQuestion] = draw_chains(pool, chain.questions, chain.count, chain.seed)

    def question_id(self, q: ChainQuestion) -> str:
        return q.id

    def question_text(self, q: ChainQuestion) -> str:
        return q.text

    def gold_passages(self, q: ChainQuestion) -> list[str]:
        """The facts of every sub-question's gold chain, in order."""
        return [f for part in q.parts for f in self.sub.gold_passages(part)]

    def question_attr(self, q: ChainQuestion, name: str):
        """``hops`` (all sub-questions together), ``sub_questions``, and ``chain_kind``: the most dangerous kind of
        fact any sub-question hinges on (:meth:`MicroWorldTask.question_attr`)."""
        if name == "hops":
            return q.hops
        if name == "sub_questions":
            return len(q.parts)
        if name == "chain_kind":
            kinds = [self.sub.question_attr(p, "chain_kind") for p in q.parts]
            order = [*MicroWorldTask.CHAIN_KIND_ORDER, "no_chain"]
            return min(kinds, key=lambda k: order.index("held_out" if k == "unseen" else k))
        return None

    def sub_correct(self, q: ChainQuestion, answer_content: str | None) -> list[bool]:
        """Whether each sub-answer of the final answer's content is its sub-question's gold answer."""
        answers = split_answers(answer_content, len(q.parts))
        return [a == gold_answer(self.kb, p) for a, p in zip(answers, q.parts)]

    def quality(self, q: ChainQuestion, answer_content: str) -> float:
        """The share of sub-questions answered right."""
        ok = self.sub_correct(q, answer_content)
        return sum(ok) / len(ok)

    def partial_quality(self, q: ChainQuestion, lines: list[str]) -> float:
        """The quality of a chain cut short: the share of all the chain's sub-questions whose answer line among
        ``lines`` (the chain's step texts so far, in order; the i-th answer line answers the i-th sub-question) is its
        gold answer — sub-questions not answered yet count as wrong. Once every answer line is written it is
        :meth:`quality` (the horizon labels of :mod:`train.counterfactual`: ``Q(t)`` after step ``t``).

        Example (the first of two sub-questions answered right, the second not reached)::

            >>> task.partial_quality(q, ["Step 1 : Mira 's father is Tovan .", "Answer : Tovan"])  # doctest: +SKIP
            0.5
        """
        answers = [sub_answer(line) for line in lines if is_sub_answer(line)][:len(q.parts)]
        return sum(a == gold_answer(self.kb, p) for a, p in zip(answers, q.parts)) / len(q.parts)

    def metrics(self, q: ChainQuestion, answer_content: str | None) -> dict[str, float]:
        """``acc`` (the quality: the share of correct sub-answers) and ``all_correct`` (every one right)."""
        ok = self.sub_correct(q, answer_content)
        return {"acc": sum(ok) / len(ok), "all_correct": float(all(ok))}

    def label(self, q: ChainQuestion, step_number: int, chain_object: str | None, content: str, is_answer: bool
              ) -> tuple[str, str | None, str | None]:
        """``(label, error_kind, where the chain stands after the step)``: the step labelled against its own
        sub-question (a sub-question's answer line against that sub-question's gold answer)."""
        part, start, obj = _parse_position(chain_object)
        part = min(part, len(q.parts) - 1)
        sub = q.parts[part]
        if is_answer or is_sub_answer(content):
            answer = split_answers(content, len(q.parts))[part] if is_answer else sub_answer(content)
            ok = answer == gold_answer(self.kb, sub)
            return ("answer_correct" if ok else "answer_wrong"), (None if ok else "answer"), \
                _position(part + 1, step_number + 1, None)
        label, kind, new = self.sub.label(sub, step_number - start + 1, obj, content, False)
        return label, kind, _position(part, start, new)


def chain_settings(config: Any):
    """The chain settings of an env config (its ``chain``, or the defaults)."""
    from envs.env_config import ChainSettings

    return config.chain or ChainSettings()


def chain_corpus(config: Any, world: Any = None):
    """The corpus the chain task searches: the world's facts, plus ``chain.distractors`` distractor passages."""
    from envs.core.microworld.corpus import distractor_passages

    if world is None:
        from envs.core.microworld.artifact import load_artifact

        world = load_artifact(config.artifact, with_model=False)
    chain = chain_settings(config)
    return world.corpus(distractor_passages(world.kb, chain.distractors, chain.seed) if chain.distractors else None)


__all__ = ["ANSWER_SEPARATOR", "ChainQuestion", "ChainTask", "chain_corpus", "draw_chains"]
