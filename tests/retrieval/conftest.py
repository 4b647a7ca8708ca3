"""Fixtures of the retrieval tests: small corpora and BM25 indexes built in temporary directories."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envs.core.data.types import Corpus, Passage

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

#: PyStemmer is a dependency of the retrieval extra; without it the tests index unstemmed
STEMMER = "english" if importlib.util.find_spec("Stemmer") else "none"

CAPITALS = [
    Passage("p-paris", "Paris", "Paris is the capital and largest city of France. It lies on the Seine."),
    Passage("p-rome", "Rome", "Rome is the capital city of Italy. It was founded in 753 BC."),
    Passage("p-berlin", "Berlin", "Berlin is the capital of Germany. The Berlin Wall fell in 1989."),
    Passage("p-seine", "Seine", "The Seine is a river that flows through Paris into the English Channel."),
    Passage("p-tiber", "Tiber", "The Tiber is the river of Rome. It rises in the Apennine mountains."),
    Passage("p-spree", "Spree", "The Spree is a river in eastern Germany that flows through Berlin."),
]


@pytest.fixture
def capitals() -> Corpus:
    """Six hand-written passages."""
    return Corpus.from_passages(CAPITALS, source="capitals")


@pytest.fixture(scope="module")
def micro_corpus() -> Corpus:
    """The micro-world fact corpus (seed 0, 328 facts)."""
    from agents.retrievers.corpus_spec import load_corpus

    return load_corpus("microworld")


@pytest.fixture
def bm25_cfg():
    from agents.retrievers.bm25 import BM25Config

    return BM25Config(stemmer=STEMMER)


@pytest.fixture
def stemmer() -> str:
    """The BM25 stemmer the tests index with."""
    return STEMMER


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def _kairos(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "eval", *args], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"kairos {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture(scope="session")
def kairos():
    """Run ``python -m eval ARGS`` (the ``kairos`` CLI) in a subprocess; raises on a non-zero exit by default."""
    return _kairos
