"""Training the generative QueryGen: flagged-step data → SFT warm start (TRL ``SFTTrainer``) → RL (TRL
``RLOOTrainer`` / ``GRPOTrainer``) on a retrieval reward minus a length cost.

Read top to bottom in :func:`train_querygen`. Layout of ``out_dir``::

    config.json        the resolved config
    data/              cached flagged-step JSONL (train and held-out splits)
    sft/               the SFT generator (a checkpoint folder, see policies.querygen.model)
    rl/                the RL-trained generator
    trainer/sft, trainer/rl   TRL/transformers checkpoints (a killed run resumes from the newest)
    tb/sft, tb/rl      TensorBoard events (TRL's logging: loss, rewards/<name>, completions length, ...)
    summary.json       wall times, sizes, final training metrics

A stage whose generator folder exists is skipped, so rerunning the command after a crash continues where it
stopped (inside a stage, from the newest trainer checkpoint).
"""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path
from typing import Any

from envs.core.io import write_json
from policies.querygen.config import QueryGenTrainConfig
from policies.querygen.data import FlaggedStep, cached_steps
from policies.querygen.model import META_FILE, GenerativeQueryGenerator, load_base

log = logging.getLogger(__name__)


def world_retriever(world: str, artifact: str | None = None, index_path: str | None = None):
    """The retriever the env uses for ``world``: BM25 in memory over its corpus, or a prebuilt index (BM25 or
    ColBERT, checked against the corpus) — built by the env's own code path."""
    from envs.components import task_retriever
    from envs.env_config import EnvConfig

    if world == "microworld":
        from envs.core.microworld.artifact import load_artifact

        corpus = load_artifact(artifact, verify=False).corpus()
    else:
        from envs.qa_task import QATask

        corpus = QATask(world, "dev").corpus()
    kind = "bm25"
    if index_path:
        from agents.retrievers.index import read_manifest

        kind = read_manifest(index_path)["kind"]
    return task_retriever(EnvConfig(retriever=kind, index_path=index_path), corpus)


def load_data(cfg: QueryGenTrainConfig, progress: bool = True) -> tuple[list[FlaggedStep], list[FlaggedStep]]:
    """``(training steps, held-out steps)`` of the config's world (cached under ``out_dir/data``)."""
    train_split, eval_split = cfg.splits
    data_dir = Path(cfg.out_dir) / "data"
    kw = dict(max_steps=cfg.chain_steps, reasoner_threads=cfg.threads, progress=progress, artifact=cfg.artifact)
    train = cached_steps(cfg.world, train_split, data_dir, max_questions=cfg.max_train_questions, **kw)
    held = cached_steps(cfg.world, eval_split, data_dir, max_questions=cfg.max_eval_questions, **kw)
    if not train:
        raise ValueError(f"{cfg.world} {train_split}: no usable training steps")
    return train, held


def sft_records(gen_style: str, steps: list[FlaggedStep], eos: str) -> list[dict[str, str]]:
    """Prompt / completion pairs for TRL's SFT (loss on the completion only)."""
    from policies.querygen.model import build_prompt

    return [{"prompt": build_prompt(gen_style, s.question, s.prior_steps, s.step),
             "completion": f" {s.target} {eos}"} for s in steps]


def rl_records(gen_style: str, steps: list[FlaggedStep]) -> list[dict[str, Any]]:
    """Prompts with their gold passage ids (a column the reward reads)."""
    from policies.querygen.model import build_prompt

    return [{"prompt": build_prompt(gen_style, s.question, s.prior_steps, s.step), "gold_ids": list(s.gold_ids)}
            for s in steps]


def freeze_lower_layers(model, trainable_layers: int | None) -> int:
    """Freeze everything but the top ``trainable_layers`` blocks and the final norm; returns trainable count."""
    if trainable_layers is not None:
        layers = model.model.layers
        for p in model.parameters():
            p.requires_grad_(False)
        for block in list(layers)[-trainable_layers:]:
            for p in block.parameters():
                p.requires_grad_(True)
        for p in model.model.norm.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _last_checkpoint(folder: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def _common_args(cfg: QueryGenTrainConfig, stage: str) -> dict[str, Any]:
    out = Path(cfg.out_dir)
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(out / "tb" / stage)
    return dict(output_dir=str(out / "trainer" / stage), use_cpu=True, seed=cfg.seed, data_seed=cfg.seed,
                logging_steps=10, save_total_limit=2, report_to=["tensorboard"] if cfg.tensorboard else [],
                dataloader_num_workers=0, bf16=False, fp16=False, save_only_model=False,
                lr_scheduler_type="constant_with_warmup", warmup_steps=10, gradient_checkpointing=False)


def run_sft(cfg: QueryGenTrainConfig, model, tok, style: str, steps: list[FlaggedStep], progress: bool) -> dict:
    """Supervised warm start with TRL's ``SFTTrainer`` (prompt/completion pairs, completion-only loss)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rng = random.Random(cfg.seed)
    steps = list(steps)
    rng.shuffle(steps)
    steps = steps[: cfg.sft.max_examples or None]
    ds = Dataset.from_list(sft_records(style, steps, tok.eos_token))
    args = SFTConfig(**_common_args(cfg, "sft"), num_train_epochs=cfg.sft.epochs, learning_rate=cfg.sft.lr,
                     per_device_train_batch_size=cfg.sft.batch_size, save_steps=cfg.sft.save_steps,
                     completion_only_loss=True, max_length=512, disable_tqdm=not progress,
                     eos_token=tok.eos_token, pad_token=tok.pad_token)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    out = trainer.train(resume_from_checkpoint=_last_checkpoint(Path(args.output_dir)))
    return {"examples": len(ds), "optimizer_steps": out.global_step, "train_loss": out.training_loss}


def run_rl(cfg: QueryGenTrainConfig, model, tok, steps: list[FlaggedStep], style: str, retriever,
           progress: bool) -> dict:
    """RL with TRL's RLOO (REINFORCE leave-one-out) or GRPO on the registered rewards."""
    from datasets import Dataset

    from policies.querygen.model import PROMPT_STYLES
    from policies.querygen.rewards import make_reward

    r = cfg.rl
    rng = random.Random(cfg.seed + 1)
    pool = [s for s in steps if s.flagged] or list(steps)
    rng.shuffle(pool)
    ds = Dataset.from_list(rl_records(style, pool[: r.steps * r.prompts_per_step]))
    names = list(r.reward_weights)
    funcs = [make_reward(n, retriever=retriever, k=r.reward_k) for n in names]
    batch = r.prompts_per_step * r.num_generations
    common = dict(**_common_args(cfg, "rl"), learning_rate=r.lr, max_steps=r.steps,
                  per_device_train_batch_size=batch, num_generations=r.num_generations,
                  max_completion_length=PROMPT_STYLES[style][1], temperature=r.temperature, beta=r.beta,
                  reward_weights=[float(r.reward_weights[n]) for n in names], save_steps=r.save_steps,
                  disable_tqdm=not progress, log_completions=False)
    if r.trainer == "rloo":
        from trl import RLOOConfig as Conf
        from trl import RLOOTrainer as Trainer
    else:
        from trl import GRPOConfig as Conf
        from trl import GRPOTrainer as Trainer
    args = Conf(**common)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    trainer = Trainer(model=model, reward_funcs=funcs, args=args, train_dataset=ds, processing_class=tok)
    out = trainer.train(resume_from_checkpoint=_last_checkpoint(Path(args.output_dir)))
    hist = [h for h in trainer.state.log_history if "reward" in h]
    return {"prompts": len(ds), "optimizer_steps": out.global_step, "trainer": r.trainer,
            "reward_first": hist[0]["reward"] if hist else None, "reward_last": hist[-1]["reward"] if hist else None,
            "log_history": hist}


def train_querygen(cfg: QueryGenTrainConfig, progress: bool = True) -> dict[str, Any]:
    """Data → SFT → RL; returns (and writes) ``summary.json``. Rerun to resume after a crash.

    Raises:
        FolderBusyError: Another run holds ``cfg.out_dir``'s lock (:class:`envs.core.runlock.FolderLock`): two
            trainings into one folder would overwrite each other's stages.
    """
    from envs.core.runlock import FolderLock

    with FolderLock(cfg.out_dir):  # one training per folder; a second refuses at once, naming the first
        return _train_querygen(cfg, progress)


def _train_querygen(cfg: QueryGenTrainConfig, progress: bool) -> dict[str, Any]:
    """:func:`train_querygen` under the folder's lock."""
    import torch

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", cfg.to_dict())
    summary: dict[str, Any] = {"world": cfg.world, "splits": list(cfg.splits)}
    t0 = time.perf_counter()
    train_steps, held = load_data(cfg, progress)
    summary["data"] = {"train_steps": len(train_steps), "train_flagged": sum(s.flagged for s in train_steps),
                       "heldout_steps": len(held), "heldout_flagged": sum(s.flagged for s in held),
                       "seconds": round(time.perf_counter() - t0, 1)}
    log.info("data: %s", summary["data"])
    sft_dir, rl_dir = out / "sft", out / "rl"

    # ---- SFT warm start
    t0, c0 = time.perf_counter(), time.process_time()
    if (sft_dir / META_FILE).is_file():
        gen = GenerativeQueryGenerator.load(sft_dir, threads=cfg.threads)
        summary["sft"] = {"skipped": "found " + str(sft_dir)}
    else:
        model, tok, style, base = load_base(cfg.world, cfg.base_model, cfg.artifact, cfg.threads)
        n_train = freeze_lower_layers(model, cfg.trainable_layers)
        summary["sft"] = run_sft(cfg, model, tok, style, train_steps, progress)
        summary["sft"]["trainable_params"] = n_train
        gen = GenerativeQueryGenerator(model, tok, style, {"base": base, "world": cfg.world})
        gen.save(sft_dir, stage="sft", history=[{"stage": "sft", **summary["sft"]}])
    summary["sft"]["seconds"] = round(time.perf_counter() - t0, 1)
    summary["sft"]["cpu_seconds"] = round(time.process_time() - c0, 1)  # of this process: wall time counts neighbours

    # ---- RL
    if cfg.rl.steps > 0:
        t0, c0 = time.perf_counter(), time.process_time()
        if (rl_dir / META_FILE).is_file():
            summary["rl"] = {"skipped": "found " + str(rl_dir)}
        else:
            retriever = world_retriever(cfg.world, cfg.artifact, cfg.index_path)
            model = gen.model.train()
            n_train = freeze_lower_layers(model, cfg.trainable_layers)
            summary["rl"] = run_rl(cfg, model, gen.tokenizer, train_steps, gen.style, retriever, progress)
            summary["rl"]["trainable_params"] = n_train
            hist = [*gen.meta.get("history", []), {"stage": "rl", **{k: v for k, v in summary["rl"].items()
                                                                      if k != "log_history"}}]
            GenerativeQueryGenerator(model, gen.tokenizer, gen.style, gen.meta).save(rl_dir, stage="rl", history=hist)
        summary["rl"]["seconds"] = round(time.perf_counter() - t0, 1)
        summary["rl"]["cpu_seconds"] = round(time.process_time() - c0, 1)
    write_json(out / "summary.json", summary)
    return summary
