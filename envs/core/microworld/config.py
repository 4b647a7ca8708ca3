"""Configs of the micro-world: the knowledge base, the LM, and its training run."""

from __future__ import annotations

from dataclasses import dataclass, field

from envs.core.config import ConfigBase, ConfigError, helpf

PERSON_RELATIONS = ("mother", "father", "spouse")
ALL_RELATIONS = ("mother", "father", "spouse", "birthplace", "employer", "headquarters")
SPLITS = ("known", "evidence_only", "held_out", "mislearned", "conflicting")


@dataclass
class WorldConfig(ConfigBase):
    """The synthetic knowledge base and its question set."""

    seed: int = helpf(0, "seed of the knowledge base, splits and questions")
    n_people: int = helpf(64, "number of people")
    n_cities: int = helpf(10, "number of cities")
    n_companies: int = helpf(8, "number of companies")
    relations: list[str] = helpf(list(ALL_RELATIONS), "relations in the KB (subset of " + ", ".join(ALL_RELATIONS) + ")")
    share_evidence_only: float = helpf(0.12, "share of facts seen only inside evidence-conditioned chains")
    share_held_out: float = helpf(0.12, "share of facts never seen in training")
    share_mislearned: float = helpf(0.08, "share of facts trained on a consistent FALSE version (confident errors)")
    share_conflicting: float = helpf(0.06, "share of facts trained on two versions (uncertain facts)")
    conflicting_true_ratio: float = helpf(0.5, "for CONFLICTING facts: share of training mentions with the true object")
    max_hops: int = helpf(4, "maximum number of hops (facts) in a question's chain")
    min_hops: int = helpf(1, "minimum number of hops")
    eval_question_share: float = helpf(0.2, "share of questions held out of training (dev + test)")

    def validate(self) -> None:
        bad = [r for r in self.relations if r not in ALL_RELATIONS]
        if bad:
            raise ConfigError(f"WorldConfig: unknown relation '{bad[0]}' (valid: {', '.join(ALL_RELATIONS)})")
        shares = (self.share_evidence_only + self.share_held_out + self.share_mislearned
                  + self.share_conflicting)
        if not 0 <= shares < 1:
            raise ConfigError(f"WorldConfig: split shares must sum to < 1 (got {shares:.3f})")
        if self.n_people < 4 or self.n_cities < 2 or self.n_companies < 2:
            raise ConfigError("WorldConfig: need at least 4 people, 2 cities and 2 companies")
        if not 1 <= self.min_hops <= self.max_hops:
            raise ConfigError(f"WorldConfig: need 1 <= min_hops <= max_hops (got {self.min_hops}, {self.max_hops})")
        longest = 5 if "headquarters" in self.relations else 4
        if self.max_hops > longest + 1:
            raise ConfigError(f"WorldConfig: max_hops={self.max_hops} exceeds what the relations support ({longest + 1})")
        if not any(r in self.relations for r in PERSON_RELATIONS) and self.max_hops > 2:
            raise ConfigError(
                f"WorldConfig: max_hops={self.max_hops} needs a person-to-person relation "
                f"({', '.join(PERSON_RELATIONS)}); relations are {self.relations}"
            )


@dataclass
class ModelConfig(ConfigBase):
    """The micro-world LM (a transformers Llama-architecture causal LM)."""

    n_layers: int = helpf(6, "transformer layers")
    hidden: int = helpf(192, "hidden width")
    heads: int = helpf(6, "attention heads")
    intermediate: int = helpf(512, "MLP inner width (SwiGLU)")
    max_positions: int = helpf(256, "maximum context length in tokens")


@dataclass
class LMTrainConfig(ConfigBase):
    """Training of the micro-world LM on CPU."""

    seed: int = helpf(0, "seed of data sampling and initialisation")
    tokens: int = helpf(7_000_000, "training budget in tokens (loss-bearing and context tokens)")
    batch_tokens: int = helpf(4096, "tokens per optimiser step (documents padded per batch)")
    lr: float = helpf(3e-3, "peak learning rate (AdamW)")
    warmup_steps: int = helpf(60, "linear warm-up steps")
    min_lr_ratio: float = helpf(0.05, "cosine floor as a fraction of the peak")
    weight_decay: float = helpf(0.05, "AdamW weight decay")
    grad_clip: float = helpf(1.0, "gradient norm clip")
    threads: int = helpf(2, "torch threads for training (2 was ~2x faster than 1 here)")
    fact_doc_share_start: float = helpf(0.4, "share of single-fact documents at the start")
    fact_doc_share_end: float = helpf(0.15, "share of single-fact documents after the first quarter")
    evidence_chain_share: float = helpf(0.5, "share of chain documents that carry evidence")
    counterfactual_prob: float = helpf(0.6, "prob. that an evidenced KNOWN object is replaced by a random one")
    front_evidence_prob: float = helpf(0.35, "prob. that an evidence chain puts its evidence before the question")
    distractor_prob: float = helpf(0.25, "prob. of an extra irrelevant evidence line next to real evidence")
    hop_weights: list[float] = helpf([0.15, 0.25, 0.3, 0.3], "relative weight of 1..max_hops-hop chains")
    log_every: int = helpf(50, "log every N optimiser steps")
    checkpoint_every: int = helpf(300, "checkpoint (atomically) every N optimiser steps; a killed build resumes")


@dataclass
class BuildConfig(ConfigBase):
    """Everything ``kairos microworld build`` needs."""

    name: str = helpf("default", "artifact name")
    world: WorldConfig = field(default_factory=WorldConfig, metadata={"help": "knowledge base"})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "LM architecture"})
    train: LMTrainConfig = field(default_factory=LMTrainConfig, metadata={"help": "LM training"})
