"""ColBERTv2 late interaction with PLAID search, through colbert-ai (CPU, in-process).

- Any ColBERT checkpoint *directory* works (one with colbert's ``artifact.metadata``: what colbert's own
  training or :func:`agents.retrievers.colbert_train.train_colbert` saves). A plain Hugging Face model
  folder is refused: colbert would initialise the 384->128 projection afresh on every load, so index and
  queries would live in different spaces (random results).
- Indexing runs in this process (``RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True)``); passages are
  indexed as ``"title | text"`` with 2-bit residual compression by default.
- Search settings ``ncells`` (IVF cells probed per query token), ``centroid_score_threshold`` (centroid
  pruning) and ``ndocs`` (candidates scored exactly) default to colbert's own choice for the requested ``k``
  (k <= 10: 1 / 0.5 / 256; k <= 100: 2 / 0.45 / 1024; else 4 / 0.4 / max(4k, 4096)) and can be fixed in the
  config or per load.
- First use compiles colbert's four C++ extensions with ninja (minutes, once per machine) under
  ``TORCH_EXTENSIONS_DIR`` (default ``<repo>/.torch_extensions``, see :mod:`.colbert_compat`).
- Torch threads are the caller's: set ``torch.set_num_threads`` (the CLI and benchmark use 1).
- The compressed index is read into memory, not memory-mapped: colbert-ai 0.2.22's
  ``load_index_with_mmap=True`` aborts the whole process on the first search (C++ assertion
  ``code < maxsim_args->ncentroids`` in ``filter_pids.cpp``). Its mmap loader skips a fixed 320-byte header
  that only torch's legacy (pre-1.6) ``torch.save`` format has; current torch writes zip archives, so it
  reads garbage codes. Not exposed. At 2 bits and 128 dimensions a ~150-token passage takes ~5 KB, so a
  5k-passage index is a few MB in memory.

Example:
    >>> from agents.retrievers import build_index, load_index, load_corpus
    >>> build_index("colbert", load_corpus("microworld"), "runs/index/micro-colbert",  # doctest: +SKIP
    ...             {"checkpoint": "runs/colbert/minilm-hotpot"}, corpus_spec="microworld")
    >>> load_index("runs/index/micro-colbert", ncells=2).search(["Where was Belsheth born ?"], k=3)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import pickle
import shutil
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.retrievers.base import (
    CorpusRetrieverBase,
    IndexCorruptError,
    IndexMismatchError,
    RetrievedPassage,
)
from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.data.types import Corpus
from envs.core.io import write_json

log = logging.getLogger(__name__)

_LOAD_ERRORS = (RuntimeError, OSError, ValueError, KeyError, EOFError, AssertionError, IndexError,
                pickle.UnpicklingError)


@dataclass
class ColBERTIndexConfig(ConfigBase):
    """ColBERT/PLAID index settings (``ncells`` / ``centroid_score_threshold`` / ``ndocs`` are search-time)."""

    checkpoint: str = helpf("", "ColBERT checkpoint directory (required; see `kairos retriever train-colbert`)")
    nbits: int = helpf(2, "bits per residual dimension (1, 2 or 4)")
    doc_maxlen: int = helpf(180, "passage tokens kept")
    query_maxlen: int = helpf(32, "query tokens (padded with [MASK])")
    kmeans_niters: int = helpf(4, "k-means iterations for the centroids")
    index_bsize: int = helpf(32, "passages encoded per batch while indexing")
    include_title: bool = helpf(True, "index 'title | text' instead of the text alone")
    ncells: int | None = helpf(None, "IVF cells probed per query token (None: colbert's choice for k)")
    centroid_score_threshold: float | None = helpf(
        None, "centroid pruning threshold (None: colbert's choice for k)")
    ndocs: int | None = helpf(None, "candidate passages scored exactly (None: colbert's choice for k)")

    def validate(self) -> None:
        if self.nbits not in (1, 2, 4):
            raise ConfigError(f"ColBERTIndexConfig: nbits must be 1, 2 or 4 (got {self.nbits})")


def checkpoint_fingerprint(path: str | Path) -> str:
    """SHA-256 over a checkpoint's weight and metadata files (names and bytes)."""
    path = Path(path)
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and (f.suffix in (".safetensors", ".bin", ".json", ".metadata") or f.name == "vocab.txt"):
            h.update(f.name.encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def check_checkpoint(path: str | Path) -> Path:
    """``path`` as an absolute ColBERT checkpoint directory, or a clear error."""
    from agents.retrievers.colbert_compat import REPO_ROOT

    if not str(path):
        raise ValueError("a ColBERT checkpoint is required (--checkpoint DIR); train one with "
                         "`kairos retriever train-colbert --out runs/colbert/minilm-hotpot`")
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists() and (REPO_ROOT / p).exists():
        p = REPO_ROOT / p
    if not p.exists():  # a hub id (colbert-ir/colbertv2.0): its snapshot in the local HF cache, as models resolve
        from agents.reasoners.models import HUB_ID, ModelNotFoundError, resolve_model

        if HUB_ID.match(str(path)) and "/" in str(path) and not str(path).startswith((".", "/", "~")):
            try:
                p = resolve_model(str(path), required="artifact.metadata")
            except ModelNotFoundError as e:
                raise ModelNotFoundError(f"ColBERT checkpoint: {e}; or train one with `kairos retriever "
                                         "train-colbert --out DIR`") from None
    p = p.resolve()
    if not p.is_dir():
        raise FileNotFoundError(f"ColBERT checkpoint not found: {p}; train one with "
                                f"`kairos retriever train-colbert --out {path}`")
    if not (p / "artifact.metadata").is_file():
        raise ValueError(
            f"{p} is not a ColBERT checkpoint (no artifact.metadata). A plain transformers model folder "
            "gives random results (colbert initialises its projection afresh at every load); save one first "
            "with `kairos retriever train-colbert --out DIR` (--steps 0 saves the untrained model)")
    return p


@contextlib.contextmanager
def quiet_colbert() -> Iterator[None]:
    """Route colbert's prints and progress bars to the debug log instead of the terminal."""
    buf_out, buf_err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err), warnings.catch_warnings():
            # colbert always asks for CUDA autocast / GradScaler; on CPU torch warns (deprecated, disabled)
            warnings.filterwarnings("ignore", message=r".*(autocast|GradScaler).*")
            yield
    finally:
        for name, buf in (("stdout", buf_out), ("stderr", buf_err)):
            text = buf.getvalue().strip()
            if text:
                log.debug("colbert %s:\n%s", name, text[-5000:])


@contextlib.contextmanager
def _quiet_fd1() -> Iterator[None]:
    """Silence file descriptor 1 (C-level prints: faiss k-means progress) for the duration."""
    import os
    import sys

    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        saved = os.dup(fd)
    except (OSError, ValueError):  # no real stdout (embedded interpreter): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        if sys.__stdout__ is not None:
            sys.__stdout__.flush()
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


def passage_text(title: str, text: str, include_title: bool = True) -> str:
    """What ColBERT indexes for a passage (Unicode NFC, as queries are encoded: see :meth:`ColBERTRetriever.encode`)."""
    return unicodedata.normalize("NFC", f"{title} | {text}" if include_title and title else text)


def _effective(k: int, cfg: ColBERTIndexConfig) -> tuple[int, float, int]:
    """colbert's Searcher defaults for ``k``, overridden by what the config fixes."""
    if k <= 10:
        d = (1, 0.5, 256)
    elif k <= 100:
        d = (2, 0.45, 1024)
    else:
        d = (4, 0.4, max(k * 4, 4096))
    return (cfg.ncells if cfg.ncells is not None else d[0],
            cfg.centroid_score_threshold if cfg.centroid_score_threshold is not None else d[1],
            cfg.ndocs if cfg.ndocs is not None else d[2])


class ColBERTRetriever(CorpusRetrieverBase):
    """ColBERTv2/PLAID retriever (implements :class:`~agents.retrievers.base.Retriever`).

    Use :func:`agents.retrievers.index.build_index` / ``load_index`` (``kind="colbert"``), which call
    :meth:`build` / :meth:`load` and add the manifest and the checks.
    """

    kind = "colbert"
    config_class = ColBERTIndexConfig
    subdir = "plaid"

    def __init__(self, corpus: Corpus, searcher: Any, config: ColBERTIndexConfig, index_id: str = "") -> None:
        super().__init__(corpus, config, index_id)
        self.searcher = searcher

    # ------------------------------------------------------------------ build / load
    @classmethod
    def build(cls, corpus: Corpus, config: ColBERTIndexConfig, out_dir: str | Path,
              index_id: str = "") -> ColBERTRetriever:
        """Encode and index ``corpus`` into ``out_dir`` (in-process), then open it."""
        from agents.retrievers.colbert_compat import prepare_colbert

        prepare_colbert()
        from colbert import Indexer
        from colbert.infra import ColBERTConfig, Run, RunConfig

        ckpt = check_checkpoint(config.checkpoint)
        config = config.replace(checkpoint=str(ckpt))
        out_dir = Path(out_dir).resolve()
        collection = [passage_text(p.title, p.text, config.include_title) for p in corpus]
        ccfg = ColBERTConfig(nbits=config.nbits, doc_maxlen=config.doc_maxlen, query_maxlen=config.query_maxlen,
                             kmeans_niters=config.kmeans_niters, index_bsize=config.index_bsize,
                             index_path=str(out_dir))
        run = RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True, root=str(out_dir.parent / ".colbert_runs"),
                        experiment="index")
        log.info("ColBERT: indexing %d passages with %s (nbits=%d); colbert encodes every passage twice below "
                 "~30k passages (k-means sample = all, then the index): minutes on one CPU thread",
                 len(collection), ckpt.name, config.nbits)
        import faiss
        import torch

        faiss.omp_set_num_threads(torch.get_num_threads())  # k-means follows the caller's thread budget
        with quiet_colbert(), _quiet_fd1(), Run().context(run):  # faiss k-means prints from C
            indexer = Indexer(checkpoint=str(ckpt), config=ccfg, verbose=0)
            indexer.index(name=out_dir.name, collection=collection, overwrite="force_silent_overwrite")
        shutil.rmtree(out_dir.parent / ".colbert_runs", ignore_errors=True)
        write_json(out_dir / "kairos_checkpoint.json",
                   {"checkpoint": str(ckpt), "fingerprint": checkpoint_fingerprint(ckpt)})
        return cls.load(out_dir, corpus, config, index_id=index_id, _collection=collection)

    @classmethod
    def load(cls, out_dir: str | Path, corpus: Corpus, config: ColBERTIndexConfig, index_id: str = "",
             checkpoint: str | None = None, ncells: int | None = None,
             centroid_score_threshold: float | None = None, ndocs: int | None = None,
             _collection: list[str] | None = None) -> ColBERTRetriever:
        """Open an index (search settings given here override the stored ones).

        Args:
            checkpoint: Use this checkpoint for queries instead of the one the index was built with; it must
                have the same fingerprint (the same weights), else :class:`IndexMismatchError`.

        Raises:
            IndexMismatchError: The checkpoint changed since the build.
            IndexCorruptError: colbert cannot read the index.
        """
        import json

        from agents.retrievers.colbert_compat import prepare_colbert

        prepare_colbert()
        from colbert import Searcher
        from colbert.infra import ColBERTConfig, Run, RunConfig

        out_dir = Path(out_dir).resolve()
        overrides = {k: v for k, v in dict(ncells=ncells, centroid_score_threshold=centroid_score_threshold,
                                           ndocs=ndocs).items() if v is not None}
        config = config.replace(**overrides) if overrides else config
        ckpt = check_checkpoint(checkpoint or config.checkpoint)
        meta_path = out_dir / "kairos_checkpoint.json"
        if meta_path.is_file():
            built_with = json.loads(meta_path.read_text())["fingerprint"]
            if checkpoint_fingerprint(ckpt) != built_with:
                raise IndexMismatchError(
                    f"{out_dir}: checkpoint {ckpt} has other weights than the one the index was built with "
                    f"({json.loads(meta_path.read_text())['checkpoint']}); rebuild the index or use that checkpoint")
        collection = _collection or [passage_text(p.title, p.text, config.include_title) for p in corpus]
        ccfg = ColBERTConfig(query_maxlen=config.query_maxlen)  # load_index_with_mmap: see module docstring
        run = RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True)
        try:
            with quiet_colbert(), Run().context(run):
                searcher = Searcher(index=str(out_dir), checkpoint=str(ckpt), collection=collection, config=ccfg,
                                    verbose=0)
        except _LOAD_ERRORS as e:
            raise IndexCorruptError(f"{out_dir}: colbert cannot load the index ({type(e).__name__}: {e})") from e
        return cls(corpus, searcher, config.replace(checkpoint=str(ckpt)), index_id)

    def backend_size(self) -> int:
        """Number of passages in the PLAID index (checked against the corpus on load)."""
        return int(len(self.searcher.ranker.doclens))

    # ------------------------------------------------------------------ search
    def encode(self, queries: Sequence[str]) -> Any:
        """Query embeddings ``(n, query_maxlen, dim)`` (one batched forward pass). Queries are put in Unicode NFC
        first, as passages are (:func:`passage_text`): a decomposed query (NFD) meets a composed passage. NFC, not
        NFKC: the model's own tokenizer decides what else is the same text."""
        import torch

        with torch.inference_mode(), quiet_colbert():
            return self.searcher.encode([unicodedata.normalize("NFC", q) for q in queries])

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[RetrievedPassage]]:
        """Top-``k`` per query: queries are encoded in one batch, then PLAID searches each."""
        import torch

        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries; wrap a single query in a list")
        if not queries:
            return []
        k = max(1, min(k, len(self._passages)))
        ncells, thr, ndocs = _effective(k, self.config)
        self.searcher.configure(ncells=ncells, centroid_score_threshold=thr, ndocs=ndocs)
        Q = self.encode(queries)
        out = []
        with torch.inference_mode():
            for i in range(len(queries)):
                pids, _ranks, scores = self.searcher.dense_search(Q[i:i + 1], k=k)
                out.append([RetrievedPassage.of(self._passages[p], s) for p, s in zip(pids, scores)])
        return out

