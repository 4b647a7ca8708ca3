"""Every shipped preset loads into its typed config; unknown keys name the key and the valid ones."""

import re
from pathlib import Path

import pytest

from envs.core.config import ConfigError
from envs.core.microworld.config import BuildConfig
from envs.env_config import EnvConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
KINDS = {"microworld_build.yaml": BuildConfig, "experiments/microworld/microworld_tiny.yaml": BuildConfig,
         "experiments/microworld/microworld_shifted.yaml": BuildConfig, "env_microworld.yaml": EnvConfig}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_shipped_presets_load(name):
    cfg = KINDS[name].from_yaml(CONFIGS / name)
    assert KINDS[name].from_dict(cfg.to_dict()) == cfg


ALL = sorted(CONFIGS.rglob("*.yaml"))


def test_every_config_file_is_covered():
    """Every config under configs/ (the recipes and their children under configs/experiments/) has a typed class."""
    from eval.config_cli import config_class

    assert not [p for p in ALL if config_class(p) is None]
    listed = {str(Path(b).resolve()) for s in CONFIGS.glob("suite_*.yaml") for b in _suite(s).benchmarks}
    assert {str(p.resolve()) for p in (CONFIGS / "seed").glob("*.yaml")} <= listed  # every seed config in a suite


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_config_loads_through_the_one_reader(path):
    """Each file — its base chain merged by the one reader — loads into its typed config and round-trips."""
    from envs.core.config import read_yaml_mapping
    from envs.env_config import pending_probes
    from eval.config_cli import load_typed

    proxies = re.findall(r"'verb_proxy': '([^']+)'", repr(read_yaml_mapping(path)))
    try:
        with pending_probes(*proxies):  # a U_verb proxy `kairos probe train` writes first (as quickstart checks)
            cfg = load_typed(path)
            if hasattr(cfg, "to_dict") and type(cfg).__name__ not in ("EnvConfig", "ServeConfig"):
                assert type(cfg).from_dict(cfg.to_dict()) == cfg
    except ConfigError as e:  # a preset whose inputs another command produces (a fitted weight set, a trained probe)
        if "runs/" in str(e) and any(m in str(e) for m in ("no file", "no probe at", "no boundary segmenter at")):
            pytest.skip(f"{path.name} needs an output of another command first: {e}")
        raise


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("env_*.yaml")), ids=lambda p: p.name)
def test_env_presets_load(path):
    """Every env YAML (what ``--env-config`` / ``python -m eval.detection.labels --config`` read) is an EnvConfig."""
    from envs.env_config import env_config_from_file

    cfg = env_config_from_file(path)
    assert EnvConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("serve_*.yaml")), ids=lambda p: p.name)
def test_serve_presets_load(path):
    from kairos.config import ServeConfig

    cfg = ServeConfig.from_yaml(path)
    assert ServeConfig.from_dict(cfg.to_dict()) == cfg and cfg.pipeline.policy


def _suite(path):
    from eval.bench.suite import SuiteConfig

    return SuiteConfig.from_yaml(path)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("probe_*.yaml")), ids=lambda p: p.name)
def test_probe_presets_load(path):
    from policies.probes.pipeline import ProbeTrainConfig

    cfg = ProbeTrainConfig.from_yaml(path)
    assert ProbeTrainConfig.from_dict(cfg.to_dict()) == cfg and cfg.out


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("suite_*.yaml")), ids=lambda p: p.name)
def test_suites_and_their_benchmarks_load(path):
    from eval.bench.suite import load_suite

    suite, benches = load_suite(str(path))
    assert len(benches) == len(suite.benchmarks)


def test_errors(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("world:\n  n_people: many\n")
    with pytest.raises(ConfigError, match="n_people' must be an integer"):
        BuildConfig.from_yaml(p)
    p.write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        BuildConfig.from_yaml(p)
    with pytest.raises(ConfigError, match="config file not found"):
        BuildConfig.from_yaml(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"unknown config key 'injectoin' \(valid keys: .*injection"):
        EnvConfig.from_dict({"injectoin": "step"})
    with pytest.raises(ConfigError, match="injection must be"):
        EnvConfig.from_dict({"injection": "middle"})


# ---------------------------------------------------------------- the env config, typed end to end
def test_config_classes_hold_a_typed_env_config():
    """Every config class carries an EnvConfig (a method its typed partial override), never a dict; a YAML mapping
    loads into it, with the preset the config names applied once, on load."""
    import typing

    from envs.env_config import EnvOverrides
    from eval.bench.policies import BenchConfig, MethodSpec
    from train.config import FactoryEnvConfig, TrainConfig
    from train.rsus_fit import RSUSFitConfig

    for cls, key in ((TrainConfig, "env_config"), (BenchConfig, "env"), (RSUSFitConfig, "env"), (MethodSpec, "env")):
        hint = typing.get_type_hints(cls)[key]
        assert dict not in (typing.get_args(hint) or (hint,)) and hint is not dict, (cls, hint)
    t = TrainConfig.from_dict({"env": "hotpotqa", "env_config": {"split": "dev[0:8]"}})
    assert isinstance(t.env_config, EnvConfig) and (t.env_config.task, t.env_config.reasoner) == ("hotpotqa", "hf")
    assert TrainConfig().env_config == TrainConfig.from_dict({}).env_config  # the default, over the preset
    assert TrainConfig().env_config.max_questions == 256 and TrainConfig().env_config.rsus_components == ["ent"]
    assert isinstance(TrainConfig.from_dict({"env": "pkg.mod:make", "env_config": {"anything": 1}}).env_config,
                      FactoryEnvConfig)
    b = BenchConfig.from_dict({"env": {"split": "dev", "rsus_options": {"n_samples": 2}},
                               "methods": [{"name": "CoT", "kind": "never", "env": {"injection": "front"}}]})
    assert isinstance(b.env, EnvConfig) and b.env.rsus_options.n_samples == 2
    assert isinstance(b.methods[0].env, EnvOverrides) and b.methods[0].env.to_dict() == {"injection": "front"}
    assert isinstance(RSUSFitConfig().env, EnvConfig)


def test_a_typo_in_a_nested_env_key_fails_on_load_naming_the_full_key_path():
    from eval.bench.policies import BenchConfig
    from train.config import TrainConfig
    from train.rsus_fit import RSUSFitConfig

    with pytest.raises(ConfigError, match=r"TrainConfig.env_config.rsus_options: unknown config key 'n_sampels' "
                                          r"\(valid keys: .*\); did you mean 'n_samples'\?"):
        TrainConfig.from_dict({"env_config": {"rsus_options": {"n_sampels": 3}}})
    with pytest.raises(ConfigError, match=r"TrainConfig.env_config: unknown config key 'rsus_optons' .*did you mean "
                                          r"'rsus_options'\?"):
        TrainConfig.from_dict({"env_config": {"rsus_optons": {}}})
    with pytest.raises(ConfigError, match=r"TrainConfig.env_config.fact_holdout.share must be in \(0, 1\)"):
        TrainConfig.from_dict({"env_config": {"fact_holdout": {"share": 2}}})
    with pytest.raises(ConfigError, match=r"TrainConfig.env_config.rsus_options: key 'n_samples' must be an integer"):
        TrainConfig.from_dict({"env_config": {"rsus_options": {"n_samples": "many"}}})
    methods = [{"name": "CoT", "kind": "never"}, {"name": "X", "kind": "always", "env": {"fact_holdout": {"shar": 0.3}}}]
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['X'\].env.fact_holdout: unknown config key 'shar' "
                                          r".*did you mean 'share'\?"):
        BenchConfig.from_dict({"methods": methods})
    with pytest.raises(ConfigError, match=r"BenchConfig.env.rsus_options: unknown config key 'agrement'"):
        BenchConfig.from_dict({"env": {"rsus_options": {"agrement": "exact"}}, "methods": methods[:1]})
    with pytest.raises(ConfigError, match=r"RSUSFitConfig.env.reasoner_service: expected \{name, namespace, replicas\}"):
        RSUSFitConfig.from_dict({"env": {"reasoner_service": {"name": "x"}}})


def test_a_typo_in_a_yaml_file_names_the_file_and_the_key_path(tmp_path):
    from eval.bench.policies import load_config
    from train.config import TrainConfig

    p = tmp_path / "train.yaml"
    p.write_text("env_config:\n  rsus_options: {n_sampels: 2}\n")
    with pytest.raises(ConfigError, match=r"train.yaml.env_config.rsus_options: unknown config key 'n_sampels'"):
        TrainConfig.from_yaml(p)
    p = tmp_path / "bench.yaml"
    p.write_text("methods:\n  - {name: CoT, kind: never}\n  - {name: F, kind: always, env: {fact_holdout: {shar: 1}}}\n")
    with pytest.raises(ConfigError, match=r"bench.yaml.methods\['F'\].env.fact_holdout: unknown config key 'shar'"):
        load_config(str(p))


def test_a_method_override_is_typed_and_validated_with_the_bench_env():
    from eval.bench.policies import BenchConfig

    def bench(env):
        return BenchConfig.from_dict({"methods": [{"name": "CoT", "kind": "never"},
                                                  {"name": "S", "kind": "always", "env": env}]})

    m = bench({"top_k": "5", "rsus_options": {"n_samples": 4}}).methods[1]
    assert m.env.get("top_k") == 5 and m.env.get("rsus_options").n_samples == 4  # coerced as the EnvConfig field
    assert m.env.to_dict() == {"top_k": 5, "rsus_options": {"n_samples": 4}}  # the keys given, nothing more
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['S'\].env: key 'top_k' must be an integer"):
        bench({"top_k": "five"})
    # cross-field: the override must make a valid env with the bench's (it has no 'eigen' signal)
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['S'\].env: self_refine 'eigenscore' .*add 'eigen'"):
        bench({"self_refine": "eigenscore"})
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['S'\].env.rsus_options.agreement must be jaccard"):
        bench({"rsus_options": {"agreement": "fuzzy"}})


def test_with_overrides_replaces_whole_keys_and_validates():
    base = EnvConfig.from_dict({"rsus_options": {"n_samples": 2, "agreement": "exact"}, "top_k": 4})
    new = base.with_overrides({"rsus_options": {"bm25_k": 5}, "injection": "front"})
    assert new.rsus_options.to_dict() == {"bm25_k": 5}  # a key replaces the whole value, as a method's env always did
    assert (new.injection, new.top_k) == ("front", 4) and base.injection == "step"
    assert base.with_overrides({}) is base and base.with_overrides(None) is base
    with pytest.raises(ConfigError, match=r"M.env: unknown config key 'injektion' .*did you mean 'injection'"):
        base.with_overrides({"injektion": "front"}, where="M.env")
    with pytest.raises(ConfigError, match=r"M.env: injection must be 'step' or 'front'"):
        base.with_overrides({"injection": "middle"}, where="M.env")


def test_presets_are_merged_in_one_place():
    """``EnvConfig.from_preset`` is the only code that reads a preset's settings (no ``{**PRESETS[…], …}`` merges
    elsewhere); a config class applies its preset once, on load."""
    import ast

    root = Path(__file__).resolve().parents[1]
    readers = []
    for pkg in ("envs", "agents", "policies", "train", "eval", "kairos", "scripts"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                is_read = (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                           and node.value.id == "PRESETS") or (
                    isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "PRESETS" and node.attr in ("get", "items", "values", "copy"))
                if is_read:
                    readers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert readers and all(r.startswith("envs/env_config.py:") for r in readers), readers
    assert len({r.split(":")[0] for r in readers}) == 1


def test_train_config_carries_its_env_and_another_env_takes_the_new_preset():
    from train.config import TrainConfig

    cfg = TrainConfig.from_dict({"env_config": {"split": "dev", "max_steps": 3}})
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg  # reloads as itself (config.json, sweep trials)
    hot = cfg.replace(env="hotpotqa")  # e.g. `--env hotpotqa`: the run's own keys over the hotpotqa preset
    assert (hot.env_config.reasoner, hot.env_config.max_steps, hot.env_config.split) == ("hf", 3, "dev")
    assert cfg.replace(iterations=3).env_config == cfg.env_config
