"""The observation's fields and scalar signals, derived from what each registered signal declared.

``agents.signals.base.register_signal`` records a signal's ``group`` (the ``EnvConfig.signals`` entry that turns
it on), ``field`` (the observation field its vector goes into), ``scalars`` (reported in ``info["signals"]``),
``dtype`` and ``episode_field``. Everything here is computed from those declarations on each call, so a signal
registered by a user shows up everywhere — adding a signal is one class and one decorator, never an edit here.
"""

from __future__ import annotations

from typing import Any

_CACHE: dict[str, Any] = {"version": None, "tables": {}}


def _cached(fn):
    """Memoise a table on the signal registry's version: derived once per change, not once per env step."""
    def wrapper():
        from agents.signals.base import SIGNALS

        SIGNALS.names()  # loads the builtin signals (a registration bumps the version)
        if _CACHE["version"] != SIGNALS.version:
            _CACHE["version"], _CACHE["tables"] = SIGNALS.version, {}
        tables = _CACHE["tables"]
        if fn.__name__ not in tables:
            tables[fn.__name__] = fn()
        value = tables[fn.__name__]
        return value.copy()  # callers may mutate their copy

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _signal_infos() -> list[tuple[str, dict[str, Any]]]:
    from agents.signals.base import SIGNALS

    return [(name, SIGNALS.info(name)) for name in SIGNALS.names()]


@_cached
def config_groups() -> list[str]:
    """The groups ``EnvConfig.signals`` accepts: every group a registered signal declared (a registered signal's
    name is accepted too: :func:`signal_names`)."""
    return list(dict.fromkeys(i["group"] for _, i in _signal_infos() if i["group"]))


@_cached
def signal_names() -> list[str]:
    """The registered signals' names that are not also a group: an ``EnvConfig.signals`` entry naming one turns on
    the observation field it writes (its own field, named after it, for a signal declared without a group)."""
    groups = set(config_groups())
    return [name for name, _ in _signal_infos() if name not in groups]


def _field(name: str, info: dict[str, Any]) -> str:
    return info["field"] or name


@_cached
def group_signals() -> dict[str, list[str]]:
    """Observation field -> the signals whose vectors are concatenated into it (registration order); a signal
    without a group has a field of its own, named after it, used when ``EnvConfig.signals`` names it."""
    out: dict[str, list[str]] = {}
    for name, i in _signal_infos():
        if i["field"]:
            out.setdefault(i["field"], []).append(name)
    for name, i in _signal_infos():
        if not i["field"] and name not in out:
            out[name] = [name]
    return out


@_cached
def group_fields() -> dict[str, list[str]]:
    """``EnvConfig.signals`` entry -> the observation fields it turns on: a group its signals' fields
    (``content``: step and context), a signal's name the field it writes."""
    out: dict[str, list[str]] = {}
    for _, i in _signal_infos():
        if i["group"] and i["field"] not in out.setdefault(i["group"], []):
            out[i["group"]].append(i["field"])
    for name, i in _signal_infos():
        if name not in out:
            out[name] = [_field(name, i)]
    return out


@_cached
def episode_fields() -> dict[str, str]:
    """Observation fields the env fills per *episode* from a field of the episode's first step (the question's
    embedding is the context embedding of step 1: the state after reading the question)."""
    return {i["episode_field"]: i["field"] for _, i in _signal_infos() if i["episode_field"]}


@_cached
def half_fields() -> set[str]:
    """Fields stored in half precision (hidden-state embeddings: large, read only by a learned projection)."""
    return {_field(name, i) for name, i in _signal_infos() if i["dtype"] == "float16"}


@_cached
def scalar_signals() -> dict[str, tuple[str, int]]:
    """Scalar signals exposed in ``info["signals"]`` (for threshold triggers): name -> (signal, index)."""
    return {k: (name, idx) for name, i in _signal_infos() for k, idx in i["scalars"].items()}
