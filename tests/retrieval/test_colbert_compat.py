"""The colbert-ai / transformers 5 compatibility shim and checkpoint checks (fast: no extension build)."""

from __future__ import annotations

import importlib.util

import pytest

from agents.retrievers import colbert_compat
from agents.retrievers.colbert_compat import compat_class, minilm_dir, torch_extensions_dir

needs_colbert = pytest.mark.skipif(not importlib.util.find_spec("colbert"), reason="colbert-ai not installed")


class _FakePreTrained:
    """Mimics transformers 5: from_pretrained needs ``all_tied_weights_keys``, which only post_init sets."""

    post_inits = 0

    def post_init(self):
        _FakePreTrained.post_inits += 1
        self.all_tied_weights_keys = {}
        self.init_weights()

    def init_weights(self):
        if "all_tied_weights_keys" not in self.__dict__:
            raise AttributeError("'HF_ColBERT' object has no attribute 'all_tied_weights_keys'")
        self.initialised = True


class _FakeHFColBERT(_FakePreTrained):
    def __init__(self):
        self.init_weights()  # what colbert-ai 0.2.22 does


def test_shim_runs_post_init_once(monkeypatch):
    monkeypatch.setattr(colbert_compat, "_transformers_major", lambda: 5)
    with pytest.raises(AttributeError, match="all_tied_weights_keys"):
        _FakeHFColBERT()
    cls = compat_class(_FakeHFColBERT)
    _FakePreTrained.post_inits = 0
    obj = cls()
    assert obj.initialised and obj.all_tied_weights_keys == {} and _FakePreTrained.post_inits == 1
    assert cls.__name__ == "_FakeHFColBERT" and compat_class(cls) is cls


def test_shim_is_a_no_op_before_transformers_5(monkeypatch):
    monkeypatch.setattr(colbert_compat, "_transformers_major", lambda: 4)

    class Old(_FakePreTrained):
        def __init__(self):
            self.all_tied_weights_keys = {}  # transformers 4 had no such requirement; emulate success
            self.init_weights()

    _FakePreTrained.post_inits = 0
    assert compat_class(Old)().initialised and _FakePreTrained.post_inits == 0


def test_extensions_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert torch_extensions_dir() == colbert_compat.REPO_ROOT / ".torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert torch_extensions_dir() == tmp_path


@needs_colbert
def test_colbert_loads_minilm_under_transformers_5():
    """colbert's own model class builds from the local MiniLM (fails without the shim on transformers 5)."""
    colbert_compat.prepare_colbert()
    from colbert.infra import ColBERTConfig
    from colbert.modeling.base_colbert import BaseColBERT

    from agents.retrievers.colbert import quiet_colbert

    with quiet_colbert():
        m = BaseColBERT(str(minilm_dir()), colbert_config=ColBERTConfig(dim=128))
    assert tuple(m.linear.weight.shape) == (128, 384)


def test_raw_model_folder_is_not_a_checkpoint(tmp_path):
    from agents.retrievers.colbert import check_checkpoint

    with pytest.raises(ValueError, match="not a ColBERT checkpoint"):
        check_checkpoint(minilm_dir())
    with pytest.raises(FileNotFoundError, match="train-colbert"):
        check_checkpoint(tmp_path / "none")
    with pytest.raises(ValueError, match="checkpoint is required"):
        check_checkpoint("")


def test_a_hub_id_resolves_from_the_local_hf_cache_through_the_model_resolver(tmp_path):
    """``colbert-ir/colbertv2.0``-style ids: the snapshot in $HF_HUB_CACHE (as models resolve); missing, the same
    ModelNotFoundError listing what was tried."""
    import subprocess
    import sys
    from pathlib import Path

    snap = tmp_path / "hub" / "models--kairos-test--colbert-tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "artifact.metadata").write_text("{}")
    (snap / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--kairos-test--colbert-tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--kairos-test--colbert-tiny" / "refs" / "main").write_text("abc123")
    code = ("from agents.retrievers.colbert import check_checkpoint\n"
            "print(check_checkpoint('kairos-test/colbert-tiny'))\n"
            "try:\n    check_checkpoint('kairos-test/not-there')\n"
            "except FileNotFoundError as e:\n    print(type(e).__name__, e)\n")
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()[:2]
    assert Path(first) == snap.resolve()
    assert second.startswith("ModelNotFoundError ColBERT checkpoint: model 'kairos-test/not-there' not found")
    assert "the Hugging Face cache" in second and "train-colbert" in second


def test_colbert_metadata_survives_a_detached_head(tmp_path, monkeypatch):
    """colbert-ai records the working directory's git branch in every checkpoint and index; on a detached HEAD
    gitpython raises — the patched record leaves the branch out instead."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["add", "f"], ["commit", "-qm", "x"], ["checkout", "-q", "--detach"]):
        subprocess.run(["git", "-C", str(tmp_path), *cmd], check=True, env={**__import__("os").environ, **env})
    monkeypatch.chdir(tmp_path)
    colbert_compat.prepare_colbert()
    from colbert.infra.config import base_config

    meta = base_config.get_metadata_only()
    assert meta.git_branch is None and len(meta.git_hash) == 40


def test_extensions_built_needs_every_cpu_extension_and_then_nothing_is_compiled(tmp_path, monkeypatch):
    from agents.retrievers import colbert_compat as cc

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    names = list(cc.EXTENSIONS)
    for name in names[:-1]:
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.so").write_bytes(b"")
    assert not cc.extensions_built()  # one missing: the background compile would start
    (tmp_path / names[-1]).mkdir()
    assert not cc.extensions_built()  # a folder without its library (a torn build) is not built either
    (tmp_path / names[-1] / f"{names[-1]}.so").write_bytes(b"")
    assert cc.extensions_built() and cc.compile_extensions_in_background() is None


def test_a_failed_background_compile_is_reported_with_its_stderr(tmp_path, monkeypatch):
    import subprocess
    import sys

    from agents.retrievers import colbert_compat as cc

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # nothing built: the child starts
    real = subprocess.Popen

    def failing(cmd, **kw):  # the child as it would fail: much on stderr (more than a pipe holds), then exit 1
        return real([sys.executable, "-c", "import sys; sys.stderr.write('x' * 200_000 + 'ninja: build stopped');"
                     "sys.exit(1)"], **kw)

    monkeypatch.setattr(subprocess, "Popen", failing)
    proc = cc.compile_extensions_in_background()
    err = cc.background_compile_error(proc)
    assert err.startswith("exit 1: ") and err.endswith("ninja: build stopped") and len(err) < 600
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: real([sys.executable, "-c", "pass"], **kw))
    assert cc.background_compile_error(cc.compile_extensions_in_background()) is None
