"""``kairos bench retrieval``: retrieval quality, index cost, latency and cache behaviour.

What it measures (all on one thread, ``torch.set_num_threads(threads)``):

1. **HotpotQA** (``dev_500``, corpus = union of the paragraphs, ~4.9k passages): the question is the query;
   Recall@2/5/10 of the two supporting paragraphs (share of gold paragraphs in the top k, averaged over
   questions), all-gold@10, and MRR@10 (first gold paragraph) on questions ``eval_questions`` (default
   250-499; the ColBERT checkpoint from ``kairos retriever train-colbert`` is trained on 0-249). Also: index
   build time and size, median / p90 latency of one query at a time, and batched throughput (a ratio
   against one-at-a-time in the same run).
2. **Micro-world** (328 fact sentences): steps of gold chains of sampled questions, scored only for facts
   whose subject is in the *eval* half (:func:`agents.retrievers.colbert_train.microworld_split`). Queries
   come from every query mode, for the correct step and for the step with a *wrong object* (what a
   mistaken reasoner writes, i.e. when retrieval matters). R@1, R@3 (the injection window) and MRR@10.
3. **Caches** (BM25, micro-world chains): per query mode, the share of lookups that hit the cache without
   prefetch (steps repeated across questions), with speculative prefetch, prefetch precision and queries
   issued; and the latency of a memory hit, a disk hit and a search.

Example (shell)::

    kairos bench retrieval --out runs/bench/retrieval --colbert-checkpoint runs/colbert/minilm-hotpot

Writes ``retrieval_bench.json`` and ``retrieval_bench.md`` under ``--out`` and prints the tables.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, helpf

log = logging.getLogger(__name__)


@dataclass
class RetrievalBenchConfig(ConfigBase):
    """Settings of ``kairos bench retrieval``."""

    out: str = helpf("runs/bench/retrieval", "output directory (JSON, Markdown, indexes)")
    retrievers: list[str] = helpf(["bm25", "colbert"], "retrievers to measure")
    colbert_checkpoints: list[str] = helpf(["runs/colbert/minilm-hotpot"], "ColBERT checkpoint directories")
    hotpotqa: str = helpf("", "HotpotQA questions (default: <shared data>/hotpotqa/dev_500.jsonl; 'none' skips)")
    eval_questions: str = helpf("250:500", "HotpotQA questions scored (start:end)")
    microworld_seed: int = helpf(0, "micro-world seed (-1 skips the micro-world part)")
    micro_questions: int = helpf(300, "micro-world questions whose chains are scored")
    prefetch_questions: int = helpf(200, "micro-world multi-hop questions in the cache simulation")
    k: int = helpf(10, "results per query")
    threads: int = helpf(1, "torch threads")
    seed: int = helpf(0, "seed of the question samples and wrong objects")
    colbert_alt: bool = helpf(True, "also time ColBERT at ncells=2, threshold 0.45, ndocs=1024")
    parts: list[str] = helpf(["hotpotqa", "microworld", "cache"], "parts to run")
    rebuild: bool = helpf(False, "rebuild indexes even when OUT/indexes holds one of the same corpus and settings")


# ------------------------------------------------------------------------------------------------ metrics


def ranking_metrics(ranked: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], ks: Sequence[int],
                    mrr_k: int = 10) -> dict[str, float]:
    """Recall@k (share of gold ids in the top k, averaged), all-gold@max(k) and MRR@mrr_k.

    Example:
        >>> ranking_metrics([["a", "x", "b"]], [["a", "b"]], ks=(1, 3))
        {'R@1': 0.5, 'R@3': 1.0, 'all@3': 1.0, 'MRR': 1.0}
    """
    out: dict[str, float] = {}
    n = len(ranked)
    for k in ks:
        out[f"R@{k}"] = sum(len(set(r[:k]) & set(g)) / len(g) for r, g in zip(ranked, gold)) / n
    kmax = max(ks)
    out[f"all@{kmax}"] = sum(set(g) <= set(r[:kmax]) for r, g in zip(ranked, gold)) / n
    rr = []
    for r, g in zip(ranked, gold):
        ranks = [i + 1 for i, pid in enumerate(r[:mrr_k]) if pid in set(g)]
        rr.append(1.0 / ranks[0] if ranks else 0.0)
    out["MRR"] = sum(rr) / n
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def timed_search(retriever: Any, queries: Sequence[str], k: int) -> tuple[list[list[str]], dict[str, float]]:
    """Search one query at a time; returns the ranked ids and latency statistics (ms)."""
    retriever.search([queries[0]], k=k)  # warm-up (lazy loads, first-call allocations)
    ranked, lat, cpu = [], [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        res = retriever.search([q], k=k)[0]
        cpu.append((time.thread_time() - c0) * 1000)
        lat.append((time.perf_counter() - t0) * 1000)
        ranked.append([p.id for p in res])
    return ranked, {"median_ms": statistics.median(lat), "p90_ms": _pct(lat, 0.9), "mean_ms": statistics.fmean(lat),
                    "median_cpu_ms": statistics.median(cpu), "p90_cpu_ms": _pct(cpu, 0.9)}


def batched_speedup(retriever: Any, queries: Sequence[str], k: int, batch: int = 32) -> dict[str, float]:
    """Queries per second one at a time vs. in batches of ``batch`` (same queries, same run)."""
    qs = list(queries)
    t0 = time.perf_counter()
    for q in qs:
        retriever.search([q], k=k)
    single = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, len(qs), batch):
        retriever.search(qs[i:i + batch], k=k)
    batched = time.perf_counter() - t0
    return {"qps_single": len(qs) / single, "qps_batched": len(qs) / batched, "batch": batch,
            "speedup": single / batched}


# ------------------------------------------------------------------------------------------------ parts


def _build(kind: str, corpus: Any, spec: str, out: Path, config: dict[str, Any] | None = None,
           rebuild: bool = False) -> dict[str, Any]:
    """Build the index, or reuse the one in ``out`` when it has the same kind, corpus and settings."""
    from agents.retrievers.index import (
        IndexCorruptError,
        IndexMissingError,
        build_index,
        read_manifest,
        retriever_class,
    )

    if not rebuild:
        try:
            old = read_manifest(out)
        except (IndexMissingError, IndexCorruptError):
            old = None
        if old is not None:
            cls = retriever_class(kind)
            want = cls.config_class.from_dict(config or {})
            if kind == "colbert":
                from agents.retrievers.colbert import check_checkpoint

                want = want.replace(checkpoint=str(check_checkpoint(want.checkpoint)))
            if (old["kind"] == kind and old["corpus"]["fingerprint"] == corpus.fingerprint()
                    and old["config"] == want.to_dict()):
                log.info("reusing %s (built %s in %.1f s)", out, old["build"]["built_at"], old["build"]["seconds"])
                return old
    return build_index(kind, corpus, out, config, corpus_spec=spec, overwrite=True)


def hotpot_part(cfg: RetrievalBenchConfig, out: Path) -> dict[str, Any]:
    """Quality, build cost and latency on the HotpotQA paragraph union."""
    from agents.retrievers.colbert_train import hotpot_split, parse_slice
    from agents.retrievers.corpus_spec import canonical_spec, load_corpus
    from agents.retrievers.index import load_index
    from envs.core.data.loaders import load_dataset, shared_data_dir

    path = Path(cfg.hotpotqa) if cfg.hotpotqa else shared_data_dir() / "hotpotqa" / "dev_500.jsonl"
    spec = canonical_spec(f"hotpotqa:{path}")
    corpus = load_corpus(spec)
    questions = list(load_dataset("hotpotqa", path))
    a, b = parse_slice(cfg.eval_questions)
    evals = questions[a:b]
    train, _ = hotpot_split(questions, "0:250")
    train_pos = {g for q in train for g in q.gold_passage_ids or []}
    overlap = sum(g in train_pos for q in evals for g in q.gold_passage_ids or [])
    qtexts = [q.question for q in evals]
    gold = [q.gold_passage_ids or [] for q in evals]
    rows: list[dict[str, Any]] = []
    for name, kind, config, opts in _systems(cfg):
        idx = out / "indexes" / f"hotpot-{name}"
        log.info("hotpotqa: building %s", name)
        manifest = _build(kind, corpus, spec, idx, config, cfg.rebuild)
        t0 = time.perf_counter()
        retriever = load_index(idx, corpus, **opts)
        load_s = time.perf_counter() - t0
        variants = [("default", {})]
        if kind == "colbert" and cfg.colbert_alt:
            variants.append(("ncells=2,thr=0.45,ndocs=1024",
                             {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 1024}))
        base_config = retriever.config
        for vname, vopts in variants:
            retriever.config = base_config.replace(**vopts) if vopts else base_config
            r = retriever
            ranked, lat = timed_search(r, qtexts, cfg.k)
            row = {"system": name if vname == "default" else f"{name} ({vname})", "kind": kind,
                   **ranking_metrics(ranked, gold, ks=(2, 3, 5, 10)), **lat,
                   "build_s": manifest["build"]["seconds"], "build_cpu_s": manifest["build"].get("cpu_seconds"),
                   "size_mb": manifest["size_bytes"] / 1e6,
                   "load_s": load_s, "n_docs": manifest["n_docs"]}
            if vname == "default":
                row["batched"] = batched_speedup(r, qtexts[:128], cfg.k)
            rows.append(row)
            log.info("hotpotqa %s: %s", row["system"], {k: round(v, 3) for k, v in row.items()
                                                         if isinstance(v, float)})
        retriever.config = base_config
    return {"corpus": spec, "n_passages": len(corpus), "eval_questions": cfg.eval_questions,
            "n_eval": len(evals), "colbert_trained_on": "questions 0:250 (disjoint from the scored ones)",
            "eval_gold_that_are_train_positives": overlap, "eval_gold_total": sum(len(g) for g in gold),
            "rows": rows}


def _systems(cfg: RetrievalBenchConfig) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]]:
    out: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []
    if "bm25" in cfg.retrievers:
        out.append(("bm25", "bm25", None, {}))
    if "colbert" in cfg.retrievers:
        for ck in cfg.colbert_checkpoints:
            out.append((f"colbert:{Path(ck).name}", "colbert", {"checkpoint": ck}, {}))
    return out


def micro_steps(kb: Any, n_questions: int, seed: int) -> list[dict[str, Any]]:
    """Chain steps of ``n_questions`` sampled questions: step text, wrong-object step, question, fact id."""
    from envs.core.microworld.kb import RELATION_TYPES, render_fact
    from envs.core.microworld.questions import enumerate_questions, gold_chain

    rng = random.Random(seed)
    qs = enumerate_questions(kb)
    rng.shuffle(qs)
    steps = []
    for q in qs[:n_questions]:
        for i, f in enumerate(gold_chain(kb, q) or []):
            pool = [e for e in kb.entities[RELATION_TYPES[f.relation][1]] if e not in (f.object, f.subject)]
            steps.append({"question": q.text, "qid": q.id, "step_index": i, "fact": f.id,
                          "step": f"Step {i + 1} : {f.sentence}",
                          "wrong_step": f"Step {i + 1} : {render_fact(f.subject, f.relation, rng.choice(pool))}"})
    return steps


def micro_part(cfg: RetrievalBenchConfig, out: Path) -> dict[str, Any]:
    """Query modes on the micro-world (correct and wrong-object steps), eval-half facts only."""
    from agents.query import QueryGenerator
    from agents.retrievers.colbert_train import microworld_split
    from agents.retrievers.corpus_spec import load_corpus
    from agents.retrievers.index import load_index
    from envs.core.microworld.config import WorldConfig
    from envs.core.microworld.kb import KnowledgeBase

    spec = f"microworld:{cfg.microworld_seed}"
    corpus = load_corpus(spec)
    kb = KnowledgeBase.generate(WorldConfig(seed=cfg.microworld_seed))
    _, eval_ids = microworld_split(corpus)
    steps = [s for s in micro_steps(kb, cfg.micro_questions, cfg.seed) if s["fact"] in eval_ids]
    gen = QueryGenerator([*QueryGenerator().modes, "question"])
    rows, systems = [], []
    for name, kind, config, opts in _systems(cfg):
        idx = out / "indexes" / f"micro-{name}"
        manifest = _build(kind, corpus, spec, idx, config, cfg.rebuild)
        retriever = load_index(idx, corpus, **opts)
        # cost of the index: latency of one query at a time (the main job's two modes over the steps), build, size
        lat_queries = [gen(s["step"], s["question"], m) for s in steps[:100] for m in ("step", "info_need")]
        _, lat = timed_search(retriever, lat_queries, cfg.k)
        systems.append({"system": name, "kind": kind, **lat, "build_s": manifest["build"]["seconds"],
                        "size_mb": manifest["size_bytes"] / 1e6, "n_docs": manifest["n_docs"],
                        "batched": batched_speedup(retriever, lat_queries[:128], cfg.k)})
        for variant in ("step", "wrong_step"):
            for mode in gen.modes:
                queries = [gen(s[variant], s["question"], mode) for s in steps]
                ranked = [[p.id for p in r] for r in retriever.search(queries, k=cfg.k)]
                m = ranking_metrics(ranked, [[s["fact"]] for s in steps], ks=(1, 3))
                rows.append({"system": name, "steps": "correct" if variant == "step" else "wrong object",
                             "mode": mode, "R@1": m["R@1"], "R@3": m["R@3"], "MRR": m["MRR"]})
    return {"corpus": spec, "n_passages": len(corpus), "n_steps": len(steps),
            "scored_facts": "subjects in the eval half (sha256(subject)[0] odd)", "rows": rows, "systems": systems}


def cache_part(cfg: RetrievalBenchConfig, out: Path) -> dict[str, Any]:
    """Cache and prefetch simulation on micro-world chains with BM25; hit / search latencies."""
    from agents.query import QueryGenerator
    from agents.retrievers.bm25 import BM25Retriever
    from agents.retrievers.cache import CachedRetriever, Prefetcher, QueryCache
    from agents.retrievers.corpus_spec import load_corpus
    from envs.core.microworld.config import ALL_RELATIONS, WorldConfig
    from envs.core.microworld.kb import KnowledgeBase

    corpus = load_corpus(f"microworld:{cfg.microworld_seed}")
    kb = KnowledgeBase.generate(WorldConfig(seed=cfg.microworld_seed))
    bm25 = BM25Retriever.build(corpus)
    steps = micro_steps(kb, 10 ** 6, cfg.seed)
    by_q: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        by_q.setdefault(s["qid"], []).append(s)
    chains = [c for c in by_q.values() if len(c) >= 2][: cfg.prefetch_questions]
    gen = QueryGenerator()
    rows = []
    for mode in gen.modes:
        for prefetch in (False, True):
            cached = CachedRetriever(bm25, QueryCache())
            pf = Prefetcher(cached, relations=ALL_RELATIONS, k=cfg.k, max_queries=16) if prefetch else None
            for chain in chains:
                for s in chain:
                    hits = cached.search([gen(s["step"], s["question"], mode)], k=3)[0]
                    if pf is not None:
                        pf.after_retrieval(hits, s["question"])
            st = cached.stats
            rows.append({"mode": mode, "prefetch": prefetch, "lookups": st.lookups, "hit_rate": st.hit_rate,
                         "prefetch_hit_rate": st.prefetch_hit_rate, "prefetch_precision": st.prefetch_precision,
                         "prefetch_candidates_per_lookup": (pf.issued / st.lookups) if pf else 0.0,
                         "prefetch_searches_per_lookup": st.prefetched / st.lookups})
    # latency of a memory hit, a disk hit and a BM25 search (same queries)
    db = out / "cache_bench.sqlite"
    db.unlink(missing_ok=True)
    queries = list(dict.fromkeys(gen(s["step"], s["question"], "step") for s in steps))[:300]
    warm = CachedRetriever(bm25, QueryCache(path=db))
    t0 = time.perf_counter()
    warm.search(queries, k=cfg.k)
    fill_ms = (time.perf_counter() - t0) * 1000 / len(queries)
    _, search_lat = timed_search(bm25, queries, cfg.k)
    _, mem_lat = timed_search(warm, queries, cfg.k)
    warm.cache.close()
    cold = CachedRetriever(bm25, QueryCache(path=db))  # a new process would see this: disk only
    disk = []
    for q in queries:
        t0 = time.perf_counter()
        cold.search([q], k=cfg.k)
        disk.append((time.perf_counter() - t0) * 1000)
    cold.cache.close()
    return {"retriever": "bm25", "n_chains": len(chains), "rows": rows,
            "latency_ms": {"bm25_search_median": search_lat["median_ms"], "memory_hit_median": mem_lat["median_ms"],
                           "disk_hit_median": statistics.median(disk), "batched_fill_per_query": fill_ms,
                           "disk_hit_rate_new_process": cold.stats.hit_rate}}


# ------------------------------------------------------------------------------------------------ report


def run_bench(cfg: RetrievalBenchConfig) -> dict[str, Any]:
    """Run every part the config enables; returns the JSON-able result (also written under ``cfg.out``)."""
    import torch

    from envs.core.io import write_json, write_text

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"config": cfg.to_dict(), "environment": _environment()}
    t0 = time.perf_counter()
    if cfg.hotpotqa.lower() != "none" and "hotpotqa" in cfg.parts:
        result["hotpotqa"] = hotpot_part(cfg, out)
    if cfg.microworld_seed >= 0 and "microworld" in cfg.parts:
        result["microworld"] = micro_part(cfg, out)
    if cfg.microworld_seed >= 0 and "cache" in cfg.parts:
        result["cache"] = cache_part(cfg, out)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(out / "retrieval_bench.json", result)
    write_text(out / "retrieval_bench.md", format_markdown(result))
    return result


def _environment() -> dict[str, Any]:
    import importlib.metadata as md
    import os
    import platform

    from agents.query import tagger_name

    vers = {}
    for n in ("bm25s", "colbert-ai", "torch", "transformers", "faiss-cpu", "textblob", "PyStemmer"):
        try:
            vers[n] = md.version(n)
        except md.PackageNotFoundError:
            vers[n] = "missing"
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "versions": vers,
            "pos_tagger": tagger_name()}


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """:func:`eval.bench.report.markdown_table` with every column left-aligned (this report's layout)."""
    from eval.bench.report import markdown_table

    return markdown_table(headers, rows, align=["---"] * len(headers))


def format_markdown(result: dict[str, Any]) -> str:
    """The benchmark tables as Markdown."""
    parts = ["# Retrieval benchmark", ""]
    env = result["environment"]
    parts.append(f"Python {env['python']}, {env['cpus']} CPUs, torch threads {result['config']['threads']}; "
                 + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
                 + f"; POS tagger: {env['pos_tagger']}.")
    if "hotpotqa" in result:
        h = result["hotpotqa"]
        parts += ["", f"## HotpotQA ({h['n_passages']} passages; questions {h['eval_questions']} scored, "
                      f"n = {h['n_eval']}; ColBERT trained on {h['colbert_trained_on']}; "
                      f"{h['eval_gold_that_are_train_positives']} of {h['eval_gold_total']} scored gold "
                      "paragraphs are also training positives)", ""]
        parts.append(_table(
            ["system", "R@2", "R@3", "R@5", "R@10", "all@10", "MRR@10", "median ms", "p90 ms", "median CPU ms",
             "p90 CPU ms", "build s", "build CPU s", "size MB", "batch x"],
            [[r["system"], r["R@2"], r.get("R@3", ""), r["R@5"], r["R@10"], r["all@10"], r["MRR"], r["median_ms"],
              r["p90_ms"],
              r.get("median_cpu_ms", ""), r.get("p90_cpu_ms", ""), r["build_s"], r.get("build_cpu_s") or "-",
              r["size_mb"],
              r.get("batched", {}).get("speedup", "")] for r in h["rows"]]))
        parts.append("\nLatency: one query at a time on one thread; wall clock and the thread's CPU time (the "
                     "CPU time is what contention from other processes on a shared machine does not inflate). "
                     "batch x: batched (32) over one-at-a-time throughput in the same run.")
    if "microworld" in result:
        m = result["microworld"]
        parts += ["", f"## Micro-world query modes ({m['n_passages']} passages, {m['n_steps']} chain steps; "
                      f"{m['scored_facts']})", ""]
        parts.append(_table(["system", "steps", "mode", "R@1", "R@3", "MRR@10"],
                            [[r["system"], r["steps"], r["mode"], r["R@1"], r["R@3"], r["MRR"]] for r in m["rows"]]))
        if m.get("systems"):
            parts += ["", "Cost per index (one query at a time on one thread: the step and info_need queries of the "
                          "first 100 steps; batch x: batched over one-at-a-time throughput):", ""]
            parts.append(_table(["system", "median ms", "p90 ms", "median CPU ms", "build s", "size MB", "batch x"],
                                [[r["system"], r["median_ms"], r["p90_ms"], r.get("median_cpu_ms", ""), r["build_s"],
                                  r["size_mb"], r.get("batched", {}).get("speedup", "")] for r in m["systems"]]))
    if "cache" in result:
        c = result["cache"]
        parts += ["", f"## Caches ({c['retriever']}, {c['n_chains']} multi-hop micro-world chains, top-3 lookups)",
                  ""]
        parts.append(_table(["mode", "prefetch", "lookups", "hit rate", "prefetch hit rate", "prefetch precision",
                             "prefetch candidates / lookup", "prefetch searches / lookup"],
                            [[r["mode"], r["prefetch"], r["lookups"], r["hit_rate"], r["prefetch_hit_rate"],
                              r["prefetch_precision"], r["prefetch_candidates_per_lookup"],
                              r["prefetch_searches_per_lookup"]] for r in c["rows"]]))
        parts.append("\nhit rate: share of lookups answered from the cache (steps repeat across questions); prefetch "
                     "hit rate: share answered by an entry a prefetch stored; precision: share of prefetched entries "
                     "used later; searches: prefetch candidates that were not cached yet.")
        lat = c["latency_ms"]
        parts += ["", "| latency (ms) | value |", "|---|---|"]
        parts += [f"| {k} | {v:.4f} |" for k, v in lat.items()]
    parts += ["", f"Total {result['seconds']} s."]
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------ CLI


def register(sub: Any) -> None:
    """Add ``kairos bench retrieval``."""
    from envs.core.config import cli_bool

    p = sub.add_parser("retrieval", help="retrieval quality, index cost, latency, caches (table + JSON)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("--config", default=None, help="YAML with the settings (flags override it)")
    p.add_argument("--retrievers", default=None, help="comma-separated: bm25,colbert")
    p.add_argument("--colbert-checkpoint", action="append", default=None, dest="colbert_checkpoints",
                   help="ColBERT checkpoint directory (repeat for several)")
    for name in ("out", "hotpotqa", "eval_questions"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, help=_help(name))
    for name in ("microworld_seed", "micro_questions", "prefetch_questions", "k", "threads", "seed"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None, help=_help(name))
    p.add_argument("--parts", default=None, help="comma-separated parts: hotpotqa,microworld,cache")
    p.add_argument("--rebuild", action="store_true", default=None, help=_help("rebuild"))
    p.add_argument("--colbert-alt", dest="colbert_alt", default=None, type=cli_bool,
                   help=_help("colbert_alt") + " (true/false)")
    p.set_defaults(func=cmd_bench)


def _help(name: str) -> str:
    import dataclasses

    return next(f.metadata.get("help", "") for f in dataclasses.fields(RetrievalBenchConfig) if f.name == name)


def cmd_bench(args: argparse.Namespace) -> int:
    """``kairos bench retrieval``."""
    data = RetrievalBenchConfig.from_yaml(args.config).to_dict() if args.config else {}
    for k in ("out", "hotpotqa", "eval_questions", "microworld_seed", "micro_questions", "prefetch_questions",
              "k", "threads", "seed", "colbert_alt", "colbert_checkpoints", "rebuild"):
        v = getattr(args, k, None)
        if v is not None:
            data[k] = v
    if args.parts:
        data["parts"] = [r.strip() for r in args.parts.split(",") if r.strip()]
    if args.retrievers:
        data["retrievers"] = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    cfg = RetrievalBenchConfig.from_dict(data)
    result = run_bench(cfg)
    sys.stdout.write(format_markdown(result))
    log.info("wrote %s and %s", Path(cfg.out) / "retrieval_bench.json", Path(cfg.out) / "retrieval_bench.md")
    return 0
