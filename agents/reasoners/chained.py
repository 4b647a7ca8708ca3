"""A chain of sub-questions as one reasoning chain: any step-wise reasoner answers several questions in turn, in one
episode, one step at a time (the micro-world's long chains, :mod:`envs.microworld.chain`).

The question is the sub-questions joined by :data:`QUESTION_SEPARATOR`. The reasoner writes the first sub-question's
steps and its answer line, then the next sub-question's, and so on; every sub-question starts from a fresh context
of the reasoner (a small model's window holds one sub-question, not the whole chain). The env sees one chain:

* a sub-question's answer line, while more follow, is an ordinary step whose ``content`` is the whole line
  (``Answer : Kasford``: it states the sub-answer; :func:`is_sub_answer` tells it from a step);
* the last sub-question's answer line is the chain's ``Answer`` line; its ``content`` is every sub-answer in order,
  joined by :data:`ANSWER_SEPARATOR` (what the task grades);
* a sub-question whose text ends without an answer line (end-of-text) is asked for it, as the env's answer closing
  asks a chain (``Answer :`` written for the reasoner): its next line is its answer;
* the env's answer closing (:meth:`ChainedReasoner.with_answer_prompt`) ends the chain at the next answer line,
  with the sub-questions not reached unanswered.

Evidence goes to the current sub-question's context. A state's snapshot is the inner reasoner's plus where the chain
stands, so the trajectory cache replays chains like any other.

Example:
    >>> from envs.core.microworld.artifact import load_artifact                      # doctest: +SKIP
    >>> from agents.reasoners.micro import MicroReasoner                             # doctest: +SKIP
    >>> r = ChainedReasoner(MicroReasoner(load_artifact()))                           # doctest: +SKIP
    >>> s = r.start("Who is Mira 's father ? | Where was Tovan born ?")               # doctest: +SKIP
    >>> [step.text for step in r.run_chains(["Who is Mira 's father ? | Where was Tovan born ?"], 8)[0]]  # doctest: +SKIP
    ["Step 1 : Mira 's father is Tovan .", 'Answer : Tovan', 'Step 1 : Tovan was born in Kasford .', 'Answer : Kasford']
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agents.reasoners.base import run_chains
from agents.segmentation import parse_header

#: joins the sub-questions of a chain's question text
QUESTION_SEPARATOR = " | "
#: joins the sub-answers in the content of a chain's final answer line
ANSWER_SEPARATOR = " ; "


def split_question(text: str) -> list[str]:
    """The sub-questions of a chain's question text.

    >>> split_question("Who is A 's father ? | Where was B born ?")
    ["Who is A 's father ?", 'Where was B born ?']
    """
    return [p.strip() for p in text.split(QUESTION_SEPARATOR.strip()) if p.strip()]


def split_answers(content: str | None, n: int) -> list[str]:
    """The ``n`` sub-answers of a final answer's content (missing ones empty).

    >>> split_answers("Tovan ; Kasford", 3)
    ['Tovan', 'Kasford', '']
    """
    parts = [p.strip() for p in (content or "").split(ANSWER_SEPARATOR.strip())] if content else []
    return (parts + [""] * n)[:n]


def is_sub_answer(content: str) -> bool:
    """Whether a step's content is a sub-question's answer line (``Answer : X``) rather than a reasoning step."""
    h = parse_header(content.strip())
    return h is not None and h.kind == "answer"


def sub_answer(content: str) -> str:
    """The answer of a sub-answer line's content (``Answer : Kasford`` -> ``Kasford``)."""
    text = content.strip()
    h = parse_header(text)
    return text[h.end:].strip() if h is not None else text


@dataclass(frozen=True)
class ChainState:
    """Where a chain stands: its sub-questions, the current one, the sub-answers so far and the inner state."""

    parts: tuple[str, ...]
    index: int
    answers: tuple[str, ...]
    inner: Any
    lines: int = 0           # lines written so far, all sub-questions together
    closing: bool = False    # the env asked for the answer: the next answer line ends the chain
    done: bool = False

    @property
    def gen(self):
        """The inner state's generation state (signals that sample continuations read it)."""
        return self.inner.gen


class ChainedReasoner:
    """A reasoner over chains of sub-questions (see the module docstring); ``inner``: any step-wise reasoner with
    ``with_answer_prompt`` (the micro-world's, the Hugging Face one)."""

    #: attributes never taken from the inner reasoner: a pass over the question text (the whole chain) would not fit
    #: the inner reasoner's context; without them the env says the feature is unavailable
    NOT_DELEGATED = frozenset({"qfs_pass", "generate_sampled"})

    def __init__(self, inner: Any):
        if not callable(getattr(inner, "with_answer_prompt", None)):
            raise ValueError(f"a chain of sub-questions needs a reasoner that can be asked for an answer "
                             f"(with_answer_prompt); {type(inner).__name__} cannot")
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ChainedReasoner.NOT_DELEGATED or name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ states
    def start(self, question: str, context: list[str] | None = None) -> ChainState:
        parts = tuple(split_question(question))
        if not parts:
            raise ValueError("a chain of sub-questions needs at least one question")
        return ChainState(parts, 0, (), self.inner.start(parts[0], context))

    def state_tokens(self, state: ChainState) -> int:
        return self.inner.state_tokens(state.inner)

    def snapshot(self, state: ChainState) -> dict:
        return {"chain": {"parts": list(state.parts), "index": state.index, "answers": list(state.answers),
                          "lines": state.lines, "closing": state.closing, "done": state.done},
                "inner": self.inner.snapshot(state.inner)}

    def restore(self, snap: dict) -> ChainState:
        c = snap["chain"]
        return ChainState(tuple(c["parts"]), int(c["index"]), tuple(c["answers"]), self.inner.restore(snap["inner"]),
                          int(c["lines"]), bool(c["closing"]), bool(c["done"]))

    def with_evidence(self, state: ChainState, evidence: list[str], mode: str = "step") -> ChainState:
        return dataclasses.replace(state, inner=self.inner.with_evidence(state.inner, evidence, mode))

    def with_answer_prompt(self, state: ChainState) -> ChainState:
        """The env's answer closing: the current sub-question is asked for its answer, and that line ends the chain."""
        return dataclasses.replace(state, inner=self.inner.with_answer_prompt(state.inner), closing=True)

    # ------------------------------------------------------------------ generation
    def next_step(self, states: list[ChainState]) -> list[tuple[Any, ChainState]]:
        """The next line of every chain (one batched call of the inner reasoner)."""
        return [self._advance(s, step, after)
                for s, (step, after) in zip(states, self.inner.next_step([s.inner for s in states]))]

    def _advance(self, state: ChainState, step: Any, after: Any) -> tuple[Any, ChainState]:
        """The chain's view of one inner line: where the chain stands after it, and the step as the env sees it."""
        step.index = state.lines + 1
        lines = state.lines + 1
        if not step.is_answer:
            if getattr(after, "done", False):  # the sub-question ended without an answer line: ask for it
                after = self.inner.with_answer_prompt(after)
            if is_sub_answer(step.content):  # (a step that reads like an answer line keeps its header)
                step.content = step.text
            return step, dataclasses.replace(state, inner=after, lines=lines)
        answers = state.answers + (step.content.strip(),)
        if state.closing or state.index + 1 >= len(state.parts):  # the chain's answer: every sub-answer
            step.content = ANSWER_SEPARATOR.join(answers)
            return step, dataclasses.replace(state, answers=answers, inner=after, lines=lines, done=True)
        step.is_answer = False  # a sub-answer: a step of the chain; the next sub-question starts afresh
        step.content = step.text
        nxt = state.index + 1
        return step, dataclasses.replace(state, index=nxt, answers=answers, inner=self.inner.start(state.parts[nxt]),
                                         lines=lines)

    def regenerate(self, states: list[ChainState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Any, ChainState]]:
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def sample_alternatives(self, state: ChainState, k: int, seed: int = 0, **kw: Any):
        return self.inner.sample_alternatives(state.inner, k, seed, **kw)

    def run_chains(self, questions: list[str], max_steps: int = 64, front: list[list[str]] | None = None):
        """Greedy chains for many chain questions, batched."""
        return run_chains(self, questions, max_steps, front)
