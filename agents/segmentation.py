"""Rule-based step segmentation of free-form reasoning chains.

Real LMs do not write ``Step 1 : …`` lines as neatly as the micro-world LM. This module turns whatever they
wrote into steps:

* a **step marker** is ``Step N`` followed by a separator (``:``, ``.``, ``)``, ``-``) and/or closing
  markdown bold, at the start of a line (after bullets, ``#`` or ``**``), or inline after whitespace when it
  is the strict form ``Step N:``. Tolerated: ``Step 1.``, ``**Step 1:**``, ``**Step 1**:``, ``Step1:``,
  ``step 1 -``, ``### Step 1:``;
* an **answer line** is ``Answer:`` / ``Final answer:`` (optionally bold) at the start of a line; the LAST
  one is the chain's answer;
* a step's content runs from its marker to the next marker or answer line;
* **malformed** steps are dropped and counted: an empty step (nothing but markdown/punctuation after the
  marker) and a verbatim repeat of an earlier step (a decoding loop). Out-of-order numbers are kept (steps
  are renumbered ``1 … n``) and counted separately.

:func:`parse_header` is the same rule on one line; the step-wise backends use it to find where a generated
line's header ends (the content starts after it).

Example:
    >>> seg = segment_steps("**Step 1:** Paris is in France.\\nStep2. It is the capital.\\nStep 3:\\nAnswer: Paris")
    >>> [s.content for s in seg.steps], seg.answer, seg.n_malformed
    (['Paris is in France.', 'It is the capital.'], 'Paris', 1)
    >>> parse_header("Step 12:Paris").end, parse_header("Answer: 7").kind
    (8, 'answer')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: the instruction that asks an LM for the format this module parses (used by the real-LM backends)
STEP_INSTRUCTION = (
    'Think step by step and output the reasoning process before answering. Each step should be started with '
    '"Step". After the last step, write the final answer on one line that starts with "Answer:".'
)

_BOLD = r"(?:\*\*|__)"
# a header at the start of a line (group 'lead' is markdown decoration before it)
_LINE_HEADER = re.compile(
    rf"(?P<lead>[ \t]*(?:(?:[#>*_]+|[-+]\s)[ \t]*)*)"
    rf"(?:(?P<step>step)[ \t]*(?P<num>\d+)[ \t]*(?P<b1>{_BOLD})?[ \t]*(?P<sep>[:.)\-–])?[ \t]*(?P<b2>{_BOLD})?"
    rf"|(?P<answer>(?:final[ \t]+)?answer)[ \t]*(?P<ab1>{_BOLD})?[ \t]*:[ \t]*(?P<ab2>{_BOLD})?)",
    re.IGNORECASE,
)
# the strict inline form: "… end of step one. Step 2: …"
_INLINE_STEP = re.compile(r"(?<=\s)(?P<step>step)[ \t]*(?P<num>\d+)[ \t]*:", re.IGNORECASE)
_EMPTY = re.compile(r"^[\s*_#>\-–.:;,)]*$")


@dataclass(frozen=True)
class Header:
    """A line header: ``kind`` is ``"step"`` or ``"answer"``; ``end`` is the character offset where the
    content starts (after the separator and closing bold, before any space)."""

    kind: str
    number: int | None
    end: int


def _header_match(m: re.Match) -> Header | None:
    if m.group("step"):
        # "Step 1 Paris" without separator or bold is prose, not a header
        if not (m.group("sep") or m.group("b1") or m.group("b2")):
            return None
        end = m.end()
        # do not swallow trailing spaces: content starts at the first non-space character
        while end > m.start() and m.string[end - 1] in " \t":
            end -= 1
        return Header("step", int(m.group("num")), end)
    end = m.end()
    while end > m.start() and m.string[end - 1] in " \t":
        end -= 1
    return Header("answer", None, end)


def parse_header(line: str) -> Header | None:
    """The ``Step N:`` / ``Answer:`` header at the start of ``line``, or ``None``.

    Example:
        >>> parse_header("**Step 2:** x"), parse_header("The answer: x")
        (Header(kind='step', number=2, end=11), None)
    """
    m = _LINE_HEADER.match(line)
    return _header_match(m) if m else None


def join_forced(forced: str, generated: str) -> str:
    """A line that began with text written for the model (``forced``, e.g. answer closing's ``Answer:``) and went
    on with what it generated: one space between them unless the generated text brings its own (a BPE token like
    ``" Paris"`` does).

    Example:
        >>> join_forced("Answer:", " Paris"), join_forced("Answer :", "a b")
        ('Answer: Paris', 'Answer : a b')
    """
    return forced + (generated if not generated or generated[:1].isspace() else " " + generated)


def clean_content(text: str) -> str:
    """Strip whitespace and stray markdown bold around a step's content."""
    text = text.strip()
    for mark in ("**", "__"):
        if text.startswith(mark) and text.count(mark) % 2 == 1:
            text = text[len(mark):]
        if text.endswith(mark) and text.count(mark) % 2 == 1:
            text = text[: -len(mark)]
    return text.strip()


@dataclass(frozen=True)
class SegStep:
    """One step: 1-based ``index`` after renumbering, the ``number`` the text gave it, its content and its
    character span ``[start, end)`` in the input (marker included)."""

    index: int
    number: int | None
    content: str
    start: int
    end: int


@dataclass(frozen=True)
class Malformed:
    """A dropped step: its raw text and why (``empty`` or ``repeat``)."""

    text: str
    reason: str


@dataclass
class Segmentation:
    """The result of :func:`segment_steps`."""

    steps: list[SegStep] = field(default_factory=list)
    answer: str | None = None           # content of the last answer line, ``None`` if there is none
    preamble: str = ""                  # text before the first step marker (not a step)
    malformed: list[Malformed] = field(default_factory=list)
    n_out_of_order: int = 0             # kept steps whose number is not previous + 1

    @property
    def n_malformed(self) -> int:
        """Number of dropped (malformed) steps."""
        return len(self.malformed)

    @property
    def n_steps(self) -> int:
        return len(self.steps)


def _markers(text: str) -> list[tuple[int, int, int, str, int | None]]:
    """Every marker as ``(cut, start, content_start, kind, number)`` in order; ``cut`` is where the previous
    step's text ends (the start of the marker's line, decoration included)."""
    found: dict[int, tuple[int, int, int, str, int | None]] = {}
    pos = 0
    for line in text.splitlines(keepends=True):
        m = _LINE_HEADER.match(line)
        h = _header_match(m) if m else None
        if h is not None:
            start = pos + len(m.group("lead"))
            found[start] = (pos, start, pos + h.end, h.kind, h.number)
        pos += len(line)
    for m in _INLINE_STEP.finditer(text):
        if not any(s <= m.start() < c for _, s, c, _, _ in found.values()):
            found.setdefault(m.start(), (m.start(), m.start(), m.end(), "step", int(m.group("num"))))
    return [found[k] for k in sorted(found)]


def segment_steps(text: str) -> Segmentation:
    """Split a free-form chain into steps and its final answer (see the module docstring for the rules).

    Args:
        text: the generated chain (any number of lines).

    Returns:
        a :class:`Segmentation`; ``malformed`` lists the dropped steps and why.
    """
    marks = _markers(text)
    seg = Segmentation(preamble=text[: marks[0][0]].strip() if marks else text.strip())
    seen: set[str] = set()
    prev_num: int | None = None
    for i, (_, start, cstart, kind, num) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        if kind == "answer":
            # the answer is its own line; anything after it up to the next marker is ignored
            line_end = text.find("\n", cstart)
            seg.answer = clean_content(text[cstart: end if line_end < 0 else min(end, line_end)])
            continue
        content = clean_content(text[cstart:end])
        raw = text[start:end].strip()
        if _EMPTY.match(content):
            seg.malformed.append(Malformed(raw, "empty"))
            continue
        key = " ".join(content.lower().split())
        if key in seen:
            seg.malformed.append(Malformed(raw, "repeat"))
            continue
        seen.add(key)
        if prev_num is not None and num is not None and num != prev_num + 1:
            seg.n_out_of_order += 1
        prev_num = num if num is not None else prev_num
        seg.steps.append(SegStep(len(seg.steps) + 1, num, content, start, end))
    return seg
