"""End to end, a fifth fresh pass of bad inputs (issue 53's "Done when"): each class of defect it found, as a user
meets it through the CLI, the Python API, the env or the HTTP request parser.

1. Options that were silently ignored or misread: ``--threshold`` on a trigger, a bool flag's other word
   (``--include-title maybe`` read as false), ``--stop-after 0`` (an untrained policy exported), ``--probe-n -1``,
   ``batch_size=2.5``, ``config show --check`` on a recipe whose own name gives no kind.
2. Values named where they enter: the training and probe bounds (one key and its value each, before any work).
3. Types at the API's edges: ``Pipeline(env_config=3)``, ``knowledge=42`` / a dict, ``stream(5)``,
   ``threshold="high"``, ``gym.make(config=[…])``.
4. Files named: a config path that is a folder, an empty or non-UTF-8 ``.txt`` corpus, a malformed ``SIGNAL<τ``.
5. One line, unquoted, for a KeyError through the CLI handler; JSON nested too deeply is an HTTP 400, not a 500.

CLI cases assert the exit status and ONE error line (no ``Traceback``) through ``_one_line_error``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_errors_e2e_runs import ROOT, _env, _one_line_error, _toy_yaml, _train

QUESTION = "Where was Mira 's father born ?"


def _kairos(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


# ======================================================================= 1. options silently ignored or misread
def test_a_threshold_for_a_trigger_is_refused_not_ignored():
    """``kairos answer --policy never --threshold 0.7`` answered as if no threshold was given."""
    r = _kairos("answer", "--policy", "never", "--threshold", "0.7", QUESTION)
    _one_line_error(r, "threshold=0.7", "'CoT' is a trigger, not a learned policy", "leave it out")


def test_a_bool_flag_refuses_a_word_it_cannot_read(tmp_path):
    """``--include-title maybe`` was read as false and the index built."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "contents": "Paris\nParis is in France."}) + "\n")
    out = tmp_path / "idx"
    r = _kairos("index", "build", "--retriever", "bm25", "--corpus", str(corpus), "--out", str(out),
                "--include-title", "maybe")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--include-title: expected true or false, got 'maybe'" in r.stderr
    assert not out.exists()
    from envs.core.config import cli_bool

    assert [cli_bool(w) for w in ("true", "Yes", "1", "false", "NO", "0")] == [True] * 3 + [False] * 3


def test_index_build_refuses_a_negative_probe_count(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "contents": "Paris\nParis is in France."}) + "\n")
    r = _kairos("index", "build", "--retriever", "bm25", "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                "--probe-n", "-1")
    _one_line_error(r, "probe_n (--probe-n) must be an integer >= 0, got -1")
    assert not (tmp_path / "idx").exists()


def test_train_stop_after_zero_is_refused_before_any_work(tmp_path):
    """``--stop-after 0`` started Ray and exported an untrained policy with rc 0."""
    out = tmp_path / "run"
    r = _train(_toy_yaml(tmp_path, out), "--stop-after", "0")
    _one_line_error(r, "stop_after (--stop-after) must be an integer >= 1, got 0")
    assert not out.exists()


def test_config_show_check_types_a_recipe_by_its_base_chain(tmp_path):
    """A child of a benchmark config named ``mine.yaml`` was 'not checked' (rc 0) with an unknown key in it."""
    parent = tmp_path / "bench_tiny.yaml"
    parent.write_text("name: t\nenv: {split: dev}\ndev: '0:2'\ntest: '2:4'\nmethods: [{name: CoT, kind: never}]\n")
    child = tmp_path / "mine.yaml"
    child.write_text(f"base: {parent}\nn_resample: 10\n")
    r = _kairos("config", "show", "--check", str(child))
    _one_line_error(r, f"{child}: unknown config key 'n_resample'", "did you mean 'n_resamples'?")
    child.write_text(f"base: {parent}\nn_resamples: 10\n")
    r = _kairos("config", "show", "--check", str(child))
    assert r.returncode == 0 and "# loads as BenchConfig" in r.stdout, r.stderr[-2000:]


# ======================================================================= 2. values named where they enter
@pytest.mark.parametrize("flags,needle", [
    (["--iterations", "-1"], "key 'iterations' must be >= 0, got -1"),
    (["--checkpoint-every", "0"], "key 'checkpoint_every' must be >= 1, got 0"),
    (["--keep-checkpoints", "0"], "key 'keep_checkpoints' must be >= 1, got 0"),
    (["--set", "algo.lr=-1"], "key 'lr' must be > 0, got -1"),
])
def test_train_bounds_name_the_key_and_the_value(tmp_path, flags, needle):
    """One message for three keys ('iterations must be >= 0, checkpoint_every and keep_checkpoints >= 1'), without
    the value given, is now the key and its value."""
    out = tmp_path / "run"
    _one_line_error(_train(_toy_yaml(tmp_path, out), *flags), needle)
    assert not out.exists()


@pytest.mark.parametrize("flags,needle", [
    (["--lr", "-0.1"], "key 'lr' must be > 0, got -0.1"),  # was torch's 'Invalid learning rate' after the data
    (["--val-frac", "1.5"], "key 'val_frac' must be in (0, 1), got 1.5"),  # was after 50 s of chains
    (["--batch-size", "0"], "key 'batch_size' must be >= 1, got 0"),
])
def test_probe_train_bounds_are_checked_before_any_work(tmp_path, flags, needle):
    r = _kairos("probe", "train", "--signal", "pulse", "--out", str(tmp_path / "p"), *flags, timeout=60)
    _one_line_error(r, needle)
    assert not (tmp_path / "p").exists()


# ======================================================================= 3. types at the API's edges
def test_the_pipeline_refuses_wrong_types_naming_the_argument():
    from kairos import Pipeline

    with pytest.raises(TypeError, match=r"env_config is a mapping of EnvConfig fields or an EnvConfig, got int"):
        Pipeline("never", 3)
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1, got 2.5"):
        Pipeline("never", batch_size=2.5)
    with pytest.raises(ValueError, match=r"threshold: .* a number in \[0, 1\), got 'high'"):
        Pipeline("never", threshold="high")
    with pytest.raises(TypeError, match=r"knowledge: got int 42; give a prebuilt index"):
        Pipeline("never", knowledge=42)
    with pytest.raises(TypeError, match=r"knowledge: got dict"):  # read its keys as passages before
        Pipeline("never", knowledge={"a": "Paris is in France ."})
    from kairos.pipeline import _question_list

    with pytest.raises(TypeError, match=r"stream\(\) takes a list of questions \(strings\), got int 5"):
        _question_list(5, "stream")


def test_gym_make_with_a_config_that_is_not_a_mapping_names_it():
    import gymnasium as gym

    import envs  # noqa: F401 - registers the ids
    from envs.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"the env config is a mapping of EnvConfig keys .*got list \[1, 2\]"):
        gym.make("kairos/MicroWorld-v0", config=[1, 2])


# ======================================================================= 4. files named
def test_a_config_path_that_is_a_folder_says_so(tmp_path):
    r = _kairos("bench", "policies", "--config", str(tmp_path))
    _one_line_error(r, f"{tmp_path} is a folder, not a config file")


@pytest.mark.parametrize("content,needle", [(b"", "holds no passages (an empty file)"),
                                            (b"\xeb\xff Paris\n", "not UTF-8 text")])
def test_a_txt_corpus_that_is_empty_or_not_utf8_is_named(tmp_path, content, needle):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(content)
    r = _kairos("answer", "--policy", "never", "--corpus", str(corpus), QUESTION)
    _one_line_error(r, str(corpus), needle)


def test_a_malformed_threshold_trigger_says_how_to_write_it():
    """'minprob<abc' was 'no exported policy at minprob<abc (no such directory)'."""
    r = _kairos("answer", "--policy", "minprob<abc", QUESTION)
    _one_line_error(r, "policy 'minprob<abc': a threshold trigger is 'SIGNAL<τ' or 'SIGNAL>τ' with τ a number")


# ======================================================================= 5. one line, one status
def test_a_key_error_is_one_unquoted_line():
    from envs.core.cli_errors import error_line

    assert error_line(KeyError("signal 'x' is not in info['signals']")) == "signal 'x' is not in info['signals']"
    assert error_line(KeyError(3)) == "3"


def test_json_nested_too_deeply_is_a_400():
    """A request body of 100,000 nested arrays was a RecursionError and a plain-text HTTP 500."""
    from kairos.openai_api import APIError, parse_chat_request

    with pytest.raises(APIError) as e:
        parse_chat_request('{"model": "kairos", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}", ["kairos"], 100)
    assert e.value.status == 400 and e.value.body()["error"]["code"] == "invalid_json"
    assert "nests JSON arrays or objects too deeply" in e.value.body()["error"]["message"]
