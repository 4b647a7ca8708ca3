"""The build path (tiny world), determinism, crash-resume and artifact checks."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from envs.core.microworld.artifact import ArtifactError, load_artifact
from envs.core.microworld.config import BuildConfig
from envs.microworld.build import train_world

TINY = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "experiments" / "microworld" / "microworld_tiny.yaml").read_text())


def _weights_hash(world) -> str:
    import hashlib

    h = hashlib.sha256()
    for k, v in sorted(world.model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().numpy().tobytes())
    return h.hexdigest()


def test_tiny_build_writes_a_loadable_artifact(tiny_world):
    assert (tiny_world.path / "manifest.json").is_file()
    loaded = load_artifact(tiny_world.path)
    assert _weights_hash(loaded) == _weights_hash(tiny_world)
    assert loaded.kb.to_dict() == tiny_world.kb.to_dict()
    assert [q.id for q in loaded.questions["test"]] == [q.id for q in tiny_world.questions["test"]]
    assert not (tiny_world.path / "checkpoint.pt").exists()


def test_same_seed_same_weights(tmp_path, tiny_world):
    again = train_world(BuildConfig.from_dict(TINY), tmp_path / "again", progress=False)
    assert _weights_hash(again) == _weights_hash(tiny_world)
    other = json.loads(json.dumps(TINY))
    other["train"]["seed"] = 1
    different = train_world(BuildConfig.from_dict(other), tmp_path / "other", progress=False)
    assert _weights_hash(different) != _weights_hash(tiny_world)


def test_crash_then_resume_gives_the_uninterrupted_weights(tmp_path, monkeypatch, tiny_world):
    calls = {"n": 0}
    real = torch.nn.utils.clip_grad_norm_

    def crash_at_step_6(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt("simulated kill")
        return real(*a, **kw)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", crash_at_step_6)
    out = tmp_path / "crashy"
    with pytest.raises(KeyboardInterrupt):
        train_world(BuildConfig.from_dict(TINY), out, progress=False)
    assert (out / "checkpoint.pt").is_file() and not (out / "manifest.json").exists()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", real)
    resumed = train_world(BuildConfig.from_dict(TINY), out, resume=True, progress=False)
    assert _weights_hash(resumed) == _weights_hash(tiny_world)


def test_missing_and_corrupt_artifacts_are_clear_errors(tmp_path, tiny_world):
    with pytest.raises(ArtifactError, match="kairos microworld build"):
        load_artifact(tmp_path / "nowhere")
    bad = tmp_path / "bad"
    shutil.copytree(tiny_world.path, bad)
    with open(bad / "model" / "model.safetensors", "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        load_artifact(bad)
    info = subprocess.run([sys.executable, "-m", "eval", "microworld", "info", "--artifact", str(bad)],
                          capture_output=True, text=True)  # `info` verifies before it prints
    assert info.returncode != 0 and "checksum mismatch" in info.stderr and '"files"' not in info.stdout
    (bad / "kb.json").unlink()
    with pytest.raises(ArtifactError, match="'kb.json' listed in the manifest is missing"):
        load_artifact(bad)
    man = json.loads((tiny_world.path / "manifest.json").read_text())
    man["format_version"] = 99
    newer = tmp_path / "newer"
    shutil.copytree(tiny_world.path, newer)
    (newer / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ArtifactError, match="format version 99"):
        load_artifact(newer)


def test_cli_build_smoke_and_bad_config(tmp_path):
    cfg = tmp_path / "w.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "cli_world"
    r = subprocess.run([sys.executable, "-m", "eval", "microworld", "build", "--config", str(cfg), "--out", str(out),
                        "--max-steps", "2", "--no-eval"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (out / "manifest.json").is_file()
    bad = dict(TINY, world={"max_hopz": 3})
    cfg.write_text(yaml.safe_dump(bad))
    r = subprocess.run([sys.executable, "-m", "eval", "microworld", "build", "--config", str(cfg), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "unknown config key 'max_hopz'" in r.stderr and "valid keys" in r.stderr
