"""Models by name (agents.reasoners.models): the shipped alias, a local folder, a .gguf file, a hub id found in the
local Hugging Face cache — and the error that names everything tried."""

from __future__ import annotations

import pytest

from agents.reasoners import models
from agents.reasoners.models import ModelNotFoundError, resolve_model


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache (the layout huggingface_hub writes), offline."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def cached_snapshot(cache, repo_id: str, commit: str = "0123456789abcdef0123456789abcdef01234567", ref="main"):
    """A snapshot folder of ``repo_id`` in ``cache`` laid out as ``huggingface-cli download`` leaves it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / ref).write_text(commit)
    return snap


def test_a_hub_id_resolves_to_its_snapshot_in_the_local_cache(hf_cache):
    snap = cached_snapshot(hf_cache, "Org/Tiny-Instruct")
    (snap / "config.json").write_text("{}")
    assert resolve_model("Org/Tiny-Instruct") == snap
    # a revision names a ref (or a commit) of the same cache
    other = cached_snapshot_ref(hf_cache, "Org/Tiny-Instruct", "fedcba9876543210fedcba9876543210fedcba98", "v2")
    assert resolve_model("Org/Tiny-Instruct@v2") == other


def cached_snapshot_ref(cache, repo_id, commit, ref):
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs" / ref).write_text(commit)
    return snap


def test_a_missing_model_names_everything_tried(hf_cache, tmp_path):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("Qwen/Qwen2.5-7B-Instruct")
    msg = str(e.value)
    assert "Qwen/Qwen2.5-7B-Instruct" in msg and "no such path" in msg
    assert f"the Hugging Face cache {hf_cache} (no snapshot of Qwen/Qwen2.5-7B-Instruct)" in msg
    assert "the hub (not tried: HF_HUB_OFFLINE / KAIROS_OFFLINE is set)" in msg
    # a snapshot without config.json is not a checkpoint
    cached_snapshot(hf_cache, "Org/NoConfig")
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model("Org/NoConfig")
    # a folder that is not a checkpoint, a file that is not GGUF, a path that cannot be a hub id
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="it has no config.json"):
        resolve_model(str(tmp_path / "empty"))
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf file"):
        resolve_model(str(tmp_path / "w.bin"))
    with pytest.raises(ModelNotFoundError, match="not a hub id"):
        resolve_model(str(tmp_path / "a" / "b" / "c"))


def test_download_is_tried_only_where_the_hub_is_reachable(hf_cache, monkeypatch):
    calls = []

    def fake_download(repo_id, revision=None, local_files_only=False, **kw):
        calls.append((repo_id, local_files_only))
        raise FileNotFoundError("not cached")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    with pytest.raises(ModelNotFoundError):
        resolve_model("Org/Model")
    assert calls == [("Org/Model", True)]  # offline: the cache only
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    calls.clear()
    with pytest.raises(ModelNotFoundError, match=r"the hub \(FileNotFoundError: not cached\)"):
        resolve_model("Org/Model")
    assert calls == [("Org/Model", True), ("Org/Model", False)]
    monkeypatch.setenv("KAIROS_OFFLINE", "1")
    calls.clear()
    with pytest.raises(ModelNotFoundError):
        resolve_model("Org/Model")
    assert calls == [("Org/Model", True)]


def test_a_gguf_file_is_converted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIROS_MODEL_CACHE", str(tmp_path / "cache"))
    converted = []

    def fake_convert(src, out_dir, dtype="float32"):
        converted.append(src)
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        (out_dir / "kairos_source.json").write_text("{}")
        return out_dir

    monkeypatch.setattr(models, "convert_gguf", fake_convert)
    gguf = tmp_path / "My-Model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    first = resolve_model(str(gguf))
    assert first.parent == tmp_path / "cache" / "gguf" and first.name.startswith("My-Model.Q4-")
    assert resolve_model(str(gguf)) == first and len(converted) == 1  # the second load reads the folder


def test_the_hf_backend_loads_a_hub_id_from_the_cache(hf_cache, tok, random_model):
    from agents.reasoners.hf import HFReasonerConfig, load_causal_lm

    snap = cached_snapshot(hf_cache, "Org/Tiny")
    random_model.save_pretrained(snap)
    tok.save_pretrained(snap)
    model, t = load_causal_lm(HFReasonerConfig(model="Org/Tiny"))
    assert model.config.hidden_size == random_model.config.hidden_size and len(t) == len(tok)
