"""The typed settings nested in an :class:`~envs.env_config.EnvConfig` — RSUS (:class:`RSUSOptions`), the
fact-disjoint condition (:class:`FactHoldout`), the micro-world's long chains (:class:`ChainSettings`) — and the
probes a running job trains before any env reads them (:func:`pending_probes`). Re-exported by
:mod:`envs.env_config`."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf

__all__ = ["ChainSettings", "FactHoldout", "RSUSOptions", "pending_probes"]


#: probe directories the running job writes before any env reads them (``kairos quickstart`` trains the U_verb proxy its
#: recipe reads): a config naming one is checked before the job starts, when the probe does not exist yet
_PENDING_PROBES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("pending_probes", default=frozenset())


@contextlib.contextmanager
def pending_probes(*paths: str | Path):
    """Within the block, ``rsus_options.verb_proxy`` may name one of ``paths`` before a probe is saved there: the job
    validating its configs trains it before anything reads it."""
    token = _PENDING_PROBES.set(_PENDING_PROBES.get() | {str(Path(p)) for p in paths})
    try:
        yield
    finally:
        _PENDING_PROBES.reset(token)


@dataclass
class RSUSOptions(ConfigBase):
    """RSUS settings of an env (``EnvConfig.rsus_options``; :class:`agents.signals.rsus.RSUSConfig` holds the
    defaults). A key left unset (null) keeps its default and stays out of :meth:`to_dict` — the trajectory-cache
    namespace holds the keys a config sets, as it did before these settings were typed."""

    n_samples: int | None = helpf(None, "U_cons k: sampled alternatives per step (default 3)")
    cons_only_at_markers: bool | None = helpf(None, "compute U_cons only at steps with a discourse marker "
                                                    "(default false)")
    agreement: str | None = helpf(None, "agreement of two sampled alternatives: jaccard | exact (default jaccard)")
    bm25_k: int | None = helpf(None, "U_ent: corpus hits per entity (default 100)")
    weights: str | None = helpf(None, "a weight set by name or path: paper = 0.40/0.35/0.25 (default), or one "
                                      "fitted with `kairos train rsus-weights`; the weights follow rsus_components")
    verb_proxy: str | None = helpf(None, "a probe directory of kind rsus_proxy: U_verb for reasoners that cannot "
                                         "state a confidence (needs 'verb' in rsus_components)")
    verb_max_tokens: int | None = helpf(None, "U_verb by prompt (hf / vllm with a chat template, openai with api: "
                                              "chat): the reply's token budget of the side question (default 16)")

    def validate(self, where: str = "RSUSOptions") -> None:
        for k in ("n_samples", "bm25_k", "verb_max_tokens"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ConfigError(f"{where}.{k} must be an integer >= 1, got {v!r}")
        if self.agreement not in (None, "jaccard", "exact"):
            raise ConfigError(f"{where}.agreement must be jaccard or exact, got {self.agreement!r}")
        if self.weights is not None:
            from agents.signals.rsus import load_rsus_weights

            try:
                load_rsus_weights(self.weights)
            except (FileNotFoundError, ValueError) as e:
                raise ConfigError(f"{where}.weights: {e}") from None
        if (self.verb_proxy and not (Path(self.verb_proxy) / "probe.json").is_file()
                and str(Path(self.verb_proxy)) not in _PENDING_PROBES.get()):
            raise ConfigError(f"{where}.verb_proxy: no probe at {self.verb_proxy} (train one with "
                              "`kairos probe train --signal rsus_proxy …`)")

    def to_dict(self) -> dict[str, Any]:
        """The keys that are set (an unset key is RSUSConfig's default)."""
        return {k: v for k, v in super().to_dict().items() if v is not None}

    def rsus_config(self) -> dict[str, Any]:
        """The set keys that are :class:`agents.signals.rsus.RSUSConfig` fields (not the weights, the proxy or the
        side question's budget)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("weights", "verb_proxy", "verb_max_tokens")}


@dataclass
class FactHoldout(ConfigBase):
    """The micro-world's fact-disjoint condition (``EnvConfig.fact_holdout``): a seeded share of the facts held
    out; ``keep: train`` keeps the split's questions whose gold chain avoids them, ``test`` those that need one."""

    share: float = helpf(help="share of the facts held out, in (0, 1)")
    seed: int = helpf(0, "seed of the draw")
    keep: str = helpf("train", "train (questions avoiding the held-out facts) | test (questions needing one)")

    def validate(self, where: str = "FactHoldout") -> None:
        if not 0.0 < self.share < 1.0:
            raise ConfigError(f"{where}.share must be in (0, 1), got {self.share!r}")
        if self.keep not in ("train", "test"):
            raise ConfigError(f"{where}.keep must be 'train' or 'test', got {self.keep!r}")


@dataclass
class ChainSettings(ConfigBase):
    """The micro-world's long chains (``EnvConfig.chain``, task ``microworld_chain``; :mod:`envs.microworld.chain`):
    one episode walks through ``questions`` sub-questions of ``hops`` hops each, one after the other — a chain of
    ``questions × (hops + 1)`` steps (each sub-question's steps and its answer line), one retrieval decision per
    step, every sub-answer graded."""

    questions: int = helpf(4, "sub-questions per chain (>= 1)", ge=1)
    hops: int = helpf(3, "hops of every sub-question (the split's questions with that many hops are the pool)", ge=1)
    count: int | None = helpf(None, "chains in the split: null = as many as the pool makes without reusing a "
                                    "sub-question; N = N distinct chains, seeded draws (a sub-question may recur "
                                    "across chains once N x questions exceeds the pool)", ge=1)
    seed: int = helpf(0, "seed of the chains' draw and of the distractor passages")
    distractors: int = helpf(0, "passages added to the world's fact corpus: true facts of other seeded worlds that "
                                "name none of this world's entities (a larger corpus, same answers)", ge=0)

    @property
    def steps(self) -> int:
        """The chain's length in steps when every sub-question takes its hops and its answer line."""
        return self.questions * (self.hops + 1)
