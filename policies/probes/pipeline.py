"""Train a step-error probe on the micro-world and measure it (the flow behind ``kairos probe train``).

Read top to bottom: load the artifact → build (or load the cached) labelled step dataset of its train
questions → features per the :class:`~policies.probes.probe.FeatureSpec` → 70/30 split by question (or
entity-disjoint) → fit with early stopping on validation AUROC → save → metrics of the probe and of the
training-free references (PPL, MinProb, MaxProb, Entropy, CoE-R, CoE-C) on the *same* validation steps,
per error kind, and on a held-out question split of the artifact (``dev``) that no choice was made on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.signals.base import signal_meta
from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

#: training-free references: name -> higher_is_error (each signal's own declared error direction)
REFERENCES = {name: signal_meta(name)["error_direction"] > 0
              for name in ("ppl", "minprob", "maxprob", "entropy", "coe_r", "coe_c")}


@dataclass
class ProbeTrainConfig(ConfigBase):
    """Everything ``kairos probe train`` needs."""

    signal: str = helpf("pulse", "probe to train: pulse | reprobe | rsus_proxy")
    artifact: str = helpf("", "micro-world artifact directory (default: the shipped one)")
    benefit_labels: str = helpf("", "real data instead of the micro-world: a retrieval-benefit label JSONL "
                                "(eval.detection.labels); label = 'retrieval helps'")
    benefit_config: str = helpf("configs/bench_hotpotqa_bm25.yaml", "with benefit_labels: the bench / env YAML "
                                "the labels were made with")
    benefit_split: str = helpf("dev[0:500:2]", "with benefit_labels: the env question split of the labels")
    out: str = helpf("", "directory to save the probe in")
    layers: str = helpf("", "PUlSE layer interval 'a,b' over hidden rows 0..L (empty: middle of the stack), or "
                            "'chosen': a probe per interval [a, b] (every one with b - a >= 2), the best validation "
                            "AUROC kept, as the PUlSE paper's Figure 4 protocol; the search is recorded with the probe")
    pooling: str = helpf("", "pooling over the step's tokens: mean | last (the pooled states' features; empty: mean "
                             "for pulse, last for reprobe); PUlSE also max | token_mean (each token's features, their "
                             "maximum or mean over the step), or 'chosen': every PUlSE pooling (with the interval "
                             "search when layers is 'chosen'), the best validation AUROC kept; the search is recorded")
    proxy_features: str = helpf("surface+minilm", "rsus_proxy: surface+minilm (the paper's SBERT + surface features: "
                                                  "the step's all-MiniLM-L6-v2 embedding and its surface features) "
                                                  "| surface (surface features alone)")
    parts: str = helpf("both", "PUlSE features: both | magnitude | angle (ablations)")
    split: str = helpf("question", "train/val split: question (group split) | entity (entity-disjoint)")
    val_frac: float = helpf(0.3, "validation share (of questions, or of steps for the entity split)")
    question_split: str = helpf("train", "artifact question split the probe is trained on")
    n_questions: int = helpf(2000, "hop-balanced questions to generate chains for (0 = all)", ge=0)
    fact_holdout: str = helpf("", "micro-world fact-disjoint condition 'share,seed' (as the env's fact_holdout "
                                  "{share, seed}): the probe trains on questions whose chain needs none of the held-out "
                                  "facts (keep: train) and the held-out evaluation uses those that need one (keep: "
                                  "test) — a probe for condition (b) that never saw a held-out fact (empty: off)")
    eval_split: str = helpf("dev", "artifact question split for a held-out evaluation (empty: skip)")
    n_eval_questions: int = helpf(500, "questions of the held-out evaluation (0 = all)", ge=0)
    threshold: float = helpf(0.5, "decision threshold on p(error)")
    seed: int = helpf(0, "seed of question sampling, splits, initialisation and shuffling")
    n_boot: int = helpf(1000, "question-level bootstrap resamples for AUROC CIs (0 = none)", ge=0)
    cache_dir: str = helpf("", "step-dataset cache directory (default $KAIROS_CACHE/steps)")
    lr: float = helpf(1e-3, "AdamW learning rate", gt=0)
    weight_decay: float = helpf(1e-4, "AdamW weight decay", ge=0)
    batch_size: int = helpf(256, "minibatch size", ge=1)
    max_epochs: int = helpf(200, "maximum epochs", ge=1)
    patience: int = helpf(20, "early-stopping patience (epochs without a better validation AUROC)", ge=1)
    pos_weight: float = helpf(3.0, "BCE weight of the error class", gt=0)

    def validate(self) -> None:
        if not 0.0 < self.val_frac < 1.0:
            raise ConfigError(f"ProbeTrainConfig: key 'val_frac' must be in (0, 1), got {self.val_frac}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"ProbeTrainConfig: key 'threshold' (on p(error)) must be in [0, 1], got {self.threshold}")
        if self.signal not in ("pulse", "reprobe", "rsus_proxy"):
            raise ConfigError(f"ProbeTrainConfig: unknown signal '{self.signal}' (valid: pulse, reprobe, rsus_proxy)")
        from agents.signals.rsus import PROXY_FEATURES

        if self.proxy_features not in PROXY_FEATURES:
            raise ConfigError(f"ProbeTrainConfig: unknown proxy_features '{self.proxy_features}' (valid: "
                              f"{', '.join(PROXY_FEATURES)})")
        if self.split not in ("question", "entity"):
            raise ConfigError(f"ProbeTrainConfig: unknown split '{self.split}' (valid: question, entity)")
        from policies.probes.probe import POOLINGS_OF

        valid = POOLINGS_OF.get(self.signal, ())
        if self.pooling and self.pooling not in (*valid, "chosen"):
            raise ConfigError(f"ProbeTrainConfig: unknown pooling '{self.pooling}' for signal '{self.signal}' (valid: "
                              f"{', '.join(valid) or 'none: leave it empty'}{', chosen' if self.signal == 'pulse' else ''})")
        if self.pooling == "chosen" and self.signal != "pulse":
            raise ConfigError(f"ProbeTrainConfig: pooling 'chosen' searches PUlSE poolings; signal is '{self.signal}'")
        if self.parts not in ("both", "magnitude", "angle"):
            raise ConfigError(f"ProbeTrainConfig: unknown parts '{self.parts}' (valid: both, magnitude, angle)")
        if self.layers == "chosen" and self.signal != "pulse":
            raise ConfigError(f"ProbeTrainConfig: layers 'chosen' searches PUlSE intervals; signal is '{self.signal}'")
        if self.layers and self.layers != "chosen":
            parse_layers(self.layers)
        if self.fact_holdout:
            if self.benefit_labels:
                raise ConfigError("ProbeTrainConfig: fact_holdout is a micro-world condition; leave it empty with "
                                  "benefit_labels")
            self.holdout("train")

    def holdout(self, keep: str) -> dict | None:
        """``fact_holdout`` as the env's ``{share, seed, keep}`` (None when off)."""
        if not self.fact_holdout:
            return None
        from envs.env_config import FactHoldout

        try:
            share, seed = self.fact_holdout.replace(" ", "").split(",")
            h = FactHoldout(share=float(share), seed=int(seed), keep=keep)
        except ValueError as e:
            raise ConfigError(f"ProbeTrainConfig.fact_holdout must be 'share,seed' (e.g. '0.33,0'), got "
                              f"'{self.fact_holdout}'") from e
        h.validate("ProbeTrainConfig.fact_holdout")
        return h.to_dict()

    def fit_config(self):
        from policies.probes.probe import FitConfig

        return FitConfig(lr=self.lr, weight_decay=self.weight_decay, batch_size=self.batch_size,
                         max_epochs=self.max_epochs, patience=self.patience, pos_weight=self.pos_weight,
                         seed=self.seed)


def parse_layers(text: str) -> tuple[int, int]:
    """``"7,25"`` -> ``(7, 25)``."""
    try:
        a, b = (int(x) for x in text.replace(" ", "").split(","))
    except ValueError as e:
        raise ConfigError(f"layer interval must be 'a,b' with integers, got '{text}'") from e
    if not 0 <= a < b:
        raise ConfigError(f"layer interval must satisfy 0 <= a < b, got '{text}'")
    return a, b


def make_spec(cfg: ProbeTrainConfig, n_layers: int, model_id: str | None = None):
    """The feature spec a config asks for on a model with ``n_layers`` layers."""
    from agents.signals.hidden import default_interval
    from policies.probes.probe import FeatureSpec

    if cfg.signal == "pulse":
        if cfg.layers == "chosen" or cfg.pooling == "chosen":
            raise ConfigError("make_spec: 'chosen' is resolved by train_probe's interval / pooling search")
        layers = parse_layers(cfg.layers) if cfg.layers else default_interval(n_layers, model_id)
        if layers[1] > n_layers:
            raise ConfigError(f"layer interval {list(layers)} exceeds the model's rows 0..{n_layers}")
        return FeatureSpec("pulse", layers=layers, pooling=cfg.pooling or "mean", parts=cfg.parts)
    if cfg.signal == "reprobe":
        return FeatureSpec("reprobe", pooling=cfg.pooling or "last")
    return FeatureSpec("rsus_proxy", pooling="none", extra=cfg.proxy_features)


def reference_scores(ds) -> dict[str, np.ndarray]:
    """Training-free detector scores of every step of a dataset (see :data:`REFERENCES` for orientation)."""
    from agents.signals.hidden import coe_scores

    coe_r, coe_c = coe_scores(ds.hidden_mean)
    out = {name: ds.output_column(name) for name in ("ppl", "minprob", "maxprob", "entropy")}
    out.update(coe_r=coe_r, coe_c=coe_c)
    return out


def detection_report(ds, probe_scores: np.ndarray, idx: np.ndarray, ref_train_idx: np.ndarray | None,
                     threshold: float, n_boot: int, seed: int) -> dict[str, Any]:
    """Metrics of the probe and the references on steps ``idx`` (reference thresholds: Youden on train)."""
    from policies.probes.metrics import auroc, evaluate_detector, youden_threshold

    y, g = ds.labels[idx], ds.question_ids[idx]
    rep: dict[str, Any] = {"probe": evaluate_detector(y, probe_scores, g, threshold=threshold, n_boot=n_boot,
                                                      seed=seed)}
    refs = reference_scores(ds)
    for name, hi in REFERENCES.items():
        t = None
        if ref_train_idx is not None:
            o = refs[name][ref_train_idx] if hi else -refs[name][ref_train_idx]
            t = youden_threshold(ds.labels[ref_train_idx], o)
            t = None if math.isnan(t) else (t if hi else -t)
        rep[name] = evaluate_detector(y, refs[name][idx], g, threshold=t, higher_is_error=hi, n_boot=n_boot,
                                      seed=seed)
    # per error kind: that kind's wrong steps vs all correct steps
    kinds = ds.error_kinds[idx]
    by_kind: dict[str, Any] = {}
    for kind in sorted(set(kinds.tolist()) - {""}):
        sel = (kinds == kind) | (y == 0)
        n_kind = int((kinds == kind).sum())
        if n_kind < 3 or int((y[sel] == 0).sum()) == 0:
            continue
        row = {"n": n_kind, "probe": auroc(y[sel], probe_scores[sel])}
        for name, hi in REFERENCES.items():
            s = refs[name][idx][sel]
            row[name] = auroc(y[sel], s if hi else -s)
        by_kind[kind] = row
    rep["by_error_kind"] = by_kind
    return rep


def train_probe(cfg: ProbeTrainConfig) -> tuple[Any, dict[str, Any]]:
    """Build the dataset, train, save and evaluate; returns ``(probe, report)``."""
    import torch

    from envs.core.io import write_json
    from envs.core.microworld.artifact import load_artifact, world_model_id
    from policies.probes.dataset import build_step_dataset
    from policies.probes.probe import default_arch, fit_probe
    from policies.probes.splits import entity_disjoint_split, group_split

    torch.set_num_threads(1)
    cache = cfg.cache_dir or None
    world = None
    if cfg.benefit_labels:  # real data: the labels' reasoner, its closed-book steps and their benefit labels
        from envs.env_config import env_config_from_file
        from policies.probes.benefit_dataset import benefit_step_dataset

        env_cfg = env_config_from_file(cfg.benefit_config, cfg.benefit_split)
        ds = benefit_step_dataset(cfg.benefit_labels, env_cfg, cache)
        model_id = ds.meta["model_id"]
        if cfg.split == "entity":
            raise ConfigError("ProbeTrainConfig: split 'entity' needs micro-world entities; use 'question' with "
                              "benefit_labels")
    else:
        world = load_artifact(cfg.artifact or None)
        model_id = world_model_id(world)
        ds = build_step_dataset(world, cfg.question_split, cfg.n_questions or None, cfg.seed, cache,
                                fact_holdout=cfg.holdout("train"))
    n_layers = ds.hidden_mean.shape[1] - 1
    if cfg.split == "question":
        tr, va = group_split(ds.question_ids, cfg.val_frac, cfg.seed)
    else:
        tr, va = entity_disjoint_split(ds.subjects, cfg.val_frac, cfg.seed)
    search = pooling_search = None
    asked = cfg
    if cfg.pooling == "chosen":  # every PUlSE pooling (each with its interval search), the best validation AUROC
        pooling_search = choose_pooling(cfg, ds, tr, va, n_layers, model_id)
        best = pooling_search["chosen"]
        search = pooling_search["candidates"][best].get("interval_search")
        cfg = cfg.replace(pooling=best, layers=",".join(map(str, pooling_search["candidates"][best]["layers"])))
    elif cfg.layers == "chosen":  # PUlSE's Figure 4 protocol: the interval with the best validation AUROC
        search = choose_interval(cfg, ds, tr, va, n_layers, model_id)
        cfg = cfg.replace(layers=",".join(map(str, search["chosen"])))
    spec = make_spec(cfg, n_layers, model_id)
    X = ds.features(spec)
    arch = default_arch(spec, X.shape[1], tuple(ds.hidden_last.shape[1:]))
    searches = {**({"interval_search": search} if search else {}),
                **({"pooling_search": pooling_search} if pooling_search else {})}
    info = {"artifact": str(world.path) if world is not None else None, "dataset": ds.meta, "split": cfg.split,
            "val_frac": cfg.val_frac, "train_config": asked.to_dict(), "resolved": {"layers": cfg.layers,
                                                                                   "pooling": spec.pooling},
            **searches}
    probe, hist = fit_probe(spec, X, ds.labels, tr, va, model_id=model_id, arch=arch, fit=cfg.fit_config(),
                            threshold=cfg.threshold, info=info)
    report: dict[str, Any] = {
        "model_id": model_id, "spec": spec.to_dict(), "n_features": int(X.shape[1]),
        "data": {"steps": len(ds), "train_steps": int(len(tr)), "val_steps": int(len(va)),
                 "error_rate": float(ds.labels.mean()),
                 "labels": {str(k): int(v) for k, v in zip(*np.unique(ds.label_names, return_counts=True))}},
        "fit": {"best_epoch": hist["best_epoch"], "epochs": hist["epochs"]},
        **searches,
        "val": detection_report(ds, probe.predict_proba(X[va]), va, tr, cfg.threshold, cfg.n_boot, cfg.seed),
    }
    ev = None
    if cfg.eval_split and world is not None:
        try:
            ev = build_step_dataset(world, cfg.eval_split, cfg.n_eval_questions or None, cfg.seed, cache,
                                    fact_holdout=cfg.holdout("test"))
        except ValueError as e:  # e.g. an incompetent LM wrote no step with content tokens
            log.warning("held-out evaluation skipped: %s", e)
    if ev is not None:
        Xe = ev.features(spec)
        # reference thresholds come from the probe's training data (no choice is made on the eval split)
        merged = _concat(ds.subset(tr), ev)
        idx = np.arange(len(tr), len(merged))
        report["eval"] = {"split": cfg.eval_split, "steps": len(ev),
                          **({"fact_holdout": cfg.holdout("test")} if cfg.fact_holdout else {}), **detection_report(
            merged, probe.predict_proba(Xe), idx, np.arange(len(tr)), cfg.threshold, cfg.n_boot, cfg.seed)}
    if ev is not None and cfg.fact_holdout:
        report["eval"]["by_fact"] = by_fact(world, ev, probe.predict_proba(Xe), cfg.holdout("test"))
    if ev is not None and pooling_search:  # each pooling's probe on the held-out questions: reported, not chosen on
        pooling_search["eval_auroc"] = {"split": cfg.eval_split, **{
            p: auroc_of(c["probe"], ev, make_spec(cfg.replace(pooling=p, layers=",".join(map(str, c["layers"]))),
                                                  n_layers, model_id))
            for p, c in pooling_search["candidates"].items()}}
    if pooling_search:
        for c in pooling_search["candidates"].values():
            c.pop("probe")
    probe.info["metrics"] = {k: report[k] for k in ("val", "eval") if k in report}
    if cfg.out:
        probe.save(cfg.out)
        write_json(Path(cfg.out) / "metrics.json", report)
        log.info("probe saved to %s", Path(cfg.out).resolve())
    return probe, report


def candidate_intervals(n_layers: int) -> list[tuple[int, int]]:
    """PUlSE intervals ``[a, b]`` over rows ``0..n_layers`` with ``b - a >= 2`` (a trajectory needs two
    transitions for an angle); above 10 layers every ``ceil(n_layers / 10)``-th boundary (and the last), so a
    28-layer model tries 54 intervals, not 350."""
    stride = max(1, math.ceil(n_layers / 10))
    rows = sorted({*range(0, n_layers + 1, stride), n_layers})
    return [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if b - a >= 2]


def choose_interval(cfg: ProbeTrainConfig, ds, tr: np.ndarray, va: np.ndarray, n_layers: int,
                    model_id: str | None, keep_probe: bool = False) -> dict[str, Any]:
    """Fit a PUlSE probe per :func:`candidate_intervals` on ``tr`` (early stopping on ``va``) and keep the one with
    the best validation AUROC (ties: the narrower, then the earlier interval). Returns ``{"on": "validation",
    "chosen": [a, b], "val_auroc": {"a,b": AUROC}}`` (and the chosen interval's ``"probe"`` with ``keep_probe``);
    no test data is read. The config's pooling is used (not ``chosen``)."""
    from policies.probes.probe import default_arch, fit_probe

    scores: dict[str, float] = {}
    probes: dict[str, Any] = {}
    for a, b in candidate_intervals(n_layers):
        spec = make_spec(cfg.replace(layers=f"{a},{b}"), n_layers, model_id)
        X = ds.features(spec)
        probe, hist = fit_probe(spec, X, ds.labels, tr, va, model_id=model_id,
                                arch=default_arch(spec, X.shape[1], tuple(ds.hidden_last.shape[1:])),
                                fit=cfg.fit_config(), threshold=cfg.threshold)
        scores[f"{a},{b}"] = float(hist["best_val_auroc"])
        if keep_probe:
            probes[f"{a},{b}"] = probe
    best = max(scores, key=lambda k: (scores[k], -(int(k.split(",")[1]) - int(k.split(",")[0])),
                                      -int(k.split(",")[0])))
    log.info("PUlSE interval chosen on validation (pooling %s): [%s] (AUROC %.4f of %d candidates)",
             cfg.pooling or "mean", best, scores[best], len(scores))
    out: dict[str, Any] = {"on": "validation", "chosen": [int(x) for x in best.split(",")], "val_auroc": scores}
    if keep_probe:
        out["probe"] = probes[best]
    return out


def choose_pooling(cfg: ProbeTrainConfig, ds, tr: np.ndarray, va: np.ndarray, n_layers: int,
                   model_id: str | None) -> dict[str, Any]:
    """Every PUlSE pooling of :data:`~policies.probes.probe.POOLINGS_OF` — each with the interval search when
    ``cfg.layers`` is ``chosen``, else at the config's interval — and the one with the best validation AUROC (ties:
    the order of the list, ``mean`` first). Returns ``{"on": "validation", "chosen": pooling, "val_auroc":
    {pooling: AUROC}, "candidates": {pooling: {"layers": [a, b], "val_auroc": …, "interval_search": …, "probe": …}}}``
    (``train_probe`` drops the probes); no test data is read."""
    from policies.probes.probe import POOLINGS_OF, default_arch, fit_probe

    cands: dict[str, dict[str, Any]] = {}
    for pooling in POOLINGS_OF["pulse"]:
        sub = cfg.replace(pooling=pooling)
        if cfg.layers == "chosen":
            sr = choose_interval(sub, ds, tr, va, n_layers, model_id, keep_probe=True)
            probe = sr.pop("probe")
            cands[pooling] = {"layers": sr["chosen"], "val_auroc": sr["val_auroc"][",".join(map(str, sr["chosen"]))],
                              "interval_search": sr, "probe": probe}
        else:
            spec = make_spec(sub, n_layers, model_id)
            X = ds.features(spec)
            probe, hist = fit_probe(spec, X, ds.labels, tr, va, model_id=model_id,
                                    arch=default_arch(spec, X.shape[1], tuple(ds.hidden_last.shape[1:])),
                                    fit=cfg.fit_config(), threshold=cfg.threshold)
            cands[pooling] = {"layers": list(spec.layers), "val_auroc": float(hist["best_val_auroc"]), "probe": probe}
    order = list(cands)
    best = max(order, key=lambda p: (cands[p]["val_auroc"], -order.index(p)))
    log.info("PUlSE pooling chosen on validation: %s (AUROC %.4f; %s)", best, cands[best]["val_auroc"],
             ", ".join(f"{p} {c['val_auroc']:.4f}" for p, c in cands.items()))
    return {"on": "validation", "chosen": best, "val_auroc": {p: c["val_auroc"] for p, c in cands.items()},
            "candidates": cands}


def auroc_of(probe, ds, spec) -> float:
    """A probe's AUROC on every step of a dataset."""
    from policies.probes.metrics import auroc

    return float(auroc(ds.labels, probe.predict_proba(ds.features(spec))))


def _concat(a, b):
    from policies.probes.dataset import StepDataset

    return StepDataset.concat(a, b)


def by_fact(world, ds, probe_scores: np.ndarray, fact_holdout: dict) -> dict[str, Any]:
    """AUROC of the probe and the references on a fact-disjoint evaluation's steps, split by whether the step's gold
    fact is held out (never stated by a training chain) or was seen: a test question needs at least one held-out
    fact, but its other steps may state facts the probe trained on."""
    from envs.core.microworld.questions import gold_chain
    from envs.microworld.task import holdout_facts
    from policies.probes.metrics import auroc

    held = holdout_facts(world.kb, float(fact_holdout["share"]), int(fact_holdout["seed"]))
    by_id = {q.id: q for split in world.questions.values() for q in split}
    is_held = np.array([gold_chain(world.kb, by_id[q])[int(i) - 1].id in held
                        for q, i in zip(ds.question_ids, ds.step_index)], dtype=bool)
    refs = reference_scores(ds)
    out: dict[str, Any] = {}
    for part, m in (("held_out", is_held), ("seen", ~is_held)):
        y = ds.labels[m]
        if not m.any() or y.min() == y.max():
            continue
        out[part] = {"n": int(m.sum()), "errors": int(y.sum()), "probe": auroc(y, probe_scores[m]),
                     **{name: auroc(y, refs[name][m] if hi else -refs[name][m]) for name, hi in REFERENCES.items()}}
    return out


def _auroc_table(title: str, key: str, size: str, rows: dict[str, tuple[str, dict[str, float]]]):
    """A table of the probe's and the references' AUROC per group: ``rows`` maps a group to (its size, its AUROCs)."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column(key)
    t.add_column(size, justify="right")
    for c in ["probe", *REFERENCES]:
        t.add_column(c, justify="right")
    for name, (n, row) in rows.items():
        t.add_row(name, n, *[f"{row[c]:.3f}" for c in ["probe", *REFERENCES]])
    return t


def format_report(report: dict[str, Any]) -> str:
    """Readable tables of a :func:`train_probe` report."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=120, force_terminal=False)
    d = report["data"]
    con.print(f"model {report['model_id']}  features {report['n_features']} ({report['spec']})")
    con.print(f"steps {d['steps']} (train {d['train_steps']}, val {d['val_steps']}), error rate "
              f"{d['error_rate']:.3f}, labels {d['labels']}; best epoch {report['fit']['best_epoch'] + 1} "
              f"of {report['fit']['epochs']}")
    if report.get("pooling_search"):
        ps = report["pooling_search"]
        ev = ps.get("eval_auroc", {})
        con.print(f"PUlSE pooling chosen on validation: {ps['chosen']} (validation AUROC, at each pooling's interval: "
                  + ", ".join(f"{p} {v:.4f} {ps['candidates'][p]['layers']}" for p, v in ps["val_auroc"].items())
                  + (f"; held-out '{ev['split']}' AUROC, not used for the choice: "
                     + ", ".join(f"{p} {v:.4f}" for p, v in ev.items() if p != "split") if ev else "") + ")")
    if report.get("interval_search"):
        sr = report["interval_search"]
        top = sorted(sr["val_auroc"].items(), key=lambda kv: -kv[1])[:5]
        con.print(f"PUlSE interval chosen on validation: {sr['chosen']} of {len(sr['val_auroc'])} candidates "
                  f"(best validation AUROCs: {', '.join(f'[{k}] {v:.4f}' for k, v in top)})")
    for part in ("val", "eval"):
        if part not in report:
            continue
        rep = report[part]
        title = "validation steps" if part == "val" else f"held-out '{rep['split']}' questions ({rep['steps']} steps)"
        t = Table(title=f"Detection on {title}")
        for c in ("detector", "AUROC", "95% CI", "PR-AUC", "F1", "precision", "recall", "threshold"):
            t.add_column(c, justify="right")
        for name, m in rep.items():
            if not isinstance(m, dict) or "auroc" not in m:
                continue
            lo, hi = m["auroc_ci95"]
            t.add_row(name, f"{m['auroc']:.4f}", f"[{lo:.3f}, {hi:.3f}]", f"{m['pr_auc']:.4f}", f"{m['f1']:.3f}",
                      f"{m['precision']:.3f}", f"{m['recall']:.3f}", f"{m['threshold']:.4g}")
        con.print(t)
        if rep.get("by_error_kind"):
            con.print(_auroc_table(f"AUROC by error kind ({part}: that kind's errors vs correct steps)", "kind", "n",
                                   {k: (str(r["n"]), r) for k, r in rep["by_error_kind"].items()}))
        if rep.get("by_fact"):
            con.print(_auroc_table(f"AUROC by the step's fact ({part}: held out of training, or seen)", "fact",
                                   "steps (errors)", {k: (f"{r['n']} ({r['errors']})", r)
                                                      for k, r in rep["by_fact"].items()}))
    return buf.getvalue()
