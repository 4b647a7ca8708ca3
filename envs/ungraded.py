"""Ungraded questions — what an application asks: plain strings, no gold answers — as an env task.

:class:`UngradedTask` implements the :class:`envs.tasks.Task` protocol over user questions. Nothing can score
their answers, and the task says so (``graded = False``): the env reports the final ``quality`` as NaN and empty
``metrics``, and the reward as the costs alone (``−Σ λ·cost``) — never a made-up score.

:func:`ungraded_components` assembles what an env runs on them: the reasoner, signals and query modes of an env
config (e.g. the one a policy was trained in) and retrieval over a **knowledge source** (:func:`knowledge_config`):

* a prebuilt index directory (what ``kairos index build`` writes; checked against its corpus before use);
* a corpus: a FlashRAG ``.jsonl`` file (``{"id", "contents"}`` per line, as ``EnvConfig.corpus`` accepts), a
  ``.txt`` file with one passage per line, or any corpus spec (``microworld``, ``hotpotqa:PATH``, …);
* passages in memory: strings, ``(id, text)`` or ``(id, title, text)`` tuples, :class:`~envs.core.data.types.Passage`
  objects, or a :class:`~envs.core.data.types.Corpus`;

(a corpus is indexed in memory by ``EnvConfig.retriever``, BM25 by default) and, for the micro-world reasoner
with no source given, the world's own fact corpus. The registered task ``questions`` (``EnvConfig.task``) is the
same over a file of questions (``data_path``: one per line, or JSON Lines with a ``question`` field).

Example:
    >>> t = UngradedTask(["Who is Mira 's father ?"])
    >>> t.question_id(t.questions[0]), t.quality(t.questions[0], "Tovan"), t.metrics(t.questions[0], "Tovan")
    ('q-2ae2f4afeb64bfb5', nan, {})
    >>> corpus = knowledge_corpus(["Mira 's father is Tovan .", ("f2", "Tovan was born in Kasford .")])
    >>> [(p.id, p.text) for p in corpus]
    [('p0', "Mira 's father is Tovan ."), ('f2', 'Tovan was born in Kasford .')]
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.data.types import Corpus, Passage
from envs.env_config import EnvConfig

log = logging.getLogger(__name__)

#: what a knowledge source may be, for error messages
KNOWLEDGE_HELP = ("a prebuilt index directory (`kairos index build --retriever bm25 --corpus FILE --out DIR`), a "
                  "corpus file (FlashRAG .jsonl with {\"id\", \"contents\"} per line, or .txt with one passage per "
                  "line), a corpus spec (e.g. 'microworld'), or passages in memory (strings or (id, text) pairs)")


@dataclass(frozen=True)
class UserQuestion:
    """A question of an :class:`UngradedTask`: its text and a stable id (a hash of the text)."""

    id: str
    text: str


def question_id_of(text: str) -> str:
    """The id of a user question: ``q-`` and 16 hex digits of the SHA-256 of its text (the trajectory cache keys
    records by it, so the same question replays, and no two questions share records)."""
    return "q-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class UngradedTask:
    """User questions without gold answers (the :class:`envs.tasks.Task` protocol; ``graded = False``).

    Args:
        questions: the questions (non-empty strings), in order: ``questions[i]`` is the env's question ``i``.
    """

    graded = False
    quality_metric = "quality"

    def __init__(self, questions: Iterable[str] = ()):
        self.questions: list[UserQuestion] = []
        self.set_questions(questions)

    def set_questions(self, questions: Iterable[str]) -> None:
        """Replace the questions (the env reads them when an episode starts).

        Raises:
            TypeError: ``questions`` is a single string (not a list of them).
            ValueError: a question that is not a non-empty string (naming its position).
        """
        if isinstance(questions, (str, bytes)):
            raise TypeError(f"UngradedTask: questions are a list of strings, got a single {type(questions).__name__} "
                            "(it would be read as one question per character): wrap it in a list")
        out = []
        for i, text in enumerate(questions):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"question {i}: a question is a non-empty string, got {text!r}")
            text = text.strip()
            out.append(UserQuestion(question_id_of(text), text))
        self.questions = out

    def question_id(self, q: UserQuestion) -> str:
        return q.id

    def question_text(self, q: UserQuestion) -> str:
        return q.text

    def quality(self, q: UserQuestion, answer_content: str | None) -> float:
        """Not defined: NaN (there is no gold answer to score against)."""
        return float("nan")

    def metrics(self, q: UserQuestion, answer_content: str | None) -> dict[str, float]:
        """No metrics (nothing to score against)."""
        return {}

    def gold_passages(self, q: UserQuestion) -> list[str]:
        return []

    def question_attr(self, q: UserQuestion, name: str) -> Any:
        return None

    @classmethod
    def from_file(cls, path: str | Path) -> UngradedTask:
        """Questions from a file: one per line (``.txt``; blank lines skipped), or JSON Lines with a ``question``
        field (``.jsonl``)."""
        return cls(read_questions(path))


def read_questions(path: str | Path) -> list[str]:
    """The questions of a file: JSON Lines (``.jsonl``: a ``question`` field per line) or one per line."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"questions file {p} not found (one question per line, or .jsonl with a "
                                "'question' field per line)")
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if p.suffix != ".jsonl":
        return lines
    out = []
    for n, ln in enumerate(lines, 1):
        try:
            row = json.loads(ln)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n}: not JSON ({e})") from None
        if not isinstance(row, dict) or not isinstance(row.get("question"), str):
            raise ValueError(f"{p}:{n}: a line needs a 'question' string field")
        out.append(row["question"])
    return out


# ----------------------------------------------------------------------------------------- knowledge sources
def knowledge_corpus(passages: Any, source: str = "<memory>") -> Corpus:
    """A corpus of passages in memory: a :class:`Corpus` as it is, else strings (ids ``p0``, ``p1``, …),
    ``(id, text)`` or ``(id, title, text)`` tuples, :class:`Passage` objects, or mappings with ``id`` and
    ``text`` (or FlashRAG's ``contents``) and optional ``title``.

    Raises:
        ValueError: an empty list, a passage without text, or an item of another kind (naming its position).
    """
    if isinstance(passages, Corpus):
        return passages
    if isinstance(passages, (str, bytes, Mapping)) or not isinstance(passages, Iterable):
        raise TypeError(f"knowledge: got {type(passages).__name__} {passages!r:.60}; give {KNOWLEDGE_HELP}")
    out = []
    for i, p in enumerate(passages):
        if isinstance(p, Passage):
            out.append(p)
        elif isinstance(p, str):
            out.append(Passage(f"p{i}", "", p))
        elif isinstance(p, (tuple, list)) and len(p) in (2, 3) and all(isinstance(x, str) for x in p):
            out.append(Passage(p[0], "", p[1]) if len(p) == 2 else Passage(*p))
        elif isinstance(p, dict) and isinstance(p.get("id"), str) and isinstance(p.get("text", p.get("contents")), str):
            out.append(Passage(p["id"], str(p.get("title", "")), p.get("text", p.get("contents"))))
        else:
            raise ValueError(f"knowledge: passage {i} is {type(p).__name__} {p!r:.60}; give strings, (id, text) or "
                             "(id, title, text) tuples, Passage objects or {'id', 'text'} mappings")
    if not out:
        raise ValueError("knowledge: no passages (an empty list)" if source == "<memory>" else
                         f"knowledge: {source} holds no passages (an empty file); give a corpus with passages")
    for i, p in enumerate(out):  # the corpus files' rule (envs.core.data.flashrag): a passage needs text
        if not p.text.strip():
            title = f", title {p.title[:60]!r}" if p.title.strip() else ""
            raise ValueError(f"knowledge: passage {i} ('{p.id}'{title}) has no text; every passage needs text to "
                             "retrieve (a title alone is not a passage)")
    return Corpus.from_passages(out, source=source)


def knowledge_config(config: EnvConfig, knowledge: Any = None, index: str | Path | None = None,
                     ) -> tuple[EnvConfig, Corpus | None]:
    """``(env config, corpus)`` for a knowledge source (see the module docstring).

    Args:
        config: the env config (its ``index_path`` / ``corpus`` are the source when none is given).
        knowledge: ``None`` (the config's own), a directory (a prebuilt index), a file or corpus spec, or passages
            in memory.
        index: a prebuilt index directory to search; ``knowledge`` is then the corpus it is checked against
            (default: the corpus recorded in its manifest).

    Returns:
        The config with ``index_path`` and ``retriever`` set for an index (``corpus`` cleared: the returned corpus
        is the source), and the corpus (``None``: :func:`ungraded_components` takes the config's own).

    Raises:
        FileNotFoundError: a corpus file or index directory that does not exist (naming the path and what to pass).
        ValueError: an unreadable source.
    """
    if isinstance(knowledge, (str, Path)) and Path(knowledge).is_dir():
        if index is not None:
            raise ValueError(f"knowledge {knowledge} is a directory (an index) and index {index} is given too: "
                             "pass the index once, and the corpus file it was built from as knowledge")
        knowledge, index = None, knowledge
    corpus = None if knowledge is None else _corpus_of(knowledge)
    if index is not None:
        from agents.retrievers.index import read_manifest

        index = Path(index)
        if not index.exists():
            raise FileNotFoundError(f"index directory {index} not found; build one with `kairos index build "
                                    f"--retriever bm25 --corpus FILE --out {index}`")
        manifest = read_manifest(index)  # IndexMissingError (a FileNotFoundError) naming the build command
        config = config.replace(index_path=str(index), retriever=manifest["kind"], corpus=None)
    elif corpus is not None:
        config = config.replace(index_path=None, corpus=None)
    return config, corpus


def _corpus_of(knowledge: Any) -> Corpus:
    if not isinstance(knowledge, (str, Path)):
        return knowledge_corpus(knowledge)
    p = Path(knowledge).expanduser()
    if p.suffix == ".txt":
        if not p.is_file():
            raise FileNotFoundError(f"corpus file {p} not found (give {KNOWLEDGE_HELP})")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"knowledge {p}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
        return knowledge_corpus([ln.strip() for ln in text.splitlines() if ln.strip()], source=str(p))
    from agents.retrievers.corpus_spec import load_corpus

    try:
        return load_corpus(str(knowledge))
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}; give {KNOWLEDGE_HELP}") from None
    except ValueError as e:
        raise ValueError(f"knowledge {str(knowledge)!r}: {e}; give {KNOWLEDGE_HELP}") from None


def _config_corpus(config: EnvConfig) -> Corpus:
    """The corpus an ungraded env's config names: its index's (from the manifest) or its ``corpus`` spec."""
    if config.index_path:
        from agents.retrievers.corpus_spec import load_corpus
        from agents.retrievers.index import read_manifest

        spec = (read_manifest(config.index_path).get("corpus") or {}).get("spec")
        if not spec:
            raise ValueError(f"index {config.index_path} does not record the corpus it was built from; pass that "
                             "corpus as the knowledge source too")
        return load_corpus(spec)
    if config.corpus:
        return _corpus_of(config.corpus)
    raise ValueError(f"no knowledge source: reasoner '{config.reasoner}' has no corpus of its own; give {KNOWLEDGE_HELP}")


# ----------------------------------------------------------------------------------------- components
def ungraded_components(config: EnvConfig, task: UngradedTask | None = None, corpus: Corpus | None = None):
    """:class:`envs.components.Components` over ungraded questions: the reasoner, signals, probes and query modes of
    ``config`` (built as the micro-world's and the real-data tasks' builders build them, so a step's features are
    the same), and retrieval over ``corpus`` (default: the config's index or corpus; the micro-world reasoner: its
    world's fact corpus). Its trajectory-cache namespace is its own (task ``questions``, the corpus by content).

    Raises:
        IndexMismatchError: a prebuilt index that was not built from ``corpus`` (naming both, and both fixes).
    """
    from agents.query import QueryGenerator
    from envs.components import (
        DETECTORS,
        Components,
        _extractor,
        _namespace,
        build_reasoner,
        env_retriever,
        group_signals,
        model_facts,
        record_groups,
        with_prefetch,
        with_probe_pulse_layers,
    )

    config = with_probe_pulse_layers(config)
    task = task if task is not None else UngradedTask()
    relations: tuple = ()
    if config.reasoner == "micro":  # as envs.components.microworld_components builds it
        from envs.core.microworld.artifact import artifact_fingerprint, load_artifact, world_model_id

        world = load_artifact(config.artifact, with_model=config.reasoner_service is None)
        corpus = corpus if corpus is not None else (_config_corpus(config) if config.index_path or config.corpus
                                                     else world.corpus())
        reasoner = build_reasoner(config, world)
        relations = world.config.world.relations
        n_layers, hidden = world.model.config.num_hidden_layers, world.model.config.hidden_size
        if not config.pulse_layers:
            config = config.replace(pulse_layers=[0, n_layers])
        model_id = world_model_id(world)
        identity: list = [world.train_info, artifact_fingerprint(world.path)]
    else:  # as envs.components.qa_components builds it
        from agents.reasoners.registry import reasoner_model_id

        corpus = corpus if corpus is not None else _config_corpus(config)
        reasoner = build_reasoner(config)
        n_layers, hidden = model_facts(reasoner)
        model_id = reasoner_model_id(reasoner, config.reasoner)
        identity = [getattr(reasoner, "model_id", config.reasoner)]
        if config.probes and not reasoner.capabilities.hidden_states:
            raise ValueError(f"EnvConfig.probes: reasoner '{config.reasoner}' exposes no hidden states")
    retriever, prefetcher = with_prefetch(config, _retriever(config, corpus, env_retriever), relations)
    extractor = _extractor(config, reasoner, n_layers, hidden, [p.text for p in corpus], config.reasoner, model_id)
    dims = extractor.dims
    feature_dims = {g: sum(dims[n] for n in group_signals()[g]) for g in record_groups(config)}
    probes = {name: DETECTORS.make("probe", path, expected_model_id=model_id, model_layers=n_layers)
              for name, path in config.probes.items()}
    ns = _namespace(f"ungraded:{config.reasoner}", identity + [corpus.fingerprint()], config)
    return Components(config, task, reasoner, retriever, QueryGenerator(list(config.query_modes)), extractor, ns,
                      feature_dims, probes, prefetcher)


def _retriever(config: EnvConfig, corpus: Corpus, env_retriever):
    from agents.retrievers.index import IndexMismatchError, read_manifest

    try:
        return env_retriever(config, corpus)
    except IndexMismatchError:
        if not config.index_path:
            raise
        manifest = read_manifest(config.index_path)
        built = (manifest.get("corpus") or {}).get("spec") or "an unrecorded corpus"
        raise IndexMismatchError(
            f"index {config.index_path} does not match the knowledge source: it was built from '{built}' "
            f"({manifest.get('n_docs')} passages, fingerprint {manifest['corpus']['fingerprint'][:12]}), the source "
            f"is {corpus.source} ({len(corpus)} passages, fingerprint {corpus.fingerprint()[:12]}). Pass the corpus "
            f"the index was built from (or none: the index's own is used), or rebuild the index from this one: "
            f"`kairos index build --retriever {manifest['kind']} --corpus {corpus.source} --out "
            f"{config.index_path} --overwrite`") from None


def questions_components(config: EnvConfig):
    """The ``questions`` task (``EnvConfig.task``): :func:`ungraded_components` over the questions of
    ``data_path`` (:func:`read_questions`; none: an empty task, its questions set later)."""
    task = UngradedTask.from_file(config.data_path) if config.data_path else UngradedTask()
    return ungraded_components(config, task)


__all__ = ["KNOWLEDGE_HELP", "UngradedTask", "UserQuestion", "knowledge_config", "knowledge_corpus",
           "question_id_of", "questions_components", "read_questions", "ungraded_components"]
