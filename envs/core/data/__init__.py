"""Kairos data layer: QA dataset loaders, corpora and their value types (stdlib only; imports are cheap).

Example:
    >>> from envs.core.data import LOADERS, QAExample
    >>> sorted(LOADERS)[:3]
    ['2wikimultihopqa', 'flashrag', 'hotpotqa']
"""

from envs.core.data.corpora import (
    CORPUS_BUILDERS,
    medmcqa_knowledge_corpus,
    paragraph_corpus,
    pubmedqa_corpus,
    strip_answer_leaks,
)
from envs.core.data.errors import CorpusError, DataFormatError, UnknownDatasetError
from envs.core.data.loaders import (
    LOADERS,
    LoadResult,
    load_dataset,
    load_flashrag_corpus,
    write_flashrag,
)
from envs.core.data.types import Corpus, Passage, QAExample, passage_id

__all__ = [
    "CORPUS_BUILDERS",
    "LOADERS",
    "Corpus",
    "CorpusError",
    "DataFormatError",
    "LoadResult",
    "Passage",
    "QAExample",
    "UnknownDatasetError",
    "load_dataset",
    "load_flashrag_corpus",
    "medmcqa_knowledge_corpus",
    "paragraph_corpus",
    "passage_id",
    "pubmedqa_corpus",
    "strip_answer_leaks",
    "write_flashrag",
]
