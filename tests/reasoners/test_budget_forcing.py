"""Budget forcing (``TextStepConfig.min_steps``, s1's "Wait"): a chain may not end before ``min_steps`` steps — an
early answer line is generated again after the continue prompt (its tokens paid), an early end of text keeps its line
and the next one starts with the continue prompt; at ``min_steps`` the chain ends as before."""

from __future__ import annotations

import numpy as np
import pytest

from agents.reasoners.stepgen import StepOutput
from agents.reasoners.textsteps import TextStepConfig, TextStepReasoner
from envs.core.config import ConfigError


class Scripted(TextStepReasoner):
    """A backend whose next line depends only on the last token of the state: after the continue prompt ('a') it
    writes 'b' and a newline; otherwise the lines of ``lines`` in turn (words; 'EOS' is the end-of-text token)."""

    def __init__(self, tok, lines: list[str], **cfg):
        self._init_text(tok, TextStepConfig(use_chat_template=False, **cfg), n_layers=2, hidden_size=4,
                        eos_ids={tok.eos_token_id})
        self.lines, self.calls = list(lines), 0

    def _ids(self, words: str) -> list[int]:
        return [self.tok.eos_token_id if w == "EOS" else self.tok.convert_tokens_to_ids(w) for w in words.split(" ") if w]

    def _run(self, gens, capture=None, sample=False, temperature=1.0, generator=None, no_stop_first=None):
        out = []
        for g in gens:
            self.calls += 1
            after_prompt = g.ids[-1] == self.tok.convert_tokens_to_ids("a")
            ids = self._ids("b \n") if after_prompt else self._ids(self.lines.pop(0))
            n = len(ids)
            out.append((StepOutput(ids, self._header_len(ids), np.full(n, -0.5), np.ones(n), np.full(n, 0.6), None,
                                   None, state=g.extend(ids)), 0.01))
        return out


def _chain(r: Scripted) -> tuple[list, object]:
    s, steps = r.start("x ?"), []
    while not s.done:
        (step, s), = r.next_step([s])
        steps.append(step)
    return steps, s


def test_an_early_answer_line_is_replaced_by_the_continuation_and_paid(tok):
    r = Scripted(tok, ["Step 1 : c \n", "Answer : Paris \n", "Answer : Paris \n"], min_steps=3, max_steps=5,
                 continue_prompt="a")
    steps, s = _chain(r)
    assert [st.text for st in steps] == ["Step 1 : c", "a b", "Answer : Paris"]
    assert not steps[1].is_answer and steps[2].is_answer and s.done and s.n_steps == 3
    assert steps[1].meta["forced_tokens"] == 4 and steps[1].n_tokens == 4 + 2  # the discarded line is paid
    assert "Answer" not in "".join(s.transcript[:2]) and s.transcript[1].startswith("a b")


def test_an_early_end_of_text_keeps_its_line_and_the_next_starts_with_the_prompt(tok):
    r = Scripted(tok, ["c EOS", "Answer : Paris \n"], min_steps=2, max_steps=4, continue_prompt="a")
    steps, s = _chain(r)
    assert [st.text for st in steps] == ["c", "a b", "Answer : Paris"]
    assert r.tok.eos_token_id not in s.gen.ids  # the end of text was taken back
    assert steps[0].meta.get("forced_tokens") is None


def test_without_min_steps_the_chain_ends_where_the_model_ends_it(tok):
    steps, s = _chain(Scripted(tok, ["Answer : Paris \n"], max_steps=4, continue_prompt="a"))
    assert len(steps) == 1 and steps[0].is_answer and s.done


def test_an_asked_for_answer_is_never_forced_away(tok):
    r = Scripted(tok, ["Step 1 : c \n", "Paris \n"], min_steps=3, max_steps=3, continue_prompt="a")
    s = r.start("x ?")
    (_, s), = r.next_step([s])
    (step, after), = r.next_step([r.with_answer_prompt(s)])  # the env's answer closing (before min_steps)
    assert step.is_answer and after.done


def test_min_steps_is_checked_against_max_steps():
    with pytest.raises(ConfigError, match=r"min_steps: 5 must be in 0 … max_steps \(4\)"):
        TextStepConfig.from_dict({"min_steps": 5, "max_steps": 4})
    with pytest.raises(ConfigError, match="continue_prompt: empty"):
        TextStepConfig.from_dict({"min_steps": 2, "continue_prompt": " "})
