"""Dataset loaders: one function per published file format, each returning :class:`LoadResult`.

A :class:`LoadResult` *is* a ``list[QAExample]`` (a list subclass) that also carries how many records were
skipped (``skipped``, ``skipped_at``) and which file format was detected (``fmt``).

Every loader checks what it reads: a malformed JSON line, a missing or mistyped field, an empty file, a
duplicate id all raise :class:`~envs.core.data.errors.DataFormatError` naming the file, the 1-based line (JSON
Lines) or record (whole-file JSON) and the field. With ``skip_bad_lines=True`` a bad record is logged as a
warning and counted in ``LoadResult.skipped`` instead; problems with the whole file (empty, not JSON at
all) always raise. Blank lines in JSON Lines files are not records and are ignored.

Formats (see ``/work/shared/data/SOURCES.md`` and each function's docstring):

- ``hotpotqa``: IRCoT JSON Lines (``question_id``, ``question_text``, ``answers_objects``, ``contexts``) or
  the original HotpotQA JSON list (``_id``, ``question``, ``answer``, ``supporting_facts``, ``context``).
  ``musique`` and ``2wikimultihopqa`` read their original schemas and the IRCoT format too.
- ``medmcqa``, ``medqa``, ``mmlu_pro``: multiple choice, JSON Lines (a JSON list works too).
- ``pubmedqa``: one JSON object keyed by PMID.
- ``flashrag``: FlashRAG questions JSON Lines (``id``, ``question``, ``golden_answers``, ``choices``).

Datasets that carry paragraphs store them in ``metadata["paragraphs"]`` as
``{"id", "title", "text", "is_supporting"}`` dicts (the corpus builders in :mod:`envs.core.data.corpora` read
them); ``gold_passage_ids`` are the ids of the supporting ones. Multi-hop paragraph text is
whitespace-normalised (runs of spaces/newlines -> one space), so the IRCoT and original HotpotQA files give
the same passage ids. Fields a loader does not interpret are kept in ``metadata`` under their file names.

Example:
    >>> qs = load_dataset("hotpotqa", shared_data_dir() / "hotpotqa/dev_500.jsonl")  # doctest: +SKIP
    >>> len(qs), qs.skipped, qs[0].answers  # doctest: +SKIP
    (500, 0, ['Chief of Protocol'])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from envs.core.data.choice import load_medmcqa, load_medqa, load_mmlu, load_mmlu_pro, load_pubmedqa
from envs.core.data.errors import UnknownDatasetError
from envs.core.data.flashrag import load_flashrag, load_flashrag_corpus, write_flashrag
from envs.core.data.multihop import load_2wikimultihopqa, load_hotpotqa, load_musique
from envs.core.data.records import YES_NO_MAYBE, LoadResult
from envs.core.registry import Registry

__all__ = ["LOADERS", "YES_NO_MAYBE", "LoadResult", "Loader", "load_2wikimultihopqa", "load_dataset", "load_flashrag",
           "load_flashrag_corpus", "load_hotpotqa", "load_medmcqa", "load_medqa", "load_mmlu", "load_mmlu_pro",
           "load_musique", "load_pubmedqa", "resolve_dataset", "shared_data_dir", "write_flashrag"]


def shared_data_dir() -> Path:
    """Where the shared real data files live: ``$KAIROS_SHARED_DATA``, else ``<repo>/../shared/data``.

    The directory may not exist (tests that need it skip); files inside are read-only inputs.
    """
    env = os.environ.get("KAIROS_SHARED_DATA")
    if env:
        return Path(env).expanduser()
    return (Path(__file__).resolve().parents[3] / ".." / "shared" / "data").resolve()


Loader = Callable[..., LoadResult]

#: dataset name -> loader ``fn(path, skip_bad_lines=False, limit=None) -> LoadResult``
LOADERS: Registry[Loader] = Registry("dataset", dotted_paths=False)
for _name, _loader in (("hotpotqa", load_hotpotqa), ("musique", load_musique),
                       ("2wikimultihopqa", load_2wikimultihopqa), ("medmcqa", load_medmcqa), ("medqa", load_medqa),
                       ("mmlu_pro", load_mmlu_pro), ("mmlu", load_mmlu), ("pubmedqa", load_pubmedqa),
                       ("flashrag", load_flashrag)):
    LOADERS.register(_name, _loader)


def resolve_dataset(name: str) -> str:
    """The registry name for ``name`` (case-insensitive, ``-`` = ``_``).

    Raises:
        UnknownDatasetError: Naming the valid datasets.
    """
    key = name.strip().lower().replace("-", "_")
    if key not in LOADERS:
        raise UnknownDatasetError("dataset", name, sorted(LOADERS.names()), dotted=False)
    return key


def load_dataset(name: str, path: str | Path, skip_bad_lines: bool = False,
                 limit: int | None = None) -> LoadResult:
    """Load the questions of dataset ``name`` from ``path``.

    Args:
        name: A key of :data:`LOADERS` (case-insensitive; ``mmlu-pro`` works too).
        path: The file.
        skip_bad_lines: Log and skip bad records (counted in ``result.skipped``) instead of raising.
        limit: Keep only the first ``limit`` good examples.

    Returns:
        The examples as a :class:`LoadResult` (a ``list[QAExample]``).

    Raises:
        UnknownDatasetError: ``name`` is not registered.
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: The file is malformed (file, line/record and field in the message).
    """
    return LOADERS.get(resolve_dataset(name))(Path(path), skip_bad_lines=skip_bad_lines, limit=limit)
