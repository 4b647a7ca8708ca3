"""The RSUS U_verb proxy: for models that cannot verbalise a confidence, an MLP predicts p(error) of a step
from its surface features (hedge words, entities, words, discourse marker, numbers) and, when given, a
sentence embedding (``step.meta["sentence_embedding"]`` at run time).

A trained proxy is a :class:`~policies.probes.probe.Probe` with ``spec.signal == "rsus_proxy"``; it is a
``(step, state) -> float`` callable, so it plugs into RSUS directly::

    rsus = RSUS(u_verb=Probe.load("runs/rsus_proxy"), corpus=passages, reasoner=reasoner)

Example:
    >>> proxy_features(["Step 1 : maybe Mira 's father is Tovan ."]).tolist()
    [[1.0, 2.0, 6.0, 0.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agents.signals.rsus import proxy_features
from policies.probes.probe import FeatureSpec, FitConfig, Probe, fit_probe


def train_rsus_proxy(texts: Sequence[str], labels: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray, *,
                     model_id: str, embeddings: np.ndarray | None = None, fit: FitConfig | None = None
                     ) -> tuple[Probe, dict]:
    """Train the proxy on step texts with error labels (1 = wrong step)."""
    spec = FeatureSpec("rsus_proxy", pooling="none", extra="surface+embedding" if embeddings is not None else "surface")
    X = proxy_features(texts, embeddings)
    return fit_probe(spec, X, labels, train_idx, val_idx, model_id=model_id, fit=fit)
