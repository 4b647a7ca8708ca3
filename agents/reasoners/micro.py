"""The micro-world reasoner: the micro-world LM driven step by step with signals from the same pass.

Example:
    >>> from envs.core.microworld.artifact import load_artifact          # doctest: +SKIP
    >>> r = MicroReasoner(load_artifact())                          # doctest: +SKIP
    >>> s = r.start("Where was Mira 's father born ?")              # doctest: +SKIP
    >>> (step, s), = r.next_step([s]); step.text                    # doctest: +SKIP
    'Step 1 : Mira 's father is Tovan .'
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from agents.reasoners.base import Alternatives, Capabilities, Step, content_pieces, run_chains
from agents.reasoners.stepgen import GenState, generate_steps


@dataclass(frozen=True)
class MicroState:
    """Question, front evidence, accepted step lines and the generation state after them."""

    question: str
    front: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    gen: GenState | None = field(default=None, compare=False, repr=False)
    done: bool = False
    forced: tuple[str, ...] = ()  # words written for the model at the start of its next line ("Answer :")


#: the words :meth:`MicroReasoner.with_answer_prompt` writes
ANSWER_PROMPT = ("Answer", ":")


class MicroReasoner:
    """Step-wise greedy reasoner over a loaded :class:`~envs.core.microworld.artifact.MicroWorld`."""

    def __init__(self, world, max_step_tokens: int = 24, capture_hidden: bool = True, max_batch: int = 64,
                 capture_attentions: bool = False, eager: bool = False):
        """``capture_attentions``: steps carry ``meta["attn_received"]`` and ``meta["token_texts"]`` (DRAGIN's
        RIND); it implies ``eager``: the world's model is switched to eager attention (sdpa cannot return attention
        weights; DRAGIN's QFS pass needs it too). Eager greedy steps can differ from sdpa's in rare near-ties, so
        envs that use it have their own cache namespace (signals and query modes are part of it)."""
        self.world = world
        self.model = world.model
        self.capture_attentions = bool(capture_attentions)
        if (eager or self.capture_attentions) and getattr(self.model.config, "_attn_implementation", None) != "eager":
            self.model.set_attn_implementation("eager")
        self.capabilities = Capabilities(hidden_states=True, logprobs=True, attentions=self.capture_attentions,
                                         sampling=True)
        self.tok = world.tokenizer
        self.max_step_tokens = max_step_tokens
        self.capture_hidden = capture_hidden
        self.max_batch = max_batch
        self.stop_ids = {self.tok.nl_id, self.tok.eos_id}
        self.colon_id = self.tok.index[":"]
        self.n_layers = self.model.config.num_hidden_layers
        self.hidden_size = self.model.config.hidden_size

    # ------------------------------------------------------------------ the context window
    @property
    def context_window(self) -> int:
        """Positions the micro-world LM was built with (evidence is cut to fit: :func:`~agents.reasoners.base.
        fit_evidence`)."""
        return int(self.model.config.max_position_embeddings)

    def count_tokens(self, text: str) -> int:
        return len(self.tok.split(text))

    def cut_tokens(self, text: str, n: int) -> str:
        return " ".join(self.tok.split(text)[: max(0, n)])

    def state_tokens(self, state: MicroState) -> int:
        return len(state.gen.ids)

    # ------------------------------------------------------------------ prompts
    @staticmethod
    def _lines(question: str, front: tuple[str, ...], steps: tuple[str, ...]) -> str:
        lines = [f"Evidence : {e}" for e in front] + [f"Question : {question}"] + list(steps)
        return " \n ".join(lines) + " \n"

    def start(self, question: str, context: list[str] | None = None) -> MicroState:
        front = tuple(context or ())
        ids = self.tok.encode(self._lines(question, front, ()))
        return MicroState(question, front, (), GenState(ids))

    # ------------------------------------------------------------------ generation
    def _run(self, gens: list[GenState], capture: bool | None = None, sample: bool = False,
             generator: torch.Generator | None = None, no_stop_first: list[bool] | None = None):
        outs = []
        for i in range(0, len(gens), self.max_batch):
            chunk = gens[i: i + self.max_batch]
            t0 = time.perf_counter()
            res = generate_steps(self.model, chunk, stop_ids=self.stop_ids, header_end_id=self.colon_id,
                                 pad_id=self.tok.pad_id, max_new_tokens=self.max_step_tokens,
                                 capture_hidden=self.capture_hidden if capture is None else capture,
                                 capture_attentions=self.capture_attentions and not sample,
                                 sample=sample, generator=generator,
                                 no_stop_first=no_stop_first[i: i + self.max_batch] if no_stop_first else None)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            outs += [(r, dt) for r in res]
        return outs

    def _to_step(self, state: MicroState, out, dt: float) -> tuple[Step, MicroState]:
        words = [self.tok.vocab[i] for i in out.ids]
        end = words[-1] if words else ""
        body = words[:-1] if end in ("\n", "<eos>") else words
        if state.forced:  # the line started with words written for the model: its content is what it wrote
            content = " ".join(body)
            body = list(state.forced) + body
            text = " ".join(body)
        else:
            text = " ".join(body)
            content = " ".join(body[out.header_len:]) if out.header_len else text
        is_answer = bool(body) and body[0] == "Answer"
        step = Step(index=len(state.steps) + 1, text=text, content=content, is_answer=is_answer,
                    token_ids=list(out.ids), logprobs=out.logprobs, entropies=out.entropies,
                    maxprobs=out.maxprobs, hidden_mean=out.hidden_mean, hidden_last=out.hidden_last,
                    hidden_first=out.hidden_first, token_transitions=out.token_transitions,
                    finished=out.finished, seconds=dt, n_tokens=len(out.ids),
                    # word-level tokens: each content token is one word of the line
                    pieces=content_pieces(out.ids, len(out.ids) - len(out.logprobs), self.stop_ids,
                                          lambda ids: [" " + self.tok.vocab[i] for i in ids]))
        if out.attn_received is not None:  # DRAGIN's RIND: attention received, and each content token's word
            step.meta["attn_received"] = out.attn_received
            ids = out.ids[out.header_len: out.header_len + len(out.attn_received)]
            step.meta["token_texts"] = [" " + self.tok.vocab[i] for i in ids]  # word-level: every token a word
        gen = out.state
        if not out.finished:  # a cut step: close the line so the next step starts cleanly
            gen = gen.extend([self.tok.nl_id])
        new = MicroState(state.question, state.front, state.steps + (text,), gen,
                         done=is_answer or end == "<eos>")
        return step, new

    def next_step(self, states: list[MicroState]) -> list[tuple[Step, MicroState]]:
        """Generate the next line of every state (batched, greedy)."""
        # a closing line (words written for the model) must say something: no stop token first
        outs = self._run([s.gen for s in states], no_stop_first=[bool(s.forced) for s in states])
        return [self._to_step(s, o, dt) for s, (o, dt) in zip(states, outs)]

    def with_evidence(self, state: MicroState, evidence: list[str], mode: str = "step") -> MicroState:
        """The state whose next step is the regeneration of ``state``'s next step with ``evidence``.

        ``step`` mode appends ``Evidence : …`` lines after the accepted steps (the prefix's KV cache is
        reused); ``front`` mode adds them before the question (the context changes from the start, so the
        whole prefix is re-encoded). Batchers use this to serve regenerations and plain next steps in one
        generation call.
        """
        if mode == "step":
            extra = self.tok.encode(" ".join(f"Evidence : {e} \n" for e in evidence))
            return MicroState(state.question, state.front, state.steps, state.gen.extend(extra), state.done)
        if mode == "front":
            front = state.front + tuple(evidence)
            ids = self.tok.encode(self._lines(state.question, front, state.steps))
            return MicroState(state.question, front, state.steps, GenState(ids))
        raise ValueError(f"unknown injection mode '{mode}' (valid: front, step)")

    def with_answer_prompt(self, state: MicroState) -> MicroState:
        """The state whose next line is the answer: ``Answer :`` written for the model after the accepted steps
        (a chain that ended on end-of-text continues on a new line instead). The env's answer closing."""
        ids = list(state.gen.ids)
        gen = GenState(ids[:-1] + [self.tok.nl_id]) if ids and ids[-1] == self.tok.eos_id else state.gen
        return MicroState(state.question, state.front, state.steps, gen.extend(self.tok.encode(list(ANSWER_PROMPT))),
                          False, ANSWER_PROMPT)

    def qfs_pass(self, question: str, prior_steps: list[str], step_text: str) -> dict:
        """One eager forward pass over the question, the accepted steps and ``step_text`` (no evidence): the
        inputs of :func:`agents.signals.attention.qfs_terms` (DRAGIN's QFS query). Line headers (``Question :``,
        ``Step i :``) and newlines are not scorable."""
        from agents.signals.attention import qfs_pass

        lines = []
        for k, line in enumerate([f"Question : {question}"] + list(prior_steps) + [step_text]):
            words = self.tok.split(line)
            head = words.index(":") + 1 if ":" in words else 0
            last = k == len(prior_steps) + 1
            content = words[head:] + ([] if last else ["\n"])
            lines.append((self.tok.encode(words[:head]), [" " + w for w in words[:head]], self.tok.encode(content),
                          [" " + w if w != "\n" else " " for w in content]))
        return qfs_pass(self.model, lines)

    def evidence_framing(self):
        """``(encode, line_start, sentence_sep, line_end, step_end)``: how :meth:`with_evidence` (step mode)
        writes evidence lines and how a step line ends (for :mod:`agents.compression`)."""
        return self.tok.encode, "Evidence : ", " ", " \n ", " \n"

    def regenerate(self, states: list[MicroState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, MicroState]]:
        """Regenerate the next line of each state with its evidence (see :meth:`with_evidence`)."""
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def snapshot(self, state: MicroState) -> dict:
        """Picklable state description (see :func:`snapshot`)."""
        return snapshot(state)

    def restore(self, snap: dict) -> MicroState:
        """Inverse of :meth:`snapshot` (the KV cache is recomputed by the next prefill)."""
        return restore(snap)

    def sample_alternatives(self, state: MicroState, k: int, seed: int = 0, temperature: float = 1.0
                            ) -> Alternatives:
        """``k`` sampled next lines (seeded), with the tokens they took (:class:`Alternatives`)."""
        g = torch.Generator().manual_seed(seed)
        outs = generate_steps(self.model, [state.gen] * k, stop_ids=self.stop_ids, header_end_id=self.colon_id,
                              pad_id=self.tok.pad_id, max_new_tokens=self.max_step_tokens, capture_hidden=False,
                              sample=True, temperature=temperature, generator=g)
        return Alternatives([" ".join(self.tok.vocab[i] for i in o.ids if i not in self.stop_ids) for o in outs],
                            tokens=sum(len(o.ids) for o in outs))

    def run_chains(self, questions: list[str], max_steps: int = 8, front: list[list[str]] | None = None
                   ) -> list[list[Step]]:
        """Closed-book (or front-evidence) greedy chains for many questions, batched."""
        return run_chains(self, questions, max_steps, front)

    def confidence_unavailable(self) -> str:
        """The micro-world LM cannot be asked for its confidence (RSUS's U_verb): it writes steps, it has no chat
        turn to answer a question about them in."""
        return ("the micro-world LM has no chat turn to ask its confidence in (U_verb from the learned proxy: "
                "rsus_options.verb_proxy)")

def snapshot(state: MicroState) -> dict:
    """A picklable description of a state (no KV cache) for the trajectory cache."""
    snap = {"question": state.question, "front": state.front, "steps": state.steps,
            "ids": list(state.gen.ids) if state.gen is not None else None, "done": state.done}
    if state.forced:  # only when set: snapshots of ordinary states are as before (cached records compare equal)
        snap["forced"] = list(state.forced)
    return snap


def restore(snap: dict) -> MicroState:
    """Rebuild a state from :func:`snapshot` (its KV cache is recomputed by the next prefill)."""
    return MicroState(snap["question"], tuple(snap["front"]), tuple(snap["steps"]),
                      GenState(list(snap["ids"])) if snap["ids"] is not None else None, snap["done"],
                      tuple(snap.get("forced", ())))
