"""User plug-ins named in a config (``plugins: [module, …]``): imported on the driver before the config is checked,
carried by the env to every process that rebuilds it (an EnvRunner's env factory here, in a fresh interpreter);
a plug-in's signal is named in ``EnvConfig.signals`` and a threshold method's ``signal``, its trigger in a bench
method, its cost in ``EnvConfig.costs``. Unknown cost names fail on the driver."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envs.core.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "plugins"
PLUGIN = "kairos_demo_plugin"

TRAIN_YAML = """\
plugins: [{plugin}]
iterations: 1
env_config:
  split: dev
  rsus_components: [ent]
  signals: [output, demo_words]
  costs: {{retrieval_calls: 0.1, demo_steps: 0.01}}
"""


@pytest.fixture
def plugin_on_path(monkeypatch):
    """The fixture folder on sys.path; the plug-in's registrations undone afterwards (other tests list the
    registries)."""
    from agents.signals.base import SIGNALS
    from envs.core import plugins
    from envs.costs import COSTS
    from policies.triggers import TRIGGERS

    monkeypatch.syspath_prepend(str(FIXTURES))
    yield
    for reg, name in ((SIGNALS, "demo_words"), (TRIGGERS, "demo_first_two"), (COSTS, "demo_steps")):
        if name in reg:
            reg.unregister(name)
    sys.modules.pop(PLUGIN, None)
    if PLUGIN in plugins._IMPORTED:
        plugins._IMPORTED.remove(PLUGIN)


@pytest.mark.slow
def test_a_train_yaml_imports_its_plugins_on_the_driver_and_its_env_carries_them(tmp_path, plugin_on_path):
    from train.config import TrainConfig

    bare = tmp_path / "bare.yaml"  # the same config without the key: the names are unknown
    bare.write_text(TRAIN_YAML.format(plugin=PLUGIN).split("\n", 1)[1])
    with pytest.raises(ConfigError, match=r"bare.yaml.env_config: unknown observation group 'demo_words'"):
        TrainConfig.from_yaml(bare)
    missing = tmp_path / "missing.yaml"
    missing.write_text(TRAIN_YAML.format(plugin="no_such_plugin_module"))
    with pytest.raises(ConfigError, match=r"missing.yaml.plugins: cannot import plug-in module "
                                          r"'no_such_plugin_module' \(No module named"):
        TrainConfig.from_yaml(missing)
    p = tmp_path / "train.yaml"
    p.write_text(TRAIN_YAML.format(plugin=PLUGIN))
    cfg = TrainConfig.from_yaml(p)
    assert cfg.plugins == [PLUGIN] and cfg.env_config.plugins == [PLUGIN]
    assert cfg.env_config.signals == ["output", "demo_words"] and "demo_steps" in cfg.env_config.costs
    assert TrainConfig.from_dict(cfg.to_dict()).env_config == cfg.env_config  # reloads as itself

    # an EnvRunner's process: the env factory RLlib calls rebuilds the driver's EnvConfig from its dict
    ctx = tmp_path / "env.json"
    ctx.write_text(json.dumps({**cfg.env_config.to_dict(), "_env": "microworld", "cache_path": None}))
    script = ("import json, sys\n"
              "from train.env_factory import make_env\n"
              "assert 'kairos_demo_plugin' not in sys.modules\n"
              "env = make_env(json.load(open(sys.argv[1])))\n"
              "obs, info = env.reset(options={'question_index': 0})\n"
              "_, _, _, _, info2 = env.step(1)\n"
              "print(json.dumps({'obs': sorted(obs), 'words': info['signals'].get('demo_words'),\n"
              "                  'costs': info2['costs']}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(FIXTURES)])}
    out = subprocess.run([sys.executable, "-c", script, str(ctx)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "demo_words" in got["obs"] and got["words"] > 0
    assert got["costs"]["demo_steps"] == 1.0


def test_costs_are_checked_on_the_driver_naming_the_key():
    from envs.env_config import EnvConfig
    from train.config import TrainConfig

    with pytest.raises(ConfigError, match=r"TrainConfig.env_config.costs: unknown cost 'tokenz' \(registered: "
                                          r"retrieval_calls"):
        TrainConfig.from_dict({"env_config": {"costs": {"retrieval_calls": 0.1, "tokenz": 1.0}}})
    with pytest.raises(ConfigError, match=r"EnvConfig.cost_params: unknown cost 'latncy'"):
        EnvConfig.from_dict({"cost_params": {"latncy": {"mode": "measured"}}})
    with pytest.raises(ConfigError, match=r"EnvConfig.cost_params: params given for 'latency', which has no weight"):
        EnvConfig.from_dict({"cost_params": {"latency": {"mode": "measured"}}})
    with pytest.raises(ConfigError, match=r"EnvConfig.costs: .*cannot import"):
        EnvConfig.from_dict({"costs": {"nopkg.costs:Gpu": 1.0}})


@pytest.mark.slow
def test_a_bench_yaml_names_a_plugins_signal_and_trigger(tmp_path, plugin_on_path):
    from eval.bench.policies import load_config, run_bench

    p = tmp_path / "bench.yaml"
    p.write_text(f"""\
plugins: [{PLUGIN}]
name: plugin
out_dir: {tmp_path / 'bench'}
env: {{split: dev, rsus_components: [ent], signals: [output, demo_words], cache_path: {tmp_path / 'c.sqlite'}}}
dev: "0:2"
test: "2:5"
n_resamples: 200
test_curves: false
methods:
  - {{name: CoT, kind: never}}
  - {{name: Words, kind: threshold, signal: demo_words, direction: above, thresholds: [3.5, 100]}}
  - {{name: FirstTwo, kind: trigger, trigger: demo_first_two}}
""")
    cfg = load_config(str(p))
    assert cfg.env.plugins == [PLUGIN]
    s = run_bench(cfg)
    assert not s["skipped"] and {"Words", "FirstTwo"} <= set(s["methods"])
    sweep = {r["threshold"]: r for r in s["calibration"]["Words"]["sweep"]}  # the grid and the never-fire point
    assert list(sweep) == ["never", 3.5, 100] and s["calibration"]["Words"]["chosen"] in sweep
    assert sweep[3.5]["calls"] > 0  # the plug-in's signal reached the trigger
    assert 0 < s["methods"]["FirstTwo"]["calls"] <= 2


def test_the_env_of_a_yaml_with_plugins_carries_them(tmp_path, plugin_on_path):
    """``kairos.read_env_config`` (``kairos answer --env-config``, ``Pipeline``): a training or bench YAML's
    top-level plug-ins are its env's."""
    from kairos.pipeline import read_env_config

    p = tmp_path / "t.yaml"
    p.write_text(TRAIN_YAML.format(plugin=PLUGIN))
    env = read_env_config(p)
    assert env.plugins == [PLUGIN] and env.signals == ["output", "demo_words"]
    p.write_text(f"plugins: [{PLUGIN}]\nenv: {{split: dev, signals: [output, demo_words]}}\n")
    assert read_env_config(p).plugins == [PLUGIN]
