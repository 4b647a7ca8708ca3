"""RSUS in ``kairos bench detection`` (:mod:`eval.detection.bench`): its components on the benchmark's labelled
micro-world steps, computed as the env computes them, and the RSUS rows they make.

Per step, :meth:`agents.signals.rsus.RSUS.components` with the env's default settings (docs/design.md §4;
``EnvConfig.rsus_options`` unset): **U_ent** — the step's entities' BM25 score entropy over the top ``bm25_k = 100``
hits of the world's fact corpus (what the env's retriever searches; :class:`~agents.signals.rsus.BM25Scores`, as
the env builds it); **U_cons** — 1 − mean pairwise Jaccard agreement of ``k = 3`` alternatives sampled by the
micro-world LM from the state before the step (seed ``seed + step index``), at every step (the env's default: the
micro-world's steps have no discourse marker to gate it). The steps are the dataset's own closed-book greedy chains,
replayed in the batches :func:`~policies.probes.dataset.build_step_dataset` made them in and checked against the
dataset row by row (a mismatch is an error). The columns are cached beside the step dataset.

The rows (:data:`RSUS_DETECTORS`), named as the policy benchmark names RSUS rows (``configs/experiments/microworld/bench_microworld_rsus.yaml``):

* ``RSUS[ent]`` — U_ent alone (RSUS with ``rsus_components: [ent]``);
* ``RSUS[cons]`` — U_cons alone;
* ``RSUS[ent,cons]`` — the env's default RSUS: the paper weights 0.35 / 0.25 renormalised over the two;
* ``RSUS[verb(proxy: surface)]`` and ``RSUS[verb(proxy: surface+MiniLM)]`` — the U_verb proxy alone, an MLP fitted on
  the split's fit part on the step's surface features (hedges, entities, words, discourse marker, numbers), with or
  without its all-MiniLM-L6-v2 embedding (the paper's SBERT + surface; ``kairos probe train --signal rsus_proxy
  --proxy-features …``): the micro-world LM cannot state a confidence, so a proxy is the only U_verb there is;
* ``RSUS[verb(proxy: …),ent,cons]`` — RSUS as shipped with that proxy (``rsus_options.verb_proxy``): the paper
  weights 0.40 / 0.35 / 0.25, the weighted mean over the components a step has.

Thresholds: the training-free rows by Youden's J on the split's whole train part, like the other training-free
detectors; the proxies like the learned probes (their p(error)); the weighted RSUS with a proxy by Youden's J on
validation (the proxy was fitted on the rest of the train part, so its scores there are not held out).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: the U_verb proxies: row -> proxy features (:data:`agents.signals.rsus.PROXY_FEATURES`)
PROXIES = {"rsus_verb_surface": "surface", "rsus_verb_minilm": "surface+minilm"}
#: RSUS row -> (label, learned?, higher = error)
RSUS_DETECTORS: dict[str, tuple[str, bool, bool]] = {
    "rsus_ent": ("RSUS[ent]", False, True),
    "rsus_cons": ("RSUS[cons]", False, True),
    "rsus_ent_cons": ("RSUS[ent,cons]", False, True),
    "rsus_verb_surface": ("RSUS[verb(proxy: surface)]", True, True),
    "rsus_verb_minilm": ("RSUS[verb(proxy: surface+MiniLM)]", True, True),
    "rsus_verb_surface_ent_cons": ("RSUS[verb(proxy: surface),ent,cons]", False, True),
    "rsus_verb_minilm_ent_cons": ("RSUS[verb(proxy: surface+MiniLM),ent,cons]", False, True),
}
#: the RSUS rows whose components are training-free (thresholded on the whole train part)
TRAINING_FREE_RSUS = ("rsus_ent", "rsus_cons", "rsus_ent_cons")
#: each weighted row: (its U_verb proxy row or None, uses U_ent, uses U_cons)
_MIX = {"rsus_ent": (None, 1, 0), "rsus_cons": (None, 0, 1), "rsus_ent_cons": (None, 1, 1),
        "rsus_verb_surface_ent_cons": ("rsus_verb_surface", 1, 1),
        "rsus_verb_minilm_ent_cons": ("rsus_verb_minilm", 1, 1)}
RSUS_CACHE_VERSION = 1


def rsus_config(seed: int, n_samples: int):
    """The env's default RSUS settings (components and options unset), with U_verb off (the proxy is the bench's)."""
    from agents.signals.rsus import RSUSConfig

    return RSUSConfig(w_verb=0.0, n_samples=n_samples, cons_only_at_markers=False, seed=seed)


def rsus_columns(world, ds, split: str, n_questions: int | None, seed: int, n_samples: int,
                 cache_dir: str | Path | None = None, progress=None, label: str = "") -> dict[str, np.ndarray]:
    """``{"u_ent": [N], "u_cons": [N], "rsus_seconds": [N]}`` for the steps of ``ds`` — the labelled steps of the
    closed-book chains of ``world``'s ``split`` questions (``n_questions`` hop-balanced ones, ``seed``), as
    :func:`~policies.probes.dataset.build_step_dataset` made them; NaN where a component cannot be computed (as the
    env masks it). Cached beside the step dataset (keyed by it and the RSUS settings)."""
    from agents.signals.rsus import RSUS, BM25Scores
    from envs.core.io import atomic_open
    from envs.core.microworld.artifact import artifact_fingerprint
    from policies.probes.dataset import dataset_cache_path, select_questions

    qs = select_questions(world.questions[split], n_questions, seed)
    reasoner = _recording_reasoner(world)
    base = dataset_cache_path(cache_dir, artifact_fingerprint(world.path), [q.id for q in qs],
                              reasoner.max_step_tokens, "MicroReasoner")
    cfg = rsus_config(seed, n_samples)
    key = hashlib.sha256(json.dumps({"v": RSUS_CACHE_VERSION, "rsus": cfg.to_dict(), "steps": len(ds)},
                                    sort_keys=True).encode()).hexdigest()[:12]
    path = base.with_name(f"{base.stem}-rsus-{key}.npz")
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            cols = {k: z[k] for k in z.files}
        log.info("RSUS components: cached %s", path)
        return cols
    rsus = RSUS(cfg, scorer=BM25Scores([p.text for p in world.corpus()]), reasoner=reasoner)
    u_ent, u_cons, secs = [], [], []
    task = progress.add_task(f"RSUS components{label}: '{split}' questions", total=len(qs)) if progress else None
    max_steps = max(q.hops for q in qs) + 2
    chunk = 128  # build_step_dataset's: the same batches, so the same greedy steps
    row = 0
    for start in range(0, len(qs), chunk):
        part = qs[start: start + chunk]
        for q, chain in zip(part, reasoner.run_chains([q.text for q in part], max_steps=max_steps)):
            for step in chain:
                if step.is_answer or step.hidden_mean is None or step.logprobs is None or len(step.logprobs) == 0:
                    continue  # build_step_dataset's rule: answer lines and steps without content tokens
                if row >= len(ds) or ds.question_ids[row] != q.id or ds.contents[row] != step.content:
                    got = (ds.question_ids[row], ds.contents[row]) if row < len(ds) else "no more rows"
                    raise ValueError(f"RSUS components: the replayed chain of question {q.id} does not match the step "
                                     f"dataset at row {row} ({(q.id, step.content)} vs {got}); rebuild the step "
                                     f"dataset (cache {base})")
                t0 = time.process_time()
                comps = rsus.components(step, step.meta.pop("state_before"))
                secs.append(time.process_time() - t0)
                u_ent.append(math.nan if comps["ent"] is None else comps["ent"])
                u_cons.append(math.nan if comps["cons"] is None else comps["cons"])
                row += 1
            for step in chain:
                step.meta.pop("state_before", None)  # each state holds its KV cache: free it with the chunk
        if task is not None:
            progress.advance(task, len(part))
    if row != len(ds):
        raise ValueError(f"RSUS components: {row} replayed steps for a step dataset of {len(ds)} (cache {base}); "
                         "rebuild it")
    cols = {"u_ent": np.asarray(u_ent, dtype=np.float64), "u_cons": np.asarray(u_cons, dtype=np.float64),
            "rsus_seconds": np.asarray(secs, dtype=np.float64)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        np.savez(f, **cols)
    log.info("RSUS components of %d steps: %.1f s CPU (%.1f ms per step) -> %s", row, sum(secs),
             1000 * sum(secs) / max(1, row), path)
    return cols


def _recording_reasoner(world):
    """The micro-world reasoner whose steps carry the state they were generated from (``meta["state_before"]``):
    what RSUS's U_cons samples from, as the env passes it. Its class name is the product's, as the step dataset's
    cache key has it."""
    from agents.reasoners.micro import MicroReasoner as _Micro

    class MicroReasoner(_Micro):
        def next_step(self, states):
            out = super().next_step(states)
            for before, (step, _) in zip(states, out):
                step.meta["state_before"] = before
            return out

    return MicroReasoner(world)


def attach_rsus(world, ds, split: str, n_questions: int | None, cfg, progress, label: str = ""):
    """``ds`` with the RSUS component columns in its extras (``u_ent``, ``u_cons``, ``rsus_seconds``)."""
    cols = rsus_columns(world, ds, split, n_questions, cfg.seed, cfg.rsus_samples, cfg.cache_dir or None, progress,
                        label)
    return ds.with_extras(**cols)


def weighted_rsus(ds, verb: np.ndarray | None, ent: bool, cons: bool) -> np.ndarray:
    """RSUS of every step of ``ds`` with the paper weights (0.40 / 0.35 / 0.25) over U_verb (``verb``: a proxy's
    scores, or none), U_ent and U_cons as selected: :func:`agents.signals.rsus.rsus_score`, the weighted mean over
    the components a step has (NaN where it has none, as the env masks RSUS there)."""
    from agents.signals.rsus import PAPER_WEIGHTS, rsus_score

    n = len(ds)
    X = np.stack([verb if verb is not None else np.full(n, np.nan), ds.extras["u_ent"], ds.extras["u_cons"]], axis=1)
    w = np.asarray(PAPER_WEIGHTS) * np.array([verb is not None, ent, cons], dtype=float)
    return rsus_score(X, w)


def rsus_scores(split, fits: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Each weighted RSUS row's scores on the split's train part (``train``; with a proxy, finite only on the
    validation steps, where the proxy's scores are held out) and test part (``test``)."""
    s = split
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, (proxy, ent, cons) in _MIX.items():
        verb_train = verb_test = None
        if proxy is not None:
            verb_train = np.full(len(s.train), np.nan)
            verb_train[s.val_idx] = fits[proxy]["val"]
            verb_test = fits[proxy]["test"]
        out[name] = {"train": weighted_rsus(s.train, verb_train, bool(ent), bool(cons)),
                     "test": weighted_rsus(s.test, verb_test, bool(ent), bool(cons))}
    return out


def rsus_cost(ds) -> dict[str, Any]:
    """CPU seconds the RSUS components took on a dataset's steps (U_ent + U_cons; generation not included)."""
    secs = ds.extras.get("rsus_seconds")
    if secs is None:
        return {}
    return {"steps": int(len(secs)), "cpu_seconds": round(float(secs.sum()), 1),
            "ms_per_step": round(1000 * float(secs.mean()), 2) if len(secs) else math.nan,
            "u_ent_masked": int(np.isnan(ds.extras["u_ent"]).sum()),
            "u_cons_masked": int(np.isnan(ds.extras["u_cons"]).sum())}
