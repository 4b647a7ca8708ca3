"""MkDocs hooks (``hooks:`` in mkdocs.yml): a config class's fields as a table, generated from the code.

A line ``<!-- config-fields: package.module:Class -->`` in a page becomes a Markdown table of the dataclass's fields
— key, type, default and the help text every field carries (``helpf``) — so the reference lists every YAML key
with what the CLI's ``--help`` says about it.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's packages, installed or not

MARKER = re.compile(r"^<!-- config-fields: ([\w.]+):(\w+) -->$", re.MULTILINE)


def _type_name(tp) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", None) or str(tp)
    return re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]\w*)", r"\1", str(text).replace("typing.", ""))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return "(its defaults)"
    else:
        return "required"
    return f"`{value!r}`"


def fields_table(path: str, name: str) -> str:
    """The Markdown table of ``path:name``'s dataclass fields."""
    cls = getattr(importlib.import_module(path), name)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a forward reference the module does not import at run time: the annotation as written
        hints = {}
    rows = ["| key | type | default | what it is |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        help_text = " ".join(str(f.metadata.get("help", "")).split()).replace("|", "\\|").replace("[", "\\[").replace("<", "&lt;")
        rows.append(f"| `{f.name}` | `{_type_name(hints.get(f.name, f.type))}` | "
                    f"{_default(f).replace('|', chr(92) + '|')} | {help_text} |")
    return f"**`{name}` keys** (`{path}.{name}`):\n\n" + "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, **kwargs) -> str:
    return MARKER.sub(lambda m: fields_table(m.group(1), m.group(2)), markdown)


#: a Sphinx role the docstrings use (``:class:`~envs.env_config.EnvConfig```) as the rendered page has it
ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html: str, **kwargs) -> str:
    """The docstrings' Sphinx roles as plain code (``~`` keeps the last name, as Sphinx does)."""
    return ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)
