"""The one config reader: duplicate keys, empty files and bad bytes are errors naming the file and line; recipes name a
parent (`base:`) and state only their difference; `kairos config show` prints what a recipe resolves to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envs.core.config import ConfigError, read_yaml_mapping
from envs.core.config_files import read_config

REPO = Path(__file__).resolve().parents[1]


def _w(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    p = _w(tmp_path / "t.yaml", "iterations: 3\nseed: 0\niterations: 2\n")
    with pytest.raises(ConfigError, match=r"t.yaml:3: key 'iterations' is given twice in one mapping \(lines 1 and 3\)"):
        read_yaml_mapping(p)
    nested = _w(tmp_path / "n.yaml", "algo:\n  lr: 0.1\n  lr: 0.2\n")
    with pytest.raises(ConfigError, match="lines 2 and 3"):
        read_yaml_mapping(nested)
    # the same key in two different mappings is fine
    assert read_yaml_mapping(_w(tmp_path / "ok.yaml", "a: {x: 1}\nb: {x: 2}\n")) == {"a": {"x": 1}, "b": {"x": 2}}


def test_an_empty_file_and_bytes_that_are_not_utf8_are_errors_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match="e.yaml: the file is empty"):
        read_yaml_mapping(_w(tmp_path / "e.yaml", "# only a comment\n\n"))
    with pytest.raises(ConfigError, match=r"b.yaml:2:7: not UTF-8 \(byte 0xe9\)"):
        read_yaml_mapping(_w(tmp_path / "b.yaml", b"name: x\nname2 \xe9: y\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        read_yaml_mapping(_w(tmp_path / "l.yaml", "- a\n- b\n"))


def test_every_config_class_reads_through_it(tmp_path):
    """TrainConfig.from_yaml, the benchmark's loader and python -m train all refuse a duplicate key."""
    from eval.bench.config import load_config
    from train.config import TrainConfig

    p = _w(tmp_path / "t.yaml", "iterations: 3\niterations: 2\n")
    with pytest.raises(ConfigError, match="given twice"):
        TrainConfig.from_yaml(p)
    b = _w(tmp_path / "b.yaml", "test: '100:400'\nmethods: [{name: CoT, kind: never}]\ntest: '1:2'\n")
    with pytest.raises(ConfigError, match="given twice"):
        load_config(str(b))
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(p)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "given twice" in r.stderr and "Traceback" not in r.stderr


def test_a_recipe_states_only_its_difference_from_its_parent(tmp_path):
    parent = _w(tmp_path / "configs" / "parent.yaml",
                "name: p\niterations: 50\nalgo: {lr: 0.001, baseline: value}\nmethods: [{name: CoT}]\n")
    child = _w(tmp_path / "configs" / "experiments" / "x" / "child.yaml",
               f"base: {parent}\nname: c\nalgo: {{lr: 0.01}}\nmethods+: [{{name: learned}}]\n")
    data, src = read_config(child)
    assert data == {"name": "c", "iterations": 50, "algo": {"lr": 0.01, "baseline": "value"},
                    "methods": [{"name": "CoT"}, {"name": "learned"}]}
    assert src["algo.lr"] == str(child) and src["algo.baseline"] == str(parent) and src["iterations"] == str(parent)
    assert src["methods"] == f"{parent} + {child}"
    # a grandchild, its base named relative to its own folder
    grand = _w(child.parent / "grand.yaml", "base: child.yaml\niterations: 5\n")
    data, src = read_config(grand)
    assert data["iterations"] == 5 and data["algo"]["lr"] == 0.01 and data["name"] == "c"


def test_a_recipe_removes_parent_rows_by_name_before_it_appends(tmp_path):
    parent = _w(tmp_path / "parent.yaml", "methods: [{name: CoT}, {name: learned, lam: null}]\nseeds: [0, 1]\n")
    child = _w(tmp_path / "child.yaml", f"base: {parent}\nmethods+: [{{name: learned, lam: 0.1}}]\n"
                                        "methods-: [learned]\nseeds-: [1]\n")
    data, src = read_config(child)
    assert data["methods"] == [{"name": "CoT"}, {"name": "learned", "lam": 0.1}] and data["seeds"] == [0]
    assert src["seeds"] == f"{parent} - {child}"
    with pytest.raises(ConfigError, match=r"removes \['nope'\], but the parent's list holds no such entry \(it holds "
                                          r"\['CoT', 'learned'\]\)"):
        read_config(_w(tmp_path / "bad.yaml", f"base: {parent}\nmethods-: [nope]\n"))
    with pytest.raises(ConfigError, match="'methods-' removes from the parent's list 'methods', but this file names no "
                                          "parent"):
        read_config(_w(tmp_path / "orphan.yaml", "methods-: [CoT]\n"))


def test_base_errors_name_the_file_and_the_fix(tmp_path):
    a = _w(tmp_path / "a.yaml", f"base: {tmp_path / 'b.yaml'}\nx: 1\n")
    _w(tmp_path / "b.yaml", f"base: {a}\ny: 1\n")
    with pytest.raises(ConfigError, match="makes a cycle"):
        read_config(a)
    with pytest.raises(ConfigError, match="base 'nope.yaml' not found"):
        read_config(_w(tmp_path / "c.yaml", "base: nope.yaml\n"))
    with pytest.raises(ConfigError, match="names no parent"):
        read_config(_w(tmp_path / "d.yaml", "methods+: [1]\n"))
    p = _w(tmp_path / "p.yaml", "methods: {a: 1}\nk: 1\n")
    with pytest.raises(ConfigError, match="holds a dict there"):
        read_config(_w(tmp_path / "e.yaml", f"base: {p}\nmethods+: [1]\n"))
    with pytest.raises(ConfigError, match="has no such key"):
        read_config(_w(tmp_path / "f.yaml", f"base: {p}\nnew+: [1]\n"))


def test_config_show_prints_each_key_with_the_file_that_set_it(tmp_path):
    parent = _w(tmp_path / "parent.yaml", "# the parent\niterations: 50\nalgo: {lr: 0.001}\n")
    child = _w(tmp_path / "child.yaml", f"# a child\nbase: {parent}\nalgo: {{lr: 0.01}}\n")
    r = subprocess.run([sys.executable, "-m", "eval", "config", "show", str(child)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = {ln.split(":")[0]: ln for ln in r.stdout.splitlines() if not ln.startswith("#")}
    assert lines["iterations"].endswith(f"# {parent}") and lines["algo.lr"].endswith(f"# {child}")
    r = subprocess.run([sys.executable, "-m", "eval", "config", "list", "--root", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "| a child |" in r.stdout and f"`{parent}`" in r.stdout


def test_the_configs_page_is_the_generated_listing():
    """docs/configs.md is `kairos config list --write docs/configs.md` of today's configs/ (regenerate it when a
    config is added, moved or its purpose changes)."""
    import os

    from eval.config_cli import listing

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        assert (REPO / "docs" / "configs.md").read_text() == listing("configs")
    finally:
        os.chdir(cwd)
