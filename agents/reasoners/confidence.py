"""RSUS's U_verb by prompt: after a step, the reasoner is asked "Rate your confidence that the current conclusion is
factually correct (0-100)" in a *side* turn of the chat, and U_verb = 1 − c/100 (docs/design.md §4).

The side turn continues the chat after the step — the question so far as the user turn, the chain up to and including
the step as the assistant turn, then the prompt as a new user turn — greedy, at most ``max_tokens`` tokens, ended by
the model's end of turn. Its reply is parsed (:func:`agents.signals.rsus.parse_confidence`) into
``step.meta["verbal_confidence"]`` (c in 0–100), which RSUS reads; the chain itself is unchanged (the step's state
after it is the one the next step continues from, never the side turn's).

A backend that can answer implements ``confidence_unavailable() -> str | None`` (``None``: it can) and asks when its
``confidence`` attribute holds a :class:`ConfidenceQuestion`: inside ``next_step``, one batched side generation for
the whole batch of new steps (the batch of every env copy, or of every caller of a reasoner-service replica). The
env sets ``confidence`` only when its signals need U_verb (:func:`envs.env_signals.asks_verbal_confidence`).

What it costs: the reply's tokens are added to ``step.n_tokens`` (generated tokens) and the side call's seconds to
``step.seconds`` — so the env charges them to the step's cost (``tokens``, ``latency``, ``dollars``) and the
trajectory cache stores them with the record (a replay does not ask again). ``step.meta["confidence_reply"]`` keeps
the reply, its tokens and seconds; a reply without a usable number leaves U_verb masked for that step, with the
reason there (``masked``).

Backends: ``hf`` and ``vllm`` (a model with a chat template: the side turn is the template's, appended to the
step's own token ids, so the KV / prefix cache of the chain is reused), ``openai`` with ``api: chat``. Not:
the micro-world LM (no chat turn: U_verb stays masked, or comes from the learned proxy ``rsus_options.verb_proxy``),
``openai`` with ``api: completions``, an ``hf`` / ``vllm`` model without a chat template.

Example:
    >>> from agents.reasoners.base import Step
    >>> step = Step(1, "Step 1: Paris is the capital.", "Paris is the capital.", False, n_tokens=9)
    >>> record_confidence(step, "I am 90% sure.", tokens=6, seconds=0.5, complete=True)
    >>> step.meta["verbal_confidence"], step.n_tokens, step.meta["confidence_reply"]["tokens"]
    (90.0, 15, 6)
    >>> step = Step(2, "Step 2: x", "x", False)
    >>> record_confidence(step, "The conclusion is 9", tokens=16, seconds=0.5, complete=False)
    >>> "verbal_confidence" in step.meta, step.meta["confidence_reply"]["masked"]
    (False, 'the reply was cut at 16 tokens inside its number')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.reasoners.base import Step
from agents.signals.rsus import CONFIDENCE_PROMPT, confidence_match

#: how a side turn's template is found: a chat rendered with this as the assistant's text
_SENTINEL = "\x00KAIROS-STEP\x00"


@dataclass(frozen=True)
class ConfidenceQuestion:
    """The side question a reasoner asks after every step (RSUS's U_verb).

    Attributes:
        prompt: the user turn (RSUS's :data:`~agents.signals.rsus.CONFIDENCE_PROMPT`).
        max_tokens: the reply's token budget (greedy; the model's end of turn ends it sooner).
    """

    prompt: str = CONFIDENCE_PROMPT
    max_tokens: int = 16

    def identity(self) -> dict[str, Any]:
        """What the replies depend on (the trajectory-cache namespace holds it when asking is on)."""
        return {"prompt": self.prompt, "max_tokens": int(self.max_tokens), "side_turn": 1}


def record_confidence(step: Step, reply: str, *, tokens: int, seconds: float, complete: bool,
                      prompt_tokens: int | None = None) -> None:
    """Put a side turn's reply on ``step``: the confidence in ``meta["verbal_confidence"]`` when the reply states one
    (else it is left out: U_verb masked, the reason in ``meta["confidence_reply"]["masked"]``); the reply's tokens
    and seconds added to the step's (what the env charges). ``complete``: the reply ended by the model's end of turn,
    not cut at the token budget (a cut reply whose number runs to its end may have lost digits: masked)."""
    m = confidence_match(reply)
    value, why = None, None
    if m is None:
        why = "no number in the reply"
    elif not complete and m.end() >= len(reply.rstrip()):
        why = f"the reply was cut at {tokens} tokens inside its number"
    elif not 0.0 <= float(m.group(0)) <= 100.0:
        why = f"the reply's number {m.group(0)} is not in 0-100"
    else:
        value = float(m.group(0))
    note: dict[str, Any] = {"reply": reply, "confidence": value, "tokens": int(tokens), "seconds": float(seconds)}
    if prompt_tokens is not None:  # what the backend fed for the side turn (hf / vllm: the appended question, the
        note["prompt_tokens"] = int(prompt_tokens)  # chain's cache reused; openai: the whole chat, as its usage says)
    if why is not None:
        note["masked"] = why
    else:
        step.meta["verbal_confidence"] = value
    step.meta["confidence_reply"] = note
    step.n_tokens += int(tokens)
    step.seconds += float(seconds)


def side_turn_suffix(tokenizer, prompt: str, system_prompt: str | None = None) -> str | None:
    """The chat template's text between the assistant's step text and the model's reply to ``prompt``: the end of
    the assistant turn, the user turn with ``prompt``, the generation prompt (``None`` when the template does not
    render an assistant turn's text as it is)."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    msgs += [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _SENTINEL},
             {"role": "user", "content": prompt}]
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001  (a template that refuses this shape, e.g. strict role alternation rules)
        return None
    if not isinstance(text, str) or text.count(_SENTINEL) != 1:
        return None
    return text.split(_SENTINEL, 1)[1]


def confidence_unavailable(reasoner: Any) -> str | None:
    """Why ``reasoner`` cannot be asked for its confidence (``None``: it can)."""
    fn = getattr(reasoner, "confidence_unavailable", None)
    if not callable(fn):
        return (f"backend {type(reasoner).__name__} cannot hold a side turn to ask for a confidence (no "
                "confidence_unavailable / side question)")
    return fn()


__all__ = ["ConfidenceQuestion", "confidence_unavailable", "record_confidence", "side_turn_suffix"]
