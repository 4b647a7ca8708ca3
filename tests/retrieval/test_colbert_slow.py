"""ColBERT/PLAID end to end on CPU: train a tiny checkpoint, index 50 passages, search, checks, CLI.

Slow: the first run on a machine compiles colbert's four C++ extensions (minutes; CI does it once per run,
under ``<repo>/.torch_extensions`` or ``$TORCH_EXTENSIONS_DIR``).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agents.retrievers import IndexCorruptError, IndexMismatchError, build_index, load_index
from agents.retrievers.index import probe_query
from envs.core.data.types import Corpus, Passage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not importlib.util.find_spec("colbert"), reason="colbert-ai not installed"),
    # triple mining uses the default BM25 (stemmed)
    pytest.mark.skipif(not importlib.util.find_spec("Stemmer"), reason="PyStemmer missing (retrieval extra)"),
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A ColBERT checkpoint trained for 2 steps on micro-world triples (a real, saved ColBERT checkpoint)."""
    from agents.retrievers.colbert_train import ColBERTTrainConfig, train_colbert

    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    report = train_colbert(ColBERTTrainConfig(out=str(out), hotpotqa="none", micro_share=1.0, steps=2, bsize=4,
                                              doc_maxlen=32), progress=False)
    assert report["steps"] == 2 and len(report["losses"]) == 2
    assert (out / "artifact.metadata").is_file() and (out / "kairos_train.json").is_file()
    return out


@pytest.fixture(scope="module")
def small_corpus(micro_corpus):
    return Corpus.from_passages(micro_corpus[:50], source="micro50")


@pytest.fixture(scope="module")
def index(tmp_path_factory, checkpoint, small_corpus):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("colbert") / "idx"
    manifest = build_index("colbert", small_corpus, out, {"checkpoint": str(checkpoint), "doc_maxlen": 32},
                           probe_n=3, probe_k=5)
    assert manifest["probe"]["ranks"] and all(r is not None for r in manifest["probe"]["ranks"])
    assert manifest["config"]["nbits"] == 2 and manifest["config"]["checkpoint"] == str(checkpoint)
    return out


def test_search_batched_and_by_own_text(index, small_corpus):
    r = load_index(index, small_corpus)
    assert len(r) == 50 and r.backend_size() == 50 and r.describe()["kind"] == "colbert"
    queries = [probe_query(p) for p in small_corpus[:8]]
    batched = r.search(queries, k=5)
    assert [len(h) for h in batched] == [5] * 8
    single = [r.search([q], k=5)[0] for q in queries]
    assert [[p.id for p in h] for h in batched] == [[p.id for p in h] for h in single]
    found = sum(p.id in [h.id for h in hits] for p, hits in zip(small_corpus[:8], batched))
    assert found >= 7  # a passage's own title + sentence finds it
    for hits in batched:
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_settings_exposed(index, small_corpus):
    r = load_index(index, small_corpus, ncells=4, centroid_score_threshold=0.3, ndocs=64)
    assert (r.config.ncells, r.config.centroid_score_threshold, r.config.ndocs) == (4, 0.3, 64)
    assert len(r.search(["Belsheth 's mother"], k=3)[0]) == 3


def test_changed_corpus_and_changed_checkpoint(index, small_corpus, checkpoint, tmp_path):
    edited = Corpus.from_passages([*small_corpus[:49], Passage(small_corpus[49].id, "X", "changed text")])
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        load_index(index, edited)
    import shutil

    other = tmp_path / "other-ckpt"
    shutil.copytree(checkpoint, other)
    meta = json.loads((other / "config.json").read_text())
    meta["_kairos_test"] = 1
    (other / "config.json").write_text(json.dumps(meta))
    with pytest.raises(IndexMismatchError, match="other weights"):
        load_index(index, small_corpus, checkpoint=str(other))


def test_broken_index(index, small_corpus, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(index, broken)
    codes = broken / "plaid" / "0.codes.pt"
    codes.write_bytes(b"\0" * codes.stat().st_size)  # same size, unreadable
    with pytest.raises(IndexCorruptError):
        load_index(broken, small_corpus)
    (broken / "plaid" / "centroids.pt").unlink()
    with pytest.raises(IndexCorruptError, match="missing"):
        load_index(broken, small_corpus)


def test_raw_model_folder_refused(tmp_path, small_corpus):
    from agents.retrievers.colbert_compat import minilm_dir

    with pytest.raises(ValueError, match="not a ColBERT checkpoint"):
        build_index("colbert", small_corpus, tmp_path / "raw", {"checkpoint": str(minilm_dir())})


def test_cli_build_and_search(tmp_path, checkpoint, kairos):
    out = tmp_path / "cli-colbert"
    kairos("index", "build", "--retriever", "colbert", "--corpus", "microworld", "--checkpoint", str(checkpoint),
           "--doc-maxlen", "32", "--out", str(out))
    p = kairos("index", "search", "--index", str(out), "-k", "3", "--json", "--ncells", "2",
               "Belsheth 's mother is Mumdril .")
    hits = json.loads(p.stdout)[0]["results"]
    assert len(hits) == 3 and "Belsheth" in " ".join(h["text"] for h in hits)
    assert "passed" in kairos("index", "info", "--index", str(out), "--check").stdout
    # the same index serves the micro-world env (kairos/MicroWorld-v0 with retriever colbert)
    import gymnasium as gym

    import envs  # noqa: F401

    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "retriever": "colbert", "index_path": str(out)}).unwrapped
    env.reset(options={"question_index": 0})
    _, _, _, _, info = env.step(1)
    assert info["costs"]["retrieval_calls"] == 1.0 and info["passage_ids"]
    with pytest.raises(ValueError, match="holds a 'colbert' index but retriever is 'bm25'"):
        gym.make("kairos/MicroWorld-v0", config={"retriever": "bm25", "index_path": str(out)})
