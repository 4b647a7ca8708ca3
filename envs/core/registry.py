"""One name registry for every extension point (the foundation layer: imports nothing of Kairos).

Every pluggable part — reasoners, signals, query modes, retrievers, reward costs, fixed triggers, λ schedules,
tasks, QueryGen rewards, benchmarks — is a :class:`Registry`. They all behave alike:

* ``@REG.register("name")`` (or ``REG.register("name", obj)``) adds an entry; a name registered twice is a
  :class:`DuplicateNameError`, whoever registers it;
* ``REG.get("name")`` returns the entry, ``REG.make("name", **kw)`` calls it; ``"package.module:Attr"`` works
  wherever a name does (the escape hatch for code outside Kairos, as Gymnasium's ``entry_point``);
* an unknown name is an :class:`UnknownNameError` (a ``ValueError``) that lists the registered names and the
  dotted-path hint;
* ``REG.register_path("name", "package.module:Attr")`` adds an entry imported on first use;
* ``REG.names()`` lists the entries (CLI ``choices=`` and config validation read it); ``REG.info("name")`` is
  the metadata an entry declared (e.g. a signal's observation group and scalars).

A registry may name *builtin modules*: they are imported the first time the registry is read, so a lower layer
can name plug-ins that live in a higher one by string — never by import — and ``import envs`` stays fast.

Example:
    >>> GREETERS = Registry("greeter")
    >>> @GREETERS.register("hello", punctuation="!")
    ... def hello(name):
    ...     return f"hello {name}"
    >>> GREETERS.make("hello", name="Ada")
    'hello Ada'
    >>> GREETERS.names(), GREETERS.info("hello")
    (['hello'], {'punctuation': '!'})
    >>> GREETERS.get("textwrap:dedent")("  x")
    'x'
    >>> GREETERS.get("helo")
    Traceback (most recent call last):
    ...
    envs.core.registry.UnknownNameError: unknown greeter 'helo' (registered: hello; or a dotted path 'package.module:Name')
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["DuplicateNameError", "Registry", "RegistryImportError", "UnknownNameError", "import_dotted"]


class UnknownNameError(ValueError):
    """A name that no registry entry has (the message lists the registered names)."""

    def __init__(self, kind: str, name: str, names: list[str], where: str = "", dotted: bool = True):
        self.kind, self.name, self.names = kind, name, list(names)
        listed = ", ".join(names) if names else "none"
        prefix = f"{where}: " if where else ""
        hint = "; or a dotted path 'package.module:Name'" if dotted else ""
        super().__init__(f"{prefix}unknown {kind} '{name}' (registered: {listed}{hint})")


class DuplicateNameError(ValueError):
    """A name registered twice in one registry."""


class RegistryImportError(ValueError):
    """A dotted path ``package.module:Attr`` that does not import."""


def import_dotted(path: str, kind: str = "object") -> Any:
    """The object at ``package.module:Attr`` (``Attr`` may be dotted: ``module:Class.method``)."""
    mod_name, sep, attr = path.partition(":")
    if not sep or not mod_name or not attr:
        raise RegistryImportError(f"{kind} '{path}': a dotted path is 'package.module:Name'")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as e:
        raise RegistryImportError(f"{kind} '{path}': cannot import module '{mod_name}' ({e})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise RegistryImportError(f"{kind} '{path}': cannot import '{attr}' from module '{mod_name}' "
                                      "(no such attribute)") from e
    return obj


class Registry(Generic[T]):
    """A name → entry table for one extension point.

    Args:
        kind: what the entries are, singular ("signal", "reward cost"); used in every message.
        builtins: modules imported on the first read, which register the builtin entries.
        dotted_paths: whether ``"package.module:Attr"`` resolves (on by default).
    """

    def __init__(self, kind: str, *, builtins: tuple[str, ...] = (), dotted_paths: bool = True):
        self.kind = kind
        self._builtins = tuple(builtins)
        self._loaded = not self._builtins
        self._dotted = dotted_paths
        self._entries: dict[str, T] = {}
        self._info: dict[str, dict[str, Any]] = {}
        #: bumped on every change: tables derived from the entries cache on it
        self.version = 0

    # -- writing
    def register(self, name: str, obj: T | None = None, /, **info: Any) -> Any:
        """Add ``obj`` as ``name``; without ``obj``, a decorator that adds what it decorates (and returns it).

        Keyword arguments are the entry's metadata (:meth:`info`)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"{self.kind} name must be a non-empty string without ':', got {name!r}")

        def add(entry: T) -> T:
            if name in self._entries:
                raise DuplicateNameError(f"{self.kind} '{name}' is already registered "
                                         f"({_describe(self._entries[name])}); pick another name")
            self._entries[name] = entry
            self._info[name] = dict(info)
            self.version += 1
            return entry

        return add if obj is None else add(obj)

    def register_path(self, name: str, path: str, /, **info: Any) -> None:
        """Add ``name`` as the object at dotted path ``package.module:Attr``, imported on first use (so naming
        a heavy backend — ColBERT, a benchmark — costs nothing until it is used)."""
        self.register(name, _Lazy(path), **info)  # type: ignore[arg-type]

    def unregister(self, name: str) -> T:
        """Remove ``name`` (tests and notebooks that register a throwaway entry)."""
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self.names(), dotted=self._dotted)
        self._info.pop(name, None)
        self.version += 1
        return self._entries.pop(name)

    # -- reading
    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # before importing: the builtin modules register into this registry
            for mod in self._builtins:
                importlib.import_module(mod)

    def get(self, name: str) -> T:
        """The entry registered as ``name``, or the object at dotted path ``package.module:Attr``."""
        self._load()
        if name in self._entries:
            entry = self._entries[name]
            if isinstance(entry, _Lazy):
                entry = self._entries[name] = import_dotted(entry.path, f"{self.kind} '{name}'")
            return entry
        if self._dotted and isinstance(name, str) and ":" in name:
            return import_dotted(name, self.kind)
        raise UnknownNameError(self.kind, str(name), self.names(), dotted=self._dotted)

    def make(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call the entry ``name`` (a class or a factory) with the given arguments."""
        entry = self.get(name)
        if not callable(entry):
            raise TypeError(f"{self.kind} '{name}' is not callable ({_describe(entry)})")
        return entry(*args, **kwargs)

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        self._load()
        return list(self._entries)

    def info(self, name: str) -> dict[str, Any]:
        """The metadata ``name`` was registered with (empty for a dotted path)."""
        self._load()
        if name not in self._entries:
            if self._dotted and ":" in name:
                return {}
            raise UnknownNameError(self.kind, name, self.names(), dotted=self._dotted)
        return dict(self._info[name])

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._entries.items())

    def check(self, name: str, where: str = "", error: type[Exception] | None = None) -> str:
        """``name`` if it is registered or a dotted path that imports, else :class:`UnknownNameError` (or
        ``error``, e.g. ``ConfigError``) prefixed with ``where`` (the config key) — config validation on the
        driver uses it, so a typo fails before anything starts."""
        try:
            self.get(name)
        except UnknownNameError:
            e: Exception = UnknownNameError(self.kind, str(name), self.names(), where, self._dotted)
            raise (error(str(e)) if error else e) from None
        except RegistryImportError as e:
            msg = f"{where}: {e}" if where else str(e)
            raise (error or RegistryImportError)(msg) from e
        return name

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        state = ", ".join(self._entries) if self._loaded else "builtins not loaded"
        return f"Registry({self.kind!r}: {state})"


class _Lazy:
    """A registered dotted path, imported on first :meth:`Registry.get`."""

    def __init__(self, path: str):
        self.path = path

    def __repr__(self) -> str:
        return self.path


def _describe(obj: Any) -> str:
    if isinstance(obj, _Lazy):
        return obj.path
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{mod}.{qual}" if mod and qual else type(obj).__name__

