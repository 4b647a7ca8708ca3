"""Index management: build, save, load and *check* retriever indexes.

An index directory holds the backend's files in a subfolder (``bm25/`` or ``plaid/``) and a manifest,
``kairos_index.json``, written last (a crashed build leaves no manifest, so it reads as missing, never as a
half-built index). The manifest records the kind, the corpus spec, document count and fingerprint, the
settings, build time, every file's size, and a *known-answer probe*: a few passages that must come back in
the top ``probe_k`` when searched with their own title and first sentence.

:func:`load_index` checks, in order: the manifest exists (else :class:`IndexMissingError` naming the build
command), the corpus has the recorded document count and fingerprint (else :class:`IndexMismatchError`: a
corpus changed since the build is an error, not stale results), every file exists with its recorded size,
the backend holds as many documents as the corpus, and the probe passes (else :class:`IndexCorruptError`).

Example:
    >>> import tempfile
    >>> from agents.retrievers.corpus_spec import load_corpus
    >>> d = tempfile.mkdtemp()
    >>> m = build_index("bm25", load_corpus("microworld"), d, corpus_spec="microworld")
    >>> r = load_index(d)
    >>> len(r), r.search(["What is Mira 's mother ?"], k=1)[0][0].text  # doctest: +SKIP
    (328, "Mira 's mother is ...")
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents.retrievers.base import IndexCorruptError, IndexMismatchError, IndexMissingError
from envs.core.config import ConfigBase
from envs.core.data.types import Corpus, Passage
from envs.core.io import sha256_file, write_json
from envs.core.registry import Registry

log = logging.getLogger(__name__)

MANIFEST = "kairos_index.json"
FORMAT = "kairos-index/1"

#: retriever kind -> class (imported on use, so BM25 never imports colbert); a class implements ``build(corpus,
#: config)``, ``save(dir)``, ``load(dir)`` and the :class:`~agents.retrievers.base.Retriever` protocol
RETRIEVERS: Registry[type] = Registry("retriever")
RETRIEVERS.register_path("bm25", "agents.retrievers.bm25:BM25Retriever")
RETRIEVERS.register_path("colbert", "agents.retrievers.colbert:ColBERTRetriever")


def retriever_class(kind: str) -> type:
    """The retriever class registered under ``kind`` (or at dotted path ``package.module:Class``)."""
    return RETRIEVERS.get(kind)


def build_command(kind: str = "bm25|colbert", corpus: str = "SPEC", out: str | Path = "DIR") -> str:
    """The shell command that (re)builds an index."""
    return f"kairos index build --retriever {kind} --corpus {corpus} --out {out}"


# ------------------------------------------------------------------------------------------------ probe


def probe_query(p: Passage, max_words: int = 30) -> str:
    """A passage's title and first sentence (at most ``max_words`` words): the known-answer probe query."""
    first = re.split(r"(?<=[.!?])\s+", p.text.strip(), maxsplit=1)[0]
    words = first.split()[:max_words]
    return " ".join([p.title, *words]).strip()


def probe_positions(n_docs: int, n: int) -> list[int]:
    """``n`` corpus positions spread evenly (first, ..., last)."""
    if n <= 0 or n_docs == 0:
        return []
    if n == 1 or n_docs == 1:
        return [0]
    return sorted({round(i * (n_docs - 1) / (n - 1)) for i in range(n)})


def run_probe(retriever: Any, corpus: Corpus, ids: list[str], k: int) -> list[int | None]:
    """1-based rank of each probe passage for its own probe query (``None``: not in the top ``k``)."""
    passages = [corpus.get(i) for i in ids]
    if any(p is None for p in passages):
        missing = [i for i, p in zip(ids, passages) if p is None]
        raise IndexMismatchError(f"probe passage(s) {missing} are not in the corpus")
    results = retriever.search([probe_query(p) for p in passages], k=k)
    ranks: list[int | None] = []
    for pid, hits in zip(ids, results):
        hit_ids = [h.id for h in hits]
        ranks.append(hit_ids.index(pid) + 1 if pid in hit_ids else None)
    return ranks


# ------------------------------------------------------------------------------------------------ build


def _files(root: Path, sub: str) -> dict[str, int]:
    base = root / sub
    return {str(f.relative_to(root)): f.stat().st_size for f in sorted(base.rglob("*")) if f.is_file()}


def _versions(kind: str) -> dict[str, str]:
    import importlib.metadata as md

    names = ["bm25s"] if kind == "bm25" else ["colbert-ai", "torch", "transformers"]
    out = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = "missing"
    return out


def build_index(kind: str, corpus: Corpus, out: str | Path, config: ConfigBase | dict | None = None, *,
                corpus_spec: str | None = None, overwrite: bool = False, probe_n: int = 3,
                probe_k: int = 10) -> dict[str, Any]:
    """Build a ``kind`` index of ``corpus`` under ``out``, run the probe, and write the manifest.

    Args:
        kind: ``bm25`` or ``colbert`` (see :data:`RETRIEVERS`).
        corpus: The passages.
        out: Index directory (created).
        config: The kind's config (object or dict); default settings when ``None``.
        corpus_spec: How to rebuild ``corpus`` (:mod:`agents.retrievers.corpus_spec`); stored so that
            :func:`load_index` can find the corpus without being told. Without it, loading needs ``corpus=``.
        overwrite: Replace an existing index in ``out``.
        probe_n: Number of known-answer probe passages (0 disables the probe).
        probe_k: A probe passage must rank within this many results.

    Returns:
        The manifest (also written to ``out/kairos_index.json``).

    Raises:
        FileExistsError: ``out`` holds an index and ``overwrite`` is false.
        FolderBusyError: Another build (or any Kairos run) holds ``out``'s lock
            (:class:`envs.core.runlock.FolderLock`): two builds into one folder would leave one index of the two
            corpora's files, both reporting success.
        IndexCorruptError: The freshly built index fails the probe (a broken checkpoint, for instance).
    """
    from envs.core.runlock import FolderLock

    for name, value, low in (("probe_n", probe_n, 0), ("probe_k", probe_k, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} (--{name.replace('_', '-')}) must be an integer >= {low}, got {value!r}")
    cls = retriever_class(kind)
    cfg = config if isinstance(config, ConfigBase) else cls.config_class.from_dict(config or {})
    with FolderLock(out):  # one build per index folder; the second refuses at once, naming the first
        return _build_index(cls, kind, corpus, Path(out), cfg, corpus_spec, overwrite, probe_n, probe_k)


def _build_index(cls: type, kind: str, corpus: Corpus, out: Path, cfg: ConfigBase, corpus_spec: str | None,
                 overwrite: bool, probe_n: int, probe_k: int) -> dict[str, Any]:
    """:func:`build_index` under the folder's lock."""
    manifest_path = out / MANIFEST
    if manifest_path.exists() and not overwrite:
        raise FileExistsError(f"{out} already holds an index (pass --overwrite / overwrite=True to replace it)")
    out.mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)  # from here on a crash leaves "no index", never a stale manifest
    for sub in {"bm25", "plaid", cls.subdir}:
        if (out / sub).exists():
            shutil.rmtree(out / sub)
    fingerprint = corpus.fingerprint()
    built_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    index_id = hashlib.sha256(json.dumps([kind, fingerprint, cfg.to_dict(), built_at]).encode()).hexdigest()[:16]
    t0, c0 = time.perf_counter(), time.process_time()
    retriever = cls.build(corpus, cfg, out_dir=out / cls.subdir, index_id=index_id)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    files = _files(out, cls.subdir)
    probe_ids = [corpus[i].id for i in probe_positions(len(corpus), probe_n)]
    ranks = run_probe(retriever, corpus, probe_ids, probe_k) if probe_ids else []
    if any(r is None for r in ranks):
        failed = [i for i, r in zip(probe_ids, ranks) if r is None]
        raise IndexCorruptError(f"{out}: the new {kind} index does not find passage(s) {failed} by their own "
                                f"title and first sentence in the top {probe_k}: the index is unusable "
                                f"(for colbert: is the checkpoint a trained ColBERT checkpoint?)")
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "index_id": index_id,
        "n_docs": len(corpus),
        "corpus": {"spec": corpus_spec, "source": corpus.source, "fingerprint": fingerprint},
        "config": retriever.config.to_dict(),  # as resolved by the build (e.g. an absolute checkpoint path)
        "build": {"built_at": built_at, "seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3),
                  "versions": _versions(kind)},
        "files": files,
        "sha256": {rel: sha256_file(out / rel) for rel in files},  # content, checked on every load
        "size_bytes": sum(files.values()),
        "probe": {"k": probe_k, "ids": probe_ids, "ranks": ranks},
    }
    write_json(manifest_path, manifest)
    log.info("built %s index of %d passages in %.1f s (%.1f MB) at %s", kind, len(corpus), seconds,
             manifest["size_bytes"] / 1e6, out)
    return manifest


# ------------------------------------------------------------------------------------------------ load


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the index at ``path``.

    Raises:
        IndexMissingError: No manifest (naming the build command).
        IndexCorruptError: A manifest that is not valid JSON or not of this format.
    """
    path = Path(path)
    mp = path / MANIFEST
    if not mp.is_file():
        what = "an unfinished or foreign index directory" if path.is_dir() and any(path.iterdir()) else "no index"
        raise IndexMissingError(f"{path}: {what} ({MANIFEST} missing); build it with `{build_command(out=path)}`")
    try:
        manifest = json.loads(mp.read_text())
    except json.JSONDecodeError as e:
        raise IndexCorruptError(f"{mp}: unreadable manifest ({e}); rebuild with "
                                f"`{build_command(out=path)} --overwrite`") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexCorruptError(f"{mp}: not a {FORMAT} manifest")
    return manifest


def _rebuild_hint(manifest: dict[str, Any], path: Path) -> str:
    spec = manifest.get("corpus", {}).get("spec") or "SPEC"
    return f"`{build_command(manifest.get('kind', 'bm25|colbert'), spec, path)} --overwrite`"


def verify_corpus(manifest: dict[str, Any], corpus: Corpus, path: str | Path = "<index>") -> None:
    """Raise :class:`IndexMismatchError` unless ``corpus`` is the corpus the index was built from."""
    path = Path(path)
    want_n, want_fp = manifest["n_docs"], manifest["corpus"]["fingerprint"]
    if len(corpus) != want_n:
        raise IndexMismatchError(
            f"{path}: the index holds {want_n} passages but the corpus ({corpus.source}) has {len(corpus)}: "
            f"the corpus changed since the build; rebuild with {_rebuild_hint(manifest, path)}")
    fp = corpus.fingerprint()
    if fp != want_fp:
        raise IndexMismatchError(
            f"{path}: corpus fingerprint {fp[:12]} differs from the one at build time {want_fp[:12]} "
            f"({corpus.source}): passages changed since the build; rebuild with {_rebuild_hint(manifest, path)}")


def verify_files(manifest: dict[str, Any], path: str | Path) -> None:
    """Raise :class:`IndexCorruptError` when an index file is missing, or has another size or content (SHA-256)
    than at build time. (Manifests written before content hashes existed are checked by size only.)"""
    path = Path(path)
    hashes = manifest.get("sha256") or {}
    for rel, size in manifest["files"].items():  # every file present and of its size first (the cheap checks) ...
        f = path / rel
        if not f.is_file():
            raise IndexCorruptError(f"{path}: index file {rel} is missing; rebuild with "
                                    f"{_rebuild_hint(manifest, path)}")
        if f.stat().st_size != size:
            raise IndexCorruptError(f"{path}: index file {rel} has {f.stat().st_size} bytes, {size} at build "
                                    f"time; rebuild with {_rebuild_hint(manifest, path)}")
    for rel in manifest["files"]:  # ... then their content
        if rel in hashes and sha256_file(path / rel) != hashes[rel]:
            raise IndexCorruptError(f"{path}: index file {rel} changed since the build (content hash differs, same "
                                    f"size); rebuild with {_rebuild_hint(manifest, path)}")


def load_index(path: str | Path, corpus: Corpus | None = None, *, verify: bool = True, probe: bool = True,
               **options: Any) -> Any:
    """Open the index at ``path`` and check it (see the module docstring).

    Args:
        path: Index directory.
        corpus: The corpus; default: rebuilt from the spec in the manifest.
        verify: Check count, fingerprint and files (turn off only to inspect a damaged index).
        probe: Run the known-answer probe.
        **options: Passed to the kind's ``load`` (for colbert: ``ncells``, ``centroid_score_threshold``,
            ``ndocs``, ``checkpoint``).

    Raises:
        IndexMissingError, IndexMismatchError, IndexCorruptError: See the module docstring.
    """
    path = Path(path)
    manifest = read_manifest(path)
    cls = retriever_class(manifest["kind"])
    if corpus is None:
        spec = manifest["corpus"].get("spec")
        if not spec:
            raise ValueError(f"{path}: the index does not record how to build its corpus; pass corpus=")
        from agents.retrievers.corpus_spec import load_corpus

        corpus = load_corpus(spec)
    if verify:
        verify_corpus(manifest, corpus, path)
        verify_files(manifest, path)
    cfg = cls.config_class.from_dict(manifest["config"])
    retriever = cls.load(path / cls.subdir, corpus, cfg, index_id=manifest["index_id"], **options)
    if verify and retriever.backend_size() != manifest["n_docs"]:
        raise IndexCorruptError(f"{path}: the {manifest['kind']} index holds {retriever.backend_size()} "
                                f"documents, the manifest {manifest['n_docs']}; rebuild with "
                                f"{_rebuild_hint(manifest, path)}")
    if probe and manifest["probe"]["ids"]:
        ranks = run_probe(retriever, corpus, manifest["probe"]["ids"], manifest["probe"]["k"])
        if any(r is None for r in ranks):
            failed = [i for i, r in zip(manifest["probe"]["ids"], ranks) if r is None]
            raise IndexCorruptError(
                f"{path}: known-answer probe failed: passage(s) {failed} not in the top {manifest['probe']['k']} "
                f"for their own title and first sentence (ranks at build: {manifest['probe']['ranks']}); the "
                f"index is damaged; rebuild with {_rebuild_hint(manifest, path)}")
    retriever.manifest = manifest
    return retriever


def index_info(path: str | Path) -> dict[str, Any]:
    """The manifest of the index at ``path`` (no loading, no checks beyond reading it)."""
    return read_manifest(path)
