"""The reasoner interface (docs/design.md §3): what every LM backend provides to the agent and the env."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Capabilities:
    """What a backend can expose; signals needing a missing capability are masked."""

    hidden_states: bool = False
    logprobs: bool = False
    attentions: bool = False
    sampling: bool = True

    def missing(self, requires: tuple[str, ...]) -> list[str]:
        """The required capabilities this backend lacks."""
        return [r for r in requires if not getattr(self, r)]


class Alternatives(list):
    """What :meth:`Reasoner.sample_alternatives` returns: the ``k`` sampled lines (a ``list[str]``, so every caller
    that reads lines is unchanged) and the ``tokens`` generating them took (every sampled token, as a step's
    ``n_tokens`` counts its own; ``None`` when the backend cannot say, e.g. a server without ``usage``) — so the env
    charges them to the step whose consistency they measure (RSUS's U_cons; :meth:`envs.components.Components.precompute`).

    Example:
        >>> alts = Alternatives(["Step 2 : a", "Step 2 : b"], tokens=9)
        >>> list(alts), alts.tokens, alts == ["Step 2 : a", "Step 2 : b"]
        (['Step 2 : a', 'Step 2 : b'], 9, True)
    """

    def __init__(self, lines=(), tokens: int | None = None):
        super().__init__(lines)
        self.tokens = None if tokens is None else int(tokens)

    def __reduce__(self):  # pickled with its count (a reasoner service's reply crosses a process boundary)
        return (Alternatives, (list(self), self.tokens))


@dataclass
class Step:
    """One generated reasoning step (one line) and the per-step data the signals need."""

    index: int                                  # 1-based step number within the episode
    text: str                                   # the whole line, e.g. "Step 2 : A 's mother is B ."
    content: str                                # the line without its header
    is_answer: bool                             # the line is the final "Answer : …"
    token_ids: list[int] = field(default_factory=list)
    logprobs: np.ndarray | None = None          # content tokens + end token
    entropies: np.ndarray | None = None
    maxprobs: np.ndarray | None = None
    hidden_mean: np.ndarray | None = None       # [n_layers + 1, d]
    hidden_last: np.ndarray | None = None       # [n_layers + 1, d]
    hidden_first: np.ndarray | None = None      # [n_layers + 1, d] at the last context token (see stepgen)
    token_transitions: np.ndarray | None = None  # [n, 2, n_layers]: per-token layer transitions (see stepgen)
    finished: bool = True                       # ended by an end-of-step token
    seconds: float = 0.0                        # measured generation time attributed to this step
    n_tokens: int = 0                           # generated tokens (incl. header)
    meta: dict[str, Any] = field(default_factory=dict)
    #: the text each content token adds to the line, in order (the end token has none): ``pieces[i]`` is the token
    #: whose log-probability is ``logprobs[i]`` — what FLARE's masked query drops tokens from. Every builtin
    #: backend fills it (``None``: a backend that cannot say; :func:`token_probs` then refuses)
    pieces: list[str] | None = None


def token_probs(step: Step, backend: str = "the reasoner") -> tuple[tuple[str, float], ...]:
    """``(piece, probability)`` of each content token of ``step`` (FLARE's masked query reads them).

    Raises:
        ValueError: the step carries no token pieces or no log-probabilities (naming ``backend``): a method that
            needs them must be masked for this backend, never run on something else.

    Example:
        >>> s = Step(1, "Step 1 : A is B .", "A is B .", False, logprobs=np.log([0.9, 0.8, 0.2, 0.7, 0.6]),
        ...          pieces=[" A", " is", " B", " ."])
        >>> [(p, round(q, 2)) for p, q in token_probs(s)]
        [(' A', 0.9), (' is', 0.8), (' B', 0.2), (' .', 0.7)]
    """
    if step.logprobs is None or step.pieces is None:
        missing = "log-probabilities" if step.logprobs is None else "token pieces"
        raise ValueError(f"step {step.index} ({step.text!r}) from {backend} carries no per-token {missing}: a query "
                         "that drops low-probability tokens (FLARE's masked query) cannot be built from it")
    n = len(step.pieces)
    if len(step.logprobs) < n:
        raise ValueError(f"step {step.index} ({step.text!r}) from {backend}: {n} token pieces but only "
                         f"{len(step.logprobs)} log-probabilities")
    return tuple((str(p), float(np.exp(lp))) for p, lp in zip(step.pieces, step.logprobs[:n]))


def content_pieces(ids: list[int], start: int, stop_ids: set[int] | frozenset[int], piece_of) -> list[str]:
    """The pieces (:attr:`Step.pieces`) of a generated line's content tokens ``ids[start:]`` without a final stop
    token; ``piece_of(content_ids)`` turns the ids into their texts."""
    content = list(ids[start:])
    if content and content[-1] in stop_ids:
        content = content[:-1]
    return list(piece_of(content)) if content else []


@runtime_checkable
class Reasoner(Protocol):
    """A step-wise reasoner. States are opaque, immutable snapshots (branch freely)."""

    capabilities: Capabilities

    def start(self, question: str, context: list[str] | None = None) -> Any:
        """Initial state for ``question`` with optional front ``context`` passages."""
        raise NotImplementedError

    def next_step(self, states: list[Any]) -> list[tuple[Step, Any]]:
        """Generate the next step of every state (batched); returns ``(step, state_after_step)``."""
        raise NotImplementedError

    def regenerate(self, states: list[Any], evidence: list[list[str]], mode: str) -> list[tuple[Step, Any]]:
        """Regenerate the next step of each state with evidence injected (``front`` or ``step`` mode)."""
        raise NotImplementedError

    def sample_alternatives(self, state: Any, k: int, seed: int) -> list[str]:
        """``k`` sampled alternative next steps (for consistency signals); an :class:`Alternatives` when the
        backend can count the tokens they took (the env charges them to the step)."""
        raise NotImplementedError


@runtime_checkable
class BranchingReasoner(Reasoner, Protocol):
    """A reasoner the env can drive: it can describe a state as plain data and rebuild it (the trajectory cache
    stores snapshots and replays branches from them), and turn a state into the state whose next step is the
    regeneration with evidence (so regenerations and plain next steps share one batched ``next_step`` call).
    The micro-world, Hugging Face and OpenAI-compatible backends implement it.

    Optional: ``with_answer_prompt(state) -> state``, the state whose next line is the final answer (``Answer:``
    written for the model to continue) — the env's answer closing (``EnvConfig.answer_closing``) for a chain that
    ends without a usable answer line; a reasoner without it has closing masked (``Components.can_close``)."""

    def snapshot(self, state: Any) -> dict:
        """A plain-data description of ``state`` (token ids, evidence, step count), enough to rebuild it."""
        raise NotImplementedError

    def restore(self, snap: dict) -> Any:
        """The state :meth:`snapshot` described (caches such as the KV cache are recomputed on use)."""
        raise NotImplementedError

    def with_evidence(self, state: Any, evidence: list[str], mode: str = "step") -> Any:
        """The state whose next step regenerates ``state``'s next step with ``evidence`` injected (``step``: right
        before the step; ``front``: before the question)."""
        raise NotImplementedError


#: tokens kept free after the evidence for the step and the answer closing's "Answer:" (beside max_step_tokens)
EVIDENCE_MARGIN = 8


def fit_evidence(reasoner: Any, state: Any, earlier: tuple[str, ...] | list[str], texts: list[str]
                 ) -> tuple[list[str], dict[str, int]]:
    """``texts`` (new evidence for ``state``'s next step, after its ``earlier`` evidence) cut so that the prompt,
    all the evidence and the step fit the backend's context window: ``(texts, note)``, ``note``: ``{"truncated":
    passages cut, "tokens_dropped": evidence tokens dropped, "window": the context window}`` (empty when nothing was
    cut). Every backend says how long its context is (``context_window``: the micro-world LM's positions, the hf
    model's max length, vLLM's ``max_model_len``, the HTTP backend's configured ``context_window``) and counts and
    cuts text in its own tokens (``count_tokens``, ``cut_tokens``, ``state_tokens``); the room is shared fairly
    (a short passage stays whole, the long ones share the rest). A backend that does not say (a plug-in) keeps
    the evidence whole."""
    window = getattr(reasoner, "context_window", None)
    if not window or not all(hasattr(reasoner, m) for m in ("count_tokens", "cut_tokens", "state_tokens")):
        return list(texts), {}
    frame = reasoner.count_tokens("Evidence : \n")  # each evidence line's framing
    reserve = int(getattr(reasoner, "max_step_tokens", 0) or 0) + EVIDENCE_MARGIN
    used = reasoner.state_tokens(state) + sum(reasoner.count_tokens(e) + frame for e in earlier) + reserve
    room = max(0, int(window) - used - frame * len(texts))
    need = [reasoner.count_tokens(t) for t in texts]
    if sum(need) <= room:
        return list(texts), {}
    share, left, order = {}, room, sorted(range(len(texts)), key=lambda i: need[i])
    for k, i in enumerate(order):  # water-filling: the shortest first, each gets at most an equal share of the rest
        share[i] = min(need[i], left // (len(order) - k))
        left -= share[i]
    out = [t if share[i] >= need[i] else reasoner.cut_tokens(t, share[i]) for i, t in enumerate(texts)]
    note = {"truncated": sum(share[i] < need[i] for i in range(len(texts))),
            "tokens_dropped": sum(need[i] - share[i] for i in range(len(texts))), "window": int(window)}
    return out, note


#: the share of the context window a question may take (the rest: evidence, the steps and the answer)
QUESTION_SHARE = 0.5


def fit_question(reasoner: Any, question: str) -> tuple[str, dict[str, Any]]:
    """``question`` cut to :data:`QUESTION_SHARE` of the backend's context window, counted and cut in its own tokens:
    ``(text, note)``, ``note``: ``{"field": "question", "from_tokens", "to_tokens", "window"}`` (empty when it fits,
    or the backend does not say its window)."""
    window = getattr(reasoner, "context_window", None)
    if not window or not all(hasattr(reasoner, m) for m in ("count_tokens", "cut_tokens")):
        return question, {}
    room, need = int(int(window) * QUESTION_SHARE), reasoner.count_tokens(question)
    if need <= room:
        return question, {}
    return reasoner.cut_tokens(question, room), {"field": "question", "from_tokens": int(need), "to_tokens": room,
                                                 "window": int(window)}


def run_chains(reasoner: Reasoner, questions: list[str], max_steps: int,
               front: list[list[str]] | None = None) -> list[list[Step]]:
    """Greedy chains for many questions with any reasoner: one batched ``next_step`` call per round.

    Args:
        reasoner: any backend with ``start`` and ``next_step``.
        questions: question texts.
        max_steps: stop a chain after this many lines.
        front: optional front-context passages per question.
    """
    states = [reasoner.start(q, front[i] if front else None) for i, q in enumerate(questions)]
    chains: list[list[Step]] = [[] for _ in questions]
    active = list(range(len(questions)))
    for _ in range(max_steps):
        if not active:
            break
        res = reasoner.next_step([states[i] for i in active])
        nxt = []
        for i, (step, st) in zip(active, res):
            chains[i].append(step)
            states[i] = st
            if not st.done:
                nxt.append(i)
        active = nxt
    return chains
