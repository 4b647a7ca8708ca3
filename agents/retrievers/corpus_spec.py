"""``--corpus`` specs: one string names every corpus an index can be built from.

- ``microworld`` (or ``microworld:SEED``): the micro-world fact corpus of ``WorldConfig(seed=SEED)``
  (default seed 0, 328 fact sentences).
- ``DATASET:PATH`` for a dataset with a paragraph corpus (``hotpotqa``, ``musique``, ``2wikimultihopqa``,
  ``pubmedqa``): the deduplicated union of the paragraphs of the questions in ``PATH``.
- ``flashrag:PATH`` or a bare ``PATH`` to a ``.jsonl`` file: a FlashRAG corpus (``{"id", "contents"}``).

:func:`canonical_spec` makes paths absolute, so the spec stored in an index manifest still resolves when
the index is used from another working directory.

Example:
    >>> canonical_spec("microworld")
    'microworld:0'
    >>> len(load_corpus("microworld"))
    328
"""

from __future__ import annotations

from pathlib import Path

from envs.core.data.types import Corpus

SPEC_HELP = ("corpus: 'microworld[:SEED]', 'DATASET:PATH' (union of the paragraphs of a question file; "
             "DATASET in hotpotqa, musique, 2wikimultihopqa, pubmedqa), or 'flashrag:PATH' / PATH.jsonl "
             "(FlashRAG corpus)")


def parse_spec(spec: str) -> tuple[str, str]:
    """``(kind, argument)`` of a spec: ``("flashrag", PATH)``, ``("hotpotqa", PATH)``, ``("microworld", SEED)``."""
    spec = spec.strip()
    if not spec:
        raise ValueError(f"empty corpus spec ({SPEC_HELP})")
    if spec.lower() == "microworld":
        return "microworld", "0"
    head, sep, rest = spec.partition(":")
    if sep and head.lower() in _kinds() and not (len(head) == 1 and head.isalpha()):  # not "C:\\..."
        return head.lower(), rest
    if spec.endswith(".jsonl") or spec.endswith(".json"):
        return "flashrag", spec
    raise ValueError(f"unknown corpus spec '{spec}' ({SPEC_HELP})")


def _kinds() -> set[str]:
    from envs.core.data.corpora import CORPUS_BUILDERS

    return {"microworld", "flashrag", *CORPUS_BUILDERS.names()}


def canonical_spec(spec: str) -> str:
    """``spec`` with its kind lower-cased and its path absolute (``microworld`` -> ``microworld:0``)."""
    kind, arg = parse_spec(spec)
    if kind == "microworld":
        return f"microworld:{int(arg)}"
    return f"{kind}:{Path(arg).expanduser().resolve()}"


def load_corpus(spec: str) -> Corpus:
    """Build the corpus a spec names (see the module docstring).

    Raises:
        ValueError: An unknown spec.
        FileNotFoundError: A path that does not exist.
    """
    kind, arg = parse_spec(spec)
    if kind == "microworld":
        from envs.core.microworld.config import WorldConfig
        from envs.core.microworld.corpus import fact_corpus
        from envs.core.microworld.kb import KnowledgeBase

        try:
            seed = int(arg)
        except ValueError as e:
            raise ValueError(f"microworld corpus spec wants an integer seed, got '{arg}'") from e
        return fact_corpus(KnowledgeBase.generate(WorldConfig(seed=seed)))
    path = Path(arg).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path} (from corpus spec '{spec}')")
    if kind == "flashrag":
        from envs.core.data.loaders import load_flashrag_corpus

        return load_flashrag_corpus(path)
    from envs.core.data.corpora import CORPUS_BUILDERS
    from envs.core.data.loaders import load_dataset

    return CORPUS_BUILDERS.make(kind, load_dataset(kind, path), source=canonical_spec(spec))
