"""End to end, a sixth fresh pass of bad inputs: each class of defect it found, as a user meets it through the CLI,
the Python API or the env.

1. Recipes: ``KEY:`` beside ``KEY+:`` / ``KEY-:`` in one file silently dropped the edit; a ``base:`` that is a folder
   was "not found".
2. Data files read by a command: a ``scaling_bench.json`` (``kairos bench projection``) or a results block's source
   (``kairos results update``) of another shape was a traceback or a bare key name; a block without its closing
   marker swallowed the next block's marker (the page lost it).
3. Errors named after the wrong thing: an unknown override key (a suite's ``overrides:``, applied as ``--set``)
   blamed on another override whose key the error listed as valid; a write onto a folder named the temporary file.
4. The Python API: ``reset(options={"cost_weights": …})`` of the wrong shape (a raw TypeError text; a bad weight
   applied the good ones before it), ``from_dict`` of a non-mapping, ``make_env(top_k=…)``,
   ``Pipeline.from_policy("never")``, and ``import kairos`` not registering the Gymnasium ids.

CLI cases assert the exit status and ONE error line (no ``Traceback``) through ``_one_line_error``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_errors_e2e_runs import ROOT, _env, _one_line_error, _tiny_bench


def _kairos(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


# ======================================================================= 1. recipes
@pytest.mark.parametrize("edit", ["methods+", "methods-"])
def test_a_list_and_its_edit_in_one_recipe_are_refused_not_one_dropped(tmp_path, edit):
    """``methods+: [X]`` then ``methods: [...]`` in one child: X was silently lost (rc 0)."""
    parent = tmp_path / "bench_p.yaml"
    parent.write_text("name: t\nenv: {split: dev}\ndev: '0:2'\ntest: '2:4'\nmethods: [{name: CoT, kind: never}]\n")
    child = tmp_path / "bench_c.yaml"
    entry = "[{name: X, kind: always}]" if edit == "methods+" else "[CoT]"
    child.write_text(f"base: {parent}\n{edit}: {entry}\nmethods: [{{name: CoT, kind: never}}]\n")
    r = _kairos("config", "show", str(child))
    _one_line_error(r, str(child), f"'methods' and '{edit}' are both given", "keep one")


def test_a_base_that_is_a_folder_says_so(tmp_path):
    child = tmp_path / "c.yaml"
    child.write_text(f"base: {tmp_path}\nname: x\n")
    r = _kairos("config", "show", str(child))
    _one_line_error(r, str(child), "is a folder", "not a config file")


# ======================================================================= 2. data files of another shape
SCALING_SHAPES = {
    "axis a list": {"axes": {"chain_length": [1, 2]}},
    "points a list": {"axes": {"chain_length": {"sizes": [4, 8], "points": [1, 2]}}},
    "a row a number": {"axes": {"chain_length": {"sizes": [4, 8], "points": {"episode": [1, 2]}}}},
    "tokens a word": {"axes": {"chain_length": {"sizes": [4, 8], "points": {"episode": [{"tokens": "many"}] * 2}}}},
    "no sizes": {"axes": {"chain_length": {"points": {"episode": [{"tokens": 1.0}] * 2}}}},
}


@pytest.mark.parametrize("shape", list(SCALING_SHAPES))
def test_projection_names_the_field_of_a_malformed_scaling_json(tmp_path, shape):
    """A scaling JSON of another shape was an AttributeError traceback, or 'error: sizes'."""
    src = tmp_path / "scaling_bench.json"
    src.write_text(json.dumps(SCALING_SHAPES[shape]))
    r = _kairos("bench", "projection", "--scaling", str(src), "--out", str(tmp_path / "out"))
    _one_line_error(r, f"--scaling {src}: field axes.chain_length", "must be")
    assert not (tmp_path / "out" / "projection.json").exists()


def _page(tmp_path, kind: str, source) -> tuple:
    page = tmp_path / "page.md"
    page.write_text(f"# R\n\n<!-- table: {kind} {source} -->\nold\n<!-- /table -->\n")
    return page, page.read_text()


@pytest.mark.parametrize("kind, content, needle", [
    ("summary", "{not json", "the source is not JSON"),
    ("suite", json.dumps({"x": 1}), "the source is not a suite JSON (it has no field 'benchmarks')"),
    ("budgets", json.dumps([1, 2]), "the source is not a budgets JSON"),
    ("groups", json.dumps([1, 2]), "the source is not a groups JSON"),
])
def test_results_update_names_page_line_and_source_of_another_shape(tmp_path, kind, content, needle):
    """A source of another shape was a traceback (a list) or a bare key ('error: benchmarks')."""
    src = tmp_path / "src.json"
    src.write_text(content)
    page, before = _page(tmp_path, kind, src)
    r = _kairos("results", "update", str(page))
    _one_line_error(r, f"{page}:3: table {kind} {src}", needle)
    assert page.read_text() == before


def test_results_update_refuses_a_block_that_would_swallow_the_next_marker(tmp_path):
    """A block missing its closing marker took the next block's marker with it: the page lost a table (rc 0)."""
    src = tmp_path / "projection.json"
    from eval.perf.projection import ProjectionConfig, project

    scaling = tmp_path / "scaling.json"
    scaling.write_text(json.dumps({"axes": {"chain_length": {"sizes": [4, 8, 16], "points": {
        "episode": [{"tokens": 10.0 * n} for n in (4, 8, 16)]}}}}))
    src.write_text(json.dumps(project(ProjectionConfig(scaling=[str(scaling)], out=str(tmp_path / "o")))))
    page = tmp_path / "page.md"
    page.write_text(f"<!-- table: projection {src} -->\n<!-- table: projection {src} -->\nold\n<!-- /table -->\n")
    before = page.read_text()
    r = _kairos("results", "update", str(page))
    _one_line_error(r, f"{page}:1:", "no closing <!-- /table --> before the next marker (line 2)")
    assert page.read_text() == before


# ======================================================================= 3. errors named after the wrong thing
def test_an_unknown_override_is_blamed_on_itself_not_on_one_the_error_lists(tmp_path):
    """A suite's ``overrides: [dev=0:2, tst=2:4]`` was reported as '--set dev=0:2: … unknown config key 'tst'
    (valid keys: … dev …)': the override named was the first whose key the error's list of valid keys held."""
    bench = _tiny_bench(tmp_path, tmp_path / "out")
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\nbenchmarks: [{bench}]\noverrides: [dev=0:2, tst=2:4]\n")
    r = _kairos("bench", "suite", "--config", str(suite), "--out", str(tmp_path / "suite_out"))
    line = _one_line_error(r, "tst=2:4:", "unknown config key 'tst'")
    assert "dev=0:2" not in line


def test_a_write_onto_a_folder_names_the_folder_not_a_temporary_file(tmp_path):
    """``config list --write DIR`` said 'cannot write DIR/../.DIR.xxxx.tmp: it is a folder'."""
    folder = tmp_path / "docs"
    folder.mkdir()
    r = _kairos("config", "list", "--write", str(folder))
    line = _one_line_error(r, f"cannot write {folder}: it is a folder, not a file")
    assert ".tmp" not in line
    assert [p.name for p in tmp_path.iterdir()] == ["docs"]  # no temporary file left beside it


# ======================================================================= 4. the Python API
@pytest.fixture(scope="module")
def env():
    import gymnasium as gym

    import envs  # noqa: F401

    e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "max_questions": 2})
    yield e
    e.close()


@pytest.mark.parametrize("weights, needle", [
    ([0.1], "cost weights are a mapping {cost: λ}"),
    (0.3, "cost weights are a mapping {cost: λ}"),
    (0, "cost weights are a mapping {cost: λ}"),  # was skipped silently (falsy)
    ({"retrieval_calls": "0.1"}, "cost weight of 'retrieval_calls' must be a finite number >= 0, got '0.1'"),
    ({"retrieval_calls": True}, "cost weight of 'retrieval_calls' must be a finite number >= 0, got True"),
])
def test_reset_cost_weights_of_the_wrong_shape_say_what_to_pass(env, weights, needle):
    from envs.retrieval_env import EnvUsageError

    with pytest.raises(EnvUsageError) as e:
        env.reset(options={"cost_weights": weights})
    assert needle in str(e.value)


def test_reset_cost_weights_change_nothing_when_one_is_bad(env):
    from envs.retrieval_env import EnvUsageError

    env.reset(options={"cost_weights": {"retrieval_calls": 0.2}})
    with pytest.raises(EnvUsageError, match="unknown cost 'tokenz'"):
        env.reset(options={"cost_weights": {"retrieval_calls": 0.4, "tokenz": 1.0}})
    assert env.unwrapped.get_cost_weights() == {"retrieval_calls": 0.2}


def test_from_dict_of_a_non_mapping_is_a_config_error_naming_the_class():
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig
    from eval.bench.policies import BenchConfig
    from train.config import TrainConfig

    for cls, data in ((EnvConfig, [1]), (TrainConfig, "iterations: 3"), (BenchConfig, [("name", "x")])):
        with pytest.raises(ConfigError, match=rf"{cls.__name__} must be a mapping of its keys"):
            cls.from_dict(data)


def test_make_env_with_an_env_key_as_keyword_says_to_pass_it_in_config():
    import kairos
    from envs.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"'top_k' is an env config key.*config=\{'top_k': 2\}"):
        kairos.make_env("microworld", top_k=2)
    with pytest.raises(TypeError, match="make_env: unknown keyword 'colour'"):
        kairos.make_env("microworld", colour=2)


def test_pipeline_from_policy_with_a_trigger_name_says_to_give_the_env():
    """``Pipeline.from_policy("never")`` was a raw FileNotFoundError 'never/spec.json'."""
    import kairos

    with pytest.raises(ValueError, match=r"'never' is not an exported policy directory.*env_config"):
        kairos.Pipeline.from_policy("never")


def test_import_kairos_registers_the_gym_ids():
    """``import gymnasium, kairos; gym.make("kairos/MicroWorld-v0")``: NamespaceNotFound."""
    code = ("import sys, gymnasium as gym, kairos\n"
            "assert 'torch' not in sys.modules\n"
            "print(sorted(k for k in gym.registry if k.startswith('kairos/')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "kairos/MicroWorld-v0" in r.stdout
