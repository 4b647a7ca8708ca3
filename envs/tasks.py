"""Tasks: the question sources the env runs (``EnvConfig.task``), by name, and the protocol they implement.

A task entry is a *builder* ``fn(config: EnvConfig) -> envs.components.Components``: it loads the questions
(a :class:`Task`) and assembles the reasoner, retriever and signals that task runs on. Builtin entries name
their builder by dotted path, so reading this registry (e.g. to validate a config on the driver) imports
nothing heavy. Every registered dataset loader (:data:`envs.core.data.loaders.LOADERS`: hotpotqa, musique,
2wikimultihopqa, medmcqa, medqa, mmlu_pro, mmlu, pubmedqa, flashrag — and any you register) is a task of its
own: its questions through :class:`envs.qa_task.QATask`, the corpus from ``EnvConfig.corpus``.

Plug in your own::

    from envs.components import qa_components
    from envs.tasks import TASKS

    @TASKS.register("mytask")
    def mytask(config):
        return qa_components(config, task=MyTask(config.split))   # any object implementing Task

Example:
    >>> TASKS.names()[:5]
    ['microworld', 'questions', 'microworld_chain', 'hotpotqa', 'musique']
    >>> isinstance(object(), Task)
    False
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from envs.core.registry import Registry


class _TaskRegistry(Registry):
    """The task registry: its own entries plus one per registered dataset loader
    (:data:`envs.core.data.loaders.LOADERS`) — ``qa_components`` over that dataset's questions — so a loader registered
    later is an env task as well."""

    _loaders_seen = -1

    def _load(self) -> None:
        super()._load()
        from envs.core.data.loaders import LOADERS

        if LOADERS.version != self._loaders_seen:
            self._loaders_seen = LOADERS.version
            for name in LOADERS.names():
                if name not in self._entries:
                    self.register_path(name, "envs.components:qa_components", labels=False, dataset=name)


#: task name -> builder ``fn(config) -> Components``
TASKS: Registry = _TaskRegistry("task")
TASKS.register_path("microworld", "envs.components:microworld_components", labels=True)
TASKS.register_path("questions", "envs.ungraded:questions_components", labels=False)  # user questions, ungraded
# the micro-world's long chains: sub-questions in turn (EnvConfig.chain; envs.microworld.chain)
TASKS.register_path("microworld_chain", "envs.microworld.chain_env:chain_components", labels=True)


@runtime_checkable
class Task(Protocol):
    """A question source: its questions, how to show them, and how to score an answer.

    Optional members the env and the benchmark use when present: ``label`` (ground-truth step labels, the
    micro-world's; declared in :class:`LabelledTask`), ``gold_passages``, ``question_attr``, and
    ``metrics(q, answer_content | None) -> {name: value}`` with ``quality_metric`` (which of them ``quality``
    is; the report names its columns by them, e.g. F1 and EM for extractive answers) — without them the
    report shows ``quality`` alone. ``graded = False`` marks a task without gold answers (user questions in an
    application, :class:`envs.ungraded.UngradedTask`): the env then reports quality as NaN and the reward as the
    costs alone, never a made-up score.
    """

    questions: list[Any]

    def question_id(self, q: Any) -> str:
        """A stable id of question ``q`` (cache keys and per-question records use it)."""
        raise NotImplementedError

    def question_text(self, q: Any) -> str:
        """The question as the reasoner sees it."""
        raise NotImplementedError

    def quality(self, q: Any, answer_content: str) -> float:
        """Answer quality in [0, 1] of the final answer's content."""
        raise NotImplementedError

    def gold_passages(self, q: Any) -> list[str]:
        """Ids of the supporting passages (empty when the data has none)."""
        raise NotImplementedError

    def question_attr(self, q: Any, name: str) -> Any:
        """A grouping attribute of ``q`` for benchmark breakdowns (``None`` when the task has none)."""
        raise NotImplementedError


@runtime_checkable
class LabelledTask(Task, Protocol):
    """A task with ground-truth step labels (the micro-world): the oracle trigger and step-level metrics."""

    def label(self, q: Any, step_number: int, chain_object: str | None, content: str, is_answer: bool
              ) -> tuple[str, str | None, str | None]:
        """``(label, error_kind, new chain object)`` of a step given where the model's chain stands."""
        raise NotImplementedError
