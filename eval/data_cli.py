"""``kairos data``: dataset statistics and conversion to FlashRAG files.

Examples (shell)::

    kairos data stats --dataset hotpotqa --path ../shared/data/hotpotqa/dev_500.jsonl
    kairos data stats --dataset medmcqa --path dev.jsonl --json
    kairos data convert --dataset pubmedqa --path test_set.json --out runs/pubmedqa_flashrag
    kairos data convert --dataset medmcqa --path dev.jsonl --knowledge-path train.jsonl --out runs/medmcqa

``stats`` prints one table (or JSON with ``--json``) to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from envs.core.data.corpora import CORPUS_BUILDERS, medmcqa_knowledge_corpus, paragraph_corpus
from envs.core.data.loaders import (
    LOADERS,
    YES_NO_MAYBE,
    LoadResult,
    load_dataset,
    resolve_dataset,
    write_flashrag,
)
from envs.core.data.types import Corpus, QAExample

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the ``data`` command (with ``stats`` and ``convert``) to the ``kairos`` subparsers."""
    parser = subparsers.add_parser(
        "data", help="QA datasets: statistics, conversion to FlashRAG files",
        description="Load a QA dataset file, check it, print statistics or convert it to FlashRAG JSONL.",
    )
    sub = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda args: _usage(parser))

    stats = sub.add_parser("stats", help="print counts for a dataset file")
    _add_common(stats)
    stats.add_argument("--json", action="store_true", help="print the statistics as JSON instead of a table")
    stats.set_defaults(func=cmd_stats)

    convert = sub.add_parser("convert", help="write FlashRAG questions.jsonl + corpus.jsonl")
    _add_common(convert)
    convert.add_argument("--out", required=True, type=Path, help="output directory")
    convert.add_argument(
        "--knowledge-path", type=Path, default=None,
        help="medmcqa only: a MedMCQA file whose explanations (of questions not in --path) become the "
             "corpus; without it no corpus is written",
    )
    convert.set_defaults(func=cmd_convert)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help=f"dataset name: {', '.join(sorted(LOADERS))}")
    p.add_argument("--path", required=True, type=Path, help="the dataset file")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="log and skip malformed records instead of stopping at the first")
    p.add_argument("--limit", type=int, default=None, help="load only the first N questions")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# ------------------------------------------------------------------------------------------------ stats


def _hist(values: list[Any]) -> dict[str, int]:
    """Value -> count, most frequent first (ties by value)."""
    counts = Counter(values)
    return {str(k): v for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))}


def default_corpus(dataset: str, examples: list[QAExample]) -> Corpus | None:
    """The corpus that comes with the questions themselves (paragraph datasets), else ``None``."""
    if dataset in CORPUS_BUILDERS:
        return CORPUS_BUILDERS.make(dataset, examples, source=dataset)
    if examples and all(isinstance(e.metadata.get("paragraphs"), list) for e in examples):
        return paragraph_corpus(examples, source=dataset)
    return None


def dataset_stats(result: LoadResult) -> dict[str, Any]:
    """Counts describing a loaded dataset (what ``kairos data stats`` prints).

    Always: questions and skipped records. Where applicable: paragraphs per question, supporting
    paragraphs per question, context paragraphs in total, corpus size after deduplication, hop / type /
    level histograms, options per question and gold-option histograms, explanation count (MedMCQA).
    """
    ex = list(result)
    stats: dict[str, Any] = {
        "dataset": result.dataset, "path": str(result.path), "format": result.fmt,
        "questions": len(ex), "skipped bad records": result.skipped,
    }
    if any("paragraphs" in e.metadata for e in ex):
        n_par = [len(e.metadata.get("paragraphs") or []) for e in ex]
        stats["paragraphs per question"] = _hist(n_par)
        stats["supporting paragraphs per question"] = _hist([len(e.gold_passage_ids or []) for e in ex])
        stats["context paragraphs (total)"] = sum(n_par)
        corpus = default_corpus(result.dataset, ex)
        if corpus is not None:
            stats["corpus passages (deduplicated)"] = len(corpus)
            stats["corpus fingerprint"] = corpus.fingerprint()[:16]
    for key, label in (("hops", "hops"), ("type", "question types"), ("level", "levels"),
                       ("category", "categories"), ("subject_name", "subjects")):
        values = [e.metadata[key] for e in ex if e.metadata.get(key) is not None]
        if values:
            h = _hist(values)
            stats[label] = h if len(h) <= 12 else f"{len(h)} distinct"
    if any(e.choices for e in ex):
        stats["options per question"] = _hist([len(e.choices or []) for e in ex])
        if all(e.choices == YES_NO_MAYBE for e in ex):
            stats["gold answers"] = _hist([e.answers[0] for e in ex])
        else:
            stats["gold options"] = _hist([e.answer_letter for e in ex])
    if result.dataset == "medmcqa":
        stats["explanations (non-empty)"] = sum(
            1 for e in ex if isinstance(e.metadata.get("exp"), str) and e.metadata["exp"].strip()
        )
    return stats


def _render(stats: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kairos data stats: {stats['dataset']}", show_header=True)
    table.add_column("statistic", style="bold")
    table.add_column("value", overflow="fold")
    for k, v in stats.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk}: {vv}" for kk, vv in v.items())
        elif isinstance(v, int):
            v = f"{v:,}"
        table.add_row(k, str(v))
    Console(file=sys.stdout, width=max(100, Console().width)).print(table)


def cmd_stats(args: argparse.Namespace) -> int:
    """``kairos data stats``: load, check and count; print a table (or JSON) to stdout."""
    result = load_dataset(args.dataset, args.path, skip_bad_lines=args.skip_bad_lines, limit=args.limit)
    stats = dataset_stats(result)
    if args.json:
        sys.stdout.write(json.dumps(stats, indent=2) + "\n")
    else:
        _render(stats)
    return 0


# ---------------------------------------------------------------------------------------------- convert


def cmd_convert(args: argparse.Namespace) -> int:
    """``kairos data convert``: write FlashRAG ``questions.jsonl`` and, if there is one, ``corpus.jsonl``."""
    dataset = resolve_dataset(args.dataset)
    if args.knowledge_path is not None and dataset != "medmcqa":
        raise ValueError("--knowledge-path is only for --dataset medmcqa")
    examples = load_dataset(dataset, args.path, skip_bad_lines=args.skip_bad_lines, limit=args.limit)
    if args.knowledge_path is not None:
        knowledge = load_dataset("medmcqa", args.knowledge_path, skip_bad_lines=args.skip_bad_lines)
        corpus: Corpus | None = medmcqa_knowledge_corpus(
            knowledge, exclude_ids=[e.id for e in examples], exclude_questions=[e.question for e in examples],
            source=str(args.knowledge_path),
        )
    else:
        corpus = default_corpus(dataset, examples)
        if corpus is None:
            log.warning("%s questions carry no passages: writing questions.jsonl only%s", dataset,
                        " (pass --knowledge-path to build a corpus)" if dataset == "medmcqa" else "")
    paths = write_flashrag(examples, corpus, args.out)
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    return 0
