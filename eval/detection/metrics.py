"""The detection benchmark's numbers of one split (:mod:`eval.detection.bench`): point metrics at a threshold, their
question-level bootstrap CIs, the per-error-kind table, PUlSE's ablations and interval search, the hedging check,
the ROC curves; and the output-confidence calibration of the error kinds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from eval.detection.data import DETECTORS, HEDGE_RE, KIND_ORDER, METRICS, SPLIT_LABELS, DetectionBenchConfig
from eval.stats import (
    auroc,
    average_precision,
    binary_stats,
    group_bootstrap_indices,
    percentile_interval,
    roc_curve,
)


def point_metrics(y: np.ndarray, o: np.ndarray, t: float | np.ndarray) -> dict[str, float]:
    """AUROC, PR-AUC, F1 / precision / recall and fire rate of oriented scores ``o`` (fire when ``o >= t``;
    ``t`` a number or one threshold per step, e.g. each cross-validation fold's own; NaN never fires)."""
    t = np.broadcast_to(np.asarray(t, dtype=float), o.shape)
    fired = np.where(np.isnan(t), False, o >= np.nan_to_num(t))
    return {"auroc": auroc(y, o), "pr_auc": average_precision(y, o), **binary_stats(y, fired),
            "fire_rate": float(fired.mean()) if fired.size else math.nan}


def report_split(name: str, info: dict[str, Any], test, parts: list[dict[str, Any]], cfg: DetectionBenchConfig,
                 progress) -> dict[str, Any]:
    """Metrics with question-level bootstrap CIs, per-kind table, ablations and hedging from the scored test
    part(s) (one part, or k folds whose test parts are ``test`` in order)."""
    y_te = np.concatenate([p["y"] for p in parts])
    scores = {d: np.concatenate([p["scores"][d] for p in parts]) for d in DETECTORS if d in parts[0]["scores"]}
    boots = group_bootstrap_indices(test.question_ids, cfg.n_boot, cfg.seed)
    p0 = parts[0]
    chosen = p0["chosen"]
    roc = {n: [a.round(5).tolist() for a in roc_curve(y_te, scores[n])] for n in scores}
    used = [list(p["main_iv"]) for p in parts]
    return {"info": info, "detectors": _detector_rows(name, parts, y_te, scores, boots, progress),
            "by_error_kind": _by_error_kind(test, y_te, scores, boots),
            "ablations": _ablations(parts, y_te, boots) if cfg.ablations else {},
            "interval_search": {"candidates": _interval_search(parts, y_te),
                                "chosen": (list(chosen) if chosen else None) if len(parts) == 1
                                else [list(p["chosen"]) if p["chosen"] else None for p in parts],
                                "used": used[0] if len(parts) == 1 else used,
                                "rule": "best validation AUROC" if p0["fixed"] is None else "fixed by --layers"},
            "pulse_pooling": p0["pooling"],
            "hedging": _hedging(test, y_te, scores), "roc": roc}


def _pooled(parts: list[dict[str, Any]], key: str) -> np.ndarray:
    """A fit's test scores over the parts (folds), in ``test``'s order."""
    return np.concatenate([p["fits"][key]["test"] for p in parts])


def _detector_rows(name: str, parts: list[dict[str, Any]], y_te: np.ndarray, scores: dict[str, np.ndarray],
                   boots: list, progress) -> dict[str, dict[str, Any]]:
    """Each detector's point metrics at its threshold, their bootstrap CIs, its fit, and its AUROC's difference
    from PUlSE's (with the paired bootstrap CI)."""
    thr = {d: np.concatenate([np.full(len(p["y"]), p["thresholds"][d]["oriented"], dtype=float) for p in parts])
           for d in scores}
    btask = progress.add_task(f"{SPLIT_LABELS[name]}: bootstrap", total=len(scores))
    detectors: dict[str, dict[str, Any]] = {}
    boot_auroc: dict[str, np.ndarray] = {}
    for det in scores:
        label, learned, hi = DETECTORS[det]
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
    return detectors


def _by_error_kind(test, y_te: np.ndarray, scores: dict[str, np.ndarray], boots: list) -> dict[str, Any]:
    """Per error kind: that kind's errors vs every correct step of the test part."""
    kinds_te = test.error_kinds
    present = [k for k in KIND_ORDER if (kinds_te == k).any()]
    present += sorted(set(kinds_te[y_te == 1].tolist()) - set(KIND_ORDER))
    by_kind: dict[str, Any] = {}
    for kind in present:
        sel = (kinds_te == kind) | (y_te == 0)
        n_k, n_c = int((kinds_te == kind).sum()), int((y_te == 0).sum())
        row = {"n_errors": n_k, "n_correct": n_c, "error_ratio": n_k / (n_k + n_c), "detectors": {}}
        for det in scores:
            o = scores[det]
            vals = [auroc(y_te[b][sel[b]], o[b][sel[b]]) for b in boots if (sel[b] & (y_te[b] == 1)).any()]
            row["detectors"][det] = {"auroc": auroc(y_te[sel], o[sel]), "pr_auc": average_precision(y_te[sel], o[sel]),
                                     "auroc_ci95": percentile_interval(vals)}
        by_kind[kind] = row
    return by_kind


def _ablations(parts: list[dict[str, Any]], y_te: np.ndarray, boots: list) -> dict[str, Any]:
    """PUlSE ablations (each reported on test; "chosen" was picked on validation, per fold when folded)."""
    p0 = parts[0]
    main_iv, chosen = p0["main_iv"], p0["chosen"]
    same_iv = all(p["main_iv"] == main_iv for p in parts)
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
    if any(p.get("other_poolings") for p in parts):  # the step's pooling over its tokens, at the same interval
        rows[f"pooling {p0['pooling']} {iv_txt}"] = "pulse"
        for pooling in p0["other_poolings"]:
            rows[f"pooling {pooling} {iv_txt}"] = f"pulse:pool={pooling}"
    ablations: dict[str, Any] = {}
    for label, k in rows.items():
        pr = _pooled(parts, k)
        ablations[label] = {"val_auroc": float(np.mean([p["fits"][k]["val_auroc"] for p in parts])),
                            "test_auroc": auroc(y_te, pr),
                            "test_auroc_ci95": percentile_interval([auroc(y_te[b], pr[b]) for b in boots]),
                            "test_pr_auc": average_precision(y_te, pr), "n_features": p0["fits"][k]["n_features"]}
    return ablations


def _hedging(test, y_te: np.ndarray, scores: dict[str, np.ndarray]) -> dict[str, Any]:
    """Hedging: drop steps whose text hedges (none exist in the micro-world's templates)."""
    hedging = np.array([bool(HEDGE_RE.search(str(c))) for c in test.contents])
    keep = ~hedging
    hedge = {"n_hedging_steps": int(hedging.sum()), "n_steps": int(len(hedging)),
             "error_ratio_hedging": float(y_te[hedging].mean()) if hedging.any() else math.nan,
             "error_ratio_non_hedging": float(y_te[keep].mean()) if keep.any() else math.nan,
             "auroc_non_hedging": {n: (auroc(y_te[keep], scores[n][keep]) if keep.any() else math.nan)
                                   for n in scores}}
    hedge["note"] = ("no step matches the hedge patterns (the micro-world's step templates never hedge): "
                     "the non-hedging subset is the whole test set and its AUROCs equal the main table's"
                     if hedging.sum() == 0 else f"{int(hedging.sum())} hedging steps dropped")
    return hedge


def _interval_search(parts: list[dict[str, Any]], y_te: np.ndarray) -> dict[str, Any]:
    """Interval search: per candidate, validation AUROC (mean over folds) and pooled test AUROC."""
    p0 = parts[0]
    intervals = {}
    for cand in p0["intervals"]:
        if all(cand in p["intervals"] for p in parts):
            intervals[cand] = {"layers": p0["intervals"][cand]["layers"],
                               "val_auroc": float(np.mean([p["intervals"][cand]["val_auroc"] for p in parts])),
                               "test_auroc": auroc(y_te, _pooled(parts, f"pulse[{cand}]"))}
    return intervals


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
