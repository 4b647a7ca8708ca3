"""Kairos — learning *when* to retrieve while a language model reasons step by step: the public API in one place.

A thin facade over the packages that implement it (``envs``, ``agents``, ``policies``, ``train``, ``eval`` stay
where they are; this one sits on top of them and nothing imports it). Every name is imported on first use, so
``import kairos`` is fast (no torch, no gymnasium until you touch something that needs them).

========================  ==========================================================================
name                      what it is
========================  ==========================================================================
``Pipeline``              a trained policy (or any trigger) answering your questions over your knowledge
``Answer``, ``TraceStep``  an answer and its trace: every decision, its signals, query and passages
``load_policy``           a policy from a directory, a trigger name or ``"minprob<0.3"``
``make_env``              a :class:`~envs.retrieval_env.RetrievalTimingEnv` from a preset and overrides
``make_batched``          ``n`` env copies with batched generation (a Gymnasium ``VectorEnv``)
``run_episodes``          the one decision loop (what the benchmark and the pipeline run)
``evaluate_policy``       greedy evaluation of a policy on a task's questions (accuracy, calls, reward)
``EnvConfig``             the env's typed config
``UngradedTask``          user questions as an env task (no gold answers, no quality)
``registries()``          every extension point's :class:`~envs.core.registry.Registry` by kind
``REASONERS`` …           the registries themselves: ``REASONERS``, ``SIGNALS``, ``RETRIEVERS``,
                          ``QUERY_MODES``, ``COSTS``, ``TASKS``, ``TRIGGERS``, ``DETECTORS``, ``LOADERS``,
                          ``CORPUS_BUILDERS``, ``LAMBDA_SCHEDULES``, ``QUERYGEN_REWARDS``, ``BENCHES``,
                          ``COMMANDS``
========================  ==========================================================================

Example:
    >>> import kairos
    >>> kairos.__version__
    '0.1.0'
    >>> "never" in kairos.TRIGGERS.names() and "micro" in kairos.REASONERS.names()
    True
    >>> kairos.load_policy("minprob<0.3").describe()
    'minprob<0.3: retrieve when minprob < 0.3'
    >>> with kairos.Pipeline.from_policy("runs/quickstart/train/policy_trigger") as p:   # doctest: +SKIP
    ...     print(p.answer("Which company does Teimshox 's mother 's father work for ?").answer)
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from typing import Any

#: public name -> "module:attribute", imported on first use
_EXPORTS: dict[str, str] = {
    "Pipeline": "kairos.pipeline:Pipeline",
    "Answer": "kairos.pipeline:Answer",
    "TraceStep": "kairos.pipeline:TraceStep",
    "TracePassage": "kairos.pipeline:TracePassage",
    "load_policy": "kairos.pipeline:load_policy",
    "make_env": "envs.registration:make_env",
    "make_batched": "envs.vector:make_batched",
    "run_episodes": "envs.rollout:run_episodes",
    "evaluate_policy": "train.evaluate:evaluate_policy",
    "EnvConfig": "envs.env_config:EnvConfig",
    "UngradedTask": "envs.ungraded:UngradedTask",
    "Registry": "envs.core.registry:Registry",
}
#: registry name -> "module:attribute" (also in :func:`registries`)
_REGISTRIES: dict[str, str] = {
    "REASONERS": "agents.reasoners.registry:REASONERS",
    "SIGNALS": "agents.signals.base:SIGNALS",
    "RETRIEVERS": "agents.retrievers.index:RETRIEVERS",
    "QUERY_MODES": "agents.query:QUERY_MODES",
    "COSTS": "envs.costs:COSTS",
    "TASKS": "envs.tasks:TASKS",
    "TRIGGERS": "policies.triggers:TRIGGERS",
    "DETECTORS": "envs.components:DETECTORS",
    "RETRIEVAL_SELECTORS": "envs.hooks:RETRIEVAL_SELECTORS",
    "EVIDENCE_TRANSFORMS": "envs.hooks:EVIDENCE_TRANSFORMS",
    "AFTER_REGENERATION": "envs.hooks:AFTER_REGENERATION",
    "LOADERS": "envs.core.data.loaders:LOADERS",
    "CORPUS_BUILDERS": "envs.core.data.corpora:CORPUS_BUILDERS",
    "LAMBDA_SCHEDULES": "train.curriculum:LAMBDA_SCHEDULES",
    "QUERYGEN_REWARDS": "policies.querygen.rewards:REWARDS",
    "BENCHES": "eval.bench_cli:BENCHES",
    "METHOD_KINDS": "eval.bench.methods:METHOD_KINDS",
    "COMMANDS": "eval.cli:COMMANDS",
}

__all__ = sorted([*_EXPORTS, *_REGISTRIES, "__version__", "registries"])


def _version() -> str:
    """The installed ``kairos-rl`` distribution's version, else the source tree's ``pyproject.toml``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kairos-rl")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _version()


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def registries() -> dict[str, Any]:
    """Every extension point's registry by its name here (``REASONERS`` …): one place to list what is plugged in.

    Example:
        >>> from kairos import registries
        >>> registries()["TRIGGERS"].names()[:2]
        ['never', 'always']
    """
    return {name: _load(target) for name, target in _REGISTRIES.items()}


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name) or _REGISTRIES.get(name)
    if target is None:
        raise AttributeError(f"module 'kairos' has no attribute '{name}' (public names: {', '.join(__all__)})")
    value = _load(target)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _GymIdsWhenGymnasiumLoads(importlib.abc.MetaPathFinder):
    """``import kairos`` then ``gym.make("kairos/MicroWorld-v0")``: the ids are registered by ``import envs``, which
    ``import kairos`` does not do (it stays light) — so when gymnasium is imported, import ``envs`` and let its own
    one-shot hook (:mod:`envs.gym_ids`) register the ids right after gymnasium's module code. Finds nothing itself."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)
        from envs import gym_ids  # `import envs` inserts gym_ids' hook for gymnasium

        hook = next((f for f in sys.meta_path if isinstance(f, gym_ids._RegisterAfterImport)), None)
        return hook.find_spec(fullname, path, target) if hook is not None else None


if "gymnasium" in sys.modules:  # gymnasium came first: register the ids now
    import envs  # noqa: F401
elif not any(isinstance(f, _GymIdsWhenGymnasiumLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _GymIdsWhenGymnasiumLoads())
