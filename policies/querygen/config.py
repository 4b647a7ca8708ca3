"""Typed configuration of ``kairos train querygen`` (YAML-loadable; every field has help text).

Example:
    >>> cfg = QueryGenTrainConfig.from_dict({"world": "microworld", "rl": {"steps": 10}})
    >>> cfg.rl.trainer, cfg.rl.reward_weights
    ('rloo', {'retrieval_rr': 1.0, 'query_tokens': -0.01})
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envs.core.config import ConfigBase, ConfigError, helpf

WORLDS = ("microworld", "hotpotqa")
#: world -> (train split, evaluation split)
#: HotpotQA: the shared dev file is ordered (bridge questions first, comparison questions last), so the
#: splits interleave: even-indexed questions train, odd-indexed ones are held out
DEFAULT_SPLITS = {"microworld": ("train", "test"), "hotpotqa": ("dev[0:500:2]", "dev[1:500:2]")}


@dataclass
class SFTOptions(ConfigBase):
    """Supervised warm start on constructed queries (TRL ``SFTTrainer``, loss on the query only)."""

    epochs: float = helpf(2.0, "passes over the training steps")
    lr: float = helpf(1e-3, "AdamW learning rate")
    batch_size: int = helpf(32, "examples per optimisation step")
    max_examples: int | None = helpf(None, "use at most this many training steps (None: all)")
    save_steps: int = helpf(100, "checkpoint every N optimisation steps (a killed run resumes from the last)")

    def validate(self) -> None:
        if self.epochs <= 0 or self.lr <= 0 or self.batch_size < 1:
            raise ConfigError("SFTOptions: epochs and lr must be > 0, batch_size >= 1")


@dataclass
class RLOptions(ConfigBase):
    """Policy-gradient fine-tuning with TRL (RLOO = REINFORCE leave-one-out, or GRPO)."""

    trainer: str = helpf("rloo", "rloo | grpo")
    steps: int = helpf(150, "optimisation steps (0: SFT only)")
    num_generations: int = helpf(4, "sampled queries per prompt (the leave-one-out group)")
    prompts_per_step: int = helpf(8, "prompts per optimisation step")
    lr: float = helpf(2e-4, "AdamW learning rate")
    beta: float = helpf(0.0, "KL weight to the SFT model (0: no reference model, cheaper)")
    temperature: float = helpf(1.0, "sampling temperature during training")
    reward_k: int = helpf(3, "retrieval depth the reward counts (1/rank of the gold passage within it)")
    reward_weights: dict[str, float] = helpf({"retrieval_rr": 1.0, "query_tokens": -0.01},
                                             "reward name -> weight; costs get negative weights (−λ)")
    save_steps: int = helpf(50, "checkpoint every N steps")

    def validate(self) -> None:
        if self.trainer not in ("rloo", "grpo"):
            raise ConfigError(f"RLOptions: trainer must be rloo or grpo, got '{self.trainer}'")
        if self.steps < 0 or self.num_generations < 2 or self.prompts_per_step < 1:
            raise ConfigError("RLOptions: steps >= 0, num_generations >= 2, prompts_per_step >= 1")
        if not self.reward_weights:
            raise ConfigError("RLOptions: reward_weights must name at least one reward")


@dataclass
class QueryGenTrainConfig(ConfigBase):
    """A generative QueryGen training run: data → SFT warm start → RL → evaluation."""

    world: str = helpf("microworld", "microworld | hotpotqa")
    out_dir: str = helpf("runs/querygen/microworld", "run folder: data/, sft/, rl/, checkpoints, tb/, report")
    plugins: list[str] = helpf([], "plug-in modules imported first (on the driver; a user's signal, trigger, cost, "
                                   "retriever … registers on import, then its name is valid anywhere in this config); "
                                   "e.g. a QueryGen reward or a query mode")
    base_model: str | None = helpf(None, "start from this model (default: the world's reasoner LM / SmolLM2)")
    artifact: str | None = helpf(None, "micro-world artifact (default: the shipped one)")
    train_split: str | None = helpf(None, "questions for training (default: microworld train, hotpotqa dev[0:500:2])")
    eval_split: str | None = helpf(None, "held-out questions (default: microworld test, hotpotqa dev[1:500:2])")
    max_train_questions: int | None = helpf(None, "use only the first N training questions")
    max_eval_questions: int | None = helpf(None, "use only the first N held-out questions")
    chain_steps: int = helpf(2, "HotpotQA: reasoner steps generated per question")
    index_path: str | None = helpf(None, "prebuilt retrieval index (default: BM25 built in memory)")
    trainable_layers: int | None = helpf(None, "train only the top N transformer blocks (None: all)")
    threads: int = helpf(1, "torch threads (1 is fastest on small shared CPUs)")
    seed: int = helpf(0, "seed of data order, sampling and initialisation")
    sft: SFTOptions = field(default_factory=SFTOptions, metadata={"help": "supervised warm start"})
    rl: RLOptions = field(default_factory=RLOptions, metadata={"help": "RL fine-tuning"})
    tensorboard: bool = helpf(True, "log to TensorBoard under out_dir/tb (TRL's logging)")

    def validate(self) -> None:
        if self.world not in WORLDS:
            raise ConfigError(f"QueryGenTrainConfig: world must be one of {WORLDS}, got '{self.world}'")
        if self.trainable_layers is not None and self.trainable_layers < 1:
            raise ConfigError("QueryGenTrainConfig: trainable_layers must be >= 1 (or null for all)")

    @property
    def splits(self) -> tuple[str, str]:
        d = DEFAULT_SPLITS[self.world]
        return self.train_split or d[0], self.eval_split or d[1]
