"""Train the micro-world LM on CPU and write a versioned artifact (``kairos microworld build``).

The run is deterministic for a given config (seeded data sampling, initialisation and torch threads) and
crash-safe: a checkpoint is written atomically every ``train.checkpoint_every`` optimiser steps and
``resume=True`` continues from it.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path

import torch

from envs.core.io import atomic_open
from envs.core.microworld.artifact import MicroWorld, save_artifact
from envs.core.microworld.config import BuildConfig
from envs.core.microworld.kb import KnowledgeBase, render_fact
from envs.core.microworld.questions import Document, DocumentSampler, enumerate_questions, split_questions

log = logging.getLogger(__name__)

FIXED_WORDS = ["Question", "Step", "Answer", "Evidence", ":"] + [str(i) for i in range(1, 10)]


def world_vocabulary(kb: KnowledgeBase) -> list[str]:
    """Every word the world can produce: entity names, fact and question templates, line headers."""
    words = set(FIXED_WORDS) | set(kb.vocabulary())
    for f in kb.facts:
        words.update(render_fact(f.subject, f.relation, f.object).split(" "))
    for q in enumerate_questions(kb):
        words.update(q.text.split(" "))
    return sorted(words)


def _lr(step: int, total: int, cfg) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _tensors(docs: list[Document], tok, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    L = max(len(d.tokens) for d in docs)
    ids = torch.full((len(docs), L), tok.pad_id, dtype=torch.long)
    att = torch.zeros((len(docs), L), dtype=torch.long)
    lab = torch.full((len(docs), L), -100, dtype=torch.long)
    for i, d in enumerate(docs):
        x = tok.encode(d.tokens)
        ids[i, : len(x)] = torch.tensor(x)
        att[i, : len(x)] = 1
        # label of position t is token t (HF shifts inside the loss); mask no-loss tokens
        lab[i, : len(x)] = torch.tensor([t if m else -100 for t, m in zip(x, d.loss)])
    return ids.to(device), att.to(device), lab.to(device)


def train_world(cfg: BuildConfig, out_dir: str | Path, resume: bool = False, max_steps: int | None = None,
                progress: bool = True) -> MicroWorld:
    """Generate the world, train its LM, and save the artifact under ``out_dir``.

    Args:
        cfg: the build config.
        out_dir: artifact directory (created; a ``checkpoint.pt`` lives there during training).
        resume: continue from ``out_dir/checkpoint.pt`` if it exists.
        max_steps: stop after this many optimiser steps (tests); ``None`` = the full token budget.
        progress: show a rich progress bar.

    Raises:
        FolderBusyError: Another run holds ``out_dir``'s lock (:class:`envs.core.runlock.FolderLock`; re-entrant, so
            ``kairos microworld build``, which locks the folder for the whole build, may call this).
    """
    from envs.core.runlock import FolderLock

    with FolderLock(out_dir):  # one build per artifact folder: two would interleave checkpoint.pt and the files
        return _train_world(cfg, Path(out_dir), resume, max_steps, progress)


def _train_world(cfg: BuildConfig, out_dir: Path, resume: bool, max_steps: int | None, progress: bool) -> MicroWorld:
    """:func:`train_world` under the folder's lock."""
    from agents.reasoners.microlm import build_model, n_params
    from envs.core.microworld.tokenizer import WordTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tc = cfg.train
    torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    kb = KnowledgeBase.generate(cfg.world)
    questions = split_questions(kb, cfg.world.seed)
    tok = WordTokenizer(world_vocabulary(kb))
    model = build_model(cfg.model, len(tok), tok.pad_id, tok.eos_id)
    sampler = DocumentSampler(kb, questions["train"], tc, seed=tc.seed)
    mix_rng = random.Random(tc.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.98), weight_decay=tc.weight_decay)
    total_steps = max(1, tc.tokens // tc.batch_tokens)
    if max_steps is not None:
        total_steps = min(total_steps, max_steps)
    step, seen_tokens, elapsed = 0, 0, 0.0
    ckpt_path = out_dir / "checkpoint.pt"
    if resume and ckpt_path.exists():
        step, seen_tokens, elapsed = _resume(ckpt_path, model, opt, sampler, mix_rng)
    log.info("micro-world: %d facts %s, %d train questions; LM %.2fM params, %d steps of ~%d tokens",
             len(kb.facts), kb.split_counts(), len(questions["train"]), n_params(model) / 1e6, total_steps,
             tc.batch_tokens)
    model.train()
    t0 = time.perf_counter() - elapsed
    loss_ema = None
    bar = _progress(progress, total_steps, step)
    while step < total_steps:
        groups, n_tok = _sample_batch(sampler, mix_rng, tc, step / total_steps)
        for g in opt.param_groups:
            g["lr"] = _lr(step, total_steps, tc)
        total = _optimiser_step(model, opt, groups, tok, tc)
        step += 1
        seen_tokens += n_tok
        loss_ema = total if loss_ema is None else 0.95 * loss_ema + 0.05 * total
        if bar is not None:
            bar[0].update(bar[1], completed=step, description=f"loss {loss_ema:.3f}")
        if step % tc.log_every == 0 or step == total_steps:
            el = time.perf_counter() - t0
            log.info("step %d/%d loss %.4f lr %.2e tokens %d (%.0f tok/s, %.0f s)", step, total_steps, loss_ema,
                     _lr(step, total_steps, tc), seen_tokens, seen_tokens / max(el, 1e-9), el)
        if step % tc.checkpoint_every == 0 and step < total_steps:
            with atomic_open(ckpt_path, "wb") as f:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                            "tokens": seen_tokens, "elapsed": time.perf_counter() - t0,
                            "sampler_rng": sampler.rng.getstate(), "mix_rng": mix_rng.getstate(),
                            "torch_rng": torch.get_rng_state()}, f)
    if bar is not None:
        bar[0].stop()
    model.eval()
    train_info = {"steps": step, "tokens": seen_tokens, "seconds": round(time.perf_counter() - t0, 1),
                  "final_loss": loss_ema, "params": n_params(model), "threads": tc.threads}
    world = MicroWorld(kb=kb, questions=questions, tokenizer=tok, model=model, config=cfg, train_info=train_info)
    save_artifact(world, out_dir)
    ckpt_path.unlink(missing_ok=True)
    return world


def _resume(ckpt_path: Path, model, opt, sampler: DocumentSampler, mix_rng: random.Random) -> tuple[int, int, float]:
    """Restore the model, optimiser and every RNG from a training checkpoint: ``(step, tokens, seconds)`` so far."""
    ck = torch.load(ckpt_path, weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    sampler.rng.setstate(ck["sampler_rng"])
    mix_rng.setstate(ck["mix_rng"])
    torch.set_rng_state(ck["torch_rng"])
    log.info("resumed from %s at step %d (%d tokens)", ckpt_path, ck["step"], ck["tokens"])
    return ck["step"], ck["tokens"], ck["elapsed"]


def _sample_batch(sampler: DocumentSampler, mix_rng: random.Random, tc, frac: float) -> tuple[list[list[Document]], int]:
    """One batch of ~``batch_tokens`` tokens: fact documents (their share decays over the first quarter of training
    from ``fact_doc_share_start`` to ``_end``), then chain documents (with evidence or closed-book), grouped by length
    into at most three forward passes. Returns the groups and the batch's tokens."""
    f_share = tc.fact_doc_share_start + (tc.fact_doc_share_end - tc.fact_doc_share_start) * min(1.0, frac * 4)
    fact_docs, chain_docs, n_tok = [], [], 0
    while n_tok < tc.batch_tokens:
        if n_tok < f_share * tc.batch_tokens:
            d = sampler.sample("fact")
            fact_docs.append(d)
        else:
            kind = "evidence" if mix_rng.random() < tc.evidence_chain_share else "closed"
            d = sampler.sample(kind)
            chain_docs.append(d)
        n_tok += len(d.tokens)
    chain_docs.sort(key=lambda d: len(d.tokens))
    half = len(chain_docs) // 2
    return [g for g in (fact_docs, chain_docs[:half], chain_docs[half:]) if g], n_tok


def _optimiser_step(model, opt, groups: list[list[Document]], tok, tc) -> float:
    """One optimiser step over the batch's groups (gradients accumulated, clipped); returns the batch's loss."""
    n_loss = sum(sum(d.loss) for g in groups for d in g)
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for g in groups:
        ids, att, lab = _tensors(g, tok, "cpu")
        logits = model(input_ids=ids, attention_mask=att).logits
        # next-token loss, summed, normalised by the loss tokens of the whole batch
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), lab[:, 1:].reshape(-1), ignore_index=-100,
            reduction="sum") / max(1, n_loss)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    opt.step()
    return total


def _progress(enabled: bool, total: int, done: int):
    if not enabled:
        return None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    p = Progress(TextColumn("[bold]micro-world LM[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                 TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
    p.start()
    task = p.add_task("", total=total, completed=done)
    return p, task
