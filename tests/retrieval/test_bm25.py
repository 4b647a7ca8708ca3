"""BM25 through bm25s: tokenisation, ranking, batching, save / memory-mapped load."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from agents.retrievers.bm25 import BM25Config, BM25Retriever, bm25_tokenize


def test_tokenisation_documented_choices():
    cfg = BM25Config(stemmer="none")
    # lower-cased, apostrophes split, single letters dropped, Lucene stop words dropped, digits kept
    assert bm25_tokenize("The Mira's father was born in 1966, in B 7.", cfg) == ["mira", "father", "born", "1966", "7"]
    assert bm25_tokenize("Who is it?", cfg) == ["who"]  # question words are not stop words


@pytest.mark.skipif(not importlib.util.find_spec("Stemmer"), reason="PyStemmer not installed")
def test_stemming():
    assert bm25_tokenize("rivers flowing headquartered") == ["river", "flow", "headquart"]
    assert bm25_tokenize("rivers", BM25Config(stemmer="none")) == ["rivers"]


def test_search_ranks_and_scores(capitals, bm25_cfg):
    r = BM25Retriever.build(capitals, bm25_cfg)
    res = r.search(["capital of Italy", "river through Berlin", "Eiffel zzz"], k=3)
    assert res[0][0].id == "p-rome" and res[1][0].id == "p-spree"
    assert res[2] == []  # no indexed term
    for hits in res:
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(h.score > 0 for h in hits)
    assert len(r) == 6 and r.describe()["kind"] == "bm25"


def test_batched_equals_one_at_a_time(micro_corpus, bm25_cfg):
    r = BM25Retriever.build(micro_corpus, bm25_cfg)
    queries = [f"{p.title} {p.text}" for p in micro_corpus][:20]  # the title breaks spouse-fact ties
    batched = r.search(queries, k=5)
    single = [r.search([q], k=5)[0] for q in queries]
    assert batched == single
    assert all(hits[0].id == p.id for hits, p in zip(batched, micro_corpus))


def test_k_larger_than_corpus_and_single_string(capitals, bm25_cfg):
    r = BM25Retriever.build(capitals, bm25_cfg)
    assert len(r.search(["capital"], k=100)[0]) == 3
    assert r.search(["capital"], k=0) == [[]]
    with pytest.raises(TypeError):
        r.search("capital", k=1)


def test_save_and_memory_mapped_load(tmp_path, capitals, bm25_cfg):
    r = BM25Retriever.build(capitals, bm25_cfg, out_dir=tmp_path / "bm25")
    loaded = BM25Retriever.load(tmp_path / "bm25", capitals, bm25_cfg)
    assert isinstance(loaded.model.scores["data"], np.memmap)
    assert loaded.backend_size() == 6
    q = ["river of Rome", "capital of Germany"]
    assert loaded.search(q, k=4) == r.search(q, k=4)


def test_bad_config():
    from envs.core.config import ConfigError

    with pytest.raises(ConfigError):
        BM25Config.from_dict({"b": 2.0})
    with pytest.raises(ConfigError):
        BM25Config.from_dict({"stemmer": "klingon"})
