"""The retriever contract: scored passages, the :class:`Retriever` protocol, errors, the injection rule.

Every retriever (BM25, ColBERT/PLAID, a cache in front of either) answers a *batch* of queries with one
ranked list of :class:`RetrievedPassage` per query, best first. What gets injected into the reasoner is
decided by :class:`PassageSelector` (PUlSE protocol: look at the top 3 and inject the first passage not
already used for this question).

Example:
    >>> ranked = [RetrievedPassage("a", "A", "x", 3.0), RetrievedPassage("b", "B", "y", 2.0)]
    >>> sel = PassageSelector()
    >>> [p.id for p in sel.select(ranked)], [p.id for p in sel.select(ranked)], sel.used
    (['a'], ['b'], ['a', 'b'])
    >>> sel.new_question(); [p.id for p in sel.select(ranked)]
    ['a']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.data.types import Passage


@dataclass(frozen=True)
class RetrievedPassage(Passage):
    """A :class:`~envs.core.data.types.Passage` with the retriever's score for one query (higher = better)."""

    score: float = 0.0

    @classmethod
    def of(cls, passage: Passage, score: float) -> RetrievedPassage:
        """Attach ``score`` to ``passage``."""
        return cls(passage.id, passage.title, passage.text, float(score))


@runtime_checkable
class Retriever(Protocol):
    """What the agent needs from a retriever (docs/design.md §3).

    Implementations: :class:`agents.retrievers.bm25.BM25Retriever`,
    :class:`agents.retrievers.colbert.ColBERTRetriever`, :class:`agents.retrievers.cache.CachedRetriever`.

    Example:
        >>> class Echo:
        ...     def search(self, queries, k=10): return [[RetrievedPassage("p", "T", q, 1.0)] for q in queries]
        ...     def __len__(self): return 1
        ...     def describe(self): return {"kind": "echo"}
        >>> isinstance(Echo(), Retriever), Echo().search(["hi"], k=1)[0][0].text
        (True, 'hi')
    """

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[RetrievedPassage]]:
        """Top-``k`` passages for every query (batched), best first; fewer when fewer match."""
        raise NotImplementedError

    def __len__(self) -> int:
        """Number of passages in the index."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """JSON-able identity: kind, corpus fingerprint, index settings (used in cache keys and reports)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------ errors


class IndexMissingError(FileNotFoundError):
    """No index at the given path; the message names the command that builds one."""


class IndexMismatchError(ValueError):
    """The index was built from another corpus (fingerprint or document count differs), or another kind."""


class IndexCorruptError(ValueError):
    """The index files are damaged: a missing or resized file, or the known-answer probe failed."""


# ------------------------------------------------------------------------------------------- selection


@dataclass
class SelectionConfig(ConfigBase):
    """Which retrieved passages are injected into the reasoner (PUlSE protocol defaults)."""

    top_k: int = helpf(3, "look at this many top-ranked passages")
    n_inject: int = helpf(1, "inject this many of them")
    skip_used: bool = helpf(True, "skip passages already injected for this question")
    when_all_used: Literal["none", "top"] = helpf(
        "none", "when every top_k passage was used already: inject nothing ('none') or the top one ('top')")

    def validate(self) -> None:
        if self.top_k < 1 or self.n_inject < 1:
            raise ConfigError(f"SelectionConfig: top_k and n_inject must be >= 1 (got {self.top_k}, "
                              f"{self.n_inject})")


def select_passages(ranked: Sequence[RetrievedPassage], used: Iterable[str] = (),
                    config: SelectionConfig | None = None) -> list[RetrievedPassage]:
    """The passages to inject from one ranked list (pure function; see :class:`PassageSelector`).

    Args:
        ranked: One query's results, best first.
        used: Ids already injected for this question.
        config: The rule (default: top 3, first one not used).
    """
    cfg = config or SelectionConfig()
    window = list(ranked[: cfg.top_k])
    used_set = set(used) if cfg.skip_used else set()
    fresh = [p for p in window if p.id not in used_set][: cfg.n_inject]
    if not fresh and window and cfg.when_all_used == "top":
        return window[: cfg.n_inject]
    return fresh


class PassageSelector:
    """Applies :func:`select_passages` and remembers what was injected during the current question."""

    def __init__(self, config: SelectionConfig | None = None) -> None:
        self.config = config or SelectionConfig()
        self._used: list[str] = []

    def new_question(self) -> None:
        """Forget the passages used so far (call at the start of every episode)."""
        self._used.clear()

    @property
    def used(self) -> list[str]:
        """Ids injected in this question, in order."""
        return list(self._used)

    def select(self, ranked: Sequence[RetrievedPassage]) -> list[RetrievedPassage]:
        """Choose from ``ranked`` and mark the choice as used."""
        chosen = select_passages(ranked, self._used, self.config)
        self._used.extend(p.id for p in chosen if p.id not in self._used)
        return chosen


class CorpusRetrieverBase:
    """Shared parts of the retrievers that hold their corpus in memory: ``len()`` and ``describe()``.

    Subclasses set ``kind`` and call ``super().__init__(corpus, config, index_id)``.
    """

    kind: str = "?"

    def __init__(self, corpus: Any, config: Any, index_id: str = "") -> None:
        self.corpus = corpus
        self.config = config
        self.index_id = index_id
        self._passages = list(corpus)
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self._passages)

    def describe(self) -> dict[str, Any]:
        """Kind, size, corpus fingerprint, index id and settings."""
        if self._fingerprint is None:
            self._fingerprint = self.corpus.fingerprint()
        return {"kind": self.kind, "n_docs": len(self), "corpus_fingerprint": self._fingerprint,
                "index_id": self.index_id, "config": self.config.to_dict()}
