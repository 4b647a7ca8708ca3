"""Rule-based step segmentation of free-form chains."""

import pytest

from agents.segmentation import parse_header, segment_steps

CHAIN = """Let me think about this.
**Step 1:** Arthur's Magazine was started in 1844.
Step2. First for Women was started in 1989.
  - step 3 - 1844 is earlier than 1989,
so Arthur's Magazine came first.
Step 4:
### Step 5: Arthur's Magazine was started in 1844.
**Step 6**: Done.
**Answer:** Arthur's Magazine
"""


def test_tolerant_markers_answer_and_counted_malformed_steps():
    seg = segment_steps(CHAIN)
    assert [s.content for s in seg.steps] == [
        "Arthur's Magazine was started in 1844.",
        "First for Women was started in 1989.",
        "1844 is earlier than 1989,\nso Arthur's Magazine came first.",
        "Done.",
    ]
    assert [s.number for s in seg.steps] == [1, 2, 3, 6] and [s.index for s in seg.steps] == [1, 2, 3, 4]
    assert seg.answer == "Arthur's Magazine" and seg.preamble == "Let me think about this."
    assert seg.n_malformed == 2 and [m.reason for m in seg.malformed] == ["empty", "repeat"]
    assert seg.n_out_of_order == 1  # 3 -> 6
    s = seg.steps[1]
    assert CHAIN[s.start: s.end].startswith("Step2.")


def test_inline_markers_and_last_answer_wins():
    seg = segment_steps("Step 1: A is B. Step 2: B is C.\nAnswer: B\nAnswer: C")
    assert [s.content for s in seg.steps] == ["A is B.", "B is C."] and seg.answer == "C"


def test_no_markers_no_answer():
    seg = segment_steps("Paris is the capital of France.")
    assert seg.steps == [] and seg.answer is None and seg.preamble == "Paris is the capital of France."
    assert segment_steps("").n_steps == 0


@pytest.mark.parametrize("line,kind,number,header", [
    ("Step 1: x", "step", 1, "Step 1:"),
    ("Step 1. x", "step", 1, "Step 1."),
    ("**Step 1:** x", "step", 1, "**Step 1:**"),
    ("**Step 10**: x", "step", 10, "**Step 10**:"),
    ("Step1:x", "step", 1, "Step1:"),
    ("STEP 2 - x", "step", 2, "STEP 2 -"),
    ("Step 3 : x", "step", 3, "Step 3 :"),
    ("Answer: x", "answer", None, "Answer:"),
    ("Final answer: x", "answer", None, "Final answer:"),
    ("**Answer**: x", "answer", None, "**Answer**:"),
])
def test_parse_header(line, kind, number, header):
    h = parse_header(line)
    assert h is not None and (h.kind, h.number) == (kind, number) and line[: h.end] == header


@pytest.mark.parametrize("line", ["Step one: x", "The answer: x", "Step 1 x", "Stepping 1: x", "x Step 1: y"])
def test_not_a_header(line):
    assert parse_header(line) is None
