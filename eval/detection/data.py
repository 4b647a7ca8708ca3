"""Settings, splits, datasets and detectors of ``kairos bench detection`` (:mod:`eval.detection.bench`).

The benchmark's configuration and constants (splits, detectors, metrics), the labelled step datasets of each
split (micro-world train / test questions, the shifted world, a real task's retrieval-benefit labels and another
task's for the out-of-distribution test) and the probe
fitting of the learned detectors. :mod:`eval.detection.bench` runs and scores them; :mod:`eval.detection.report`
formats the result.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.core.config import ConfigBase, ConfigError, helpf
from eval.detection.rsus import PROXIES, RSUS_DETECTORS

#: implemented splits -> description
SPLITS = {
    "question": "probes trained on steps of the artifact's train questions, tested on steps of its test questions",
    "entity": "test steps are about subjects (held out, seeded) that no training step is about",
    "shifted": "probes fitted as in (a), tested on a shifted micro-world (other KB seed, relation mix and LM)",
    "benefit": "a real task's retrieval-benefit labels (benefit_labels), train / test by question",
    "benefit_ood": "detectors fitted and thresholded on every benefit_labels question, tested on another task's "
                   "benefit labels (ood_labels) made by the same reasoner, never fitted on",
}
#: splits on retrieval-benefit labels of real data ("error" in their tables reads "retrieval helps")
BENEFIT_SPLITS = ("benefit", "benefit_ood")
#: splits run on the micro-world artifact (the others bring their own data)
MICRO_SPLITS = ("question", "entity", "shifted")
SPLIT_LABELS = {"question": "(a) question", "entity": "(a') entity-disjoint", "shifted": "(b) shifted world",
                "benefit": "(c) benefit", "benefit_ood": "(d) benefit OOD"}

#: the training-free detectors: signals whose label and error direction are their own declaration
#: (``agents.signals.base.signal_meta``)
TRAINING_FREE = ("coe_r", "coe_c", "ppl", "maxprob", "entropy", "minprob")


def _training_free(name: str) -> tuple[str, bool, bool]:
    from agents.signals.base import signal_meta

    meta = signal_meta(name)
    return meta["label"], False, meta["error_direction"] > 0


#: detector -> (label, learned?, higher score = more likely an error); a probe's score is its error probability
DETECTORS: dict[str, tuple[str, bool, bool]] = {
    "pulse": ("PUlSE probe", True, True),
    "reprobe": ("ReProbe", True, True),
    **{name: _training_free(name) for name in TRAINING_FREE},
    "ref_last_layer": ("ref: last-layer state probe", True, True),
    "ref_step_meta": ("ref: step index + length probe", True, True),
}
DETECTORS.update(RSUS_DETECTORS)  # the micro-world splits' RSUS rows (eval.detection.rsus)
#: error kinds reported first (others found in the data follow)
KIND_ORDER = ("mislearned", "conflicting", "unseen", "evidence_only")
HEDGE_RE = re.compile(r"\b(may|might|could|unclear|uncertain|not clear|possibly|perhaps|suggest\w*)\b", re.I)
METRICS = ("auroc", "pr_auc", "f1", "precision", "recall")


@dataclass
class DetectionBenchConfig(ConfigBase):
    """Settings of ``kairos bench detection``."""

    artifact: str = helpf("", "micro-world artifact directory (default: the shipped one)")
    out: str = helpf("runs/bench/detection", "output directory (Markdown, JSON, ROC PNG)")
    splits: list[str] = helpf(["question", "entity"], "splits: question, entity, shifted, benefit, benefit_ood")
    shifted_artifact: str = helpf("envs/core/microworld/artifacts/shifted", "the shifted world of split 'shifted'")
    n_train_questions: int = helpf(1500, "hop-balanced questions of the artifact's train split (probe training)")
    n_test_questions: int = helpf(600, "hop-balanced questions of the artifact's test split (evaluation)")
    train_split: str = helpf("train", "artifact question split the probes and thresholds are fitted on")
    test_split: str = helpf("test", "artifact question split evaluated on")
    val_frac: float = helpf(0.3, "validation share of the train part (questions; steps for the entity split)")
    entity_test_frac: float = helpf(0.3, "entity split: share of the test-question steps whose subjects are held out")
    benefit_labels: str = helpf("runs/labels/hotpotqa_benefit.jsonl", "splits 'benefit' and 'benefit_ood': the "
                                "retrieval-benefit label JSONL the detectors are fitted on (python -m "
                                "eval.detection.labels)")
    benefit_config: str = helpf("configs/bench_hotpotqa_bm25.yaml", "splits 'benefit' and 'benefit_ood': the bench / "
                                "env YAML the labels were made with")
    benefit_split: str = helpf("dev[0:500:2]", "splits 'benefit' and 'benefit_ood': the env question split the "
                               "labels were made on")
    benefit_test_frac: float = helpf(0.3, "split 'benefit' with benefit_folds 1: share of the labelled questions held "
                                     "out for test")
    benefit_folds: int = helpf(5, "split 'benefit': k-fold cross-validation by question (every labelled question "
                               "tested once); 1 = one held-out part of benefit_test_frac")
    benefit_batch: int = helpf(8, "splits 'benefit' and 'benefit_ood': questions regenerated together for the hidden "
                               "states")
    ood_labels: str = helpf("", "split 'benefit_ood': another task's retrieval-benefit label JSONL, made by the same "
                            "reasoner (PUlSE's out-of-distribution column: fitted on MedMCQA, tested on MMLU-Pro)")
    ood_config: str = helpf("", "split 'benefit_ood': the bench / env YAML ood_labels were made with")
    ood_split: str = helpf("", "split 'benefit_ood': the env question split ood_labels were made on")
    layers: str = helpf("chosen", "PUlSE layer interval 'a,b', or 'chosen' (best validation AUROC)")
    pulse_pooling: str = helpf("mean", "PUlSE probe's pooling over a step's tokens: mean | last (pooled hidden states, "
                               "then PUlSE) | max | token_mean (each token's PUlSE features pooled: the shipped "
                               "probe's); the ablations fit the others too")
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
    rsus: bool = helpf(True, "RSUS rows on the micro-world splits: U_ent, U_cons, the U_verb proxies and the weighted "
                       "RSUS (eval.detection.rsus; replays the chains and samples rsus_samples alternatives per step, "
                       "cached); not computed on the benefit splits")
    rsus_samples: int = helpf(3, "RSUS U_cons: sampled alternatives per step (the env's default k)")

    def validate(self) -> None:
        if not self.splits:
            raise ConfigError("DetectionBenchConfig: no split asked for")
        for s in self.splits:
            if s == "hotpotqa":
                raise ConfigError("DetectionBenchConfig: split 'hotpotqa' is now 'benefit' (any task's retrieval-"
                                  "benefit labels: benefit_labels / benefit_config / benefit_split)")
            if s not in SPLITS:
                raise ConfigError(f"DetectionBenchConfig: unknown split '{s}' (valid: {', '.join(SPLITS)})")
        if "benefit_ood" in self.splits:
            missing = [k for k in ("ood_labels", "ood_config", "ood_split") if not getattr(self, k)]
            if missing:
                raise ConfigError(f"DetectionBenchConfig: split 'benefit_ood' needs {', '.join(missing)} (the other "
                                  "task's label JSONL, the YAML and the question split it was made with)")
        if self.interval_search not in ("all", "named"):
            raise ConfigError(f"DetectionBenchConfig: interval_search must be all | named, got '{self.interval_search}'")
        from agents.signals.hidden import PULSE_POOLINGS

        if self.pulse_pooling not in PULSE_POOLINGS:
            raise ConfigError(f"DetectionBenchConfig: pulse_pooling must be one of {', '.join(PULSE_POOLINGS)}, got "
                              f"'{self.pulse_pooling}'")
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
        if self.rsus_samples < 2:
            raise ConfigError(f"DetectionBenchConfig: rsus_samples must be >= 2 (U_cons compares samples), got "
                              f"{self.rsus_samples}")



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


def pulse_poolings(split: SplitData) -> list[str]:
    """The PUlSE poolings a split's steps allow: ``mean`` and ``last`` (pooled hidden states) always, ``max`` and
    ``token_mean`` where both parts recorded each token's transitions (the ``pulse_<pooling>`` step columns)."""
    from agents.signals.hidden import PULSE_POOLINGS
    from policies.probes.probe import FeatureSpec

    return [p for p in PULSE_POOLINGS if not FeatureSpec("pulse", pooling=p).per_token
            or all(f"pulse_{p}" in ds.extras for ds in (split.train, split.test))]


def split_detectors(split: SplitData) -> list[str]:
    """The detectors a split is scored with: every one of :data:`DETECTORS`, the RSUS rows only where the split's
    steps carry RSUS's components (the micro-world splits with ``rsus`` on)."""
    has_rsus = all("u_ent" in ds.extras for ds in (split.train, split.test))
    return [d for d in DETECTORS if has_rsus or d not in RSUS_DETECTORS]


def kind_counts(ds) -> dict[str, int]:
    kinds, counts = np.unique(np.where(ds.labels == 1, ds.error_kinds, "correct"), return_counts=True)
    return {str(k): int(c) for k, c in zip(kinds, counts)}


def make_split(name: str, train_ds, test_ds, cfg: DetectionBenchConfig) -> SplitData:
    """The train / test parts of split ``name`` (see the module docstring)."""
    from policies.probes.splits import entity_disjoint_split, group_split

    if name == "benefit":  # one labelled set: hold out whole questions for test
        tr_idx, te_idx = group_split(train_ds.question_ids, cfg.benefit_test_frac, cfg.seed)
        train, test = train_ds.subset(tr_idx), train_ds.subset(te_idx)
        fit_idx, val_idx = group_split(train.question_ids, cfg.val_frac, cfg.seed + 1)
        extra = {"val_split": "by question", **benefit_label_info(train_ds)}
    elif name == "benefit_ood":  # every labelled question of one task to fit on, another task's to test on
        train, test = train_ds, test_ds
        fit_idx, val_idx = group_split(train.question_ids, cfg.val_frac, cfg.seed + 1)
        extra = {"val_split": "by question", **benefit_label_info(test_ds)}
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
            "test_kinds": kind_counts(test), "n_subjects_test": int(np.unique(test.subjects).size), **extra}
    return SplitData(name, train, test, fit_idx, val_idx, info)


def benefit_label_info(ds) -> dict[str, Any]:
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
    from envs.core.microworld.artifact import load_artifact

    path = Path(cfg.shifted_artifact)
    if not (path / "manifest.json").is_file():
        raise FileNotFoundError(f"split 'shifted': no micro-world artifact at {path} (build it with `kairos "
                                f"microworld build --config configs/experiments/microworld/microworld_shifted.yaml --out {path}`)")
    shifted = load_artifact(path, threads=cfg.threads)
    if (shifted.model.config.num_hidden_layers, shifted.model.config.hidden_size) != (
            world.model.config.num_hidden_layers, world.model.config.hidden_size):
        raise ValueError(f"split 'shifted': {path} has another LM shape than {world.path}; PUlSE features would "
                         "not line up")
    sub = cfg.replace(train_split=cfg.test_split, n_train_questions=0)
    _, test = load_datasets(shifted, sub, progress, only_test=True)
    if cfg.rsus:  # its own LM samples U_cons, its own corpus scores U_ent
        from eval.detection.rsus import attach_rsus

        test = attach_rsus(shifted, test, cfg.test_split, cfg.n_test_questions or None, cfg, progress, " (shifted)")
    info = {"artifact": str(path), "seed": shifted.kb.config.seed, "relations": list(shifted.kb.config.relations),
            "steps": len(test), "error_rate": float(test.labels.mean()), "kinds": kind_counts(test)}
    if cfg.rsus:
        from eval.detection.rsus import rsus_cost

        info["rsus"] = rsus_cost(test)
    return test, info



def benefit_source(cfg: DetectionBenchConfig, ood: bool = False) -> tuple[Path, str, str]:
    """``(labels, config, split)`` of ``benefit_labels`` or, with ``ood``, of ``ood_labels``; a missing label file
    is an error naming its key and the command that makes it."""
    labels, config, split = ((cfg.ood_labels, cfg.ood_config, cfg.ood_split) if ood else
                             (cfg.benefit_labels, cfg.benefit_config, cfg.benefit_split))
    labels = Path(labels)
    if not labels.is_file():
        key = "ood_labels" if ood else "benefit_labels"
        raise FileNotFoundError(f"{key}: no benefit-label file at {labels} (make it with `python -m "
                                f"eval.detection.labels --config {config} --split '{split}' --out {labels}`)")
    return labels, config, split


def benefit_dataset(cfg: DetectionBenchConfig, progress, ood: bool = False):
    """The labelled steps with hidden states (:mod:`policies.probes.benefit_dataset`, cached) of ``benefit_labels``
    (splits (c) and (d)'s fit part), or of ``ood_labels`` with ``ood`` (split (d)'s test part)."""
    from envs.env_config import env_config_from_file
    from policies.probes.benefit_dataset import benefit_step_dataset

    labels, config, split = benefit_source(cfg, ood)
    env_cfg = env_config_from_file(config, split)
    n = sum(1 for line in labels.read_text(encoding="utf-8").splitlines() if line.strip())
    task = progress.add_task(f"{'(d) OOD' if ood else 'benefit'} closed-book chains with hidden states", total=n)
    return benefit_step_dataset(labels, env_cfg, cfg.cache_dir or None, batch=cfg.benefit_batch,
                                progress=lambda done: progress.update(task, completed=done))


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

    def features(self, kind: str, ds, layers: tuple[int, int] | None = None, parts: str = "both",
                 pooling: str | None = None):
        from policies.probes.probe import FeatureSpec

        if kind == "pulse":  # pooling: the config's unless an ablation names another
            spec = FeatureSpec("pulse", layers=layers, pooling=pooling or self.cfg.pulse_pooling, parts=parts)
            return spec, ds.features(spec)
        if kind == "reprobe":
            spec = FeatureSpec("reprobe", pooling="last")
            return spec, spec.compute(hidden_last=ds.hidden_last)
        if kind == "ref_last_layer":  # the raw (mean-pooled) last-layer state
            return FeatureSpec("reprobe", pooling="mean", extra="last layer only"), \
                ds.hidden_mean[:, -1, :].astype(np.float32)
        if kind in PROXIES:  # RSUS's U_verb proxies: `kairos probe train --signal rsus_proxy --proxy-features …`
            spec = FeatureSpec("rsus_proxy", pooling="none", extra=PROXIES[kind])
            return spec, spec.compute(texts=ds.contents.tolist())
        if kind == "ref_step_meta":
            length = np.array([len(c.split()) for c in ds.contents], dtype=np.float32)
            return FeatureSpec("rsus_proxy", pooling="none", extra="step index + length"), \
                np.stack([ds.step_index.astype(np.float32), length], axis=1)
        raise ValueError(f"unknown probe '{kind}'")

    def fit(self, kind: str, layers: tuple[int, int] | None = None, parts: str = "both",
            pooling: str | None = None) -> dict[str, Any]:
        from policies.probes.probe import FitConfig, default_arch, fit_probe

        spec, X = self.features(kind, self.s.train, layers, parts, pooling)
        _, Xt = self.features(kind, self.s.test, layers, parts, pooling)
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
