"""Config files: the one YAML reader every config goes through, and recipes that name a parent.

:func:`read_config` reads a YAML file strictly — a key given twice in one mapping is an error naming both lines (YAML
itself keeps the last one without a word), an empty file is an error (it would silently run every default), bytes
that are not UTF-8 are named with their line — and resolves **inheritance**: a file may name a parent recipe with
``base: FILE`` and state only what differs.

* ``base`` is a path as every path in a config is: relative to the working directory (the repository root, where
  commands run) — or, when nothing is there, to the folder of the file that names it. A parent may name its own
  parent; a cycle is an error.
* Merging: a mapping in the child is merged key by key into the parent's mapping (``env_config: {seed: 1}`` changes
  one key of the parent's env); any other value — a number, a string, a list — replaces the parent's. ``KEY+: [...]``
  appends to the parent's list ``KEY`` (a benchmark adding a row to its parent's ``methods``); ``KEY-: [...]`` removes
  from it the entries named (a mapping by its ``name``, anything else by its value) — before any ``KEY+`` of the same
  file; a name the parent's list does not hold is an error, and so is ``KEY`` beside ``KEY+`` / ``KEY-`` in one
  mapping (the list would replace the parent's and the edit be lost).
* :func:`read_config` returns the merged mapping and, for every leaf key path, the file that set it
  (``kairos config show FILE`` prints both).

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "parent.yaml").write_text("iterations: 50\\nalgo: {lr: 0.001, baseline: value}\\nseeds: [0]\\n")
    >>> _ = (d / "child.yaml").write_text(f"base: {d / 'parent.yaml'}\\nalgo: {{lr: 0.01}}\\nseeds+: [1, 2]\\n"
    ...                                   "seeds-: [0]\\n")
    >>> data, sources = read_config(d / "child.yaml")
    >>> data
    {'iterations': 50, 'algo': {'lr': 0.01, 'baseline': 'value'}, 'seeds': [1, 2]}
    >>> sources["algo.lr"].endswith("child.yaml"), sources["algo.baseline"].endswith("parent.yaml")
    (True, True)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

__all__ = ["BASE_KEY", "ConfigError", "read_config", "read_yaml_strict", "resolve_base"]


class ConfigError(ValueError):
    """A config file or dict does not match its dataclass (unknown key, wrong type, bad value); defined here, the
    lowest config module, and re-exported by :mod:`envs.core.config`."""

#: the key that names a config's parent recipe
BASE_KEY = "base"
#: a key ending in this appends its list to the parent's list of the key without it
APPEND = "+"
#: a key ending in this removes the entries it names from the parent's list of the key without it
REMOVE = "-"


def _loader(path: Path):
    """A safe YAML loader class that refuses a key given twice in one mapping (naming both lines)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # YAML's `<<:` merge key: no duplicate of its own
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first is not None:
                raise ConfigError(f"{path}:{line}: key {key!r} is given twice in one mapping (lines {first} and "
                                  f"{line}); YAML would keep the last one silently — delete one of them")
            seen[key] = line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


def read_yaml_strict(path: str | Path) -> dict[str, Any]:
    """One YAML file whose top level is a mapping, read strictly (no inheritance resolved): a missing file, bytes
    that are not UTF-8 (named ``file:line``), invalid YAML (``file:line:column``), a key given twice (both lines),
    an empty file or another top level is a :class:`ConfigError`."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file (give the path of a YAML file)")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{path}:{line}:{col}: not UTF-8 (byte 0x{raw[e.start]:02x}); save the file as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_loader(path))  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(e, 'problem', None) or e})") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty (no keys); a config states at least what it runs — an empty "
                          "one would run every default without a word")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def resolve_base(name: Any, child: Path) -> Path:
    """The file a ``base:`` value names: relative to the working directory, else to the child's folder."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{child}: '{BASE_KEY}' must name a parent config file, got {name!r}")
    p = Path(name)
    tried = [p] if p.is_absolute() else [p, child.parent / p]
    for t in tried:
        if t.is_file():
            return t
    folders = [t for t in tried if t.is_dir()]
    if folders:
        raise ConfigError(f"{child}: base {name!r} is a folder ({folders[0]}), not a config file; name the parent "
                          "recipe's YAML file, e.g. base: configs/train_microworld_rsus_verb_ent.yaml")
    raise ConfigError(f"{child}: base {name!r} not found (tried {', '.join(str(t) for t in tried)}); name the "
                      "parent recipe by its path from the repository root, e.g. base: configs/experiments/microworld/train_microworld.yaml")


def read_config(path: str | Path, _chain: tuple[Path, ...] = ()) -> tuple[dict[str, Any], dict[str, str]]:
    """The config at ``path`` with its ``base`` chain merged (see the module docstring): ``(mapping, sources)`` where
    ``sources`` maps every leaf key path (``algo.lr``; a list is one leaf) to the file that set it."""
    path = Path(path)
    data = read_yaml_strict(path)
    here = path.resolve()
    if here in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, here))
        raise ConfigError(f"{path}: '{BASE_KEY}' makes a cycle ({cycle})")
    if BASE_KEY not in data:
        _check_appends(data, path)
        return data, {k: str(path) for k in _leaves(data)}
    parent_path = resolve_base(data.pop(BASE_KEY), path)
    merged, sources = read_config(parent_path, (*_chain, here))
    _merge(merged, sources, data, path, "")
    return merged, sources


def _check_appends(data: dict, path: Path, prefix: str = "") -> None:
    """``KEY+`` / ``KEY-`` need a parent list to change: an error where ``data`` has none."""
    for k, v in data.items():
        if isinstance(k, str) and k.endswith((APPEND, REMOVE)):
            verb = "appends to" if k.endswith(APPEND) else "removes from"
            raise ConfigError(f"{path}: '{prefix}{k}' {verb} the parent's list '{prefix}{k[:-1]}', but this file "
                              f"names no parent ('{BASE_KEY}: FILE'); write '{k[:-1]}:' instead")
        if isinstance(v, dict):
            _check_appends(v, path, f"{prefix}{k}.")


def _merge(into: dict, sources: dict[str, str], child: dict, path: Path, prefix: str) -> None:
    """Merge ``child`` into ``into`` in place (mappings key by key, anything else replaced, ``KEY-`` removed from and
    then ``KEY+`` appended to the parent's list)."""
    for k in child:  # `KEY:` beside `KEY+:` / `KEY-:` in one mapping: which applies first is not written anywhere
        if isinstance(k, str) and k.endswith((APPEND, REMOVE)) and k[:-1] in child:
            raise ConfigError(f"{path}: '{prefix}{k[:-1]}' and '{prefix}{k}' are both given: '{prefix}{k[:-1]}:' "
                              f"replaces the parent's list, so '{prefix}{k}' would be lost or applied to this file's "
                              f"own list — keep one (put every entry in '{prefix}{k[:-1]}:', or edit the parent's "
                              f"list with '{prefix}{k[:-1]}-:' / '{prefix}{k[:-1]}+:' only)")
    removals_first = sorted(child.items(), key=lambda kv: not (isinstance(kv[0], str) and kv[0].endswith(REMOVE)))
    for k, v in removals_first:
        key = f"{prefix}{k}"
        if isinstance(k, str) and k.endswith((APPEND, REMOVE)):
            name, verb = k[:-1], ("appends to" if k.endswith(APPEND) else "removes from")
            old = into.get(name)
            if not isinstance(v, list):
                raise ConfigError(f"{path}: '{key}' {verb} the parent's list '{prefix}{name}': its value must be "
                                  f"a list, got {type(v).__name__}")
            if not isinstance(old, list):
                held = "has no such key" if name not in into else f"holds a {type(old).__name__} there"
                raise ConfigError(f"{path}: '{key}' {verb} the parent's list '{prefix}{name}', but the parent "
                                  f"{held}; write '{name}:' to set it")
            into[name] = old + copy.deepcopy(v) if k.endswith(APPEND) else _without(old, v, path, key)
            sources[f"{prefix}{name}"] = f"{sources.get(prefix + name, '?')} {k[-1]} {path}"
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], sources, v, path, f"{key}.")
        else:
            if isinstance(v, dict):  # a new mapping: nothing below it to append to
                _check_appends(v, path, f"{key}.")
            for old_leaf in [s for s in sources if s == key or s.startswith(f"{key}.")]:
                del sources[old_leaf]
            into[k] = copy.deepcopy(v)
            for leaf in _leaves(v, f"{key}") if isinstance(v, dict) else [key]:
                sources[leaf] = str(path)


def _entry_name(entry: Any) -> Any:
    """What ``KEY-`` matches an entry by: a mapping's ``name``, anything else itself."""
    return entry.get("name") if isinstance(entry, dict) else entry


def _without(entries: list, names: list, path: Path, key: str) -> list:
    """``entries`` less those ``names`` names; a name no entry has is an error listing the names there are."""
    held = [_entry_name(e) for e in entries]
    missing = [n for n in names if n not in held]
    if missing:
        raise ConfigError(f"{path}: '{key}' removes {missing}, but the parent's list holds no such entry (it holds "
                          f"{held}); give the names exactly as the parent writes them")
    return [e for e in entries if _entry_name(e) not in names]


def _leaves(data: Any, prefix: str = "") -> list[str]:
    """The leaf key paths of a mapping (a non-empty mapping is not a leaf; an empty one is)."""
    if isinstance(data, dict) and data:
        out = []
        for k, v in data.items():
            out += _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [prefix] if prefix else []
