"""``kairos bench detection``: step-error detection on the micro-world (docs/design.md §4, §6, §8).

Read top to bottom: load the artifact → labelled step datasets of its TRAIN questions (probe training and
thresholds) and TEST questions (evaluation), both from the shared step-dataset cache → for each split:

* **(a) question** — train on steps of the artifact's train questions (70/30 fit / validation by
  question), evaluate on steps of its test questions;
* **(a') entity** — entity-disjoint: a seeded set of subject entities (≥ ``entity_test_frac`` of the test
  steps) is held out; the test part is the test-question steps *about* those subjects, the train part the
  train-question steps about every other subject (validation is entity-disjoint inside it too), so no
  probe ever saw a step about a test subject;

fit the learned probes (PUlSE, ReProbe, and two references: an MLP on the raw last-layer state and one on
step index + step length) on the fit part with early stopping on validation, threshold them at 0.5 (or by
Youden's J on validation), threshold the training-free detectors (CoE-R, CoE-C, PPL, MaxProb, Entropy,
MinProb) by Youden's J on the whole train part — never on test — and report on the test part AUROC,
PR-AUC, F1, precision and recall with question-level bootstrap 95% CIs (the same resamples for every
detector, so ΔAUROC vs PUlSE is a paired comparison). Also: AUROC / PR-AUC per error kind (that kind's
errors vs the correct steps), a calibration check (is a MISLEARNED step confident?), PUlSE ablations
(magnitude / angle / both; layer intervals early / middle / late / whole / design default / "chosen" = best
validation AUROC), and AUROC on non-hedging steps. On the micro-world splits RSUS too (``rsus``, on by default):
U_ent, U_cons, the U_verb proxies (surface features, with or without the MiniLM embedding) and the weighted RSUS,
its components computed on the same steps as the env computes them (:mod:`eval.detection.rsus`; U_cons samples 3
alternatives per step: ≈ 55 ms CPU per step on the micro-world LM, ≈ 8 min for the default splits' ~8,000 steps,
cached beside the step datasets).

* **(b) shifted** — probes and thresholds exactly as in (a) (fitted on the default world's train
  questions, never refitted), evaluated on the test-question steps of a *shifted* micro-world: another KB
  seed and relation mix with its own LM of the same architecture (``shifted_artifact``; built by
  ``kairos microworld build --config configs/experiments/microworld/microworld_shifted.yaml``). It asks whether the trajectory
  features transfer to another model's hidden states and another error mix.

* **(c) benefit** — real data: a real task's *retrieval-benefit* labels (docs/design.md §6; a step is positive when
  retrieving at it raises the answer's quality), made by :mod:`eval.detection.labels` — SmolLM2-135M on HotpotQA dev
  by default, on MedMCQA for PUlSE's home ground. A few hundred labelled questions hold few positives, so (c) is
  k-fold cross-validation by question (``benefit_folds``, default 5): each fold's detectors are fitted / thresholded
  on the other folds exactly as in (a), and the metrics are computed on the pooled out-of-fold scores
  (``benefit_folds=1``: one held-out part of ``benefit_test_frac``). Hidden states and output signals come from
  regenerating the labelled closed-book chains with the same reasoner (:mod:`policies.probes.benefit_dataset`,
  cached). "Error" in the tables means "retrieval helps" here.

* **(d) benefit_ood** — PUlSE's out-of-distribution column on real data: the detectors are fitted and thresholded
  on every question of ``benefit_labels`` (fit / validation by question) and tested on another task's labels
  (``ood_labels``, e.g. MMLU-Pro health when (c) is MedMCQA), made by the same reasoner, never fitted on.

Example (shell)::

    kairos bench detection --out runs/bench/detection            # shipped artifact, ~1,500 + 600 questions
    kairos bench detection --split entity --n-boot 10000
    kairos bench detection --split benefit --out runs/bench/detection_hotpotqa   # needs the benefit labels
    kairos bench detection --config configs/experiments/seed_vllm_pulse/detection_medical.yaml  # MedMCQA -> MMLU-Pro

Writes ``detection_bench.md``, ``detection_bench.json`` and ``roc.png`` under ``--out`` and prints the main
table.

Modules: :mod:`eval.detection.data` (settings, splits, datasets, probe fitting), :mod:`eval.detection.rsus` (RSUS's
components and rows), this one (fitting, scoring and bootstrap of every split; the run and the CLI),
:mod:`eval.detection.report` (ROC figure, Markdown tables).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from eval.detection.data import (
    BENEFIT_SPLITS,
    DETECTORS,
    MICRO_SPLITS,
    SPLIT_LABELS,
    SPLITS,
    DetectionBenchConfig,
    ProbeFitter,
    SplitData,
    benefit_dataset,
    benefit_label_info,
    benefit_source,
    kind_counts,
    load_datasets,
    make_split,
    named_intervals,
    pulse_poolings,
    shifted_test_steps,
    split_detectors,
    training_free_scores,
)
from eval.detection.metrics import calibration, report_split
from eval.detection.report import format_markdown, main_table, plot_roc
from eval.detection.rsus import PROXIES, TRAINING_FREE_RSUS, attach_rsus, rsus_cost, rsus_scores
from eval.stats import (
    auroc,
    youden_threshold,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ one split


def fit_and_score(split: SplitData, cfg: DetectionBenchConfig, model_id: str, progress) -> dict[str, Any]:
    """Fit every learned detector on ``split``'s train part (PUlSE interval search and ablations included),
    threshold every detector on train / validation only, and score the test part (oriented: higher = error)."""
    s = split
    y_tr, y_te = s.train.labels.astype(np.int8), s.test.labels.astype(np.int8)
    y_val = y_tr[s.val_idx]
    fitter = ProbeFitter(s, cfg, model_id)
    n_layers = int(s.train.hidden_mean.shape[1] - 1)
    named = named_intervals(n_layers, model_id)
    if cfg.interval_search == "all":
        candidates = [(a, b) for a in range(n_layers) for b in range(a + 1, n_layers + 1)]
    else:
        candidates = list(dict.fromkeys(named.values()))
    search = cfg.layers == "chosen" or cfg.ablations
    fixed = None if cfg.layers == "chosen" else tuple(int(x) for x in cfg.layers.split(","))
    detectors = split_detectors(s)
    proxies = tuple(p for p in PROXIES if p in detectors)  # RSUS's U_verb proxies (eval.detection.rsus)
    other_poolings = [p for p in pulse_poolings(s) if p != cfg.pulse_pooling] if cfg.ablations else []
    n_fits = 3 + (len(candidates) if search else 0) + (2 if cfg.ablations else 0) + len(other_poolings) \
        + int(fixed is not None and (not search or fixed not in candidates)) + len(proxies)
    task = progress.add_task(f"{SPLIT_LABELS[s.name]}: probes{s.info.get('fold_label', '')}", total=n_fits)
    fits: dict[str, dict[str, Any]] = {}

    def run_fit(key: str, kind: str, layers=None, parts="both", pooling=None) -> dict[str, Any]:
        fits[key] = fitter.fit(kind, layers, parts, pooling)
        progress.advance(task)
        return fits[key]

    # PUlSE interval search (validation AUROC decides; test only reported)
    intervals: dict[str, dict[str, Any]] = {}
    if search:
        for iv in candidates:
            r = run_fit(f"pulse[{iv[0]},{iv[1]}]", "pulse", iv)
            intervals[f"{iv[0]},{iv[1]}"] = {"layers": list(iv), "val_auroc": r["val_auroc"],
                                             "test_auroc": auroc(y_te, r["test"])}
    chosen = max(candidates, key=lambda iv: fits[f"pulse[{iv[0]},{iv[1]}]"]["val_auroc"]) if search else None
    main_iv = fixed if fixed is not None else chosen
    key = f"pulse[{main_iv[0]},{main_iv[1]}]"
    if key not in fits:
        run_fit(key, "pulse", main_iv)
    fits["pulse"] = fits[key]
    for kind in ("reprobe", "ref_last_layer", "ref_step_meta") + proxies:
        run_fit(kind, kind)
    if cfg.ablations:
        for parts in ("magnitude", "angle"):
            run_fit(f"pulse:{parts}", "pulse", main_iv, parts)
        for pooling in other_poolings:  # the step's pooling (arXiv 2605.18549: max-pooling decisive there)
            run_fit(f"pulse:pool={pooling}", "pulse", main_iv, pooling=pooling)

    # scores (oriented: higher = error) and thresholds (train part / validation only)
    free_tr, free_te = training_free_scores(s.train), training_free_scores(s.test)
    rsus = rsus_scores(s, fits) if proxies else {}
    scores: dict[str, np.ndarray] = {}
    thresholds: dict[str, dict[str, Any]] = {}
    for name in detectors:
        _, learned, hi = DETECTORS[name]
        sign = 1.0 if hi else -1.0
        if name in rsus:  # the weighted RSUS rows (eval.detection.rsus); NaN = masked: never fires, ranks last
            r = rsus[name]
            scores[name] = np.nan_to_num(r["test"], nan=-np.inf)
            part, rule = ((y_tr, r["train"]), "Youden's J on the train part") if name in TRAINING_FREE_RSUS \
                else ((y_val, r["train"][s.val_idx]), "Youden's J on validation (the U_verb proxy's held-out part)")
            t = youden_threshold(part[0], np.nan_to_num(part[1], nan=-np.inf))
            thresholds[name] = {"oriented": t, "native": t, "rule": rule}
        elif learned:
            scores[name] = fits[name]["test"]
            if cfg.probe_threshold == "val":
                t, rule = youden_threshold(y_val, fits[name]["val"]), "Youden's J on validation"
            else:
                t, rule = float(cfg.probe_threshold), "fixed p(error) threshold"
            thresholds[name] = {"oriented": t, "native": t, "rule": rule}
        else:
            scores[name] = sign * free_te[name]
            t = youden_threshold(y_tr, sign * free_tr[name])
            thresholds[name] = {"oriented": t, "native": sign * t, "rule": "Youden's J on the train part"}
    return {"y": y_te, "scores": scores, "thresholds": thresholds, "fits": fits, "intervals": intervals,
            "chosen": chosen, "main_iv": main_iv, "named": named, "fixed": fixed, "pooling": cfg.pulse_pooling,
            "other_poolings": other_poolings}


def evaluate_split(split: SplitData, cfg: DetectionBenchConfig, model_id: str, progress) -> dict[str, Any]:
    """Every detector, per-kind table, ablations and hedging on one split (test part only for numbers)."""
    return report_split(split.name, split.info, split.test, [fit_and_score(split, cfg, model_id, progress)],
                        cfg, progress)


def evaluate_folds(name: str, ds, cfg: DetectionBenchConfig, model_id: str, progress, k: int) -> dict[str, Any]:
    """k-fold cross-validation by question: every question is tested once, by detectors fitted (and
    thresholded) on the other folds; metrics on the pooled out-of-fold scores, each step judged against its
    own fold's threshold. For small labelled sets (split (c)), where one held-out part has few positives."""
    from policies.probes.splits import group_kfold, group_split

    try:
        fold = group_kfold(ds.question_ids, k, cfg.seed)
    except ValueError as e:
        raise ValueError(f"split '{name}': {e}") from None
    n_questions = int(np.unique(np.asarray(ds.question_ids).astype(str)).size)
    parts, test_idx, sizes = [], [], []
    for f in range(k):
        te, tr = np.nonzero(fold == f)[0], np.nonzero(fold != f)[0]
        train, test = ds.subset(tr), ds.subset(te)
        fit_idx, val_idx = group_split(train.question_ids, cfg.val_frac, cfg.seed + 1 + f)
        sd = SplitData(name, train, test, fit_idx, val_idx, {"fold_label": f" (fold {f + 1}/{k})"})
        parts.append(fit_and_score(sd, cfg, model_id, progress))
        test_idx.append(te)
        sizes.append((len(tr), len(fit_idx), len(val_idx)))
    test = ds.subset(np.concatenate(test_idx))
    info = {"description": SPLITS[name] + f" ({k}-fold cross-validation by question; metrics on the pooled "
                                          "out-of-fold scores)",
            "folds": k, "train_steps": int(np.mean([a for a, _, _ in sizes])),
            "fit_steps": int(np.mean([b for _, b, _ in sizes])), "val_steps": int(np.mean([c for _, _, c in sizes])),
            "val_split": "by question, inside each fold's train part", "test_steps": len(test),
            "train_questions": int(round(n_questions * (k - 1) / k)), "test_questions": n_questions,
            "train_error_rate": float(ds.labels.mean()), "test_error_rate": float(test.labels.mean()),
            "test_kinds": kind_counts(test), "n_subjects_test": int(np.unique(test.subjects).size),
            **benefit_label_info(ds)}
    return report_split(name, info, test, parts, cfg, progress)


# ------------------------------------------------------------------------------------------------ run


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), disable=not enabled)


def run_bench(cfg: DetectionBenchConfig) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-able result (also written under ``cfg.out`` with MD and PNG)."""
    import torch

    from envs.core.io import write_json, write_text

    torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    result: dict[str, Any] = {"config": cfg.to_dict(), "environment": _environment(), "data": {}, "splits": {}}
    micro = [s for s in cfg.splits if s in MICRO_SPLITS]
    with _progress(cfg.progress) as progress:
        if micro:
            _run_micro(cfg, micro, result, timings, progress)
        if any(s in cfg.splits for s in BENEFIT_SPLITS):
            _run_benefit(cfg, result, timings, progress)
    timings["total"] = round(time.perf_counter() - t_start, 1)
    result["seconds"] = timings
    plot_roc(result, out / "roc.png")
    result = _finite(result)  # NaN (an undefined metric) -> null: strict JSON
    write_json(out / "detection_bench.json", result)
    write_text(out / "detection_bench.md", format_markdown(result))
    return result


def _benefit_data(labels: str, config: str, split: str, ds) -> dict[str, Any]:
    """Where a benefit dataset comes from and what it holds (``result["data"]`` of splits (c) and (d))."""
    return {"labels": labels, "config": config, "env_split": split, "model_id": ds.meta["model_id"],
            "questions": int(ds.meta["n_questions"]), "steps": len(ds), "positive_rate": float(ds.labels.mean()),
            "label_names": {str(k): int(v) for k, v in zip(*np.unique(ds.label_names, return_counts=True))},
            "regenerated_at_batch_1": ds.meta.get("regenerated_at_batch_1"),
            "n_layers": int(ds.hidden_mean.shape[1] - 1), "hidden_size": int(ds.hidden_mean.shape[2])}


def _run_benefit(cfg: DetectionBenchConfig, result: dict[str, Any], timings: dict[str, float], progress) -> None:
    """Splits (c) and (d): one task's benefit labels (k-fold), and the detectors fitted on them tested on another's."""
    if "benefit_ood" in cfg.splits:  # both label files exist before either's chains are regenerated
        benefit_source(cfg, ood=True)
    t0 = time.perf_counter()
    ds = benefit_dataset(cfg, progress)
    model_id = ds.meta["model_id"]
    result["data"]["benefit"] = _benefit_data(cfg.benefit_labels, cfg.benefit_config, cfg.benefit_split, ds)
    if "benefit" in cfg.splits:
        result["splits"]["benefit"] = (
            evaluate_folds("benefit", ds, cfg, model_id, progress, cfg.benefit_folds) if cfg.benefit_folds > 1 else
            evaluate_split(make_split("benefit", ds, ds, cfg), cfg, model_id, progress))
        timings["split_benefit"] = round(time.perf_counter() - t0, 1)
    if "benefit_ood" in cfg.splits:
        t0 = time.perf_counter()
        ood = benefit_dataset(cfg, progress, ood=True)
        if ood.meta["model_id"] != model_id or ood.hidden_mean.shape[1:] != ds.hidden_mean.shape[1:]:
            raise ValueError(f"split 'benefit_ood': {cfg.ood_labels} was made by {ood.meta['model_id']} "
                             f"(hidden {tuple(ood.hidden_mean.shape[1:])}), {cfg.benefit_labels} by {model_id} "
                             f"(hidden {tuple(ds.hidden_mean.shape[1:])}); the detectors need the same reasoner")
        result["data"]["benefit_ood"] = _benefit_data(cfg.ood_labels, cfg.ood_config, cfg.ood_split, ood)
        result["splits"]["benefit_ood"] = evaluate_split(make_split("benefit_ood", ds, ood, cfg), cfg, model_id,
                                                         progress)
        timings["split_benefit_ood"] = round(time.perf_counter() - t0, 1)


def _run_micro(cfg: DetectionBenchConfig, splits: list[str], result: dict[str, Any], timings: dict[str, float],
               progress) -> None:
    """Splits (a), (a') and (b): the micro-world artifact's step datasets, probes and calibration."""
    from envs.core.microworld.artifact import load_artifact, world_model_id

    world = load_artifact(cfg.artifact or None, threads=cfg.threads)
    model_id = world_model_id(world)
    result.update(artifact=str(world.path), model_id=model_id)
    t0 = time.perf_counter()
    train_ds, test_ds = load_datasets(world, cfg, progress)
    timings["datasets"] = round(time.perf_counter() - t0, 1)
    if cfg.rsus:  # RSUS's components on the same steps (the chains replayed; k samples per step; cached)
        t0 = time.perf_counter()
        train_ds = attach_rsus(world, train_ds, cfg.train_split, cfg.n_train_questions or None, cfg, progress)
        test_ds = attach_rsus(world, test_ds, cfg.test_split, cfg.n_test_questions or None, cfg, progress)
        timings["rsus_components"] = round(time.perf_counter() - t0, 1)
        result["data"]["rsus"] = {"train": rsus_cost(train_ds), "test": rsus_cost(test_ds),
                                  "n_samples": cfg.rsus_samples}
    result["data"].update({
        "train": {"split": cfg.train_split, "questions": int(train_ds.meta.get("n_questions", 0)),
                  "steps": len(train_ds), "error_rate": float(train_ds.labels.mean()),
                  "kinds": kind_counts(train_ds)},
        "test": {"split": cfg.test_split, "questions": int(test_ds.meta.get("n_questions", 0)),
                 "steps": len(test_ds), "error_rate": float(test_ds.labels.mean()), "kinds": kind_counts(test_ds)},
        "n_layers": int(train_ds.hidden_mean.shape[1] - 1), "hidden_size": int(train_ds.hidden_mean.shape[2]),
    })
    for name in splits:
        t0 = time.perf_counter()
        test_part = test_ds
        if name == "shifted":
            test_part, result["data"]["shifted"] = shifted_test_steps(cfg, world, progress)
        result["splits"][name] = evaluate_split(make_split(name, train_ds, test_part, cfg), cfg, model_id, progress)
        timings[f"split_{name}"] = round(time.perf_counter() - t0, 1)
    # calibration on every test-question step; MinProb's flag threshold from the train questions
    t_min = -youden_threshold(train_ds.labels, -train_ds.output_column("minprob"))
    result["calibration"] = {"steps": f"all {len(test_ds)} steps of the '{cfg.test_split}' questions",
                             "minprob_threshold": t_min, **calibration(test_ds, t_min)}


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _environment() -> dict[str, Any]:
    import os
    import platform

    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------------------ CLI


def register(sub: Any) -> None:
    """Add ``kairos bench detection``."""
    p = sub.add_parser("detection", help="step-error / retrieval-benefit detection (micro-world splits, real tasks' "
                                         "benefit labels, in and out of distribution): PUlSE, ReProbe, CoE, "
                                         "output signals (table + JSON + ROC PNG)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--config", default=None, help="YAML with DetectionBenchConfig keys (flags override it)")
    p.add_argument("--split", "--splits", dest="split_list", default=None, action="append",
                   help="split(s), comma-separated or repeated: question, entity, shifted, benefit, benefit_ood "
                        "(default: question,entity)")
    DetectionBenchConfig.add_cli_args(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """``kairos bench detection``."""
    data = DetectionBenchConfig.from_yaml(args.config).to_dict() if args.config else {}
    data.update(DetectionBenchConfig.cli_overrides(args))
    if args.split_list:
        data["splits"] = [s.strip() for item in args.split_list for s in item.split(",") if s.strip()]
    cfg = DetectionBenchConfig.from_dict(data)
    result = run_bench(cfg)
    sys.stdout.write(main_table(result) + "\n")
    log.info("wrote %s, %s and %s (%.0f s)", *(Path(cfg.out) / f for f in
                                              ("detection_bench.md", "detection_bench.json", "roc.png")),
             result["seconds"]["total"])
    return 0
