"""Step datasets for real data: the retrieval-benefit labels joined with the reasoner's per-step states.

:mod:`eval.detection.labels` labels every non-answer step of a question's closed-book (never-retrieve) chain
with ``benefit = quality(retrieve at this step) − quality(never)``. The probes need, per labelled step, what
the micro-world's :class:`~policies.probes.dataset.StepDataset` holds: the pooled per-layer states and the
output-level signals of the generation pass. :func:`benefit_step_dataset` regenerates those closed-book
chains with the same reasoner the labels were made with (batched, hidden states captured), checks every step
text against the label file (a question whose chain differs at batch ``batch`` is regenerated alone, at
batch 1 like the labelling env; one that still differs is an error naming the file and line) and caches the
result as ``.npz`` keyed by the label rows, the env config and the model.

Label: 1 = "retrieval helps" (``benefit > min_benefit``, default 0); ``label_names`` keeps helps / neutral /
hurts, ``subjects`` holds the question id (no entity is parsed on real data).

Example::

    from envs.env_config import env_config_from_file

    cfg = env_config_from_file("configs/bench_hotpotqa_bm25.yaml", split="dev[0:500:2]")
    ds = benefit_step_dataset("runs/labels/hotpotqa_benefit.jsonl", cfg)
    X = FeatureSpec("pulse", layers=(7, 27)).compute(hidden_mean=ds.hidden_mean)
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from agents.reasoners.registry import reasoner_model_id
from policies.probes.dataset import (
    _ARRAYS,
    DATASET_VERSION,
    StepDataset,
    default_cache_dir,
    token_pooled_columns,
)

log = logging.getLogger(__name__)


def _label_name(benefit: float, min_benefit: float) -> str:
    return "helps" if benefit > min_benefit else ("hurts" if benefit < 0 else "neutral")


def benefit_cache_path(cache_dir: str | Path | None, rows: dict[int, dict[str, Any]], env_namespace: str,
                       model_id: str, min_benefit: float) -> Path:
    """The ``.npz`` of a benefit dataset: keyed by every label row's question, step texts and benefits, the
    env's cache namespace (reasoner, corpus, settings) and the model id."""
    h = hashlib.sha256()
    h.update(f"{DATASET_VERSION}|benefit|{env_namespace}|{model_id}|{min_benefit}".encode())
    for qi in sorted(rows):
        r = rows[qi]
        h.update(json.dumps([qi, r["question_id"], [(s["index"], s["text"], s["benefit"]) for s in r["steps"]]],
                            ensure_ascii=False).encode())
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / f"benefit-{h.hexdigest()[:16]}.npz"


def benefit_step_dataset(labels_path: str | Path, env_config, cache_dir: str | Path | None = None,
                         batch: int = 8, min_benefit: float = 0.0, use_cache: bool = True,
                         progress=None, components=None) -> StepDataset:
    """Labelled steps with hidden states for every question of a benefit-label file.

    Args:
        labels_path: the JSONL written by :mod:`eval.detection.labels`.
        env_config: the :class:`~envs.env_config.EnvConfig` the labels were made with (same task, split,
            reasoner and ``max_steps``); its question ids are checked against the file's.
        cache_dir: where the ``.npz`` lives (default ``$KAIROS_CACHE/steps``).
        batch: questions generated together (1 reproduces the labelling env's generation exactly).
        min_benefit: a step is positive ("retrieval helps") when its benefit exceeds this.
        use_cache: read an existing cache file (it is always written).
        progress: optional ``callable(n_done_questions)`` called after each batch.
        components: prebuilt env components (tests); default built from ``env_config``.
    """
    from envs.components import build_components

    path = Path(labels_path)
    rows, lines = _read_labels(path)
    c = components if components is not None else build_components(env_config)
    reasoner = c.reasoner
    if not getattr(reasoner, "capabilities", None) or not reasoner.capabilities.hidden_states:
        raise ValueError(f"reasoner '{env_config.reasoner}' exposes no hidden states: the PUlSE / ReProbe "
                         "probes cannot be trained on it")
    model_id = reasoner_model_id(reasoner, env_config.reasoner)
    out_path = benefit_cache_path(cache_dir, rows, c.namespace, model_id, min_benefit)
    if use_cache and out_path.is_file():
        log.info("benefit dataset: cached %s", out_path)
        return StepDataset.load(out_path)
    _check_questions(c, env_config, rows, lines, path)
    order = sorted(rows)
    chains, regenerated = _closed_book_chains(c, env_config, rows, lines, path, batch, progress)
    cols, skipped = _columns(rows, order, chains, min_benefit)
    if not cols["labels"]:
        raise ValueError(f"{path}: no labelled step with content tokens")
    ds = StepDataset.from_columns(cols, {
        "version": DATASET_VERSION, "source": "benefit", "labels": str(path), "model_id": model_id,
        "split": env_config.split, "n_questions": len(order), "skipped_steps": skipped,
        "regenerated_at_batch_1": len(regenerated), "min_benefit": min_benefit})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    ds.save(out_path)
    log.info("benefit dataset: %d steps of %d questions (%.1f%% helped; %d regenerated at batch 1, %d skipped) "
             "-> %s", len(ds), len(order), 100 * ds.labels.mean(), len(regenerated), skipped, out_path)
    return ds


def _read_labels(path: Path) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """The label file's rows by question index, and each row's line (for the errors)."""
    from envs.core.io import read_done_rows

    if not path.is_file():
        raise FileNotFoundError(f"no benefit-label file at {path} (make one with `python -m eval.detection.labels "
                                f"--config … --split … --out {path}`)")
    lines: dict[int, int] = {}
    rows = read_done_rows(path, require=("question_id", "quality_never", "steps"), line_of=lines)
    if not rows:
        raise ValueError(f"{path}: no labelled question")
    for qi, r in rows.items():
        bad = [s for s in r["steps"] if not isinstance(s, dict) or not {"index", "text", "benefit"} <= set(s)]
        if bad:
            raise ValueError(f"{path}:{lines[qi]}: a step without 'index', 'text' or 'benefit': {bad[0]!r}")
    return rows, lines


def _check_questions(c, env_config, rows: dict[int, dict[str, Any]], lines: dict[int, int], path: Path) -> None:
    """Every labelled question is the env's question of that index (else the labels come from another split)."""
    questions = c.questions
    for qi, r in rows.items():
        where = f"{path}:{lines[qi]}"
        if not 0 <= qi < len(questions):
            raise ValueError(f"{where}: question_index {qi} is outside the env's split '{env_config.split}' "
                             f"({len(questions)} questions) — were the labels made on another split?")
        if c.question_id(questions[qi]) != r["question_id"]:
            raise ValueError(f"{where}: question {qi} is '{c.question_id(questions[qi])}' in the env's split "
                             f"'{env_config.split}' but '{r['question_id']}' in the labels — another split?")


def _closed_book_chains(c, env_config, rows: dict[int, dict[str, Any]], lines: dict[int, int], path: Path,
                        batch: int, progress) -> tuple[dict[int, list], list[int]]:
    """Each labelled question's closed-book chain, ``batch`` at a time, checked against the labelled step texts
    (a mismatch is regenerated alone, at batch 1; one that still differs is an error). Returns the chains and the
    questions regenerated at batch 1."""
    reasoner, questions, max_steps = c.reasoner, c.questions, env_config.max_steps

    def matches(qi: int, chain: list) -> bool:
        by_index = {s.index: s for s in chain}
        return all(s["index"] in by_index and by_index[s["index"]].text == s["text"] for s in rows[qi]["steps"])

    order = sorted(rows)
    chains: dict[int, list] = {}
    regenerated, done = [], 0
    for start in range(0, len(order), max(1, batch)):
        part = order[start: start + batch]
        got = reasoner.run_chains([c.question_text(questions[qi]) for qi in part], max_steps=max_steps)
        for qi, chain in zip(part, got):
            if not matches(qi, chain) and batch > 1:
                chain = reasoner.run_chains([c.question_text(questions[qi])], max_steps=max_steps)[0]
                regenerated.append(qi)
            if not matches(qi, chain):
                want = [s["text"] for s in rows[qi]["steps"]]
                raise ValueError(f"{path}:{lines[qi]}: the reasoner's closed-book chain for question {qi} "
                                 f"is not the labelled one ({[s.text for s in chain]} vs {want}) — labels made "
                                 "with another model or generation settings?")
            chains[qi] = chain
        done += len(part)
        if progress is not None:
            progress(done)
    return chains, regenerated


def _columns(rows: dict[int, dict[str, Any]], order: list[int], chains: dict[int, list],
             min_benefit: float) -> tuple[dict[str, list], int]:
    """The dataset's columns, one entry per labelled step with content tokens; and how many steps had none."""
    from agents.signals.output import OutputGroup

    out_sig = OutputGroup()
    cols: dict[str, list] = {k: [] for k in _ARRAYS}
    skipped = 0
    for qi in order:
        r = rows[qi]
        by_index = {s.index: s for s in chains[qi]}
        for lab in r["steps"]:
            step = by_index[lab["index"]]
            if step.hidden_mean is None or step.logprobs is None or len(step.logprobs) == 0:
                skipped += 1
                continue
            name = _label_name(float(lab["benefit"]), min_benefit)
            cols["hidden_mean"].append(step.hidden_mean.astype(np.float32))
            cols["hidden_last"].append(step.hidden_last.astype(np.float32))
            cols["output"].append(out_sig(step))
            cols["labels"].append(int(name == "helps"))
            cols["label_names"].append(name)
            cols["error_kinds"].append("retrieval_helps" if name == "helps" else "")
            cols["question_ids"].append(r["question_id"])
            cols["subjects"].append(r["question_id"])
            cols["relations"].append("")
            cols["step_index"].append(int(lab["index"]))
            cols["hops"].append(2)
            cols["question_correct"].append(float(r["quality_never"]) >= 0.5)
            cols["contents"].append(step.content)
            for k, v in token_pooled_columns(step).items():
                cols.setdefault(k, []).append(v)
    return cols, skipped
