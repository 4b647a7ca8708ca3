"""Index management: manifest, corpus checks, broken-index checks, missing-index messages, corpus specs."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest

from agents.retrievers import (
    IndexCorruptError,
    IndexMismatchError,
    IndexMissingError,
    build_index,
    index_info,
    load_index,
)
from agents.retrievers.corpus_spec import canonical_spec, load_corpus
from agents.retrievers.index import MANIFEST, probe_positions, probe_query
from envs.core.data.types import Corpus, Passage

STEMMER = "english" if importlib.util.find_spec("Stemmer") else "none"


@pytest.fixture
def built(tmp_path, capitals):
    out = tmp_path / "idx"
    manifest = build_index("bm25", capitals, out, {"stemmer": STEMMER}, probe_n=3)
    return out, manifest


def test_build_writes_manifest_and_loads(built, capitals):
    out, manifest = built
    assert (out / MANIFEST).is_file() and manifest == index_info(out)
    assert manifest["kind"] == "bm25" and manifest["n_docs"] == 6
    assert manifest["corpus"]["fingerprint"] == capitals.fingerprint()
    assert manifest["probe"]["ranks"] == [1, 1, 1] and len(manifest["probe"]["ids"]) == 3
    assert manifest["size_bytes"] == sum(manifest["files"].values()) > 0
    r = load_index(out, capitals)
    assert r.search(["capital of France"], k=1)[0][0].id == "p-paris"
    assert r.describe()["index_id"] == manifest["index_id"]


def test_missing_index_names_the_build_command(tmp_path):
    with pytest.raises(IndexMissingError, match="kairos index build --retriever"):
        load_index(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "junk").write_text("x")
    with pytest.raises(IndexMissingError, match="unfinished"):
        load_index(tmp_path / "half")


def test_changed_corpus_is_an_error_not_stale_results(built, capitals):
    out, _ = built
    edited = Corpus.from_passages([*capitals[:5], Passage("p-spree", "Spree", "The Spree is a river.")])
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        load_index(out, edited)
    shorter = Corpus.from_passages(capitals[:5])
    with pytest.raises(IndexMismatchError, match="holds 6 passages but the corpus"):
        load_index(out, shorter)
    reordered = Corpus.from_passages(list(reversed(list(capitals))))
    with pytest.raises(IndexMismatchError):
        load_index(out, reordered)


def test_deleted_or_resized_file(built, capitals):
    out, manifest = built
    victim = next(f for f in manifest["files"] if f.endswith("vocab.index.json"))
    (out / victim).write_text((out / victim).read_text() + " ")
    with pytest.raises(IndexCorruptError, match="bytes"):
        load_index(out, capitals)
    (out / victim).unlink()
    with pytest.raises(IndexCorruptError, match="missing"):
        load_index(out, capitals)


def test_same_size_edit_is_caught_by_the_content_hash(built, capitals):
    out, manifest = built
    data = next(out / f for f in manifest["files"] if f.endswith("data.csc.index.npy"))
    arr = np.load(data)
    arr[0] *= 1.5  # same size, one score edited: the probe still passes, the ranking differs
    np.save(data, arr)
    with pytest.raises(IndexCorruptError, match="changed since the build \\(content hash differs, same size\\)"):
        load_index(out, capitals)


def test_same_size_damage_is_caught_by_the_probe_without_hashes(built, capitals):
    out, manifest = built
    m = json.loads((out / MANIFEST).read_text())
    del m["sha256"]  # a manifest written before content hashes
    (out / MANIFEST).write_text(json.dumps(m))
    data = next(out / f for f in manifest["files"] if f.endswith("data.csc.index.npy"))
    arr = np.load(data)
    np.save(data, np.zeros_like(arr))  # same size, every score zero
    with pytest.raises(IndexCorruptError, match="known-answer probe failed"):
        load_index(out, capitals)
    load_index(out, capitals, probe=False)  # still opens when asked not to probe


def test_unreadable_manifest_and_overwrite(built, capitals):
    out, _ = built
    with pytest.raises(FileExistsError):
        build_index("bm25", capitals, out, {"stemmer": STEMMER})
    build_index("bm25", capitals, out, {"stemmer": STEMMER}, overwrite=True)
    (out / MANIFEST).write_text("{not json")
    with pytest.raises(IndexCorruptError, match="unreadable manifest"):
        load_index(out, capitals)


def test_corpus_recorded_in_manifest_is_used(tmp_path):
    out = tmp_path / "micro"
    build_index("bm25", load_corpus("microworld"), out, {"stemmer": STEMMER}, corpus_spec="microworld")
    assert index_info(out)["corpus"]["spec"] == "microworld"
    r = load_index(out)  # no corpus given: rebuilt from the spec, then checked
    assert len(r) == 328


def test_probe_helpers():
    assert probe_positions(10, 3) == [0, 4, 9] or probe_positions(10, 3) == [0, 5, 9]
    assert probe_positions(1, 3) == [0] and probe_positions(5, 0) == []
    p = Passage("x", "Paris", "Paris is big. It has a river.")
    assert probe_query(p) == "Paris Paris is big."


def test_corpus_specs(tmp_path, fixtures_dir):
    assert canonical_spec("microworld") == "microworld:0"
    assert len(load_corpus("microworld:1")) > 0
    hp = load_corpus(f"hotpotqa:{fixtures_dir / 'hotpotqa_ircot.jsonl'}")
    assert len(hp) > 0 and canonical_spec(f"hotpotqa:{fixtures_dir / 'hotpotqa_ircot.jsonl'}").startswith("hotpotqa:/")
    flash = tmp_path / "corpus.jsonl"
    flash.write_text("\n".join(json.dumps({"id": f"d{i}", "contents": f"T{i}\ntext {i}"}) for i in range(3)) + "\n")
    assert [p.id for p in load_corpus(str(flash))] == ["d0", "d1", "d2"]
    assert len(load_corpus(f"flashrag:{flash}")) == 3
    with pytest.raises(ValueError, match="unknown corpus spec"):
        load_corpus("wikipedia")
    with pytest.raises(FileNotFoundError):
        load_corpus("hotpotqa:/no/such/file.jsonl")


def test_unknown_kind(tmp_path, capitals):
    with pytest.raises(ValueError, match="unknown retriever"):
        build_index("tfidf", capitals, tmp_path)


def test_crash_during_build_leaves_no_manifest(tmp_path, capitals, monkeypatch):
    from agents.retrievers.bm25 import BM25Retriever

    out = tmp_path / "idx"
    build_index("bm25", capitals, out, {"stemmer": STEMMER})

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Retriever, "build", classmethod(lambda cls, *a, **k: boom()))
    with pytest.raises(RuntimeError):
        build_index("bm25", capitals, out, {"stemmer": STEMMER}, overwrite=True)
    with pytest.raises(IndexMissingError):
        load_index(out, capitals)
    shutil.rmtree(out)
