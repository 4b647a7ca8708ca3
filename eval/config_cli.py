"""``kairos config``: what a recipe resolves to, and the list of every recipe.

* ``kairos config show FILE`` — the config with its ``base:`` chain merged (:mod:`envs.core.config_files`), each key
  followed by the file that set it; ``--check`` also loads it into its typed config (by the file's kind), so a bad
  key or value fails here, naming it.
* ``kairos config list [--write PAGE]`` — every config under ``configs/``: its parent and its purpose (the first
  comment line), as a Markdown table (the docs' generated page, ``docs/configs.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

#: a config's typed class by its file name's first word (``train_…yaml`` is a TrainConfig)
KINDS = {"train": "train.config:TrainConfig", "bench": "eval.bench.config:BenchConfig",
         "querygen": "policies.querygen.config:QueryGenTrainConfig", "rsus": "train.rsus_fit:RSUSFitConfig",
         "probe": "policies.probes.pipeline:ProbeTrainConfig", "serve": "kairos.config:ServeConfig",
         "suite": "eval.bench.suite:SuiteConfig", "env": "envs.env_config:EnvConfig",
         "microworld": "envs.core.microworld.config:BuildConfig",
         "retriever": "agents.retrievers.colbert_train:ColBERTBuildConfig",
         "detection": "eval.detection.data:DetectionBenchConfig"}


def config_class(path: str | Path):
    """The typed config class of a config file, by the first word of its name — or of the nearest file of its
    ``base:`` chain that has a known kind (a child of ``bench_….yaml`` is a benchmark whatever its own name);
    ``None``: no known kind."""
    import importlib

    spec = None
    for p in _chain(Path(path)):
        stem = p.name.split("_")[0].split(".")[0]
        spec = KINDS.get(stem) or (KINDS["bench"] if p.parent.name == "seed" else None)  # configs/seed/: benchmarks
        if spec is not None:
            break
    if spec is None:
        return None
    mod, _, name = spec.partition(":")
    return getattr(importlib.import_module(mod), name)


def load_typed(path: str | Path):
    """The config at ``path`` loaded into its typed class (its base chain merged; the env presets applied where its
    class does); ``None`` when its kind is unknown."""
    from envs.core.config import read_yaml_mapping

    cls = config_class(path)
    if cls is None:
        return None
    if cls.__name__ == "EnvConfig":
        from envs.env_config import env_config_from_file

        return env_config_from_file(path)
    return cls.from_dict(read_yaml_mapping(path), where=str(path))


def show(path: str | Path, check: bool = False) -> str:
    """The resolved config as YAML, each leaf annotated with the file that set it."""
    import yaml

    from envs.core.config_files import read_config

    data, sources = read_config(path)
    chain = _chain(Path(path))
    lines = [f"# {path}" + (f"  (base chain: {' <- '.join(str(p) for p in chain[1:])})" if len(chain) > 1 else "")]
    width = 0
    body = []
    for key, value in _flat(data):
        text = f"{key}: {yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()}"
        if text.endswith("\n..."):
            text = text[:-4]
        body.append((text.replace("\n...", ""), sources.get(key, "?")))
        width = max(width, len(body[-1][0]))
    width = min(width, 64)  # a long value (a benchmark's methods) runs on; the short ones stay aligned
    lines += [f"{t.ljust(width)}  # {src}" for t, src in body]
    if check:
        cfg = load_typed(path)
        lines.append(f"# loads as {type(cfg).__name__}" if cfg is not None else "# (no typed class for this kind of "
                     "file: not checked)")
    return "\n".join(lines) + "\n"


def _flat(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict) and data:
        out = []
        for k, v in data.items():
            out += _flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [(prefix, data)]


def _chain(path: Path) -> list[Path]:
    """``path`` and its ancestors, nearest first."""
    from envs.core.config_files import BASE_KEY, read_yaml_strict, resolve_base

    out = [path]
    while True:
        raw = read_yaml_strict(out[-1])
        if BASE_KEY not in raw or len(out) > 50:
            return out
        out.append(resolve_base(raw[BASE_KEY], out[-1]))


def purpose(path: Path) -> str:
    """A config's purpose: its leading comment lines up to the first blank or key line, joined."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        text = s.lstrip("#").strip()
        if not text or text.startswith(("kairos ", "python ", "make ")):
            break
        words.append(text)
    return " ".join(words)


def listing(root: str | Path = "configs") -> str:
    """Every config under ``root`` as a Markdown table: file, parent, purpose."""
    from envs.core.config_files import BASE_KEY, read_yaml_strict

    root = Path(root)
    rows = ["| config | parent | purpose |", "|---|---|---|"]
    for p in sorted(root.rglob("*.yaml")):
        parent = read_yaml_strict(p).get(BASE_KEY)
        text = purpose(p).replace("|", "\\|")
        rows.append(f"| `{p.as_posix()}` | {f'`{parent}`' if parent else '–'} | {text} |")
    return ("# Configs\n\nEvery recipe under `configs/`, generated by `kairos config list --write docs/configs.md`: "
            "the file, the parent it states its difference from (`base:`), and its purpose (its first comment). "
            "`kairos config show FILE` prints what a recipe resolves to, key by key, with the file that set each.\n\n"
            + "\n".join(rows) + "\n")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="what a recipe resolves to (its base chain merged), and every recipe")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = verbs.add_parser("show", help="the config with its base chain merged, each key with the file that set it")
    s.add_argument("file", help="a config YAML")
    s.add_argument("--check", action="store_true", help="also load it into its typed config (errors name the key)")
    s.set_defaults(func=lambda a: print(show(a.file, a.check), end="") or 0)
    ls = verbs.add_parser("list", help="every config under configs/ with its parent and purpose (Markdown)")
    ls.add_argument("--root", default="configs", help="the folder to list")
    ls.add_argument("--write", default=None, metavar="PAGE", help="write the table to this file (atomically)")
    ls.set_defaults(func=_list)


def _list(args) -> int:
    text = listing(args.root)
    if args.write:
        from envs.core.io import write_text

        write_text(args.write, text)
        print(f"wrote {args.write}")
    else:
        print(text, end="")
    return 0
