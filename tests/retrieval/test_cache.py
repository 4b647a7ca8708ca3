"""Query-result cache (memory LRU + SQLite on disk), the cached retriever, speculative prefetch."""

from __future__ import annotations

from agents.retrievers import BM25Retriever, CachedRetriever, Prefetcher, QueryCache
from agents.retrievers.base import RetrievedPassage
from envs.core.microworld.config import ALL_RELATIONS


class Counting:
    """Wraps a retriever and counts the queries that reach it."""

    def __init__(self, inner):
        self.inner, self.corpus, self.queries = inner, inner.corpus, []

    def search(self, queries, k=10):
        self.queries += list(queries)
        return self.inner.search(queries, k)

    def __len__(self):
        return len(self.inner)

    def describe(self):
        return self.inner.describe()


def test_lru_evicts_oldest():
    c = QueryCache(capacity=2)
    c.put_many([("a", 5, [("x", 1.0)]), ("b", 5, [("y", 1.0)])])
    assert c.get("a", 5) == [("x", 1.0)]  # a is now the most recent
    c.put_many([("c", 5, [("z", 1.0)])])
    assert c.get("b", 5) is None and c.get("a", 5) is not None and c.get("c", 5) is not None


def test_smaller_k_is_served_larger_is_not():
    c = QueryCache()
    c.put_many([("q", 10, [(f"p{i}", 10.0 - i) for i in range(10)])])
    assert [i for i, _ in c.get("q", 3)] == ["p0", "p1", "p2"]
    assert c.get("q", 20) is None


def test_disk_cache_survives_a_new_process(tmp_path, capitals, bm25_cfg):
    db = tmp_path / "cache.sqlite"
    inner = Counting(BM25Retriever.build(capitals, bm25_cfg))
    first = CachedRetriever(inner, QueryCache(path=db))
    res = first.search(["capital of Italy", "river"], k=3)
    first.cache.close()
    again = CachedRetriever(inner, QueryCache(path=db))
    assert again.search(["capital of Italy", "river"], k=3) == res
    assert inner.queries == ["capital of Italy", "river"]
    assert again.stats.disk_hits == 2 and again.stats.hit_rate == 1.0
    assert all(isinstance(p, RetrievedPassage) for p in res[0])


def test_cached_retriever_batches_and_dedupes_misses(capitals, bm25_cfg):
    inner = Counting(BM25Retriever.build(capitals, bm25_cfg))
    r = CachedRetriever(inner)
    out = r.search(["river", "capital", "river"], k=2)
    assert inner.queries == ["river", "capital"] and out[0] == out[2]
    r.search(["capital", "Seine"], k=2)
    assert inner.queries == ["river", "capital", "Seine"]
    assert (r.stats.lookups, r.stats.hits, r.stats.misses) == (5, 2, 3)


def test_namespace_changes_with_the_index(capitals, bm25_cfg):
    a = CachedRetriever(BM25Retriever.build(capitals, bm25_cfg, index_id="one"))
    b = CachedRetriever(BM25Retriever.build(capitals, bm25_cfg.replace(k1=0.9), index_id="one"))
    c = CachedRetriever(BM25Retriever.build(capitals, bm25_cfg, index_id="two"))
    assert len({a.namespace, b.namespace, c.namespace}) == 3


def test_prefetch_turns_the_next_hop_into_a_hit(micro_corpus, bm25_cfg):
    """Step 1 retrieves 'A 's father is B .'; prefetch asks about B; step 2's info-need query hits."""
    from agents.query import QueryGenerator

    fact = next(p for p in micro_corpus if " 's father is " in p.text)
    subject, obj = fact.title, fact.text.split(" is ")[1].rstrip(" .")
    second = next(p for p in micro_corpus if p.title == obj and " 's mother is " in p.text)
    question = f"Who is {subject} 's father 's mother ?"
    gen = QueryGenerator()
    r = CachedRetriever(BM25Retriever.build(micro_corpus, bm25_cfg))
    pf = Prefetcher(r, relations=ALL_RELATIONS, k=10, max_queries=16)
    hits = r.search([gen(fact.text, question, "info_need")], k=3)[0]
    assert hits[0].id == fact.id
    assert pf.after_retrieval(hits[:1], question) > 0
    assert f"What is {obj} 's mother ?" in pf.candidates(hits[:1], question)
    before = r.stats.prefetch_hits
    hit2 = r.search([gen(second.text, question, "info_need")], k=3)[0]
    assert hit2[0].id == second.id
    assert r.stats.prefetch_hits == before + 1 and r.stats.prefetch_hit_rate == 0.5
    assert 0 < r.stats.prefetch_precision <= 1


def test_background_prefetch(micro_corpus, bm25_cfg):
    r = CachedRetriever(BM25Retriever.build(micro_corpus, bm25_cfg))
    pf = Prefetcher(r, relations=["mother"], background=True)
    hits = r.search([micro_corpus[0].text], k=1)[0]
    pf.after_retrieval(hits)
    pf.close()
    assert r.stats.prefetched > 0
