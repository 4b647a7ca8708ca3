"""``kairos index build | search | info`` and ``kairos retriever train-colbert``.

Examples (shell)::

    kairos index build --retriever bm25 --corpus microworld --out runs/index/micro-bm25
    kairos index build --retriever bm25 --corpus hotpotqa:../shared/data/hotpotqa/dev_500.jsonl \\
        --out runs/index/hotpot-bm25
    kairos retriever train-colbert --out runs/colbert/minilm-hotpot
    kairos index build --retriever colbert --checkpoint runs/colbert/minilm-hotpot \\
        --corpus hotpotqa:../shared/data/hotpotqa/dev_500.jsonl --out runs/index/hotpot-colbert
    kairos index search --index runs/index/hotpot-bm25 -k 5 "Who directed Sinister?"
    kairos index info --index runs/index/hotpot-colbert --check

Search results and ``info`` go to stdout (``--json`` for machine-readable output); logs go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
import types
import typing
from typing import Any

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ config flags


def _add_config_flags(parser: argparse.ArgumentParser, *classes: type, skip: tuple[str, ...] = ()) -> None:
    """One ``--flag`` per scalar field of the config classes (shared names added once; Optional scalars too)."""
    from envs.core.config import cli_bool

    seen: set[str] = set(skip)
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in seen:
                continue
            tp = hints[f.name]
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1
            base = args[0] if optional else tp
            if typing.get_origin(base) is typing.Literal:
                choices = list(typing.get_args(base))
                parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, choices=choices,
                                    help=f.metadata.get("help", ""))
            elif base is bool:
                parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, type=cli_bool,
                                    help=f.metadata.get("help", "") + " (true/false)")
            elif base in (int, float, str):
                parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, type=base,
                                    help=f.metadata.get("help", ""))
            else:
                continue
            seen.add(f.name)


def _config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """``cls`` from ``--config`` YAML (if given) with the command-line flags on top."""
    data: dict[str, Any] = {}
    if getattr(args, "config", None):
        data = cls.from_yaml(args.config).to_dict()
    for f in dataclasses.fields(cls):
        v = getattr(args, f.name, None)
        if v is not None:
            data[f.name] = v
    return cls.from_dict(data)


# ------------------------------------------------------------------------------------------------ index


def register_index(sub: Any) -> None:
    """Add ``kairos index`` (build, search, info)."""
    from agents.retrievers.bm25 import BM25Config
    from agents.retrievers.colbert import ColBERTIndexConfig
    from agents.retrievers.corpus_spec import SPEC_HELP
    from agents.retrievers.index import RETRIEVERS

    p = sub.add_parser("index", help="build, search and inspect retrieval indexes (BM25, ColBERT/PLAID)",
                       description="Build, search and inspect retrieval indexes. Every load checks the corpus "
                                   "fingerprint, document count, file sizes and a known-answer probe.")
    isub = p.add_subparsers(dest="index_command", metavar="ACTION")
    p.set_defaults(func=lambda a: p.print_help(sys.stderr) or 2)

    b = isub.add_parser("build", help="index a corpus")
    b.add_argument("--retriever", required=True, choices=RETRIEVERS.names(), help="index kind")
    b.add_argument("--corpus", required=True, help=SPEC_HELP)
    b.add_argument("--out", required=True, help="index directory")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index in --out")
    b.add_argument("--config", default=None, help="YAML file with the index settings (flags override it)")
    b.add_argument("--probe-n", type=int, default=3, help="known-answer probe passages (0: no probe)")
    b.add_argument("--probe-k", type=int, default=10, help="a probe passage must rank within this many")
    b.add_argument("--threads", type=int, default=1, help="torch threads (colbert)")
    _add_config_flags(b, BM25Config, ColBERTIndexConfig)
    b.set_defaults(func=cmd_build)

    s = isub.add_parser("search", help="search an index")
    s.add_argument("--index", required=True, help="index directory")
    s.add_argument("queries", nargs="+", help="one or more queries")
    s.add_argument("-k", type=int, default=5, help="results per query")
    s.add_argument("--corpus", default=None, help="corpus spec (default: the one recorded at build time)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--threads", type=int, default=1, help="torch threads (colbert)")
    _add_search_flags(s)
    s.set_defaults(func=cmd_search)

    i = isub.add_parser("info", help="print an index's manifest")
    i.add_argument("--index", required=True, help="index directory")
    i.add_argument("--check", action="store_true", help="also load it and run every check (corpus, files, probe)")
    i.add_argument("--json", action="store_true", help="print the manifest as JSON")
    i.set_defaults(func=cmd_info)


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ncells", type=int, default=None, help="colbert: IVF cells probed per query token")
    p.add_argument("--centroid-score-threshold", type=float, default=None, help="colbert: centroid pruning")
    p.add_argument("--ndocs", type=int, default=None, help="colbert: candidates scored exactly")


def _search_options(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in dict(ncells=args.ncells, centroid_score_threshold=args.centroid_score_threshold,
                                  ndocs=args.ndocs).items() if v is not None}


def cmd_build(args: argparse.Namespace) -> int:
    """``kairos index build``."""
    import torch

    from agents.retrievers.bm25 import BM25Config
    from agents.retrievers.colbert import ColBERTIndexConfig
    from agents.retrievers.corpus_spec import canonical_spec, load_corpus
    from agents.retrievers.index import build_index, retriever_class

    torch.set_num_threads(args.threads)
    cls = retriever_class(args.retriever)
    own = {f.name for f in dataclasses.fields(cls.config_class)}
    foreign = sorted({f.name for c in (BM25Config, ColBERTIndexConfig) for f in dataclasses.fields(c)
                      if f.name not in own and getattr(args, f.name, None) is not None})
    if foreign:
        raise ValueError(f"--{foreign[0].replace('_', '-')} is not a {args.retriever} setting")
    cfg = _config_from_args(cls.config_class, args)
    corpus = load_corpus(args.corpus)
    manifest = build_index(args.retriever, corpus, args.out, cfg, corpus_spec=canonical_spec(args.corpus),
                           overwrite=args.overwrite, probe_n=args.probe_n, probe_k=args.probe_k)
    print(json.dumps({k: manifest[k] for k in ("kind", "n_docs", "size_bytes", "build", "probe")}, indent=2))
    return 0


def _load(args: argparse.Namespace) -> Any:
    from agents.retrievers.corpus_spec import load_corpus
    from agents.retrievers.index import load_index

    corpus = load_corpus(args.corpus) if getattr(args, "corpus", None) else None
    opts = _search_options(args) if hasattr(args, "ncells") else {}
    return load_index(args.index, corpus, **opts)


def cmd_search(args: argparse.Namespace) -> int:
    """``kairos index search``."""
    import torch

    torch.set_num_threads(args.threads)
    retriever = _load(args)
    t0 = time.perf_counter()
    results = retriever.search(args.queries, k=args.k)
    ms = (time.perf_counter() - t0) * 1000
    if args.json:
        print(json.dumps([{"query": q, "results": [{"rank": r + 1, "id": p.id, "score": round(p.score, 4),
                                                     "title": p.title, "text": p.text} for r, p in enumerate(hits)]}
                          for q, hits in zip(args.queries, results)], indent=2, ensure_ascii=False))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=max(110, Console().width))
    for q, hits in zip(args.queries, results):
        table = Table(title=f"{q}", show_header=True)
        for col in ("rank", "score", "id", "title", "text"):
            table.add_column(col, overflow="fold", max_width=70 if col == "text" else None)
        for r, p in enumerate(hits):
            text = p.text if len(p.text) <= 200 else p.text[:197] + "..."
            table.add_row(str(r + 1), f"{p.score:.3f}", p.id, p.title, text)
        if not hits:
            table.add_row("-", "-", "-", "-", "(no passage shares a term with the query)")
        console.print(table)
    log.info("%d queries in %.1f ms (%s)", len(args.queries), ms, retriever.describe()["kind"])
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """``kairos index info``."""
    from agents.retrievers.index import index_info

    manifest = index_info(args.index)
    if args.check:
        t0 = time.perf_counter()
        _load(args)
        manifest = {**manifest, "check": f"passed in {time.perf_counter() - t0:.2f} s "
                                         "(corpus fingerprint, document count, files, known-answer probe)"}
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    rows = [("kind", manifest["kind"]), ("passages", manifest["n_docs"]),
            ("corpus", manifest["corpus"].get("spec") or manifest["corpus"]["source"]),
            ("corpus fingerprint", manifest["corpus"]["fingerprint"][:16]),
            ("size", f"{manifest['size_bytes'] / 1e6:.2f} MB in {len(manifest['files'])} files"),
            ("built", f"{manifest['build']['built_at']} in {manifest['build']['seconds']:.1f} s"),
            ("versions", ", ".join(f"{k} {v}" for k, v in manifest["build"]["versions"].items())),
            ("settings", json.dumps(manifest["config"])),
            ("probe", f"{len(manifest['probe']['ids'])} passages, ranks {manifest['probe']['ranks']} "
                      f"(must be <= {manifest['probe']['k']})")]
    if "check" in manifest:
        rows.append(("check", manifest["check"]))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


# --------------------------------------------------------------------------------------------- retriever


def register_retriever(sub: Any) -> None:
    """Add ``kairos retriever`` (train-colbert)."""
    from agents.retrievers.colbert_train import ColBERTTrainConfig

    p = sub.add_parser("retriever", help="retriever models: train a ColBERT checkpoint offline")
    rsub = p.add_subparsers(dest="retriever_command", metavar="ACTION")
    p.set_defaults(func=lambda a: p.print_help(sys.stderr) or 2)
    t = rsub.add_parser(
        "train-colbert", help="fine-tune all-MiniLM-L6-v2 as ColBERT on micro-world + HotpotQA triples",
        description="Mine (query, positive, BM25 hard negative) triples from the micro-world (train-half "
                    "subjects) and HotpotQA (--train-questions), train in-process on CPU, save a ColBERT "
                    "checkpoint directory usable by `kairos index build --retriever colbert`.")
    t.add_argument("--config", default=None, help="YAML file with the training settings (flags override it)")
    ColBERTTrainConfig.add_cli_args(t)
    t.set_defaults(func=cmd_train_colbert)


def cmd_train_colbert(args: argparse.Namespace) -> int:
    """``kairos retriever train-colbert``."""
    from agents.retrievers.colbert_train import ColBERTTrainConfig, train_colbert

    cfg = _config_from_args(ColBERTTrainConfig, args)
    report = train_colbert(cfg)
    print(json.dumps({k: report[k] for k in ("data", "steps", "train_seconds", "total_seconds")}, indent=2))
    first, last = report["losses"][:5], report["losses"][-5:]
    if first:
        log.info("loss: first steps %s ... last steps %s", first, last)
    return 0
