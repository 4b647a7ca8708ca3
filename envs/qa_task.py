"""Real-data env tasks: questions from a QA dataset, a paragraph corpus, F1 / accuracy as the quality."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from envs.core.data.loaders import load_dataset, shared_data_dir
from envs.core.data.types import QAExample

log = logging.getLogger(__name__)

#: each dataset's file in the shared data (``envs.core.data.loaders.shared_data_dir``); the others need ``data_path``
DEFAULT_PATHS = {"hotpotqa": "hotpotqa/dev_500.jsonl", "musique": "musique/musique_train_first50.json",
                 "medmcqa": "medmcqa/dev.jsonl", "medqa": "medqa/test_4opt_first600.jsonl",
                 "mmlu_pro": "mmlu_pro/health.jsonl", "pubmedqa": "pubmedqa/test_set.json"}
_SLICE = re.compile(r"^(\w+)(?:\[(\d*):(\d*)(?::(\d+))?\])?$")

#: answer kind -> (the metric that is the env's quality, every metric reported) — see :meth:`QATask.metrics`
ANSWER_METRICS = {"extractive": ("f1", ("f1", "em")), "multiple_choice": ("acc", ("acc", "acc_strict")),
                  "yes_no_maybe": ("acc", ("acc", "acc_strict"))}
#: how the report names a metric
METRIC_LABELS = {"f1": "F1", "em": "EM", "acc": "accuracy", "acc_strict": "accuracy (strict)",
                 "quality": "quality"}


def answer_kind(q: QAExample) -> str:
    """``extractive`` (an open answer), ``multiple_choice`` (lettered options) or ``yes_no_maybe``."""
    if not q.choices:
        return "extractive"
    from envs.scoring import _is_yes_no_maybe

    return "yes_no_maybe" if _is_yes_no_maybe(q.choices) else "multiple_choice"


def resolve_data_file(path: str | Path) -> Path:
    """``path`` as given when it exists, else relative to the shared data folder (so a config can say
    ``medmcqa/dev.jsonl``); the first candidate when neither exists (the caller names it in its error)."""
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    alt = shared_data_dir() / p
    return alt if alt.exists() else p


def title_core(title: str) -> str:
    """A paragraph title without its parenthesised disambiguation: ``Shonen Jump (magazine)`` -> ``Shonen Jump``."""
    return re.sub(r"\s*\(.*?\)\s*", " ", title).strip()


def mentions_title(title: str, text: str) -> bool:
    """Whether ``text`` names a paragraph title (case-insensitive; the disambiguation is ignored)."""
    t = title_core(title).lower()
    return bool(t) and t in text.lower()


class QATask:
    """Questions of a dataset split like ``dev``, ``dev[0:100]`` (a contiguous slice of the file) or
    ``dev[0:500:2]`` (every second question: interleaved splits when the file is ordered by type).

    ``dataset``: any registered loader (:data:`envs.core.data.loaders.LOADERS`: hotpotqa, musique, 2wikimultihopqa,
    medmcqa, medqa, mmlu_pro, mmlu, pubmedqa, flashrag). Questions a dataset marks unanswerable (MuSiQue
    ``answerable: false``) are left out of the split and counted in :attr:`excluded` — never scored as ordinary
    ones.

    Quality, by answer kind (:data:`ANSWER_METRICS`; :meth:`metrics` reports the others beside it): token F1
    (max over gold aliases) for extractive answers, with EM beside it; option accuracy for multiple choice and
    label accuracy for yes/no/maybe, on the lenient extraction, with the strict one (only an explicit option
    letter or option text counts) beside it.

    Example:
        >>> t = QATask("hotpotqa", "dev[0:4]")                        # doctest: +SKIP
        >>> t.quality_metric, t.metrics(t.questions[0], "no idea")      # doctest: +SKIP
        ('f1', {'f1': 0.0, 'em': 0.0})
    """

    def __init__(self, dataset: str, split: str = "dev", path: str | None = None):
        from envs.core.data.loaders import resolve_dataset

        m = _SLICE.match(split)
        if not m:
            raise ValueError(f"split '{split}' is not of the form NAME, NAME[a:b] or NAME[a:b:step]")
        dataset = resolve_dataset(dataset)
        if path:
            file = resolve_data_file(path)
        elif dataset in DEFAULT_PATHS:
            file = shared_data_dir() / DEFAULT_PATHS[dataset]
        else:
            raise FileNotFoundError(f"{dataset}: no shared data file for this dataset; give EnvConfig.data_path "
                                    f"(shared files exist for {', '.join(sorted(DEFAULT_PATHS))})")
        if not file.is_file():
            raise FileNotFoundError(f"{dataset}: data file {file} not found (give EnvConfig.data_path)")
        examples = load_dataset(dataset, file)
        a = int(m.group(2)) if m.group(2) else 0
        b = int(m.group(3)) if m.group(3) else len(examples)
        self.dataset = dataset
        self.path = file
        self.all_examples: list[QAExample] = list(examples)
        step = int(m.group(4)) if m.group(4) else 1
        if step < 1:
            raise ValueError(f"split '{split}': step must be >= 1")
        chosen = self.all_examples[a:b:step]
        #: ids of the split's questions the data marks unanswerable (left out)
        self.excluded: list[str] = [q.id for q in chosen if q.metadata.get("answerable") is False]
        self.questions: list[QAExample] = [q for q in chosen if q.metadata.get("answerable") is not False]
        if self.excluded:
            log.info("%s %s: %d unanswerable question(s) left out", dataset, split, len(self.excluded))
        if not self.questions:
            raise ValueError(f"{dataset}: split '{split}' selects no (answerable) questions (file has {len(examples)})")
        kinds = sorted({answer_kind(q) for q in self.questions})
        #: the answer kinds of the split's questions and the metric that is the env's quality
        self.answer_kinds = kinds
        qm = sorted({ANSWER_METRICS[k][0] for k in kinds})
        self.quality_metric = qm[0] if len(qm) == 1 else "quality"
        self.metric_names = tuple(dict.fromkeys(n for k in kinds for n in ANSWER_METRICS[k][1]))

    def question_id(self, q: QAExample) -> str:
        return q.id

    def question_text(self, q: QAExample) -> str:
        """The question as the reasoner sees it (multiple choice: with lettered options)."""
        if q.choices:
            opts = "\n".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(q.choices))
            return f"{q.question}\n{opts}\nAnswer with the letter of the correct option."
        return q.question

    def question_attr(self, q: QAExample, name: str):
        """Grouping attributes for benchmark breakdowns. ``question_form`` (HotpotQA-style data with
        supporting paragraphs): ``both titles named`` when the question names every supporting paragraph's
        title (comparison-like), ``one title named`` / ``no title named`` otherwise (bridge-like) — derived
        from the text, because the IRCoT-format file carries no question type. ``answer_kind``: see
        :func:`answer_kind`. Others: ``metadata[name]`` (e.g. ``hops`` for MuSiQue, ``subject_name``)."""
        if name == "question_form":
            paras = {p["id"]: p for p in q.metadata.get("paragraphs", [])}
            gold = [g for g in (q.gold_passage_ids or []) if g in paras]
            if not gold:
                return None
            named = sum(mentions_title(paras[g]["title"], q.question) for g in gold)
            return "both titles named" if named == len(gold) else ("one title named" if named else "no title named")
        if name == "answer_kind":
            return answer_kind(q)
        return q.metadata.get(name)

    def gold_passages(self, q) -> list[str]:
        """Ids of the supporting passages (empty when the dataset has no passage-level supervision)."""
        return list(q.gold_passage_ids or [])

    def metrics(self, q: QAExample, answer_content: str | None) -> dict[str, float]:
        """Every metric of ``q``'s answer kind for the final answer's content (``None``: no answer, all 0)."""
        from envs.scoring import score

        names = ANSWER_METRICS[answer_kind(q)][1]
        if answer_content is None:
            return {n: 0.0 for n in names}
        text = f"Answer: {answer_content}"
        lenient = score(text, q, mode="lenient")
        if q.choices:
            return {"acc": float(lenient["acc"]), "acc_strict": float(score(text, q, mode="strict")["acc"])}
        return {"f1": float(lenient["f1"]), "em": float(lenient["em"])}

    def quality(self, q: QAExample, answer_content: str) -> float:
        """The env's quality in [0, 1]: F1 for an extractive answer, lenient accuracy otherwise (the lenient
        reading only: the strict one is for :meth:`metrics`)."""
        from envs.scoring import score

        s = score(f"Answer: {answer_content}", q, mode="lenient")
        return float(s["acc"] if q.choices else s["f1"])

    def corpus(self, spec: str | None = None):
        """The retrieval corpus (``EnvConfig.corpus``; see :func:`task_corpus`)."""
        return task_corpus(self, spec)


#: what ``EnvConfig.corpus`` accepts, for error messages
CORPUS_HELP = ("null (the task's own: its file's paragraphs; MedMCQA: the explanations of the questions outside "
               "the split), 'paragraphs', 'medmcqa_explanations[:PATH]' (MedMCQA explanations, answer leaks "
               "stripped, the evaluated questions left out), 'DATASET:PATH' (the paragraphs of another question "
               "file), 'flashrag:PATH' or PATH.jsonl (a FlashRAG corpus), 'microworld[:SEED]'; a relative PATH is "
               "read from the working directory, else from the shared data folder")


def task_corpus(task: QATask, spec: str | None = None):
    """The corpus ``spec`` names for ``task`` (see :data:`CORPUS_HELP`).

    Raises:
        ValueError: A task without passages and no ``spec``, or an unknown spec (both say what to set).
        FileNotFoundError: A corpus file that does not exist.
    """
    from envs.core.data.corpora import medmcqa_knowledge_corpus, paragraph_corpus

    has_paragraphs = any(isinstance(q.metadata.get("paragraphs"), list) for q in task.all_examples)
    if spec is None or spec == "default":
        if task.dataset == "medmcqa":
            spec = "medmcqa_explanations"
        elif has_paragraphs:
            spec = "paragraphs"
        else:
            raise ValueError(f"task '{task.dataset}' ({task.path}): its questions carry no passages to retrieve from; "
                             f"set EnvConfig.corpus, e.g. 'medmcqa_explanations:medmcqa/dev.jsonl' (a medical "
                             f"knowledge collection) or a FlashRAG corpus .jsonl (accepted: {CORPUS_HELP})")
    if spec == "paragraphs":
        if not has_paragraphs:
            raise ValueError(f"EnvConfig.corpus 'paragraphs': the questions of {task.path} carry no paragraphs "
                             f"(accepted: {CORPUS_HELP})")
        return paragraph_corpus(task.all_examples, source=task.dataset)
    kind, sep, arg = spec.partition(":")
    if kind == "medmcqa_explanations":
        if sep:
            file = resolve_data_file(arg)
            if not file.is_file():
                raise FileNotFoundError(f"EnvConfig.corpus '{spec}': MedMCQA file {file} not found")
            examples = list(load_dataset("medmcqa", file))
        elif task.dataset == "medmcqa":
            examples = task.all_examples
        else:
            raise ValueError(f"EnvConfig.corpus 'medmcqa_explanations' needs the MedMCQA file for task "
                             f"'{task.dataset}': 'medmcqa_explanations:PATH'")
        # the evaluated questions' own explanations never enter (by id and by question text)
        return medmcqa_knowledge_corpus(examples, exclude_ids=[q.id for q in task.questions],
                                        exclude_questions=[q.question for q in task.questions],
                                        source=f"medmcqa-explanations:{Path(arg).name if sep else task.path.name}")
    from agents.retrievers.corpus_spec import load_corpus, parse_spec

    try:
        kind, arg = parse_spec(spec)
    except ValueError as e:
        raise ValueError(f"EnvConfig.corpus '{spec}': {e} (accepted: {CORPUS_HELP})") from None
    return load_corpus(f"{kind}:{arg if kind == 'microworld' else resolve_data_file(arg)}")
