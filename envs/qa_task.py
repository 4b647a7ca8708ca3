"""Real-data env tasks: questions from a QA dataset, a paragraph corpus, F1 / accuracy as the quality."""

from __future__ import annotations

import re
from pathlib import Path

from envs.data.loaders import load_dataset, shared_data_dir
from envs.data.types import QAExample

DEFAULT_PATHS = {"hotpotqa": "hotpotqa/dev_500.jsonl", "medmcqa": "medmcqa/dev.jsonl",
                 "pubmedqa": "pubmedqa/test_set.json"}
_SLICE = re.compile(r"^(\w+)(?:\[(\d*):(\d*)(?::(\d+))?\])?$")


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

    Quality: token F1 (max over gold aliases) for extractive answers, accuracy for multiple choice,
    on the answer extracted from the final ``Answer:`` line (lenient extraction).
    """

    def __init__(self, dataset: str, split: str = "dev", path: str | None = None):
        m = _SLICE.match(split)
        if not m:
            raise ValueError(f"split '{split}' is not of the form NAME, NAME[a:b] or NAME[a:b:step]")
        file = Path(path) if path else shared_data_dir() / DEFAULT_PATHS.get(dataset, "")
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
        self.questions: list[QAExample] = self.all_examples[a:b:step]
        if not self.questions:
            raise ValueError(f"{dataset}: split '{split}' selects no questions (file has {len(examples)})")

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
        from the text, because the IRCoT-format file carries no question type. Others: ``metadata[name]``."""
        if name == "question_form":
            paras = {p["id"]: p for p in q.metadata.get("paragraphs", [])}
            gold = [g for g in (q.gold_passage_ids or []) if g in paras]
            if not gold:
                return None
            named = sum(mentions_title(paras[g]["title"], q.question) for g in gold)
            return "both titles named" if named == len(gold) else ("one title named" if named else "no title named")
        return q.metadata.get(name)

    def gold_passages(self, q) -> list[str]:
        """Ids of the supporting passages (empty when the dataset has no passage-level supervision)."""
        return list(q.gold_passage_ids or [])

    def quality(self, q: QAExample, answer_content: str) -> float:
        from envs.scoring import score

        s = score(f"Answer: {answer_content}", q, mode="lenient")
        return float(s["acc"] if q.choices else s["f1"])

    def corpus(self):
        """The retrieval corpus: the union of the whole file's paragraphs (HotpotQA / MuSiQue style); for
        MedMCQA the explanation collection of every question *outside* this split's slice (answer leaks
        stripped), so no evaluated question's own explanation can be retrieved."""
        if self.dataset == "medmcqa":
            from envs.data.corpora import medmcqa_knowledge_corpus

            return medmcqa_knowledge_corpus(self.all_examples, exclude_ids=[q.id for q in self.questions],
                                            exclude_questions=[q.question for q in self.questions])
        from envs.data.corpora import paragraph_corpus

        return paragraph_corpus(self.all_examples, source=self.dataset)
