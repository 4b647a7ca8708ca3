"""The generative QueryGen: a small causal LM that writes the retrieval query for a flagged step.

Two bases, chosen per world (``QueryGenTrainConfig.world``):

* **micro-world** — the world's own reasoner LM (6-layer Llama, 2.7M parameters, word-level vocabulary),
  copied and fine-tuned. It already knows every entity and the sentence shapes of the world, and a query in
  any other words would be out of its vocabulary; it is small enough that supervised warm start and RL
  finish in minutes on 2 CPU cores. Its prompt is the reasoner's own transcript followed by ``Evidence :``,
  so the query it writes is the evidence line it wants (``Mira 's mother is``).
* **HotpotQA** — SmolLM2-135M-Instruct (the real-data reasoner, English vocabulary); plain-text prompt
  ``Question: … / steps / Search query:``. Only the top ``trainable_layers`` blocks are trained (CPU budget).

A checkpoint is a folder: the transformers model and tokenizer (``save_pretrained``) plus ``querygen.json``
(format, world, prompt style, base model, tokenizer fingerprint, weights fingerprint, training history).
Loading checks all of it: a folder that is not a checkpoint, missing or corrupt weights, a tokenizer that is
not the one the model was trained with are clear errors.

It is a query mode like any other: ``QueryGenerator(["gen:runs/querygen/microworld/rl"])`` — or
``EnvConfig.query_modes: [step, …, "gen:<checkpoint>"]`` — resolves the ``gen:`` prefix to
:func:`query_mode_from_checkpoint`.

Example:
    >>> gen = GenerativeQueryGenerator.load("runs/querygen/microworld/rl")  # doctest: +SKIP
    >>> gen("Step 2 : Tovan 's father is Krai .", {"question": "Who is Mira 's mother 's father ?",
    ...     "context": {"prior_steps": ["Step 1 : Mira 's mother is Tovan ."]}})  # doctest: +SKIP
    "Tovan 's father is"
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.core.io import write_json

log = logging.getLogger(__name__)

FORMAT = "kairos-querygen"
VERSION = 1
META_FILE = "querygen.json"
#: prompt style -> (answer cue, max query tokens)
PROMPT_STYLES = {"micro": ("Evidence :", 8), "text": ("Search query:", 32)}


class QueryGenCheckpointError(ValueError):
    """A generative QueryGen checkpoint that cannot be used (what is wrong, and where)."""


# ------------------------------------------------------------------------------------------------ prompts

def build_prompt(style: str, question: str, prior_steps: Sequence[str], step: str) -> str:
    """The generator's input: question, accepted steps, the flagged step, then the query cue.

    Example:
        >>> build_prompt("micro", "Who is Mira 's mother ?", [], "Step 1 : Mira 's mother is Tovan .")
        "Question : Who is Mira 's mother ? \\n Step 1 : Mira 's mother is Tovan . \\n Evidence :"
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style '{style}' (valid: {', '.join(PROMPT_STYLES)})")
    cue = PROMPT_STYLES[style][0]
    if style == "micro":
        return " \n ".join([f"Question : {question}", *prior_steps, step, cue])
    lines = [f"Question: {question}", *[s.strip() for s in prior_steps], step.strip(),
             "Write a short search query for the fact this step is missing.", cue]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- tokenizers

def word_tokenizer_to_hf(tok):
    """The micro-world :class:`WordTokenizer` as a transformers fast tokenizer with the same ids.

    Special tokens are added tokens (so ``"is<eos>"`` splits into ``is``, ``<eos>``), newlines are tokens,
    words are split on spaces, decoding joins with spaces.
    """
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from envs.core.microworld.tokenizer import EOS, PAD, UNK

    core = Tokenizer(models.WordLevel(vocab=dict(tok.index), unk_token=UNK))
    core.normalizer = normalizers.Replace("\n", " \n ")
    core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    core.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (PAD, EOS, UNK)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK,
                                   bos_token=EOS, padding_side="left")


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's vocabulary (token -> id) and its special tokens."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    payload = json.dumps({"vocab": vocab, "eos": tokenizer.eos_token, "pad": tokenizer.pad_token})
    return hashlib.sha256(payload.encode()).hexdigest()


def _weights_fingerprint(folder: Path) -> str:
    h = hashlib.sha256()
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise QueryGenCheckpointError(f"{folder}: no *.safetensors weights in the checkpoint")
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- bases

def load_base(world: str, base_model: str | None = None, artifact: str | None = None, threads: int | None = 1):
    """``(model, tokenizer, prompt_style, base_id)`` to start training from (see the module docstring)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    if world == "microworld":
        import copy

        from envs.core.microworld.artifact import load_artifact

        if base_model is not None:
            gen = GenerativeQueryGenerator.load(base_model)
            return gen.model, gen.tokenizer, gen.style, gen.meta.get("base", base_model)
        w = load_artifact(artifact, threads=threads)
        model = copy.deepcopy(w.model).float().train()
        tok = word_tokenizer_to_hf(w.tokenizer)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        return model, tok, "micro", f"microworld:{Path(w.path).name}"
    if world == "hotpotqa":
        from agents.reasoners.hf import SMOLLM2, HFReasonerConfig, load_causal_lm

        if base_model is not None and (Path(base_model) / META_FILE).is_file():
            gen = GenerativeQueryGenerator.load(base_model)
            return gen.model, gen.tokenizer, gen.style, gen.meta.get("base", base_model)
        model, tok = load_causal_lm(HFReasonerConfig(model=base_model or SMOLLM2, threads=threads))
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return model.train(), tok, "text", base_model or SMOLLM2
    raise ValueError(f"unknown QueryGen world '{world}' (valid: microworld, hotpotqa)")


# ------------------------------------------------------------------------------------------- generator

class GenerativeQueryGenerator:
    """A causal LM that writes a query from (question, prior steps, flagged step); a ``QueryFn``.

    Args:
        model: A transformers causal LM.
        tokenizer: Its tokenizer (left padding).
        style: Prompt style (``micro`` | ``text``).
        meta: The checkpoint's metadata (empty for an unsaved model).
        max_new_tokens: Query length cap (default: the style's).
    """

    def __init__(self, model, tokenizer, style: str, meta: Mapping[str, Any] | None = None,
                 max_new_tokens: int | None = None) -> None:
        if style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style '{style}' (valid: {', '.join(PROMPT_STYLES)})")
        self.model, self.tokenizer, self.style = model, tokenizer, style
        self.meta = dict(meta or {})
        self.max_new_tokens = max_new_tokens or PROMPT_STYLES[style][1]
        self.n_generated = 0
        self.seconds = 0.0

    # ---------------------------------------------------------------- io
    @classmethod
    def load(cls, path: str | Path, threads: int | None = None) -> GenerativeQueryGenerator:
        """Load a checkpoint folder written by :meth:`save` (every mismatch is a clear error)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = Path(path)
        meta_path = folder / META_FILE
        if not folder.is_dir():
            raise QueryGenCheckpointError(f"QueryGen checkpoint '{folder}' does not exist (train one with "
                                          "`kairos train querygen --config …`)")
        if not meta_path.is_file():
            raise QueryGenCheckpointError(f"{folder}: not a Kairos QueryGen checkpoint (no {META_FILE})")
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as e:
            raise QueryGenCheckpointError(f"{meta_path}: unreadable metadata ({e})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise QueryGenCheckpointError(f"{meta_path}: format {meta.get('format')} v{meta.get('version')}, "
                                          f"expected {FORMAT} v{VERSION}")
        for key in ("style", "tokenizer_sha256", "weights_sha256"):
            if key not in meta:
                raise QueryGenCheckpointError(f"{meta_path}: missing key '{key}'")
        if _weights_fingerprint(folder) != meta["weights_sha256"]:
            raise QueryGenCheckpointError(f"{folder}: weights do not match the fingerprint in {META_FILE} "
                                          "(corrupt or replaced files)")
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
            raise QueryGenCheckpointError(f"{folder}: cannot load the tokenizer ({type(e).__name__}: {e})") from None
        if tokenizer_fingerprint(tok) != meta["tokenizer_sha256"]:
            raise QueryGenCheckpointError(
                f"{folder}: tokenizer mismatch — this tokenizer (sha256 {tokenizer_fingerprint(tok)[:12]}) is not "
                f"the one the model was trained with ({meta['tokenizer_sha256'][:12]})")
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
        n_emb = model.get_input_embeddings().weight.shape[0]
        if len(tok) > n_emb:
            raise QueryGenCheckpointError(f"{folder}: tokenizer has {len(tok)} tokens but the model embeds only "
                                          f"{n_emb}")
        tok.padding_side = "left"
        return cls(model, tok, meta["style"], meta)

    def save(self, path: str | Path, **extra: Any) -> Path:
        """Write model, tokenizer and ``querygen.json`` (metadata last: a folder without it is incomplete)."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / META_FILE).unlink(missing_ok=True)
        self.model.save_pretrained(str(folder), safe_serialization=True)
        self.tokenizer.save_pretrained(str(folder))
        meta = {**self.meta, **extra, "format": FORMAT, "version": VERSION, "style": self.style,
                "tokenizer_sha256": tokenizer_fingerprint(self.tokenizer),
                "weights_sha256": _weights_fingerprint(folder)}
        write_json(folder / META_FILE, meta)
        self.meta = meta
        return folder

    @property
    def fingerprint(self) -> str:
        """Identity of the weights (for cache namespaces)."""
        return str(self.meta.get("weights_sha256", "unsaved"))

    # ---------------------------------------------------------------- generation
    def prompt(self, question: str, prior_steps: Sequence[str], step: str) -> str:
        return build_prompt(self.style, question, prior_steps, step)

    def generate(self, prompts: Sequence[str], batch_size: int = 32) -> list[str]:
        """Greedy queries for ``prompts`` (batched; stops at end-of-text or a newline)."""
        import torch

        t0 = time.perf_counter()
        out: list[str] = []
        self.model.eval()
        for lo in range(0, len(prompts), batch_size):
            enc = self.tokenizer(list(prompts[lo: lo + batch_size]), return_tensors="pt", padding=True,
                                 add_special_tokens=False)
            with torch.no_grad():
                gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False,
                                          pad_token_id=self.tokenizer.pad_token_id,
                                          eos_token_id=self.tokenizer.eos_token_id)
            for row in gen[:, enc["input_ids"].shape[1]:]:
                out.append(clean_query(self.tokenizer.decode(row, skip_special_tokens=True)))
        self.n_generated += len(prompts)
        self.seconds += time.perf_counter() - t0
        return out

    def __call__(self, step_text: str, question: str | None = None,
                 context: Mapping[str, Any] | None = None) -> str:
        """The ``QueryFn`` signature of :mod:`agents.query`: ``context["prior_steps"]`` are the accepted
        steps before ``step_text`` (the env passes them)."""
        prior = list((context or {}).get("prior_steps", ()))
        return self.generate([self.prompt(question or "", prior, step_text)])[0]


def clean_query(text: str) -> str:
    """The first line of a generated query, whitespace collapsed."""
    return " ".join(text.strip().split("\n", 1)[0].split()) if text.strip() else ""


@functools.lru_cache(maxsize=8)
def _cached_generator(path: str) -> GenerativeQueryGenerator:
    return GenerativeQueryGenerator.load(path)


def query_mode_from_checkpoint(path: str) -> GenerativeQueryGenerator:
    """The ``gen:<checkpoint>`` query mode (loaded once per process)."""
    return _cached_generator(str(Path(path).resolve()))
