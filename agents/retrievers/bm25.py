"""BM25 over a :class:`~envs.core.data.types.Corpus` with `bm25s <https://github.com/xhluca/bm25s>`_.

Tokenisation (the same function for passages and queries, see :func:`bm25_tokenize`):

1. the passage is ``title + " " + text`` (``include_title``); queries are used as given;
2. Unicode NFKC, then case-folding, then ``\\w+`` word runs (apostrophes and hyphens split words: ``Mira's`` ->
   ``mira``, ``s``); NFKC (not only NFC: tokens are case-folded and stripped of punctuation anyway) makes a
   decomposed query (NFD: ``e`` + combining accent, as macOS file names and some PDFs give) find a composed
   passage and vice versa, and full-width letters or ligatures find their plain forms;
3. single letters are dropped (``'s`` leftovers, initials); single digits are kept;
4. Lucene's 33-word English stop list (``bm25s.stopwords.STOPWORDS_EN``, what Lucene/Pyserini's English
   analyzer uses) is removed -- small on purpose, so question words ("who", "what") and relation words stay;
5. Snowball English (Porter2) stemming with PyStemmer (``stemmer: none`` turns it off).

Scoring is bm25s' ``lucene`` variant (k1 = 1.2, b = 0.75, Lucene's defaults). The index is saved with
bm25s' ``save`` (CSC score matrix as ``.npy`` files + vocabulary) and loaded with ``mmap=True``, so the
score matrix is memory-mapped, not read. Search computes one query's scores over all documents
(``get_scores_from_ids``) and takes the top ``k`` with ``argpartition``: no thread pool, no progress bar.

Example:
    >>> from envs.core.data.types import Corpus, Passage
    >>> c = Corpus.from_passages([Passage("a", "Paris", "Paris is the capital of France."),
    ...                           Passage("b", "Rome", "Rome is the capital of Italy.")])
    >>> r = BM25Retriever.build(c, BM25Config(stemmer="none"))
    >>> [p.id for p in r.search(["capital of Italy"], k=1)[0]]
    ['b']
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agents.retrievers.base import CorpusRetrieverBase, IndexCorruptError, RetrievedPassage
from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.data.errors import CorpusError
from envs.core.data.types import Corpus

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")


@dataclass
class BM25Config(ConfigBase):
    """BM25 index settings (stored in the index manifest; a loaded index uses the settings it was built with)."""

    k1: float = helpf(1.2, "BM25 term-frequency saturation")
    b: float = helpf(0.75, "BM25 length normalisation")
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = helpf("lucene", "bm25s scoring variant")
    stemmer: Literal["english", "none"] = helpf("english", "Snowball stemmer language (PyStemmer) or none")
    stopwords: Literal["en", "none"] = helpf("en", "stop list: Lucene's English list or none")
    include_title: bool = helpf(True, "index the title together with the text")

    def validate(self) -> None:
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ConfigError(f"BM25Config: need k1 >= 0 and 0 <= b <= 1 (got {self.k1}, {self.b})")


class _Tokenizer:
    """The tokenisation of the module docstring, with a memo for stems (PyStemmer is fast; the memo is faster)."""

    def __init__(self, config: BM25Config) -> None:
        from bm25s.stopwords import STOPWORDS_EN

        self.stop = frozenset(STOPWORDS_EN) if config.stopwords == "en" else frozenset()
        self.stem = _stemmer(config.stemmer)
        self._memo: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        out = []
        for w in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
            if (len(w) == 1 and not w.isdigit()) or w in self.stop:
                continue
            s = self._memo.get(w)
            if s is None:
                s = self._memo.setdefault(w, self.stem(w) if self.stem else w)
            out.append(s)
        return out


def _stemmer(name: str):
    if name == "none":
        return None
    try:
        import Stemmer
    except ImportError as e:
        raise ImportError("BM25 stemming needs PyStemmer: pip install PyStemmer (or set stemmer: none)") from e
    return Stemmer.Stemmer(name).stemWord


def bm25_tokenize(text: str, config: BM25Config | None = None) -> list[str]:
    """Tokens of ``text`` as the index sees them.

    Example:
        >>> bm25_tokenize("Where was Mira's father born?", BM25Config(stemmer="none"))
        ['where', 'mira', 'father', 'born']
    """
    return _Tokenizer(config or BM25Config())(text)


def passage_text(title: str, text: str, include_title: bool = True) -> str:
    """What gets indexed for a passage."""
    return f"{title} {text}" if include_title and title else text


class BM25Retriever(CorpusRetrieverBase):
    """BM25 retriever (implements :class:`~agents.retrievers.base.Retriever`).

    Build in memory with :meth:`build`, persist with :meth:`save`, reopen with :meth:`load` (use
    :func:`agents.retrievers.index.build_index` / ``load_index`` for the checked, manifest-carrying versions).
    """

    kind = "bm25"
    config_class = BM25Config
    subdir = "bm25"

    def __init__(self, corpus: Corpus, model: Any, config: BM25Config, index_id: str = "") -> None:
        super().__init__(corpus, config, index_id)
        self.model = model
        self._tok = _Tokenizer(config)
        self._vocab: dict[str, int] = model.vocab_dict

    # ------------------------------------------------------------------ build / save / load
    @classmethod
    def build(cls, corpus: Corpus, config: BM25Config | None = None, out_dir: str | Path | None = None,
              index_id: str = "") -> BM25Retriever:
        """Index ``corpus`` (and save under ``out_dir`` when given).

        Raises:
            CorpusError: No passage has an indexable token (an all-empty corpus), naming the corpus.
        """
        import bm25s

        cfg = config or BM25Config()
        tok = _Tokenizer(cfg)
        docs = [tok(passage_text(p.title, p.text, cfg.include_title)) for p in corpus]
        if not any(docs):  # bm25s would fail on an empty vocabulary ("max() arg is an empty sequence")
            raise CorpusError(f"{corpus.source}: none of its {len(docs)} passages has a word BM25 can index (each "
                              "is empty, or only stop words and single letters): give passages with text")
        model = bm25s.BM25(k1=cfg.k1, b=cfg.b, method=cfg.method, backend="numpy")
        model.index(docs, show_progress=False)
        self = cls(corpus, model, cfg, index_id)
        if out_dir is not None:
            self.save(out_dir)
        return self

    def save(self, out_dir: str | Path) -> None:
        """Write the bm25s index files into ``out_dir``."""
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.model.save(str(out_dir), show_progress=False)

    @classmethod
    def load(cls, out_dir: str | Path, corpus: Corpus, config: BM25Config, index_id: str = "",
             mmap: bool = True) -> BM25Retriever:
        """Open a saved index (score matrix memory-mapped unless ``mmap=False``).

        Raises:
            IndexCorruptError: When bm25s cannot read the files.
        """
        import bm25s

        try:
            model = bm25s.BM25.load(str(out_dir), mmap=mmap, load_corpus=False)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            raise IndexCorruptError(f"{out_dir}: cannot read the BM25 index ({type(e).__name__}: {e})") from e
        return cls(corpus, model, config, index_id)

    def backend_size(self) -> int:
        """Number of documents the bm25s index itself holds (checked against the corpus on load)."""
        return int(self.model.scores["num_docs"])

    # ------------------------------------------------------------------ search
    def query_tokens(self, query: str) -> list[int]:
        """Vocabulary ids of the query's tokens (tokens the corpus never contains are dropped)."""
        return [self._vocab[t] for t in self._tok(query) if t in self._vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (corpus order)."""
        ids = self.query_tokens(query)
        if not ids:
            return np.zeros(len(self._passages), dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids))

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[RetrievedPassage]]:
        """Top-``k`` passages per query. A query with no indexed token returns ``[]``; zero scores are cut."""
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries; wrap a single query in a list")
        out: list[list[RetrievedPassage]] = []
        n = len(self._passages)
        k = max(0, min(k, n))
        for q in queries:
            ids = self.query_tokens(q)
            if not ids or k == 0:
                out.append([])
                continue
            s = np.asarray(self.model.get_scores_from_ids(ids))
            top = np.argpartition(-s, k - 1)[:k] if k < n else np.arange(n)
            top = top[np.lexsort((top, -s[top]))]  # by score, ties by corpus position (deterministic)
            out.append([RetrievedPassage.of(self._passages[i], s[i]) for i in top if s[i] > 0])
        return out

