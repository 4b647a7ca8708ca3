"""Retrievers: BM25 (bm25s) and ColBERTv2/PLAID (colbert-ai), index checks, caches, prefetch.

The flat public API (heavy libraries are imported only when a ColBERT object is used)::

    from agents.retrievers import build_index, load_index, load_corpus, PassageSelector

    corpus = load_corpus("microworld")
    build_index("bm25", corpus, "runs/index/micro-bm25", corpus_spec="microworld")
    retriever = load_index("runs/index/micro-bm25")        # checks count, fingerprint, files, probe
    hits = retriever.search(["What is Mira 's mother ?"], k=3)[0]
    chosen = PassageSelector().select(hits)               # PUlSE: first of the top 3 not used yet

Command line: ``kairos index build|search|info`` and ``kairos retriever train-colbert``.
"""

from __future__ import annotations

from typing import Any

from agents.retrievers.base import (
    IndexCorruptError,
    IndexMismatchError,
    IndexMissingError,
    PassageSelector,
    RetrievedPassage,
    Retriever,
    SelectionConfig,
    select_passages,
)
from agents.retrievers.bm25 import BM25Config, BM25Retriever, bm25_tokenize
from agents.retrievers.cache import CachedRetriever, CacheStats, Prefetcher, QueryCache
from agents.retrievers.corpus_spec import canonical_spec, load_corpus
from agents.retrievers.index import RETRIEVERS, build_index, index_info, load_index

__all__ = [
    "RETRIEVERS",
    "BM25Config",
    "BM25Retriever",
    "CacheStats",
    "CachedRetriever",
    "ColBERTIndexConfig",
    "ColBERTRetriever",
    "IndexCorruptError",
    "IndexMismatchError",
    "IndexMissingError",
    "PassageSelector",
    "Prefetcher",
    "QueryCache",
    "RetrievedPassage",
    "Retriever",
    "SelectionConfig",
    "bm25_tokenize",
    "build_index",
    "canonical_spec",
    "index_info",
    "load_corpus",
    "load_index",
    "select_passages",
]


def __getattr__(name: str) -> Any:  # ColBERT classes on first use: importing them does not import colbert
    if name in ("ColBERTRetriever", "ColBERTIndexConfig"):
        from agents.retrievers import colbert

        return getattr(colbert, name)
    raise AttributeError(f"module 'agents.retrievers' has no attribute '{name}'")
