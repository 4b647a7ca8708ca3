"""Tasks: the question sources the env runs (``EnvConfig.task``), by name, and the protocol they implement.

A task entry is a *builder* ``fn(config: EnvConfig) -> envs.components.Components``: it loads the questions
(a :class:`Task`) and assembles the reasoner, retriever and signals that task runs on. Builtin entries name
their builder by dotted path, so reading this registry (e.g. to validate a config on the driver) imports
nothing heavy.

Plug in your own::

    from envs.components import qa_components
    from envs.tasks import TASKS

    @TASKS.register("mytask")
    def mytask(config):
        return qa_components(config, task=MyTask(config.split))   # any object implementing Task

Example:
    >>> TASKS.names()
    ['microworld', 'hotpotqa', 'medmcqa']
    >>> isinstance(object(), Task)
    False
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from envs.registry import Registry

#: task name -> builder ``fn(config) -> Components``
TASKS: Registry = Registry("task")
TASKS.register_path("microworld", "envs.components:microworld_components", labels=True)
TASKS.register_path("hotpotqa", "envs.components:qa_components", labels=False)
TASKS.register_path("medmcqa", "envs.components:qa_components", labels=False)


@runtime_checkable
class Task(Protocol):
    """A question source: its questions, how to show them, and how to score an answer.

    Optional methods the env and the benchmark use when present (declared in :class:`LabelledTask`):
    ``label`` (ground-truth step labels, the micro-world's), ``gold_passages`` and ``question_attr``.
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
