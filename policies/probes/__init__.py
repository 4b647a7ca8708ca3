"""Step-error probes (PUlSE, ReProbe, RSUS proxy), their metrics, splits and micro-world datasets.

Flat public API (torch is imported on first use of the probe classes)::

    from policies.probes import Probe, FeatureSpec, fit_probe, evaluate_detector, build_step_dataset
"""

from __future__ import annotations

import importlib
from typing import Any

from policies.probes.metrics import (
    auroc,
    average_precision,
    binary_stats,
    bootstrap_auroc_ci,
    evaluate_detector,
    youden_threshold,
)
from policies.probes.splits import entity_disjoint_split, group_split

_LAZY = {
    "Probe": "policies.probes.probe", "FeatureSpec": "policies.probes.probe", "FitConfig": "policies.probes.probe",
    "ProbeMismatchError": "policies.probes.probe", "fit_probe": "policies.probes.probe",
    "default_arch": "policies.probes.probe", "MLP": "policies.probes.nets", "ReProbeNet": "policies.probes.nets",
    "proxy_features": "agents.signals.rsus", "train_rsus_proxy": "policies.probes.rsus_proxy",
    "StepDataset": "policies.probes.dataset", "build_step_dataset": "policies.probes.dataset",
    "artifact_fingerprint": "envs.core.microworld.artifact", "world_model_id": "envs.core.microworld.artifact",
    "ProbeTrainConfig": "policies.probes.pipeline", "train_probe": "policies.probes.pipeline",
}

__all__ = ["auroc", "average_precision", "binary_stats", "bootstrap_auroc_ci", "entity_disjoint_split",
           "evaluate_detector", "group_split", "youden_threshold", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'policies.probes' has no attribute '{name}'")
