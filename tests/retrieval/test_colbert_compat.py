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
