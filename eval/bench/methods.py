"""The benchmark's methods: one spec class per kind, registered in :data:`METHOD_KINDS`.

A method's YAML mapping picks its class by ``kind:`` (default ``threshold``); each class holds the keys of its kind
only — a key of another kind is an error naming ``methods['NAME'].key`` and the valid keys. Each class knows how
it is checked, which trigger it builds, how it runs on dev and test and how an application replays it.

A new kind is one class and a registration::

    @METHOD_KINDS.register("every_other")
    @dataclass
    class EveryOtherMethod(MethodSpec):
        kind: str = helpf("every_other", KIND_HELP)

        def make_trigger(self, threshold=None, p=None, seed=0):
            return MyEveryOtherTrigger(name=self.name)

(``kind: package.module:Class`` names a class that is not registered.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from envs.core.config import ConfigBase, ConfigError, config_mapping, helpf
from envs.core.registry import Registry, UnknownNameError
from envs.env_config import EnvOverrides

if TYPE_CHECKING:
    from envs.env_config import EnvConfig

__all__ = ["METHOD_KINDS", "MethodSpec", "RunContext", "Skip", "make_trigger", "tag"]

#: method kind name → its spec class (a :class:`MethodSpec` subclass)
METHOD_KINDS: Registry[type[MethodSpec]] = Registry("bench method kind",
                                                   builtins=("eval.bench.kinds", "eval.bench.published"))

KIND_HELP = ("the method's kind (its class): " "never | always (retrieve at every step) | single (Single RAG: one "
             "retrieval with the question as query before step 1, the top-k injected) | ircot (IRCoT as published) | "
             "flare (FLARE-direct as published: θ on minprob, the masked step as query) | threshold | random | oracle "
             "| cache_oracle (per question the best action sequence at the bench λ; an upper bound for any timing "
             "policy) | learned | trigger (any registered trigger) — or a kind a plug-in registers in "
             "eval.bench.methods.METHOD_KINDS")


class Skip(Exception):
    """A method that cannot run here (its reason goes into the report)."""


def tag(name: str, mode: str | None, suffix: str) -> str:
    """A run's file tag: the method, its query mode and what distinguishes the run (threshold, seed …)."""
    return f"{name}[{mode}]@{suffix}" if mode else f"{name}@{suffix}"


@dataclass
class RunContext:
    """What a method's :meth:`MethodSpec.run` gets: the runner, CoT on dev, the slices, the results so far (Random
    matches another method's rate), the calibration records it adds to, and the bench λ."""

    runner: Any  # eval.bench.runner.Runner (not imported: it imports the config, which imports this)
    cot_dev: dict[str, Any]
    dev: range
    test: range
    results: dict[str, dict[str, Any]]
    calib: dict[str, dict[str, Any]]
    lam: float


@dataclass
class MethodSpec(ConfigBase):
    """One method of the benchmark: the keys every kind has. ``MethodSpec.from_dict`` builds the class its ``kind``
    names."""

    #: the report's grouping of the kind: baseline | fixed | random | oracle | learned
    report_kind: ClassVar[str] = "baseline"
    #: an upper bound (the oracle-gap fractions use the best of these)
    ceiling: ClassVar[bool] = False
    #: runs after every other method (Random matches another's retrieval rate)
    runs_last: ClassVar[bool] = False
    #: an application can replay it (``evaluated_policy``); not Random, not the oracles
    replayable: ClassVar[bool] = True

    name: str = helpf("", "display name (unique)")
    kind: str = helpf("threshold", KIND_HELP)
    env: EnvOverrides = field(default_factory=EnvOverrides, metadata={"help": (
        "env config overrides for this method only (EnvConfig keys, e.g. {injection: front} for PUlSE-front; a "
        "key replaces the bench env's value); it gets its own components and trajectory-cache namespace")})
    query_mode: str | None = helpf(None, "retrieve with this query formulation (one of env.query_modes; null: "
                                         "the env's default, its first) — e.g. a learned policy trained with it")

    # ------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> MethodSpec:
        """The spec class ``data['kind']`` names, built from ``data``; errors name the method
        (``BenchConfig.methods['X'].key``) and a key of another kind lists this kind's valid keys."""
        data = config_mapping(cls, data, where)
        name = data.get("name")
        where = f"{where}['{name}']" if where and name else where
        target = cls
        if cls is MethodSpec:  # the kind picks the class
            kind = data.get("kind", "threshold")
            try:
                target = METHOD_KINDS.get(str(kind))
            except (UnknownNameError, ValueError):
                raise ConfigError(f"{where or f'MethodSpec {name!r}'}: kind must be one of "
                                  f"{tuple(METHOD_KINDS.names())}, got '{kind}'") from None
            if not (isinstance(target, type) and issubclass(target, MethodSpec)):
                raise ConfigError(f"{where or 'MethodSpec'}: kind '{kind}' is not a MethodSpec class")
        kind = data.get("kind", target.__dataclass_fields__["kind"].default)
        valid = {f.name for f in dataclasses.fields(target)}
        for key in data:
            if key not in valid:
                raise ConfigError(_foreign_key_message(where or target.__name__, key, kind, sorted(valid)))
        return ConfigBase.from_dict.__func__(target, data, where)  # type: ignore[attr-defined]

    def validate(self) -> None:
        if not self.name:
            raise ConfigError("MethodSpec: every method needs a name")
        try:
            own = METHOD_KINDS.get(self.kind)
        except (UnknownNameError, ValueError):
            own = None
        if own is not type(self):
            raise ConfigError(f"MethodSpec '{self.name}': kind '{self.kind}' is not the kind of {type(self).__name__} "
                              f"(build a method with MethodSpec.from_dict: its kind picks the class)")

    def check_with(self, names: list[str], query_modes: list[str]) -> None:
        """Checks against the whole benchmark (``BenchConfig.validate``): the query modes it names are the env's."""
        for q in self.named_query_modes():
            if q not in query_modes:
                raise ConfigError(f"BenchConfig: method '{self.name}' names query mode '{q}', which is not one of "
                                  f"env.query_modes {query_modes}")

    def preflight(self, known_signals: set[str], skip_missing_policies: bool) -> None:
        """Checks on the driver before anything runs (a typo is an error now, not after the other methods ran)."""

    def check_loaded(self, runner: Any) -> None:
        """Checks of the saved objects the method loads against the env it runs in (a learned policy's fields,
        sizes and query modes), on the driver, after :meth:`preflight` and before the first method runs."""

    # ------------------------------------------------------------ running
    def uses_querygen(self) -> bool:
        """Whether the policy picks the query mode itself (the env runs with QueryGen actions)."""
        return bool(getattr(self, "querygen", False))

    def named_query_modes(self) -> list[str]:
        """The env query modes the config names (checked against ``env.query_modes``)."""
        return [self.query_mode] if self.query_mode else []

    def modes(self, runner: Any) -> list[str | None]:
        """The query modes the method is calibrated over (``[None]``: the env's default mode)."""
        return [self.query_mode] if self.query_mode else [None]

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        """The :class:`policies.triggers.Trigger` of the method (threshold / rate filled in by the caller)."""
        from policies.triggers import TRIGGERS

        t = TRIGGERS.make(self.kind)
        t.name = self.name
        return t

    def run(self, ctx: RunContext) -> dict[str, Any]:
        """Run on test (calibrating on dev first where the kind does); raises :class:`Skip` when it cannot run."""
        mode = self.modes(ctx.runner)[0]
        return ctx.runner.run(self.make_trigger(), "test", ctx.test, tag=tag(self.name, mode, "greedy") if mode
                              else self.name, querygen=self.uses_querygen(), env=self.env, mode=mode)

    def report_extras(self, result: dict[str, Any]) -> dict[str, Any]:
        """Kind-specific entries of the method's row in ``summary.json``."""
        return {}

    def report_notes(self, result: dict[str, Any]) -> list[str]:
        """Kind-specific lines of the report's notes (e.g. whether IRCoT's caps bound)."""
        return []

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        """``(env config, trigger, query mode, querygen)`` that repeat on test what the benchmark evaluated, from
        its calibration record ``calib`` (``evaluated_policy``)."""
        if not self.replayable:
            raise ValueError(f"method '{self.name}' (kind {self.kind}) is not a policy an application can run: "
                             "Random is matched to another method's rate over seeds, the oracles read gold labels; "
                             "pick a trigger or a learned method")
        return env_config, self.make_trigger(), self.query_mode or None, self.uses_querygen()


def _foreign_key_message(where: str, key: Any, kind: str, valid: list[str]) -> str:
    others = [k for k, c in METHOD_KINDS.items() if isinstance(c, type) and issubclass(c, MethodSpec)
              and key in {f.name for f in dataclasses.fields(c)}]
    hint = f"a key of kind {', '.join(others)}; " if others else ""
    import difflib

    close = difflib.get_close_matches(str(key), valid, n=1)
    mean = f"; did you mean '{close[0]}'?" if close and not others else ""
    return (f"{where}.{key}: unknown config key '{key}' for a '{kind}' method ({hint}valid keys: "
            f"{', '.join(valid)}){mean}")


def make_trigger(m: MethodSpec, threshold: float | None = None, p: float | None = None, seed: int = 0):
    """The trigger of method ``m`` (:meth:`MethodSpec.make_trigger`)."""
    return m.make_trigger(threshold=threshold, p=p, seed=seed)


def policy_path_missing(path: str | Path | None) -> bool:
    return not (Path(str(path)) / "spec.json").is_file()
