"""Query-result caching and speculative prefetch.

- :class:`QueryCache`: an LRU in memory in front of an optional SQLite file on disk (WAL journal: a crash
  loses at most the last writes, never corrupts). Values are ``[(passage id, score), ...]`` plus the ``k``
  they were computed for, so a cached top-10 also answers a top-3 request. Keys hash the retriever's
  identity (:meth:`Retriever.describe`, which includes the index id and search settings) with the query, so
  a rebuilt index or changed search settings never read old results.
- :class:`CachedRetriever`: a :class:`~agents.retrievers.base.Retriever` that answers from the cache and
  sends only the misses, de-duplicated, to the wrapped retriever in one batch.
- :class:`Prefetcher`: after a retrieval, searches ahead for likely next-step queries built from the
  entities in the retrieved passages (``What is [entity]'s [relation]?`` for the relations the question
  mentions, plus configured ones), so the next step's lookup can be a cache hit. Its effect is in
  :class:`CacheStats` (``prefetch_hit_rate``: share of lookups answered by a prefetched entry;
  ``prefetch_precision``: share of prefetched entries that were used).

Example:
    >>> from agents.retrievers.base import RetrievedPassage
    >>> class Fake:
    ...     calls = 0
    ...     def search(self, queries, k=10):
    ...         Fake.calls += 1
    ...         return [[RetrievedPassage("p", "T", q, 1.0)] for q in queries]
    ...     def __len__(self): return 1
    ...     def describe(self): return {"kind": "fake"}
    ...     corpus = None
    >>> from envs.core.data.types import Corpus, Passage
    >>> Fake.corpus = Corpus.from_passages([Passage("p", "T", "x")])
    >>> r = CachedRetriever(Fake())
    >>> _ = r.search(["a", "a", "b"], k=1); _ = r.search(["a"], k=1)
    >>> Fake.calls, r.stats.lookups, r.stats.hits
    (1, 4, 2)
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.retrievers.base import RetrievedPassage, Retriever

log = logging.getLogger(__name__)

Entry = tuple[int, list[tuple[str, float]]]  # (k searched, [(id, score), ...])


@dataclass
class CacheStats:
    """Counters of one :class:`QueryCache` (prefetch searches are not lookups)."""

    lookups: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    prefetched: int = 0
    prefetch_hits: int = 0
    prefetch_used: int = 0

    @property
    def hits(self) -> int:
        return self.memory_hits + self.disk_hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def prefetch_hit_rate(self) -> float:
        """Share of lookups answered by an entry that a prefetch stored (and no lookup had read before)."""
        return self.prefetch_hits / self.lookups if self.lookups else 0.0

    @property
    def prefetch_precision(self) -> float:
        """Share of prefetched entries that a later lookup used."""
        return self.prefetch_used / self.prefetched if self.prefetched else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(hits=self.hits, hit_rate=self.hit_rate, prefetch_hit_rate=self.prefetch_hit_rate,
                 prefetch_precision=self.prefetch_precision)
        return d


class QueryCache:
    """Memory LRU + optional on-disk SQLite store of query results (thread-safe).

    Args:
        capacity: Entries kept in memory.
        path: SQLite file; ``None`` keeps the cache in memory only.
    """

    def __init__(self, capacity: int = 10_000, path: str | Path | None = None) -> None:
        self.capacity = capacity
        self.path = Path(path) if path else None
        self.stats = CacheStats()
        self._mem: OrderedDict[str, Entry] = OrderedDict()
        self._prefetched: set[str] = set()  # keys stored by a prefetch, not read by a lookup yet
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, k INTEGER, value TEXT)")

    @staticmethod
    def key(namespace: str, query: str) -> str:
        """Cache key of ``query`` under ``namespace`` (the retriever identity)."""
        return hashlib.sha256(json.dumps([namespace, query], ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str, k: int) -> list[tuple[str, float]] | None:
        """The first ``k`` cached results of ``key``, or ``None`` (also when fewer than ``k`` were searched)."""
        with self._lock:
            self.stats.lookups += 1
            entry = self._mem.get(key)
            if entry is not None and entry[0] >= k:
                self._mem.move_to_end(key)
                self.stats.memory_hits += 1
                self._count_prefetch_use(key)
                return entry[1][:k]
            if self._db is not None:
                row = self._db.execute("SELECT k, value FROM results WHERE key = ?", (key,)).fetchone()
                if row is not None and row[0] >= k:
                    value = [(str(i), float(s)) for i, s in json.loads(row[1])]
                    self._remember(key, (row[0], value))
                    self.stats.disk_hits += 1
                    self._count_prefetch_use(key)
                    return value[:k]
            self.stats.misses += 1
            return None

    def _count_prefetch_use(self, key: str) -> None:
        if key in self._prefetched:
            self._prefetched.discard(key)
            self.stats.prefetch_hits += 1
            self.stats.prefetch_used += 1

    def contains(self, key: str, k: int) -> bool:
        """Whether ``key`` is cached for ``k`` results (not counted as a lookup)."""
        with self._lock:
            entry = self._mem.get(key)
            if entry is not None and entry[0] >= k:
                return True
            if self._db is not None:
                row = self._db.execute("SELECT k FROM results WHERE key = ?", (key,)).fetchone()
                return row is not None and row[0] >= k
            return False

    def put_many(self, items: Sequence[tuple[str, int, list[tuple[str, float]]]], prefetched: bool = False) -> None:
        """Store ``(key, k, results)`` items (one disk transaction)."""
        with self._lock:
            for key, k, value in items:
                self._remember(key, (k, list(value)))
                if prefetched:
                    self._prefetched.add(key)
                    self.stats.prefetched += 1
            if self._db is not None and items:
                with self._db:  # one transaction
                    self._db.execute("BEGIN")
                    self._db.executemany(
                        "INSERT OR REPLACE INTO results (key, k, value) VALUES (?, ?, ?)",
                        [(key, k, json.dumps([[i, s] for i, s in value])) for key, k, value in items])

    def _remember(self, key: str, entry: Entry) -> None:
        self._mem[key] = entry
        self._mem.move_to_end(key)
        while len(self._mem) > self.capacity:
            old, _ = self._mem.popitem(last=False)
            self._prefetched.discard(old)

    def __len__(self) -> int:
        with self._lock:
            if self._db is not None:
                return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
            return len(self._mem)

    def clear_memory(self) -> None:
        """Drop the in-memory entries (the disk store stays)."""
        with self._lock:
            self._mem.clear()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def retriever_namespace(retriever: Retriever) -> str:
    """A short hash of ``retriever.describe()``: the cache namespace of its results."""
    desc = json.dumps(retriever.describe(), sort_keys=True, default=str)
    return hashlib.sha256(desc.encode()).hexdigest()[:16]


class CachedRetriever:
    """A retriever answering from a :class:`QueryCache` first (implements ``Retriever``).

    Args:
        retriever: The wrapped retriever; it must expose ``corpus`` (passages are resolved from their ids).
        cache: The cache (a fresh in-memory one by default).
    """

    def __init__(self, retriever: Any, cache: QueryCache | None = None) -> None:
        self.retriever = retriever
        self.cache = cache if cache is not None else QueryCache()  # an empty cache is falsy (len 0)
        self.corpus = retriever.corpus
        self.namespace = retriever_namespace(retriever)
        self._search_lock = threading.Lock()  # the wrapped retriever is not assumed thread-safe

    @property
    def stats(self) -> CacheStats:
        return self.cache.stats

    def _resolve(self, hits: list[tuple[str, float]]) -> list[RetrievedPassage]:
        out = []
        for pid, score in hits:
            p = self.corpus.get(pid)
            if p is None:  # cannot happen with a namespace tied to the corpus fingerprint
                raise KeyError(f"cached passage id '{pid}' is not in the corpus")
            out.append(RetrievedPassage.of(p, score))
        return out

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[RetrievedPassage]]:
        """Cached results where present; the misses (de-duplicated) in one batched search."""
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries; wrap a single query in a list")
        keys = [self.cache.key(self.namespace, q) for q in queries]
        found: dict[str, list[tuple[str, float]]] = {}
        todo: dict[str, str] = {}
        for q, key in zip(queries, keys):
            if key in found or key in todo:
                with self.cache._lock:  # repeated within the batch: served by the same search
                    self.cache.stats.lookups += 1
                    self.cache.stats.memory_hits += 1
                continue
            hit = self.cache.get(key, k)
            if hit is None:
                todo[key] = q
            else:
                found[key] = hit
        if todo:
            with self._search_lock:
                results = self.retriever.search(list(todo.values()), k=k)
            items = [(key, k, [(p.id, p.score) for p in res]) for key, res in zip(todo, results)]
            self.cache.put_many(items)
            found.update({key: value for key, _, value in items})
        return [self._resolve(found[key]) for key in keys]

    def prefetch(self, queries: Sequence[str], k: int = 10) -> int:
        """Search the queries that are not cached yet and store them as prefetched; returns how many."""
        todo = list(dict.fromkeys(q for q in queries if not self.cache.contains(self.cache.key(self.namespace, q), k)))
        if not todo:
            return 0
        with self._search_lock:
            results = self.retriever.search(todo, k=k)
        self.cache.put_many([(self.cache.key(self.namespace, q), k, [(p.id, p.score) for p in res])
                             for q, res in zip(todo, results)], prefetched=True)
        return len(todo)

    def __len__(self) -> int:
        return len(self.retriever)

    def describe(self) -> dict[str, Any]:
        d = dict(self.retriever.describe())
        d["cache"] = {"path": str(self.cache.path) if self.cache.path else None, "capacity": self.cache.capacity}
        return d


class Prefetcher:
    """Speculative prefetch of likely next-step queries (see the module docstring).

    Args:
        retriever: The cached retriever to fill.
        relations: Relations always tried (e.g. the micro-world's six); the question's relation words are
            added per call.
        k: Results to prefetch per query (a top-``k`` entry answers every smaller request).
        max_queries: At most this many prefetch queries per retrieval.
        query_fn: ``(entity, relation, microworld) -> query``; default
            :func:`agents.query.info_need_query`, i.e. what the ``info_need`` mode asks.
        background: Run the searches on one background thread (``wait()`` joins them).
    """

    def __init__(self, retriever: CachedRetriever, relations: Sequence[str] = (), k: int = 10,
                 max_queries: int = 16, query_fn: Callable[[str, str | None, bool], str] | None = None,
                 background: bool = False) -> None:
        from agents.query import info_need_query

        self.retriever = retriever
        self.relations = list(relations)
        self.k = k
        self.max_queries = max_queries
        self.query_fn = query_fn or info_need_query
        self.issued = 0
        self._pool = ThreadPoolExecutor(max_workers=1) if background else None
        self._pending: list[Future[int]] = []

    def candidates(self, passages: Sequence[RetrievedPassage], question: str | None = None) -> list[str]:
        """Likely next-step queries: entities of the passages x (question relations + configured ones)."""
        from agents.query import _microworld_parse, extract_entities, relation_words

        rels = list(dict.fromkeys([*(relation_words(question) if question else []), *self.relations]))
        out: list[str] = []
        for p in passages:
            micro = _microworld_parse(p.text) is not None
            entities = extract_entities(p.text)
            if micro:  # the object is the next hop; the subject was this hop's entity
                entities = entities[1:] + entities[:1]
            for ent in entities:
                for rel in rels or [None]:
                    out.append(self.query_fn(ent, rel, micro))
        return list(dict.fromkeys(out))[: self.max_queries]

    def after_retrieval(self, passages: Sequence[RetrievedPassage], question: str | None = None) -> int:
        """Prefetch for the passages just retrieved; returns the number of queries issued (or queued)."""
        queries = self.candidates(passages, question)
        self.issued += len(queries)
        if self._pool is not None:
            for f in [f for f in self._pending if f.done()]:  # finished ones: surface their errors, then forget
                self._pending.remove(f)
                f.result()
            self._pending.append(self._pool.submit(self.retriever.prefetch, queries, self.k))
            return len(queries)
        return self.retriever.prefetch(queries, self.k)

    def wait(self) -> None:
        """Wait for queued background prefetches (re-raises their errors)."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    def close(self) -> None:
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
