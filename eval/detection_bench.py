"""``kairos bench detection``: step-error detection on the micro-world (DESIGN §4, §6, §8).

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
validation AUROC), and AUROC on non-hedging steps.

* **(b) shifted** — probes and thresholds exactly as in (a) (fitted on the default world's train
  questions, never refitted), evaluated on the test-question steps of a *shifted* micro-world: another KB
  seed and relation mix with its own LM of the same architecture (``shifted_artifact``; built by
  ``kairos microworld build --config configs/microworld_shifted.yaml``). It asks whether the trajectory
  features transfer to another model's hidden states and another error mix.

* **(c) hotpotqa** — real data: SmolLM2-135M on HotpotQA dev with *retrieval-benefit* labels (DESIGN §6; a
  step is positive when retrieving at it raises the answer's F1), made by :mod:`eval.benefit_labels`. A few
  hundred labelled questions hold few positives, so (c) is k-fold cross-validation by question
  (``benefit_folds``, default 5): each fold's detectors are fitted / thresholded on the other folds exactly as in
  (a), and the metrics are computed on the pooled out-of-fold scores (``benefit_folds=1``: one held-out part of
  ``benefit_test_frac``). Hidden states and
  output signals come from regenerating the labelled closed-book chains with the same reasoner
  (:mod:`policies.probes.benefit_dataset`, cached). "Error" in the tables means "retrieval helps" here.

Example (shell)::

    kairos bench detection --out runs/bench/detection            # shipped artifact, ~1,500 + 600 questions
    kairos bench detection --split entity --n-boot 10000
    kairos bench detection --split hotpotqa --out runs/bench/detection_hotpotqa   # needs the benefit labels

Writes ``detection_bench.md``, ``detection_bench.json`` and ``roc.png`` under ``--out`` and prints the main
table.

Modules: :mod:`eval.detection_data` (settings, splits, datasets, probe fitting), this one (fitting, scoring and
bootstrap of every split; the run and the CLI), :mod:`eval.detection_report` (ROC figure, Markdown tables).
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

from eval.detection_data import (
    DETECTORS,
    HEDGE_RE,
    KIND_ORDER,
    METRICS,
    MICRO_SPLITS,
    SPLIT_LABELS,
    SPLITS,
    DetectionBenchConfig,
    ProbeFitter,
    SplitData,
    benefit_dataset,
    benefit_label_info,
    kind_counts,
    load_datasets,
    make_split,
    named_intervals,
    shifted_test_steps,
    training_free_scores,
)
from eval.detection_report import format_markdown, main_table, plot_roc
from eval.stats import (
    auroc,
    average_precision,
    binary_stats,
    group_bootstrap_indices,
    percentile_interval,
    roc_curve,
    youden_threshold,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ metrics


def point_metrics(y: np.ndarray, o: np.ndarray, t: float | np.ndarray) -> dict[str, float]:
    """AUROC, PR-AUC, F1 / precision / recall and fire rate of oriented scores ``o`` (fire when ``o >= t``;
    ``t`` a number or one threshold per step, e.g. each cross-validation fold's own; NaN never fires)."""
    t = np.broadcast_to(np.asarray(t, dtype=float), o.shape)
    fired = np.where(np.isnan(t), False, o >= np.nan_to_num(t))
    return {"auroc": auroc(y, o), "pr_auc": average_precision(y, o), **binary_stats(y, fired),
            "fire_rate": float(fired.mean()) if fired.size else math.nan}


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
    n_fits = 3 + (len(candidates) if search else 0) + (2 if cfg.ablations else 0) \
        + int(fixed is not None and (not search or fixed not in candidates))
    task = progress.add_task(f"{SPLIT_LABELS[s.name]}: probes{s.info.get('fold_label', '')}", total=n_fits)
    fits: dict[str, dict[str, Any]] = {}

    def run_fit(key: str, kind: str, layers=None, parts="both") -> dict[str, Any]:
        fits[key] = fitter.fit(kind, layers, parts)
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
    for kind in ("reprobe", "ref_last_layer", "ref_step_meta"):
        run_fit(kind, kind)
    if cfg.ablations:
        for parts in ("magnitude", "angle"):
            run_fit(f"pulse:{parts}", "pulse", main_iv, parts)

    # scores (oriented: higher = error) and thresholds (train part / validation only)
    free_tr, free_te = training_free_scores(s.train), training_free_scores(s.test)
    scores: dict[str, np.ndarray] = {}
    thresholds: dict[str, dict[str, Any]] = {}
    for name, (_, learned, hi) in DETECTORS.items():
        sign = 1.0 if hi else -1.0
        if learned:
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
            "chosen": chosen, "main_iv": main_iv, "named": named, "fixed": fixed}


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


def report_split(name: str, info: dict[str, Any], test, parts: list[dict[str, Any]], cfg: DetectionBenchConfig,
                 progress) -> dict[str, Any]:
    """Metrics with question-level bootstrap CIs, per-kind table, ablations and hedging from the scored test
    part(s) (one part, or k folds whose test parts are ``test`` in order)."""
    y_te = np.concatenate([p["y"] for p in parts])
    scores = {d: np.concatenate([p["scores"][d] for p in parts]) for d in DETECTORS}
    thr = {d: np.concatenate([np.full(len(p["y"]), p["thresholds"][d]["oriented"], dtype=float) for p in parts])
           for d in DETECTORS}

    def pooled(key: str) -> np.ndarray:
        return np.concatenate([p["fits"][key]["test"] for p in parts])

    boots = group_bootstrap_indices(test.question_ids, cfg.n_boot, cfg.seed)
    btask = progress.add_task(f"{SPLIT_LABELS[name]}: bootstrap", total=len(DETECTORS))
    detectors: dict[str, dict[str, Any]] = {}
    boot_auroc: dict[str, np.ndarray] = {}
    for det, (label, learned, hi) in DETECTORS.items():
        o, t = scores[det], thr[det]
        natives = [p["thresholds"][det]["native"] for p in parts]
        row: dict[str, Any] = {"label": label, "learned": learned, "higher_is_error": hi,
                               **point_metrics(y_te, o, t), "threshold": float(np.nanmean(natives))
                               if len(parts) > 1 and not all(math.isnan(x) for x in natives) else natives[0],
                               "threshold_rule": parts[0]["thresholds"][det]["rule"]}
        if len(parts) > 1:
            row["threshold_per_fold"] = natives
        reps = [point_metrics(y_te[b], o[b], t[b]) for b in boots]
        for m in METRICS:
            row[f"{m}_ci95"] = percentile_interval([r[m] for r in reps])
        boot_auroc[det] = np.array([r["auroc"] for r in reps])
        if learned:
            keys = ("spec", "n_features", "best_epoch", "epochs", "val_auroc", "seconds")
            fits = [{k: p["fits"][det][k] for k in keys} for p in parts]
            row["fit"] = fits[0] if len(fits) == 1 else fits
        detectors[det] = row
        progress.advance(btask)
    for det, row in detectors.items():
        d = boot_auroc[det] - boot_auroc["pulse"]
        row["delta_auroc_vs_pulse"] = row["auroc"] - detectors["pulse"]["auroc"]
        row["delta_auroc_vs_pulse_ci95"] = percentile_interval(d)

    # per error kind: that kind's errors vs every correct step of the test part
    kinds_te = test.error_kinds
    present = [k for k in KIND_ORDER if (kinds_te == k).any()]
    present += sorted(set(kinds_te[y_te == 1].tolist()) - set(KIND_ORDER))
    by_kind: dict[str, Any] = {}
    for kind in present:
        sel = (kinds_te == kind) | (y_te == 0)
        n_k, n_c = int((kinds_te == kind).sum()), int((y_te == 0).sum())
        row = {"n_errors": n_k, "n_correct": n_c, "error_ratio": n_k / (n_k + n_c), "detectors": {}}
        for det in DETECTORS:
            o = scores[det]
            vals = [auroc(y_te[b][sel[b]], o[b][sel[b]]) for b in boots if (sel[b] & (y_te[b] == 1)).any()]
            row["detectors"][det] = {"auroc": auroc(y_te[sel], o[sel]), "pr_auc": average_precision(y_te[sel], o[sel]),
                                     "auroc_ci95": percentile_interval(vals)}
        by_kind[kind] = row

    # PUlSE ablations (each reported on test; "chosen" was picked on validation, per fold when folded)
    p0 = parts[0]
    main_iv, chosen = p0["main_iv"], p0["chosen"]
    same_iv = all(p["main_iv"] == main_iv for p in parts)
    ablations: dict[str, Any] = {}
    if cfg.ablations:
        rows = {}
        for nm, iv in p0["named"].items():
            k = f"pulse[{iv[0]},{iv[1]}]"
            if all(k in p["fits"] for p in parts):
                rows[f"interval {nm} [{iv[0]},{iv[1]}]"] = k
        if chosen is not None:
            tag = f"[{chosen[0]},{chosen[1]}]" if all(p["chosen"] == chosen for p in parts) else "(per fold)"
            rows[f"interval chosen on validation {tag}"] = "pulse"
        iv_txt = f"[{main_iv[0]},{main_iv[1]}]" if same_iv else "(per fold)"
        rows[f"parts magnitude only {iv_txt}"] = "pulse:magnitude"
        rows[f"parts angle only {iv_txt}"] = "pulse:angle"
        rows[f"parts both {iv_txt}"] = "pulse"
        for label, k in rows.items():
            pr = pooled(k)
            ablations[label] = {"val_auroc": float(np.mean([p["fits"][k]["val_auroc"] for p in parts])),
                                "test_auroc": auroc(y_te, pr),
                                "test_auroc_ci95": percentile_interval([auroc(y_te[b], pr[b]) for b in boots]),
                                "test_pr_auc": average_precision(y_te, pr), "n_features": p0["fits"][k]["n_features"]}

    # hedging: drop steps whose text hedges (none exist in the micro-world's templates)
    hedging = np.array([bool(HEDGE_RE.search(str(c))) for c in test.contents])
    keep = ~hedging
    hedge = {"n_hedging_steps": int(hedging.sum()), "n_steps": int(len(hedging)),
             "error_ratio_hedging": float(y_te[hedging].mean()) if hedging.any() else math.nan,
             "error_ratio_non_hedging": float(y_te[keep].mean()) if keep.any() else math.nan,
             "auroc_non_hedging": {n: (auroc(y_te[keep], scores[n][keep]) if keep.any() else math.nan)
                                   for n in DETECTORS}}
    hedge["note"] = ("no step matches the hedge patterns (the micro-world's step templates never hedge): "
                     "the non-hedging subset is the whole test set and its AUROCs equal the main table's"
                     if hedging.sum() == 0 else f"{int(hedging.sum())} hedging steps dropped")

    # interval search: per candidate, validation AUROC (mean over folds) and pooled test AUROC
    intervals = {}
    for cand in p0["intervals"]:
        if all(cand in p["intervals"] for p in parts):
            k = f"pulse[{cand}]"
            intervals[cand] = {"layers": p0["intervals"][cand]["layers"],
                               "val_auroc": float(np.mean([p["intervals"][cand]["val_auroc"] for p in parts])),
                               "test_auroc": auroc(y_te, pooled(k))}
    roc = {n: [a.round(5).tolist() for a in roc_curve(y_te, scores[n])] for n in DETECTORS}
    used = [list(p["main_iv"]) for p in parts]
    return {"info": info, "detectors": detectors, "by_error_kind": by_kind, "ablations": ablations,
            "interval_search": {"candidates": intervals,
                                "chosen": (list(chosen) if chosen else None) if len(parts) == 1
                                else [list(p["chosen"]) if p["chosen"] else None for p in parts],
                                "used": used[0] if len(parts) == 1 else used,
                                "rule": "best validation AUROC" if p0["fixed"] is None else "fixed by --layers"},
            "hedging": hedge, "roc": roc}


def calibration(ds, minprob_threshold: float | None = None) -> dict[str, Any]:
    """Mean output confidence on correct steps and on each error kind (are MISLEARNED steps confident?)."""
    maxp, minp, ppl = ds.output_column("maxprob"), ds.output_column("minprob"), ds.output_column("ppl")
    groups = {"correct": ds.labels == 0}
    kinds = [k for k in KIND_ORDER if (ds.error_kinds == k).any()]
    kinds += sorted(set(ds.error_kinds[ds.labels == 1].tolist()) - set(KIND_ORDER))
    groups.update({k: ds.error_kinds == k for k in kinds})
    rows = {}
    for name, m in groups.items():
        if not m.any():
            continue
        rows[name] = {"n": int(m.sum()), "mean_maxprob": float(maxp[m].mean()), "sd_maxprob": float(maxp[m].std()),
                      "mean_minprob": float(minp[m].mean()), "sd_minprob": float(minp[m].std()),
                      "median_minprob": float(np.median(minp[m])), "mean_ppl": float(ppl[m].mean()),
                      "share_minprob_ge_0.9": float((minp[m] >= 0.9).mean())}
        if minprob_threshold is not None and not math.isnan(minprob_threshold):
            rows[name]["minprob_flag_rate"] = float((minp[m] <= minprob_threshold).mean())
    verdict = ""
    if "mislearned" in rows and "correct" in rows:
        c, w = rows["correct"], rows["mislearned"]
        confident = w["mean_minprob"] >= 0.8 * c["mean_minprob"]
        verdict = (f"MISLEARNED steps: mean MaxProb {w['mean_maxprob']:.3f} vs {c['mean_maxprob']:.3f} on correct "
                   f"steps, mean MinProb {w['mean_minprob']:.3f} vs {c['mean_minprob']:.3f} — "
                   + ("confident errors (output confidence barely sees them)" if confident
                      else "NOT confident: output confidence does see them"))
    return {"rows": rows, "verdict": verdict}


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
        if "hotpotqa" in cfg.splits:
            t0 = time.perf_counter()
            ds = benefit_dataset(cfg, progress)
            result["data"]["hotpotqa"] = {
                "labels": cfg.benefit_labels, "config": cfg.benefit_config, "env_split": cfg.benefit_split,
                "model_id": ds.meta["model_id"], "questions": int(ds.meta["n_questions"]), "steps": len(ds),
                "positive_rate": float(ds.labels.mean()),
                "label_names": {str(k): int(v) for k, v in zip(*np.unique(ds.label_names, return_counts=True))},
                "regenerated_at_batch_1": ds.meta.get("regenerated_at_batch_1"),
                "n_layers": int(ds.hidden_mean.shape[1] - 1), "hidden_size": int(ds.hidden_mean.shape[2])}
            result["splits"]["hotpotqa"] = (
                evaluate_folds("hotpotqa", ds, cfg, ds.meta["model_id"], progress, cfg.benefit_folds)
                if cfg.benefit_folds > 1 else
                evaluate_split(make_split("hotpotqa", ds, ds, cfg), cfg, ds.meta["model_id"], progress))
            timings["split_hotpotqa"] = round(time.perf_counter() - t0, 1)
    timings["total"] = round(time.perf_counter() - t_start, 1)
    result["seconds"] = timings
    plot_roc(result, out / "roc.png")
    result = _finite(result)  # NaN (an undefined metric) -> null: strict JSON
    write_json(out / "detection_bench.json", result)
    write_text(out / "detection_bench.md", format_markdown(result))
    return result


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
    p = sub.add_parser("detection", help="step-error / retrieval-benefit detection (micro-world splits, HotpotQA): PUlSE, ReProbe, CoE, "
                                         "output signals (table + JSON + ROC PNG)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--config", default=None, help="YAML with DetectionBenchConfig keys (flags override it)")
    p.add_argument("--split", "--splits", dest="split_list", default=None, action="append",
                   help="split(s), comma-separated or repeated: question, entity, shifted, hotpotqa "
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
