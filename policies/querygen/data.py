"""Flagged-step datasets for the generative QueryGen: what the generator sees and what it should fetch.

A :class:`FlaggedStep` is one moment where a trigger asks for evidence: the question, the accepted steps
before it, the flagged step itself, the corpus ids of the evidence that step lacks (``gold_ids``) and a
query we can construct for supervised warm start (``target``).

* **Micro-world** (:func:`microworld_steps`): greedy closed-book chains of the world's reasoner on a
  question split; a step is usable when every step before it is correct, so the fact it needs is known:
  the question's next relation applied to the previous step's object. ``gold_ids`` = that fact;
  ``target`` = that fact's sentence up to its object (``Mira 's mother is``, ``Mira was born in``) — the
  information need in the world's own words (the micro LM has no other vocabulary). Every such step is
  a training example; the held-out *flagged* steps are the ones the ground truth marks wrong (wrong,
  off-chain or unparseable: where an oracle trigger retrieves).
* **HotpotQA** (:func:`hotpotqa_steps`): the first ``max_steps`` steps of SmolLM2's greedy chains;
  ``gold_ids`` = the supporting paragraphs the question and earlier steps do not already name (both when
  both are named or neither is); ``target`` (:func:`hotpotqa_target`) = the title of the first of them
  that the visible text names (comparison questions name both), else — a bridge paragraph nobody has named
  yet, whose title cannot be known — the question's content words (its key phrase). SmolLM2 answers almost
  nothing closed-book (F1 0.03), so every step counts as flagged.

Datasets are cached as JSONL under the run's ``data/`` folder (``chains_<world>_<split>.jsonl``): chains
are the expensive part, and the cache makes reruns and the benchmark see exactly the same steps.

Example:
    >>> s = FlaggedStep("q1", "Who is Mira 's mother ?", [], "Step 1 : Mira 's mother is Tovan .",
    ...                 ["F001"], "Mira 's mother is", flagged=True)
    >>> s.step_index
    1
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.core.io import write_text

log = logging.getLogger(__name__)


@dataclass
class FlaggedStep:
    """One step a trigger flagged, with the evidence it lacks.

    Attributes:
        qid: Question id.
        question: Question text as the reasoner saw it.
        prior_steps: Accepted step lines before the flagged one (``Step i : ...``).
        step: The flagged step line.
        gold_ids: Corpus ids of the evidence the step lacks (any of them counts as a hit).
        target: A constructed query for supervised warm start.
        flagged: Whether the step is an error (micro-world ground truth; real data: always).
        meta: Anything else (label, error kind, hop count, ...).
    """

    qid: str
    question: str
    prior_steps: list[str]
    step: str
    gold_ids: list[str]
    target: str
    flagged: bool = True
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def step_index(self) -> int:
        return len(self.prior_steps) + 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FlaggedStep:
        return cls(**d)


def save_steps(steps: Iterable[FlaggedStep], path: str | Path) -> Path:
    """Write ``steps`` as JSONL atomically."""
    text = "".join(json.dumps(s.to_json(), ensure_ascii=False) + "\n" for s in steps)
    write_text(path, text)
    return Path(path)


def load_steps(path: str | Path) -> list[FlaggedStep]:
    """Read a JSONL written by :func:`save_steps`; a bad line is an error naming file and line."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(FlaggedStep.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as e:
                raise ValueError(f"{path}:{i}: not a flagged-step record ({e})") from None
    return out


# ------------------------------------------------------------------------------------------- micro-world

def cloze_query(sentence: str, obj: str) -> str:
    """A fact sentence up to its object: ``Mira 's mother is Tovan .`` -> ``Mira 's mother is``."""
    words = sentence.split()
    if words and words[-1] == ".":
        words = words[:-1]
    if obj in words:
        words = words[: len(words) - 1 - words[::-1].index(obj)]
    return " ".join(words)


def microworld_steps(world, split: str, max_questions: int | None = None, batch: int = 64,
                     progress: bool = False) -> list[FlaggedStep]:
    """Usable steps of the world reasoner's greedy chains on ``split`` (see the module docstring).

    Args:
        world: A loaded :class:`envs.core.microworld.artifact.MicroWorld`.
        split: ``train`` | ``dev`` | ``test``.
        max_questions: Use only the first N questions of the split.
        batch: Questions per batched generation call.
        progress: Show a progress bar.
    """
    from agents.reasoners.micro import MicroReasoner
    from envs.core.microworld.labels import label_step
    from envs.core.microworld.questions import gold_chain

    if split not in world.questions:
        raise ValueError(f"unknown micro-world split '{split}' (valid: {', '.join(world.questions)})")
    questions = list(world.questions[split])[: max_questions or None]
    reasoner = MicroReasoner(world)
    out: list[FlaggedStep] = []
    bar = _bar(len(questions), f"micro-world {split} chains", progress)
    for lo in range(0, len(questions), batch):
        qs = questions[lo: lo + batch]
        chains = reasoner.run_chains([q.text for q in qs], max_steps=max(q.hops for q in qs) + 1)
        for q, chain in zip(qs, chains):
            facts = gold_chain(world.kb, q) or []
            prior: list[str] = []
            cur = q.head
            for i, step in enumerate(chain):
                if step.is_answer or i >= len(q.path) or i >= len(facts):
                    break
                lab = label_step(world.kb, step.content, (cur, q.path[i]))
                fact = facts[i]
                out.append(FlaggedStep(
                    qid=q.id, question=q.text, prior_steps=list(prior), step=step.text, gold_ids=[fact.id],
                    target=cloze_query(fact.sentence, fact.object), flagged=lab.is_error,
                    meta={"label": lab.label, "error_kind": lab.error_kind, "hops": q.hops, "hop": i + 1,
                          "split": fact.split}))
                if lab.is_error:
                    break  # later steps depend on a wrong premise: their need is not defined
                prior.append(step.text)
                cur = fact.object
        bar.update(len(qs))
    bar.close()
    return out


# ---------------------------------------------------------------------------------------------- HotpotQA

def hotpotqa_target(question: str, prior_steps: Sequence[str], step: str, missing_titles: Sequence[str]) -> str:
    """The constructed query of a HotpotQA step: the first missing paragraph's title that the question,
    earlier steps or the step name; else the question's content words.

    Example:
        >>> hotpotqa_target("Were Scott Derrickson and Ed Wood of the same nationality?", [], "Step 1: Hm.",
        ...                 ["Ed Wood", "Scott Derrickson"])
        'Ed Wood'
        >>> hotpotqa_target("Who directed the film Big Stone Gap?", [], "Step 1: Hm.", ["Adriana Trigiani"])
        'directed film Big Stone Gap'
    """
    from agents.query import content_words
    from envs.qa_task import mentions_title, title_core

    visible = " ".join([question, *prior_steps, step])
    for title in missing_titles:
        if mentions_title(title, visible):
            return title_core(title)
    return " ".join(content_words(question)) or question


def hotpotqa_steps(examples: Sequence[Any], reasoner, max_steps: int = 2, batch: int = 8,
                   progress: bool = False) -> list[FlaggedStep]:
    """The first ``max_steps`` steps of ``reasoner``'s greedy chains on HotpotQA ``examples``.

    Args:
        examples: :class:`envs.core.data.types.QAExample` with paragraphs (``metadata["paragraphs"]``).
        reasoner: A reasoner with ``run_chains`` (the HF backend: SmolLM2-135M by default).
        max_steps: Steps generated per question (the answer line is never a flagged step).
        batch: Questions per batched generation call.
        progress: Show a progress bar.
    """
    from envs.qa_task import mentions_title

    out: list[FlaggedStep] = []
    bar = _bar(len(examples), "HotpotQA chains", progress)
    for lo in range(0, len(examples), batch):
        exs = list(examples[lo: lo + batch])
        chains = reasoner.run_chains([e.question for e in exs], max_steps=max_steps)
        for ex, chain in zip(exs, chains):
            paras = {p["id"]: p for p in ex.metadata.get("paragraphs", [])}
            gold = [g for g in (ex.gold_passage_ids or []) if g in paras]
            if not gold:
                continue
            prior: list[str] = []
            for step in chain:
                if step.is_answer:
                    break
                seen = " ".join([ex.question, *prior])
                missing = [g for g in gold if not mentions_title(paras[g]["title"], seen)] or gold
                out.append(FlaggedStep(
                    qid=ex.id, question=ex.question, prior_steps=list(prior), step=step.text,
                    gold_ids=missing, flagged=True,
                    target=hotpotqa_target(ex.question, prior, step.text, [paras[g]["title"] for g in missing]),
                    meta={"type": ex.metadata.get("type"), "hop": len(prior) + 1,
                          "n_gold": len(gold)}))
                prior.append(step.text)
        bar.update(len(exs))
    bar.close()
    return out


def _bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


def cached_steps(world_name: str, split: str, data_dir: str | Path, *, max_questions: int | None = None,
                 max_steps: int = 2, reasoner_threads: int = 1, progress: bool = False,
                 artifact: str | None = None) -> list[FlaggedStep]:
    """The flagged-step dataset of ``world_name`` / ``split``, built once and cached as JSONL in ``data_dir``.

    Args:
        world_name: ``microworld`` (splits train | dev | test) or ``hotpotqa`` (a slice like ``dev[0:250]`` or ``dev[0:500:2]``).
        split: The question split.
        data_dir: Where the JSONL lives (``steps_<world>_<split>_<n>.jsonl``).
        max_questions: Use only the first N questions of the split.
        max_steps: HotpotQA: steps generated per question.
        reasoner_threads: torch threads for generation.
        progress: Show progress bars.
        artifact: Micro-world artifact directory (default: the shipped one).
    """
    tag = re.sub(r"[^\w.-]+", "_", split).strip("_")
    path = Path(data_dir) / f"steps_{world_name}_{tag}_{max_questions or 'all'}.jsonl"
    if path.is_file():
        return load_steps(path)
    if world_name == "microworld":
        from envs.core.microworld.artifact import load_artifact

        steps = microworld_steps(load_artifact(artifact, threads=reasoner_threads), split,
                                 max_questions=max_questions, progress=progress)
    elif world_name == "hotpotqa":
        from agents.reasoners.hf import HFReasoner, HFReasonerConfig
        from envs.qa_task import QATask

        task = QATask("hotpotqa", split)
        reasoner = HFReasoner.from_config(HFReasonerConfig(max_step_tokens=32, max_steps=max_steps + 1,
                                                           capture_hidden=False, threads=reasoner_threads))
        steps = hotpotqa_steps(task.questions[: max_questions or None], reasoner, max_steps=max_steps,
                               progress=progress)
    else:
        raise ValueError(f"unknown QueryGen world '{world_name}' (valid: microworld, hotpotqa)")
    save_steps(steps, path)
    log.info("%s %s: %d steps (%d flagged) -> %s", world_name, split, len(steps), sum(s.flagged for s in steps), path)
    return steps
