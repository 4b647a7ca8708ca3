"""Typed dataclass configs that load from YAML and double as CLI options.

Every config in Kairos is a ``@dataclass`` subclass of :class:`ConfigBase`; every field carries its help
text in ``field(metadata={"help": ...})``. Unknown keys are an error that names the key and lists the
valid ones, so a typo in a YAML file never silently falls back to a default.

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Demo(ConfigBase):
    ...     lr: float = field(default=1e-3, metadata={"help": "learning rate"})
    >>> Demo.from_dict({"lr": 0.1}).lr
    0.1
    >>> Demo.from_dict({"lrr": 0.1})
    Traceback (most recent call last):
    ...
    envs.core.config_files.ConfigError: Demo: unknown config key 'lrr' (valid keys: lr); did you mean 'lr'?

A nested config (a field whose type is a :class:`ConfigBase`) loads from a mapping; its errors name the whole key
path (``TrainConfig.env_config.rsus_options: unknown config key 'n_sampels' …``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from envs.core.config_files import ConfigError, read_config  # the one YAML reader (and its error)

T = TypeVar("T", bound="ConfigBase")


def helpf(default: Any = dataclasses.MISSING, help: str = "", ge: float | None = None, gt: float | None = None,
          **kw: Any) -> Any:
    """A dataclass ``field`` with help text; mutable defaults are wrapped in a factory automatically. ``ge`` / ``gt``:
    the number (or every number of a list) must be ``>=`` / ``>`` it — checked on load, the error naming the key."""
    meta: dict[str, Any] = {"help": help}
    if ge is not None:
        meta["ge"] = ge
    if gt is not None:
        meta["gt"] = gt
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta, **kw)
    return dataclasses.field(default=default, metadata=meta, **kw)


def check_bounds(name: str, value: Any, meta: Any, where: str) -> None:
    """A field's ``ge`` / ``gt`` bounds (:func:`helpf`) on its value (each number of a list; ``None`` passes)."""
    ge, gt = meta.get("ge"), meta.get("gt")
    if ge is None and gt is None:
        return
    check_finite(name, value, where)  # a bounded number is a finite one (nan compares false to every bound)
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if ge is not None and not v >= ge:
            raise ConfigError(f"{where}: key '{name}' must be >= {ge}, got {v}")
        if gt is not None and not v > gt:
            raise ConfigError(f"{where}: key '{name}' must be > {gt}, got {v}")


def _coerce(name: str, tp: Any, value: Any, where: str) -> Any:
    """Coerce ``value`` to annotation ``tp`` (nested configs, Optional, list, tuple, scalars)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # Optional[X]: X's own error (a nested config's names its key path)
            return _coerce(name, members[0], value, where)
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(name, a, value, where)
            except ConfigError as e:  # try the next member of the union
                errors.append(str(e))
        raise ConfigError(f"{where}: key '{name}' = {value!r} matches none of {tp} ({'; '.join(errors)})")
    if isinstance(tp, type) and issubclass(tp, ConfigBase):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: key '{name}' must be a mapping for {tp.__name__}, got {value!r}")
        return tp.from_dict(value, where=f"{where}.{name}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: key '{name}' must be a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(name, inner, v, where) for v in value]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: key '{name}' must be a mapping, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(f"{name}.{k}", vt, v, where) for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{where}: key '{name}' must be a number, got {value!r}")
        try:
            return float(value)
        except ValueError as e:
            raise ConfigError(f"{where}: key '{name}' must be a number, got {value!r}") from e
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (
            isinstance(value, str) and not value.lstrip("-").isdigit()
        ):
            raise ConfigError(f"{where}: key '{name}' must be an integer, got {value!r}")
        return int(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: key '{name}' must be true/false, got {value!r}")
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where}: key '{name}' must be a string, got {value!r}")
        return str(value)
    if typing.get_origin(tp) is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: key '{name}' must be one of {list(args)}, got {value!r}")
        return value
    return value


def check_finite(name: str, value: Any, where: str) -> None:
    """Every number in ``value`` (a field's coerced value: a scalar, or the numbers in its lists and mappings —
    cost weights, thresholds) is finite; ``nan`` / ``inf`` is a :class:`ConfigError` naming the key path. Nested
    configs check their own fields when they load."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: key '{name}' must be a finite number, got {value}")
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite(f"{name}.{k}", v, where)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_finite(name, v, where)


def unknown_key_error(where: str, key: Any, valid: typing.Iterable[str]) -> ConfigError:
    """The error of a key that is not one of ``valid``: names it, lists the valid keys and suggests the closest."""
    valid = sorted(valid)
    close = difflib.get_close_matches(str(key), valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"{where}: unknown config key '{key}' (valid keys: {', '.join(valid)}){hint}")


def coerce_value(name: str, tp: Any, value: Any, where: str) -> Any:
    """``value`` coerced to annotation ``tp`` as :meth:`ConfigBase.from_dict` coerces a field (errors name
    ``where`` and the key; a number that is not finite is one)."""
    out = _coerce(name, tp, value, where)
    check_finite(name, out, where)
    return out


def plain_data(value: Any) -> Any:
    """A field value as plain data: a nested config by its own ``to_dict`` (which may leave out unset keys)."""
    if isinstance(value, ConfigBase):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return value


def config_mapping(cls: type, data: Any, where: str | None = None) -> dict[str, Any]:
    """``data`` as a new dict for ``cls.from_dict`` (``None``: empty); anything but a mapping is a
    :class:`ConfigError` naming ``where`` — not the TypeError or ValueError ``dict()`` would raise. Every
    ``from_dict`` goes through it."""
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__}: {cls.__name__} must be a mapping of its keys (key: value), "
                          f"got {type(data).__name__} {data!r:.80}")
    return dict(data or {})


def _hand_down_plugins(obj: Any, plugins: list[str]) -> None:
    """A config's ``plugins`` added to those of the configs it holds that have the key (its env: which carries them
    to every worker process)."""
    for f in dataclasses.fields(obj):
        values = getattr(obj, f.name)
        for v in values if isinstance(values, (list, tuple)) else [values]:
            if f.name != "plugins" and isinstance(v, ConfigBase) and isinstance(getattr(v, "plugins", None), list):
                v.plugins = list(dict.fromkeys([*plugins, *v.plugins]))  # type: ignore[attr-defined]


class ConfigBase:
    """Mixin for ``@dataclass`` configs: strict ``from_dict``/``from_yaml``, ``to_dict``, CLI flags.

    A config with a ``plugins`` field imports those modules (:mod:`envs.core.plugins`) before its other keys are
    checked — so a plug-in's registered names are valid anywhere in it — and hands them to the configs it holds
    that have the key (an env carries them to every process that rebuilds it)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> typing.Self:
        """Build the config from a mapping; unknown keys raise :class:`ConfigError` naming the key."""
        where = where or cls.__name__
        data = config_mapping(cls, data, where)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = [k for k in data if k not in fields]
        if unknown:
            raise unknown_key_error(where, unknown[0], fields)
        plugins = None
        if "plugins" in fields and data.get("plugins"):  # before any name of the config is checked
            from envs.core.plugins import import_plugins

            plugins = import_plugins(data["plugins"], f"{where}.plugins", ConfigError)
        missing = [n for n, f in fields.items() if f.init and n not in data
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{where}: missing config key '{missing[0]}'")
        kwargs = {k: _coerce(k, hints[k], v, where) for k, v in data.items()}
        for k, v in kwargs.items():  # declared bounds (helpf(ge=…, gt=…)) before anything uses the value
            check_bounds(k, v, fields[k].metadata, where)
        try:
            obj = cls(**kwargs)
        except TypeError as e:
            raise ConfigError(f"{where}: {e}") from e
        if plugins:
            _hand_down_plugins(obj, plugins)
        validate = getattr(obj, "validate", None)
        if callable(validate):  # a validate(where=…) names the key path its errors are about
            validate(where=where) if "where" in inspect.signature(validate).parameters else validate()
        for k, v in kwargs.items():  # no nan / inf anywhere (a validate may say more about its own keys first)
            check_finite(k, v, where)
        return obj

    @classmethod
    def from_yaml(cls, path: str | Path, section: str | None = None) -> typing.Self:
        """Load from a YAML file (optionally one top-level ``section`` of it)."""
        data = read_yaml_mapping(path)
        if section is not None:
            data = data.get(section, {}) or {}
        return cls.from_dict(data, where=f"{path}" + (f":{section}" if section else ""))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON/YAML-serialisable); ``from_dict`` of it rebuilds the config."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return json.loads(json.dumps({f.name: plain_data(getattr(self, f.name)) for f in fields}, default=str))

    def replace(self, **changes: Any) -> typing.Self:
        """Copy with some fields changed (validated like ``from_dict``)."""
        merged = {**self.to_dict(), **changes}
        return type(self).from_dict(merged)

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser, prefix: str = "") -> None:
        """Add one ``--flag`` per scalar field (help text from the field metadata)."""
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            tp = hints[f.name]
            if isinstance(tp, type) and issubclass(tp, ConfigBase):
                continue
            flag = "--" + (prefix + f.name).replace("_", "-")
            kind = tp if tp in (int, float, str) else None
            if tp is bool:
                parser.add_argument(flag, dest=prefix + f.name, default=None, type=cli_bool,
                                    help=f.metadata.get("help", "") + " (true/false)")
            elif kind is not None:
                parser.add_argument(flag, dest=prefix + f.name, default=None, type=kind,
                                    help=f.metadata.get("help", ""))

    @classmethod
    def cli_overrides(cls, ns: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
        """The fields the user set on the command line (for merging over a YAML file)."""
        out = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            v = getattr(ns, prefix + f.name, None)
            if v is not None:
                out[f.name] = v
        return out


def cli_bool(text: str) -> bool:
    """A true/false command-line value (``true``/``false``, ``yes``/``no``, ``1``/``0``); another word is an argparse
    error naming it (it was read as false).

    >>> cli_bool("True"), cli_bool("no")
    (True, False)
    """
    word = text.strip().lower()
    if word not in ("true", "false", "yes", "no", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return word in ("true", "yes", "1")


def parse_set(kv: str, flag: str = "--set", verbatim: tuple[str, ...] = ()) -> tuple[str, Any]:
    """One ``KEY=VALUE`` of a ``--set`` flag: ``(dotted key, value)``, the value read as YAML (``0.1``, ``true``,
    ``[a, b]``) — a key in ``verbatim`` keeps its text. A malformed one is a one-line :class:`ConfigError` naming the
    key and how to write it."""
    import yaml

    key, sep, text = str(kv).partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{flag} expects KEY=VALUE (e.g. {flag} lambda_retrieval=0.2), got {kv!r}")
    if any(not part for part in key.split(".")):
        raise ConfigError(f"{flag} {kv!r}: the key '{key}' has an empty part (write a.b.c)")
    if key in verbatim:
        return key, text
    try:
        return key, yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{flag} {key}={text}: the value is not valid YAML ({problem}); write e.g. "
                          f"{key}='[a, b]' for a list or quote a string") from None


def apply_sets(raw: dict[str, Any], sets: list[str] | tuple[str, ...], where: str, flag: str = "--set",
               verbatim: tuple[str, ...] = ()) -> dict[str, str]:
    """Apply ``--set KEY=VALUE`` overrides to the mapping ``raw`` (a dotted key sets a key of a nested mapping,
    created if missing). Returns {dotted key: the ``KEY=VALUE`` text} for :func:`from_dict_with_sets`'s errors."""
    given: dict[str, str] = {}
    for kv in sets or ():
        key, value = parse_set(kv, flag, verbatim)
        *parents, leaf = key.split(".")
        node: Any = raw
        for i, part in enumerate(parents):
            child = node.get(part)
            if child is None:  # missing or null: a new mapping
                child = node[part] = {}
            if not isinstance(child, dict):
                bad = ".".join(parents[: i + 1])
                raise ConfigError(f"{flag} {kv}: '{bad}' is not a mapping in {where} (it holds {child!r}), so it "
                                  f"has no key '{'.'.join(parents[i + 1:] + [leaf])}'")
            node = child
        node[leaf] = value
        given[key] = kv
    return given


def sets_error(e: ConfigError, given: dict[str, str], flag: str = "--set") -> ConfigError:
    """A config error annotated with the ``--set`` that caused it (the key path it names ends with one the user
    set): the key the user wrote is in the message."""
    import re

    msg = str(e)
    # the key the error is about, not the keys it lists as valid or suggests ("(valid keys: …); did you mean …")
    subject = re.sub(r" \(valid(?: keys)?: [^)]*\)|; did you mean '[^']*'\?", "", msg)
    for key, kv in sorted(given.items(), key=lambda kv: -len(kv[0])):
        parts = key.split(".")
        for i in range(len(parts)):
            tail = re.escape(".".join(parts[i:]))
            if re.search(rf"(?<![\w.]){tail}(?![\w])", subject) or re.search(rf"'{tail}\.", subject):
                return ConfigError(f"{flag} {kv}: {msg}")
    return e


def from_dict_with_sets(cls: type[T], raw: dict[str, Any], sets: list[str] | tuple[str, ...], where: str,
                        flag: str = "--set") -> T:
    """``cls`` from the mapping ``raw`` with ``--set KEY=VALUE`` overrides applied (:func:`apply_sets`); an error
    about a key the user set names that ``--set`` (:func:`sets_error`)."""
    given = apply_sets(raw, sets, where, flag)
    try:
        return cls.from_dict(raw, where=where)
    except ConfigError as e:
        raise sets_error(e, given, flag) from None


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A config file as one mapping, its ``base:`` chain merged (:func:`envs.core.config_files.read_config`: the one
    YAML reader of every config). A missing file, bytes that are not UTF-8 (``file:line``), invalid YAML
    (``file:line:column``), a key given twice (both lines), an empty file, another top level or a bad ``base`` is a
    :class:`ConfigError`."""
    return read_config(path)[0]
