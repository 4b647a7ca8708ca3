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
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

#: implemented splits -> description
SPLITS = {
    "question": "probes trained on steps of the artifact's train questions, tested on steps of its test questions",
    "entity": "test steps are about subjects (held out, seeded) that no training step is about",
    "shifted": "probes fitted as in (a), tested on a shifted micro-world (other KB seed, relation mix and LM)",
    "hotpotqa": "SmolLM2-135M on HotpotQA dev, retrieval-benefit labels, train / test by question",
}
#: splits run on the micro-world artifact (the others bring their own data)
MICRO_SPLITS = ("question", "entity", "shifted")
SPLIT_LABELS = {"question": "(a) question", "entity": "(a') entity-disjoint", "shifted": "(b) shifted world",
                "hotpotqa": "(c) HotpotQA benefit"}

#: detector -> (label, learned?, higher score = more likely an error)
DETECTORS: dict[str, tuple[str, bool, bool]] = {
    "pulse": ("PUlSE probe", True, True),
    "reprobe": ("ReProbe", True, True),
    "coe_r": ("CoE-R", False, False),
    "coe_c": ("CoE-C", False, False),
    "ppl": ("PPL", False, True),
    "maxprob": ("MaxProb", False, False),
    "entropy": ("Entropy", False, True),
    "minprob": ("MinProb", False, False),
    "ref_last_layer": ("ref: last-layer state probe", True, True),
    "ref_step_meta": ("ref: step index + length probe", True, True),
}
#: error kinds reported first (others found in the data follow)
KIND_ORDER = ("mislearned", "conflicting", "unseen", "evidence_only")
HEDGE_RE = re.compile(r"\b(may|might|could|unclear|uncertain|not clear|possibly|perhaps|suggest\w*)\b", re.I)
METRICS = ("auroc", "pr_auc", "f1", "precision", "recall")


@dataclass
class DetectionBenchConfig(ConfigBase):
    """Settings of ``kairos bench detection``."""

    artifact: str = helpf("", "micro-world artifact directory (default: the shipped one)")
    out: str = helpf("runs/bench/detection", "output directory (Markdown, JSON, ROC PNG)")
    splits: list[str] = helpf(["question", "entity"], "splits: question, entity, shifted, hotpotqa")
    shifted_artifact: str = helpf("envs/microworld/artifacts/shifted", "the shifted world of split 'shifted'")
    n_train_questions: int = helpf(1500, "hop-balanced questions of the artifact's train split (probe training)")
    n_test_questions: int = helpf(600, "hop-balanced questions of the artifact's test split (evaluation)")
    train_split: str = helpf("train", "artifact question split the probes and thresholds are fitted on")
    test_split: str = helpf("test", "artifact question split evaluated on")
    val_frac: float = helpf(0.3, "validation share of the train part (questions; steps for the entity split)")
    entity_test_frac: float = helpf(0.3, "entity split: share of the test-question steps whose subjects are held out")
    benefit_labels: str = helpf("runs/labels/hotpotqa_benefit.jsonl", "split 'hotpotqa': the retrieval-benefit "
                                "label JSONL (python -m eval.benefit_labels)")
    benefit_config: str = helpf("configs/bench_hotpotqa_bm25.yaml", "split 'hotpotqa': the bench / env YAML the "
                                "labels were made with")
    benefit_split: str = helpf("dev[0:500:2]", "split 'hotpotqa': the env question split the labels were made on")
    benefit_test_frac: float = helpf(0.3, "split 'hotpotqa': share of the labelled questions held out for test")
    benefit_folds: int = helpf(5, "split 'hotpotqa': k-fold cross-validation by question (every labelled question "
                               "tested once); 1 = one held-out part of benefit_test_frac")
    benefit_batch: int = helpf(8, "split 'hotpotqa': questions regenerated together for the hidden states")
    layers: str = helpf("chosen", "PUlSE layer interval 'a,b', or 'chosen' (best validation AUROC)")
    interval_search: str = helpf("all", "intervals tried for 'chosen': all (every [a,b]) | named "
                                 "(early, middle, late, whole, design default)")
    ablations: bool = helpf(True, "PUlSE ablations (parts, layer intervals)")
    probe_threshold: str = helpf("0.5", "learned probes' threshold on p(error): a number, or 'val' "
                                 "(Youden's J on validation)")
    n_boot: int = helpf(1000, "question-level bootstrap resamples for the 95 percent CIs")
    seed: int = helpf(0, "seed of question sampling, splits, probe initialisation and the bootstrap")
    cache_dir: str = helpf("", "step-dataset cache directory (default $KAIROS_CACHE/steps)")
    threads: int = helpf(1, "torch threads")
    max_epochs: int = helpf(200, "probe training: maximum epochs")
    patience: int = helpf(20, "probe training: early-stopping patience (epochs)")
    reprobe_max_epochs: int = helpf(200, "ReProbe: maximum epochs (an epoch costs ~25x an MLP epoch; lower it for "
                                    "quick runs)")
    progress: bool = helpf(True, "show rich progress bars (stderr)")

    def validate(self) -> None:
        if not self.splits:
            raise ConfigError("DetectionBenchConfig: no split asked for")
        for s in self.splits:
            if s not in SPLITS:
                raise ConfigError(f"DetectionBenchConfig: unknown split '{s}' (valid: {', '.join(SPLITS)})")
        if self.interval_search not in ("all", "named"):
            raise ConfigError(f"DetectionBenchConfig: interval_search must be all | named, got '{self.interval_search}'")
        if self.layers != "chosen":
            from policies.probes.pipeline import parse_layers

            parse_layers(self.layers)
        if self.probe_threshold != "val":
            try:
                float(self.probe_threshold)
            except ValueError as e:
                raise ConfigError(f"DetectionBenchConfig: probe_threshold must be a number or 'val', "
                                  f"got '{self.probe_threshold}'") from e
        for name in ("val_frac", "entity_test_frac", "benefit_test_frac"):
            if not 0 < getattr(self, name) < 1:
                raise ConfigError(f"DetectionBenchConfig: {name} must be in (0, 1)")
        if self.n_boot < 0:
            raise ConfigError("DetectionBenchConfig: n_boot must be >= 0")
        if self.benefit_folds < 1:
            raise ConfigError("DetectionBenchConfig: benefit_folds must be >= 1")


# ------------------------------------------------------------------------------------------------ metrics


def point_metrics(y: np.ndarray, o: np.ndarray, t: float | np.ndarray) -> dict[str, float]:
    """AUROC, PR-AUC, F1 / precision / recall and fire rate of oriented scores ``o`` (fire when ``o >= t``;
    ``t`` a number or one threshold per step, e.g. each cross-validation fold's own; NaN never fires)."""
    from policies.probes.metrics import auroc, average_precision, binary_stats

    t = np.broadcast_to(np.asarray(t, dtype=float), o.shape)
    fired = np.where(np.isnan(t), False, o >= np.nan_to_num(t))
    return {"auroc": auroc(y, o), "pr_auc": average_precision(y, o), **binary_stats(y, fired),
            "fire_rate": float(fired.mean()) if fired.size else math.nan}


def bootstrap_indices(groups: np.ndarray, n_boot: int, seed: int) -> list[np.ndarray]:
    """``n_boot`` resamples of step indices, drawing whole groups (questions) with replacement."""
    uniq, inv = np.unique(np.asarray(groups).astype(str), return_inverse=True)
    order = np.argsort(inv, kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(inv, minlength=uniq.size))]
    members = [order[starts[i]: starts[i + 1]] for i in range(uniq.size)]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[i] for i in rng.integers(0, uniq.size, uniq.size)]) for _ in range(n_boot)]


def _ci(values: list[float], level: float = 0.95) -> list[float]:
    v = np.asarray([x for x in values if not math.isnan(x)])
    if v.size == 0:
        return [math.nan, math.nan]
    lo, hi = np.percentile(v, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return [float(lo), float(hi)]


def roc_curve(y: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates over every distinct threshold of oriented scores ``o``."""
    order = np.argsort(-o, kind="mergesort")
    s, yy = o[order], y[order].astype(bool)
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tpr = np.cumsum(yy)[last] / max(1, yy.sum())
    fpr = np.cumsum(~yy)[last] / max(1, (~yy).sum())
    return np.r_[0.0, fpr], np.r_[0.0, tpr]


# ------------------------------------------------------------------------------------------------ data


@dataclass
class SplitData:
    """One evaluation split: a train part (fit + validation indices into it) and a test part."""

    name: str
    train: Any        # StepDataset
    test: Any         # StepDataset
    fit_idx: np.ndarray
    val_idx: np.ndarray
    info: dict[str, Any]


def _kind_counts(ds) -> dict[str, int]:
    kinds, counts = np.unique(np.where(ds.labels == 1, ds.error_kinds, "correct"), return_counts=True)
    return {str(k): int(c) for k, c in zip(kinds, counts)}


def make_split(name: str, train_ds, test_ds, cfg: DetectionBenchConfig) -> SplitData:
    """The train / test parts of split ``name`` (see the module docstring)."""
    from policies.probes.splits import entity_disjoint_split, group_split

    if name == "hotpotqa":  # one labelled set: hold out whole questions for test
        tr_idx, te_idx = group_split(train_ds.question_ids, cfg.benefit_test_frac, cfg.seed)
        train, test = train_ds.subset(tr_idx), train_ds.subset(te_idx)
        fit_idx, val_idx = group_split(train.question_ids, cfg.val_frac, cfg.seed + 1)
        extra = {"val_split": "by question", **_benefit_label_info(train_ds)}
    elif name in ("question", "shifted"):
        train, test = train_ds, test_ds
        overlap = set(train.question_ids.tolist()) & set(test.question_ids.tolist())
        if overlap and name == "question":
            raise ValueError(f"question split: {len(overlap)} questions are in both the train and the test part")
        fit_idx, val_idx = group_split(train.question_ids, cfg.val_frac, cfg.seed)
        extra: dict[str, Any] = {"val_split": "by question"}
        if name == "shifted":
            extra["test_world"] = test_ds.meta.get("artifact", cfg.shifted_artifact)
    elif name == "entity":
        _, te = entity_disjoint_split(test_ds.subjects, cfg.entity_test_frac, cfg.seed)
        held = set(test_ds.subjects[te].tolist())
        test = test_ds.subset(te)
        train = train_ds.subset(np.nonzero(~np.isin(train_ds.subjects, list(held)))[0])
        if len(train) == 0:
            raise ValueError("entity split: every train step is about a held-out subject")
        if set(train.subjects.tolist()) & held:
            raise ValueError("entity split: a held-out subject appears in the train part")
        fit_idx, val_idx = entity_disjoint_split(train.subjects, cfg.val_frac, cfg.seed)
        extra = {"val_split": "entity-disjoint", "held_out_subjects": sorted(held),
                 "n_subjects_train": int(np.unique(train.subjects).size)}
    else:
        raise ValueError(f"unknown split '{name}' (valid: {', '.join(SPLITS)})")
    info = {"description": SPLITS[name], "train_steps": len(train), "fit_steps": int(len(fit_idx)),
            "val_steps": int(len(val_idx)), "test_steps": len(test),
            "train_questions": int(np.unique(train.question_ids).size),
            "test_questions": int(np.unique(test.question_ids).size),
            "train_error_rate": float(train.labels.mean()), "test_error_rate": float(test.labels.mean()),
            "test_kinds": _kind_counts(test), "n_subjects_test": int(np.unique(test.subjects).size), **extra}
    return SplitData(name, train, test, fit_idx, val_idx, info)


def _benefit_label_info(ds) -> dict[str, Any]:
    """Where a benefit dataset's labels come from and what "positive" means (split (c) info)."""
    return {"labels": ds.meta.get("labels"), "label": f"retrieval helps (benefit > {ds.meta.get('min_benefit', 0)})"}


def load_datasets(world, cfg: DetectionBenchConfig, progress, only_test: bool = False) -> tuple[Any, Any]:
    """Labelled steps of the train and test questions, from the step-dataset cache or generated (with a bar)."""
    from agents.reasoners.micro import MicroReasoner as _Micro
    from policies.probes.dataset import build_step_dataset

    out: list[Any] = [None] if only_test else []
    parts = ((cfg.train_split, cfg.n_train_questions), (cfg.test_split, cfg.n_test_questions))
    for split, n in parts[1:] if only_test else parts:
        total = min(n, len(world.questions[split])) if n else len(world.questions[split])
        task = progress.add_task(f"steps of '{split}' questions", total=total)

        class MicroReasoner(_Micro):  # same class name as the product's: the cache key (and cache) is shared
            def run_chains(self, questions, max_steps=8, front=None, _task=task):
                chains = super().run_chains(questions, max_steps, front)
                progress.advance(_task, len(questions))
                return chains

        ds = build_step_dataset(world, split, n or None, cfg.seed, cfg.cache_dir or None,
                                reasoner=MicroReasoner(world))
        progress.update(task, completed=total)
        out.append(ds)
    return out[0], out[1]


def shifted_test_steps(cfg: DetectionBenchConfig, world, progress) -> tuple[Any, dict[str, Any]]:
    """Test-question steps of the shifted world (its own LM), and a description of it."""
    from envs.microworld.artifact import load_artifact

    path = Path(cfg.shifted_artifact)
    if not (path / "manifest.json").is_file():
        raise FileNotFoundError(f"split 'shifted': no micro-world artifact at {path} (build it with `kairos "
                                f"microworld build --config configs/microworld_shifted.yaml --out {path}`)")
    shifted = load_artifact(path, threads=cfg.threads)
    if (shifted.model.config.num_hidden_layers, shifted.model.config.hidden_size) != (
            world.model.config.num_hidden_layers, world.model.config.hidden_size):
        raise ValueError(f"split 'shifted': {path} has another LM shape than {world.path}; PUlSE features would "
                         "not line up")
    sub = cfg.replace(train_split=cfg.test_split, n_train_questions=0)
    _, test = load_datasets(shifted, sub, progress, only_test=True)
    info = {"artifact": str(path), "seed": shifted.kb.config.seed, "relations": list(shifted.kb.config.relations),
            "steps": len(test), "error_rate": float(test.labels.mean()), "kinds": _kind_counts(test)}
    return test, info


# ------------------------------------------------------------------------------------------------ detectors


def named_intervals(n_layers: int, model_id: str | None = None) -> dict[str, tuple[int, int]]:
    """Early / middle / late thirds, the whole stack and the design's default interval over rows 0..n."""
    from agents.signals.hidden import default_interval

    t1 = max(1, round(n_layers / 3))
    t2 = min(n_layers, max(t1 + 1, round(2 * n_layers / 3)))
    late = (t2, n_layers) if t2 < n_layers else (n_layers - 1, n_layers)
    return {"early": (0, t1), "middle": (t1, t2), "late": late, "whole": (0, n_layers),
            "default": default_interval(n_layers, model_id)}


class ProbeFitter:
    """Fits one probe kind on a split's fit part (early stopping on validation); scores val and test."""

    def __init__(self, split: SplitData, cfg: DetectionBenchConfig, model_id: str):
        self.s, self.cfg, self.model_id = split, cfg, model_id

    def features(self, kind: str, ds, layers: tuple[int, int] | None = None, parts: str = "both"):
        from policies.probes.probe import FeatureSpec

        if kind == "pulse":
            spec = FeatureSpec("pulse", layers=layers, pooling="mean", parts=parts)
            return spec, spec.compute(hidden_mean=ds.hidden_mean)
        if kind == "reprobe":
            spec = FeatureSpec("reprobe", pooling="last")
            return spec, spec.compute(hidden_last=ds.hidden_last)
        if kind == "ref_last_layer":  # the raw (mean-pooled) last-layer state
            return FeatureSpec("reprobe", pooling="mean", extra="last layer only"), \
                ds.hidden_mean[:, -1, :].astype(np.float32)
        if kind == "ref_step_meta":
            length = np.array([len(c.split()) for c in ds.contents], dtype=np.float32)
            return FeatureSpec("rsus_proxy", pooling="none", extra="step index + length"), \
                np.stack([ds.step_index.astype(np.float32), length], axis=1)
        raise ValueError(f"unknown probe '{kind}'")

    def fit(self, kind: str, layers: tuple[int, int] | None = None, parts: str = "both") -> dict[str, Any]:
        from policies.probes.probe import FitConfig, default_arch, fit_probe

        spec, X = self.features(kind, self.s.train, layers, parts)
        _, Xt = self.features(kind, self.s.test, layers, parts)
        if kind == "reprobe":
            arch = default_arch(spec, X.shape[1], tuple(self.s.train.hidden_last.shape[1:]))
        else:
            arch = {"type": "mlp", "in_dim": int(X.shape[1]), "hidden": [128, 64], "dropout": 0.0}
        fit = FitConfig(max_epochs=self.cfg.reprobe_max_epochs if kind == "reprobe" else self.cfg.max_epochs,
                        patience=self.cfg.patience, seed=self.cfg.seed)
        t0 = time.perf_counter()
        probe, hist = fit_probe(spec, X, self.s.train.labels, self.s.fit_idx, self.s.val_idx,
                                model_id=self.model_id, arch=arch, fit=fit)
        return {"val": probe.predict_proba(X[self.s.val_idx]), "test": probe.predict_proba(Xt),
                "spec": spec.describe(), "n_features": int(X.shape[1]), "best_epoch": hist["best_epoch"] + 1,
                "epochs": hist["epochs"], "val_auroc": float(hist["best_val_auroc"]),
                "seconds": round(time.perf_counter() - t0, 2)}


def training_free_scores(ds) -> dict[str, np.ndarray]:
    """CoE-R, CoE-C, PPL, MaxProb, Entropy, MinProb of every step (native orientation)."""
    from policies.probes.pipeline import reference_scores

    return reference_scores(ds)


def _threshold_on(y: np.ndarray, o: np.ndarray) -> float:
    from policies.probes.metrics import youden_threshold

    return youden_threshold(y, o)


# ------------------------------------------------------------------------------------------------ one split


def fit_and_score(split: SplitData, cfg: DetectionBenchConfig, model_id: str, progress) -> dict[str, Any]:
    """Fit every learned detector on ``split``'s train part (PUlSE interval search and ablations included),
    threshold every detector on train / validation only, and score the test part (oriented: higher = error)."""
    from policies.probes.metrics import auroc

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
                t, rule = _threshold_on(y_val, fits[name]["val"]), "Youden's J on validation"
            else:
                t, rule = float(cfg.probe_threshold), "fixed p(error) threshold"
            thresholds[name] = {"oriented": t, "native": t, "rule": rule}
        else:
            scores[name] = sign * free_te[name]
            t = _threshold_on(y_tr, sign * free_tr[name])
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
            "test_kinds": _kind_counts(test), "n_subjects_test": int(np.unique(test.subjects).size),
            **_benefit_label_info(ds)}
    return report_split(name, info, test, parts, cfg, progress)


def report_split(name: str, info: dict[str, Any], test, parts: list[dict[str, Any]], cfg: DetectionBenchConfig,
                 progress) -> dict[str, Any]:
    """Metrics with question-level bootstrap CIs, per-kind table, ablations and hedging from the scored test
    part(s) (one part, or k folds whose test parts are ``test`` in order)."""
    from policies.probes.metrics import auroc, average_precision

    y_te = np.concatenate([p["y"] for p in parts])
    scores = {d: np.concatenate([p["scores"][d] for p in parts]) for d in DETECTORS}
    thr = {d: np.concatenate([np.full(len(p["y"]), p["thresholds"][d]["oriented"], dtype=float) for p in parts])
           for d in DETECTORS}

    def pooled(key: str) -> np.ndarray:
        return np.concatenate([p["fits"][key]["test"] for p in parts])

    boots = bootstrap_indices(test.question_ids, cfg.n_boot, cfg.seed)
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
            row[f"{m}_ci95"] = _ci([r[m] for r in reps])
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
        row["delta_auroc_vs_pulse_ci95"] = _ci(d.tolist()) if len(d) else [math.nan, math.nan]

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
                                     "auroc_ci95": _ci(vals)}
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
                                "test_auroc_ci95": _ci([auroc(y_te[b], pr[b]) for b in boots]),
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

    from envs.io import write_json, write_text

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


def benefit_dataset(cfg: DetectionBenchConfig, progress):
    """Split (c)'s labelled steps with hidden states (:mod:`policies.probes.benefit_dataset`, cached)."""
    from envs.env_config import EnvConfig, env_config_from_file
    from policies.probes.benefit_dataset import benefit_step_dataset

    labels = Path(cfg.benefit_labels)
    if not labels.is_file():
        raise FileNotFoundError(f"split 'hotpotqa': no benefit-label file at {labels} (make it with `python -m "
                                f"eval.benefit_labels --config {cfg.benefit_config} --split '{cfg.benefit_split}' "
                                f"--out {labels}`)")
    env_cfg = EnvConfig.from_dict(env_config_from_file(cfg.benefit_config, cfg.benefit_split))
    n = sum(1 for line in labels.read_text(encoding="utf-8").splitlines() if line.strip())
    task = progress.add_task("(c) closed-book chains with hidden states", total=n)
    return benefit_step_dataset(labels, env_cfg, cfg.cache_dir or None, batch=cfg.benefit_batch,
                                progress=lambda done: progress.update(task, completed=done))


def _run_micro(cfg: DetectionBenchConfig, splits: list[str], result: dict[str, Any], timings: dict[str, float],
               progress) -> None:
    """Splits (a), (a') and (b): the micro-world artifact's step datasets, probes and calibration."""
    from envs.microworld.artifact import load_artifact, world_model_id

    world = load_artifact(cfg.artifact or None, threads=cfg.threads)
    model_id = world_model_id(world)
    result.update(artifact=str(world.path), model_id=model_id)
    t0 = time.perf_counter()
    train_ds, test_ds = load_datasets(world, cfg, progress)
    timings["datasets"] = round(time.perf_counter() - t0, 1)
    result["data"].update({
        "train": {"split": cfg.train_split, "questions": int(train_ds.meta.get("n_questions", 0)),
                  "steps": len(train_ds), "error_rate": float(train_ds.labels.mean()),
                  "kinds": _kind_counts(train_ds)},
        "test": {"split": cfg.test_split, "questions": int(test_ds.meta.get("n_questions", 0)),
                 "steps": len(test_ds), "error_rate": float(test_ds.labels.mean()), "kinds": _kind_counts(test_ds)},
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
    from policies.probes.metrics import youden_threshold

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


def plot_roc(result: dict[str, Any], path: Path) -> None:
    """One ROC panel per split, one curve per detector (AUROC in the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = result["splits"]
    fig, axes = plt.subplots(1, len(splits), figsize=(6.2 * len(splits), 5.6), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, (name, sp) in zip(axes[0], splits.items()):
        for i, (det, (label, learned, _)) in enumerate(DETECTORS.items()):
            fpr, tpr = sp["roc"][det]
            ax.plot(fpr, tpr, color=colors[i % 10], lw=1.6 if learned else 1.2,
                    ls="-" if learned else "--", label=f"{label} ({sp['detectors'][det]['auroc']:.3f})")
        ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls=":")
        info = sp["info"]
        ax.set_title(f"{SPLIT_LABELS[name]} — {info['test_steps']} test steps, "
                     f"{100 * info['test_error_rate']:.1f}% {'helped' if name == 'hotpotqa' else 'errors'}",
                     fontsize=10)
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.legend(fontsize=7.5, loc="lower right")
        ax.set_aspect("equal")
    models = [result["model_id"]] if "model_id" in result else []
    if "hotpotqa" in result["data"]:
        models.append(result["data"]["hotpotqa"]["model_id"])
    fig.suptitle(f"Step-error / retrieval-benefit detection ({', '.join(models)})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    tmp.replace(path)


# ------------------------------------------------------------------------------------------------ report


def _f(x: float, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _g(x: float | None, spec: str = ".4g") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _ci_txt(ci: list[float], nd: int = 3) -> str:
    return f"[{_f(ci[0], nd)}, {_f(ci[1], nd)}]"


def _table(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] + ["--:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main_table(result: dict[str, Any]) -> str:
    """Table 1: rows detectors, columns AUROC (95% CI) / PR-AUC / F1 / P / R per split."""
    headers, rows = ["detector"], []
    for name in result["splits"]:
        tag = SPLIT_LABELS[name].split(" ")[0]
        headers += [f"{tag} AUROC [95% CI]", f"{tag} PR-AUC", f"{tag} F1", f"{tag} P", f"{tag} R"]
    for det, (label, _, _) in DETECTORS.items():
        row = [label]
        for sp in result["splits"].values():
            d = sp["detectors"][det]
            row += [f"{_f(d['auroc'])} {_ci_txt(d['auroc_ci95'])}", _f(d["pr_auc"]), _f(d["f1"]),
                    _f(d["precision"]), _f(d["recall"])]
        rows.append(row)
    return _table(headers, rows)


def format_markdown(result: dict[str, Any]) -> str:
    """Every table of the benchmark as Markdown."""
    cfg, data = result["config"], result["data"]
    nb = cfg["n_boot"]
    parts = ["# Step-error detection", ""]
    if "train" in data:
        parts += [f"Micro-world artifact `{result['artifact']}` ({result['model_id']}, {data['n_layers']} layers, "
                  f"width {data['hidden_size']}). Train part: {data['train']['questions']} '{data['train']['split']}' "
                  f"questions → {data['train']['steps']} steps ({100 * data['train']['error_rate']:.1f}% errors); "
                  f"test part: {data['test']['questions']} '{data['test']['split']}' questions → "
                  f"{data['test']['steps']} steps ({100 * data['test']['error_rate']:.1f}% errors). Error = the "
                  "step's fact is not the KB's (exact labels).", ""]
    if "hotpotqa" in data:
        h = data["hotpotqa"]
        parts += [f"(c) real data: {h['model_id']} ({h['n_layers']} layers, width {h['hidden_size']}) on "
                  f"'{h['env_split']}' of `{h['config']}`: {h['questions']} labelled questions → {h['steps']} "
                  f"closed-book steps ({h['label_names']}); positive = retrieving at the step raises the answer's "
                  f"F1 (retrieval benefit, DESIGN §6; labels `{h['labels']}`). In (c) columns 'error' reads "
                  "'retrieval helps'.", ""]
    parts += [f"Thresholds: training-free detectors by Youden's J on each split's train part; learned probes "
             f"{'by Youden on validation' if cfg['probe_threshold'] == 'val' else 'at p(error) ≥ ' + cfg['probe_threshold']}"
             f" — never on test. 95% CIs: question-level bootstrap, {nb} resamples, seed {cfg['seed']} "
             "(the same resamples for every detector).", "",
             "## Main table (test steps)", ""]
    for name, sp in result["splits"].items():
        i = sp["info"]
        extra = (f"; {len(i['held_out_subjects'])} held-out subjects, {i['n_subjects_train']} train subjects"
                 if name == "entity" else "")
        parts.append(f"- **{SPLIT_LABELS[name]}**: {i['description']}. Train {i['train_steps']} steps "
                     f"(fit {i['fit_steps']}, validation {i['val_steps']}, {i['val_split']}), test "
                     f"{i['test_steps']} steps of {i['test_questions']} questions "
                     f"({100 * i['test_error_rate']:.1f}% errors: {i['test_kinds']}){extra}. PUlSE interval "
                     f"{sp['interval_search']['used']} ({sp['interval_search']['rule']}).")
    parts += ["", main_table(result), ""]
    for name, sp in result["splits"].items():
        parts += [f"### {SPLIT_LABELS[name]}: every metric with its 95% CI, thresholds, ΔAUROC vs PUlSE (paired)", ""]
        rows = []
        for det, (label, _, _) in DETECTORS.items():
            d = sp["detectors"][det]
            rows.append([label, f"{_f(d['auroc'])} {_ci_txt(d['auroc_ci95'])}",
                         f"{_f(d['pr_auc'])} {_ci_txt(d['pr_auc_ci95'])}", f"{_f(d['f1'])} {_ci_txt(d['f1_ci95'])}",
                         f"{_f(d['precision'])} {_ci_txt(d['precision_ci95'])}",
                         f"{_f(d['recall'])} {_ci_txt(d['recall_ci95'])}", _g(d["threshold"]), _f(d["fire_rate"]),
                         "–" if det == "pulse" else
                         f"{_g(d['delta_auroc_vs_pulse'], '+.3f')} {_ci_txt(d['delta_auroc_vs_pulse_ci95'])}"])
        parts += [_table(["detector", "AUROC", "PR-AUC", "F1", "precision", "recall", "threshold", "fire rate",
                          "ΔAUROC vs PUlSE"], rows), ""]
    parts += ["## Per error kind (that kind's errors vs all correct test steps)", "",
              "AUROC [95% CI] / PR-AUC. The PR-AUC of a random detector equals the set's error ratio.", ""]
    for name, sp in result["splits"].items():
        bk = sp["by_error_kind"]
        if not bk:
            continue
        headers = ["detector"] + [f"{k} (n={r['n_errors']}, ratio {r['error_ratio']:.3f})" for k, r in bk.items()]
        rows = []
        for det, (label, _, _) in DETECTORS.items():
            rows.append([label] + [f"{_f(r['detectors'][det]['auroc'])} {_ci_txt(r['detectors'][det]['auroc_ci95'], 2)}"
                                   f" / {_f(r['detectors'][det]['pr_auc'])}" for r in bk.values()])
        parts += [f"### {SPLIT_LABELS[name]}", "", _table(headers, rows), ""]
    cal = result.get("calibration", {"rows": {}, "verdict": "", "steps": "", "minprob_threshold": None})
    parts += [] if not cal["rows"] else [f"## Calibration ({cal['steps']})", "",
              f"Output confidence per step kind. MinProb flag rate = share of steps MinProb fires on at its "
              f"train-part Youden threshold ({_g(cal['minprob_threshold'])}).", ""]
    rows = [[k, str(r["n"]), f"{r['mean_maxprob']:.3f} ± {r['sd_maxprob']:.3f}",
             f"{r['mean_minprob']:.3f} ± {r['sd_minprob']:.3f}", f"{r['median_minprob']:.3f}",
             f"{r['share_minprob_ge_0.9']:.3f}", f"{r['mean_ppl']:.3f}", _f(r.get("minprob_flag_rate", math.nan))]
            for k, r in cal["rows"].items()]
    parts += [] if not rows else [_table(["steps", "n", "mean MaxProb", "mean MinProb", "median MinProb", "share MinProb ≥ 0.9",
                      "mean PPL", "MinProb flag rate"], rows), ""]
    if cal["verdict"]:
        parts += [cal["verdict"] + ".", ""]
    if any(sp["ablations"] for sp in result["splits"].values()):
        parts += ["## PUlSE ablations (chosen on validation, reported on test)", ""]
        names = list(result["splits"])
        labels = list(dict.fromkeys(k for sp in result["splits"].values() for k in sp["ablations"]))
        headers = ["variant"]
        for n in names:
            tag = SPLIT_LABELS[n].split(" ")[0]
            headers += [f"{tag} val AUROC", f"{tag} test AUROC [95% CI]", f"{tag} test PR-AUC"]
        rows = []
        for lab in labels:
            row = [lab]
            for n in names:
                a = result["splits"][n]["ablations"].get(lab)
                row += (["–"] * 3 if a is None else
                        [_f(a["val_auroc"]), f"{_f(a['test_auroc'])} {_ci_txt(a['test_auroc_ci95'])}",
                         _f(a["test_pr_auc"])])
            rows.append(row)
        parts += [_table(headers, rows), "",
                  "Variant labels name the split's own intervals; 'parts' rows use the interval in use for that "
                  "split. Every candidate interval's validation and test AUROC is in the JSON (`interval_search`).",
                  ""]
    parts += ["## Non-hedging steps", ""]
    for name, sp in result["splits"].items():
        h = sp["hedging"]
        ratios = ("" if not h["n_hedging_steps"] else
                  f" Error ratio: hedging {_f(h.get('error_ratio_hedging'))}, non-hedging "
                  f"{_f(h.get('error_ratio_non_hedging'))}.")
        parts.append(f"- {SPLIT_LABELS[name]}: {h['n_hedging_steps']} of {h['n_steps']} test steps hedge; "
                     f"{h['note']}.{ratios}")
        if h["n_hedging_steps"]:
            parts.append("  AUROC on non-hedging steps: " + ", ".join(
                f"{DETECTORS[d][0]} {_f(v)}" for d, v in h["auroc_non_hedging"].items()))
    parts += ["", "Wall time: " + ", ".join(f"{k} {v} s" for k, v in result["seconds"].items()) + "."]
    return "\n".join(parts) + "\n"


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
