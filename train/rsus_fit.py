"""Refit the RSUS weights on a validation split (docs/design.md §6) and save them by name (``kairos train rsus-weights``).

The target is the retrieval benefit of each step: the counterfactual reward difference R(retrieve at the step) −
R(go on), the rest of the episode under CoT (the warm start's labels, :func:`train.warmstart.counterfactual_labels`).
The components come from the env's own ``rsus`` observation (U_verb, U_ent, U_cons and their availability flags), so
the fitted RSUS is the one the env computes: the weighted mean over the components available at each step. A grid
search over the weight simplex (components outside ``rsus_components`` fixed at 0) maximises the Pearson
correlation; the weights, both correlations (fitted and paper) and what they were fitted on are saved as
``<rsus_weights_dir>/<name>.json``, which an env then loads with ``rsus_options: {weights: <name>}``.

Example (shell)::

    kairos train rsus-weights --config configs/rsus_weights_microworld.yaml
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf
from envs.env_config import EnvConfig

log = logging.getLogger(__name__)


@dataclass
class RSUSFitConfig(ConfigBase):
    """What to fit RSUS weights on."""

    name: str = helpf("microworld_dev", "name of the weight set (saved as <folder>/<name>.json)")
    env: EnvConfig = field(
        default_factory=lambda: EnvConfig.from_dict({"split": "dev", "rsus_components": ["ent", "cons"],
                                                     "signals": ["output", "rsus"]}),
        metadata={"help": "env config (EnvConfig fields; micro-world: the counterfactual labels need its cache "
                          "replays; default: {split: dev, rsus_components: [ent, cons], signals: [output, rsus]})"})
    plugins: list[str] = helpf([], "plug-in modules imported first (on the driver; a user's signal, trigger, cost, "
                                   "retriever … registers on import, then its name is valid anywhere in this config); "
                                   "the env carries them (env.plugins)")
    questions: str = helpf("0:100", "a 'start:stop' slice of the env split (the validation questions)")
    lam: float = helpf(0.1, "λ of retrieval calls in the counterfactual rewards")
    grid_step: float = helpf(0.05, "resolution of the weight-simplex grid")
    folder: str | None = helpf(None, "where to save (default: $KAIROS_RSUS_WEIGHTS or runs/rsus_weights)")
    labels_dir: str = helpf("runs/rsus_weights/labels", "where the counterfactual episodes are written (resumable)")

    def validate(self) -> None:
        if "rsus" not in self.env.signals:
            raise ConfigError("RSUSFitConfig.env: signals must include 'rsus' (the components come from its field)")
        if self.lam < 0 or not 0 < self.grid_step <= 0.5:
            raise ConfigError("RSUSFitConfig: need lam >= 0 and 0 < grid_step <= 0.5")
        a, _, b = self.questions.partition(":")
        if not (a.isdigit() and b.isdigit() and int(a) < int(b)):
            raise ConfigError(f"RSUSFitConfig.questions must look like 'start:stop', got {self.questions!r}")


def fit_rsus(cfg: RSUSFitConfig, progress: bool = True) -> dict[str, Any]:
    """Fit, save and return the weight set (with the correlations and what it was fitted on)."""
    import numpy as np

    from agents.signals.rsus import PAPER_WEIGHTS, fit_weights, rsus_correlation, save_rsus_weights
    from train.counterfactual import counterfactual_labels
    from train.warmstart import WarmStartOptions

    env = cfg.env
    a, b = (int(x) for x in cfg.questions.split(":"))
    data = counterfactual_labels(env, list(range(a, b)), WarmStartOptions(behavior="never"), cfg.lam,
                                 Path(cfg.labels_dir) / cfg.name, progress=progress)
    r = data["obs"]["rsus"].astype(np.float64)
    comps, avail, target = r[:, 1:4], r[:, 4:7], data["delta"]
    use = tuple(env.rsus_components)
    w = fit_weights(comps, target, step=cfg.grid_step, available=avail, use=use)
    paper = tuple(x if c in use else 0.0 for x, c in zip(PAPER_WEIGHTS, ("verb", "ent", "cons")))
    info = {"fitted_on": {"env": env.to_dict(), "questions": cfg.questions, "steps": int(len(target)),
                          "target": "counterfactual retrieval benefit under CoT (λ = %g)" % cfg.lam},
            "components": list(use),
            "correlation": rsus_correlation(comps, target, w, avail),
            "paper_correlation": rsus_correlation(comps, target, paper, avail),
            "available_share": {c: float(avail[:, i].mean()) for i, c in enumerate(("verb", "ent", "cons"))}}
    path = save_rsus_weights(cfg.name, w, info, cfg.folder)
    log.info("RSUS weights '%s' = verb %.2f, ent %.2f, cons %.2f: r = %.3f (paper weights: r = %.3f) on %d steps; "
             "saved to %s", cfg.name, *w, info["correlation"], info["paper_correlation"], len(target), path)
    return {"name": cfg.name, "weights": dict(zip(("verb", "ent", "cons"), w)), "path": str(path), **info}
