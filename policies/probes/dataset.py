"""Step datasets with ground-truth error labels from the micro-world (docs/design.md §6), cached on disk.

:func:`build_step_dataset` runs the micro-world reasoner's closed-book greedy chains on a question split,
labels every non-answer step with :func:`envs.core.microworld.labels.label_chain` (error = label is not
``correct``) and keeps, per step, everything the detectors need: the pooled per-layer states
(``hidden_mean`` / ``hidden_last``), PUlSE's per-token transitions pooled over the step (``extras``), the
output-level signals, the step text, its question, error kind and
subject entity. The result is cached as ``.npz`` keyed by the artifact fingerprint and the question ids,
so training a probe, choosing a layer interval and the detection benchmark share one generation run.

Example::

    world = load_artifact("envs/core/microworld/artifacts/default")
    ds = build_step_dataset(world, split="train", n_questions=2000)
    X = FeatureSpec("pulse", layers=(1, 5)).compute(hidden_mean=ds.hidden_mean)
    y, groups = ds.labels, ds.question_ids
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.core.io import atomic_open
from envs.core.microworld.artifact import artifact_fingerprint, world_model_id

log = logging.getLogger(__name__)

DATASET_VERSION = 2  # 2: the per-token PUlSE transitions pooled by max and mean (extras pulse_max, pulse_token_mean)
OUTPUT_COLUMNS = ("ppl", "maxprob", "entropy", "minprob")
_ARRAYS = ("hidden_mean", "hidden_last", "output", "labels", "label_names", "error_kinds", "question_ids",
           "subjects", "relations", "step_index", "hops", "question_correct", "contents")
#: PUlSE's per-token poolings the builders record, each as the extra column ``pulse_<pooling>`` ([N, 2, L])
TOKEN_POOLINGS = ("max", "token_mean")


def default_cache_dir() -> Path:
    """``$KAIROS_CACHE/steps`` (default ``~/.cache/kairos/steps``)."""
    return Path(os.environ.get("KAIROS_CACHE", "~/.cache/kairos")).expanduser() / "steps"


def token_pooled_columns(step) -> dict[str, np.ndarray]:
    """A step's per-token transitions pooled by each of :data:`TOKEN_POOLINGS` (``{"pulse_max": [2, L], …}``;
    the dataset builders' extra columns); ``{}`` for a step without them (a reasoner that does not record them:
    the dataset then has no such column, and a probe that needs one says so)."""
    from agents.signals.hidden import pool_token_transitions

    if step.token_transitions is None or len(step.token_transitions) == 0:
        return {}
    return {f"pulse_{p}": pool_token_transitions(step.token_transitions, p) for p in TOKEN_POOLINGS}


@dataclass
class StepDataset:
    """One row per labelled step (arrays aligned on the first axis).

    ``extras`` holds further aligned columns by name: what the builders record beyond the core arrays (PUlSE's
    per-token transitions pooled over the step, ``pulse_max`` / ``pulse_token_mean``, each ``[N, 2, L]``) and
    what a consumer attaches (:meth:`with_extras`; e.g. the detection benchmark's RSUS components)."""

    hidden_mean: np.ndarray          # [N, L+1, d] float32
    hidden_last: np.ndarray          # [N, L+1, d] float32
    output: np.ndarray               # [N, 4] PPL, MaxProb, Entropy, MinProb
    labels: np.ndarray               # [N] int8, 1 = error (label != "correct")
    label_names: np.ndarray          # [N] correct | wrong | off_chain | unparseable
    error_kinds: np.ndarray          # [N] "" for correct steps, else unseen | mislearned | ... | parse | off_chain
    question_ids: np.ndarray         # [N]
    subjects: np.ndarray             # [N] the step's subject (parsed, else the entity it should be about)
    relations: np.ndarray            # [N] the parsed relation ("" if unparseable)
    step_index: np.ndarray           # [N] 1-based
    hops: np.ndarray                 # [N] hops of the question
    question_correct: np.ndarray     # [N] bool: the chain's final answer is right
    contents: np.ndarray             # [N] step text without header
    meta: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, idx: np.ndarray) -> StepDataset:
        return StepDataset(**{k: getattr(self, k)[idx] for k in _ARRAYS}, meta=dict(self.meta),
                           extras={k: v[idx] for k, v in self.extras.items()})

    def with_extras(self, **columns: np.ndarray) -> StepDataset:
        """A copy with more aligned columns in :attr:`extras` (each with one row per step)."""
        for k, v in columns.items():
            if len(v) != len(self):
                raise ValueError(f"extra column '{k}' has {len(v)} rows, the dataset {len(self)} steps")
        return StepDataset(**{k: getattr(self, k) for k in _ARRAYS}, meta=dict(self.meta),
                           extras={**self.extras, **{k: np.asarray(v) for k, v in columns.items()}})

    @classmethod
    def concat(cls, a: StepDataset, b: StepDataset) -> StepDataset:
        """``a``'s rows then ``b``'s (``a``'s meta; the extra columns both have)."""
        return cls(**{k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in _ARRAYS}, meta=dict(a.meta),
                   extras={k: np.concatenate([a.extras[k], b.extras[k]]) for k in a.extras if k in b.extras})

    def output_column(self, name: str) -> np.ndarray:
        """One output-level signal (``ppl`` | ``maxprob`` | ``entropy`` | ``minprob``)."""
        if name not in OUTPUT_COLUMNS:
            raise ValueError(f"unknown output signal '{name}' (valid: {', '.join(OUTPUT_COLUMNS)})")
        return self.output[:, OUTPUT_COLUMNS.index(name)]

    def features(self, spec) -> np.ndarray:
        """``[N, F]`` features of every step for a :class:`~policies.probes.probe.FeatureSpec` (the per-token
        poolings read the ``pulse_<pooling>`` extra column)."""
        pooled = self.extras.get(f"pulse_{spec.pooling}") if spec.per_token else None
        if spec.per_token and pooled is None:
            raise ValueError(f"this step dataset has no per-token PUlSE transitions pooled by {spec.pooling} (extra "
                             f"column 'pulse_{spec.pooling}'): its reasoner did not record Step.token_transitions "
                             "at every step")
        return spec.compute(hidden_mean=self.hidden_mean, hidden_last=self.hidden_last,
                            texts=self.contents.tolist(), token_pooled=pooled)

    @classmethod
    def from_columns(cls, cols: dict[str, list], meta: dict[str, Any]) -> StepDataset:
        """A dataset from per-step column lists (every name of ``_ARRAYS``; any other name is an extra column of
        stacked arrays); ``meta`` gains the layer count and width."""
        dtypes = {"labels": np.int8, "step_index": np.int16, "hops": np.int8, "question_correct": bool}
        arrays = {k: (np.stack(v) if k in ("hidden_mean", "hidden_last", "output")
                      else np.asarray(v, dtype=dtypes.get(k, str))) for k, v in cols.items() if k in _ARRAYS}
        n = len(arrays["labels"])
        extras = {k: np.stack(v) for k, v in cols.items() if k not in _ARRAYS and len(v) == n}  # (every step has it)
        return cls(**arrays, meta={**meta, "n_layers": int(arrays["hidden_mean"].shape[1] - 1),
                                   "hidden_size": int(arrays["hidden_mean"].shape[2])}, extras=extras)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        with atomic_open(path, "wb") as f:
            np.savez(f, **{k: getattr(self, k) for k in _ARRAYS}, **{f"extra.{k}": v for k, v in self.extras.items()},
                     meta=np.array(json.dumps(self.meta)))

    @classmethod
    def load(cls, path: str | Path) -> StepDataset:
        with np.load(path, allow_pickle=False) as z:
            return cls(**{k: z[k] for k in _ARRAYS}, meta=json.loads(str(z["meta"])),
                       extras={k[len("extra."):]: z[k] for k in z.files if k.startswith("extra.")})


def select_questions(questions: list, n: int | None, seed: int = 0) -> list:
    """Up to ``n`` questions balanced over hop counts (deterministic); all of them when ``n`` is None."""
    if n is None or n >= len(questions):
        return list(questions)
    rng = random.Random(seed)
    by: dict[int, list] = defaultdict(list)
    for q in questions:
        by[q.hops].append(q)
    for v in by.values():
        rng.shuffle(v)
    out: list = []
    while len(out) < n:
        for h in sorted(by):
            if by[h] and len(out) < n:
                out.append(by[h].pop())
    return out


def dataset_cache_path(cache_dir: str | Path | None, fingerprint: str, question_ids: list[str],
                       max_step_tokens: int, reasoner_name: str = "MicroReasoner") -> Path:
    """The cache file of a step dataset: keyed by artifact fingerprint, question ids and generation settings."""
    key = hashlib.sha256("|".join([fingerprint, str(DATASET_VERSION), reasoner_name, str(max_step_tokens)]
                                  + list(question_ids)).encode()).hexdigest()[:16]
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / f"steps-{fingerprint[:12]}-{key}.npz"


def build_step_dataset(world, split: str = "train", n_questions: int | None = 2000, seed: int = 0,
                       cache_dir: str | Path | None = None, chunk: int = 128, use_cache: bool = True,
                       reasoner=None, fact_holdout: dict | None = None) -> StepDataset:
    """Labelled steps of closed-book greedy chains on ``world.questions[split]`` (cached).

    Args:
        world: a loaded :class:`~envs.core.microworld.artifact.MicroWorld` (saved: it needs a path).
        split: question split (``train`` for probe training; ``dev`` / ``test`` for evaluation).
        n_questions: hop-balanced sample size (``None`` = every question of the split).
        seed: sampling seed.
        cache_dir: where the ``.npz`` lives (default :func:`default_cache_dir`).
        chunk: questions generated together (bounds the KV-cache memory).
        use_cache: read an existing cache file (it is always written).
        reasoner: the step generator (default ``MicroReasoner(world)``; tests pass fakes).
        fact_holdout: the env's fact-disjoint condition (``{"share", "seed", "keep"}``, as ``EnvConfig.fact_holdout``):
            only the split's questions it keeps are sampled (``keep: train`` — no chain needs a held-out fact).
    """
    from agents.reasoners.micro import MicroReasoner
    from agents.signals.output import OutputGroup
    from envs.core.microworld.labels import label_chain

    if split not in world.questions:
        raise ValueError(f"unknown question split '{split}' (valid: {', '.join(world.questions)})")
    pool = world.questions[split]
    if fact_holdout:
        from envs.microworld.task import MicroWorldTask

        pool = MicroWorldTask(world, split, fact_holdout).questions
    qs = select_questions(pool, n_questions, seed)
    if not qs:
        raise ValueError(f"question split '{split}' is empty" + (f" under fact_holdout {fact_holdout}" if fact_holdout
                                                                 else ""))
    fp = artifact_fingerprint(world.path)
    reasoner = reasoner if reasoner is not None else MicroReasoner(world)
    path = dataset_cache_path(cache_dir, fp, [q.id for q in qs], reasoner.max_step_tokens,
                              type(reasoner).__name__)
    if use_cache and path.is_file():
        log.info("step dataset: cached %s", path)
        return StepDataset.load(path)

    out_sig = OutputGroup()
    rows: dict[str, list] = {k: [] for k in _ARRAYS}
    skipped = 0
    max_steps = max(q.hops for q in qs) + 2
    for start in range(0, len(qs), chunk):
        part = qs[start: start + chunk]
        chains = reasoner.run_chains([q.text for q in part], max_steps=max_steps)
        for q, chain in zip(part, chains):
            answer = next((s.content for s in chain if s.is_answer), None)
            steps = [s for s in chain if not s.is_answer]
            labels, correct = label_chain(world.kb, q, [s.content for s in steps], answer)
            cur = q.head
            for step, lab in zip(steps, labels):
                expected_subject, cur = cur, (lab.object if lab.object is not None else cur)
                if step.hidden_mean is None or step.logprobs is None or len(step.logprobs) == 0:
                    skipped += 1
                    continue
                rows["hidden_mean"].append(step.hidden_mean.astype(np.float32))
                rows["hidden_last"].append(step.hidden_last.astype(np.float32))
                rows["output"].append(out_sig(step))
                rows["labels"].append(int(lab.label != "correct"))
                rows["label_names"].append(lab.label)
                rows["error_kinds"].append(lab.error_kind or "")
                rows["question_ids"].append(q.id)
                rows["subjects"].append(lab.subject or expected_subject)
                rows["relations"].append(lab.relation or "")
                rows["step_index"].append(step.index)
                rows["hops"].append(q.hops)
                rows["question_correct"].append(bool(correct))
                rows["contents"].append(step.content)
                for k, v in token_pooled_columns(step).items():
                    rows.setdefault(k, []).append(v)
        log.info("step dataset: %d/%d questions, %d steps", min(start + chunk, len(qs)), len(qs),
                 len(rows["labels"]))
    if not rows["labels"]:
        raise ValueError(f"no labelled steps with content tokens in {len(qs)} '{split}' questions")
    ds = StepDataset.from_columns(rows, {
        "version": DATASET_VERSION, "fingerprint": fp, "model_id": world_model_id(world), "split": split,
        "n_questions": len(qs), "seed": seed, "skipped_steps": skipped})
    ds.save(path)
    log.info("step dataset: %d steps (%.1f%% errors, %d skipped without content) -> %s", len(ds),
             100 * ds.labels.mean(), skipped, path)
    return ds
