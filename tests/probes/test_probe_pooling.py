"""PUlSE's pooling over a step's tokens (``FeatureSpec.pooling``: mean | last | max | token_mean), the pooling chosen
on validation, and the shipped probe the PUlSE rows load."""

import math

import numpy as np
import pytest

from agents.reasoners.base import Step
from agents.signals.base import SignalUnavailable
from agents.signals.hidden import Pulse, pool_token_transitions, pulse_features, transitions
from policies.probes.dataset import StepDataset, token_pooled_columns
from policies.probes.probe import FeatureSpec

#: a hand-made step: 2 content tokens, layers 0..2, width 2 — [T, L+1, d]
STATES = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]],    # token 1: m = [sqrt 2, 1], theta = [pi/2, 0]
                   [[1.0, 0.0], [2.0, 0.0], [2.0, 0.0]]])   # token 2: m = [1, 0],      theta = [0, 0]


def _step(states=STATES, with_tokens=True):
    import torch

    from agents.reasoners.stepgen import token_transitions

    tt = token_transitions(torch.tensor(states)) if with_tokens else None
    return Step(1, "Step 1 : x", "x", False, hidden_mean=states.mean(0), hidden_last=states[-1],
                token_transitions=tt)


def test_token_transitions_are_numpys_pulse_transitions_per_token():
    m, theta = transitions(STATES)
    tt = _step().token_transitions
    assert tt.shape == (2, 2, 2)
    np.testing.assert_allclose(tt[:, 0], m, atol=1e-6)
    np.testing.assert_allclose(tt[:, 1], theta, atol=1e-6)


def test_pooling_changes_the_features_as_specified():
    """Hand-computed features of each pooling: the max / mean of the per-token features, the last token's, and the
    features of the mean-pooled states (which are not the mean of the per-token features)."""
    r2, half_pi = math.sqrt(2), math.pi / 2
    mean_states = STATES.mean(0)  # rows [1, 0], [1, .5], [1, 1]
    want = {
        "max": [r2, 1.0, half_pi, 0.0],
        "token_mean": [(r2 + 1) / 2, 0.5, half_pi / 2, 0.0],
        "last": [1.0, 0.0, 0.0, 0.0],
        "mean": [0.5, 0.5, math.atan(0.5), math.acos(1.5 / math.sqrt(1.25 * 2))],
    }
    np.testing.assert_allclose(pulse_features(mean_states, (0, 2)), want["mean"], atol=1e-6)
    step = _step()
    got = {}
    for pooling, expected in want.items():
        spec = FeatureSpec("pulse", layers=(0, 2), pooling=pooling)
        got[pooling] = spec.step_features(step)[0]
        np.testing.assert_allclose(got[pooling], expected, atol=1e-5, err_msg=pooling)
        # the env's PUlSE signal reads the same features
        np.testing.assert_allclose(Pulse(layers=(0, 2), pooling=pooling)(step), expected, atol=1e-5)
    assert len({tuple(np.round(v, 4)) for v in got.values()}) == 4  # four different feature vectors
    # a narrower interval slices the pooled transitions like pulse_features slices rows
    np.testing.assert_allclose(FeatureSpec("pulse", layers=(1, 2), pooling="max").step_features(step)[0], [1.0, 0.0],
                               atol=1e-6)
    np.testing.assert_allclose(FeatureSpec("pulse", layers=(0, 2), pooling="max", parts="angle").step_features(step)[0],
                               [half_pi, 0.0], atol=1e-6)


def test_a_dataset_scores_like_the_live_step():
    """The step dataset's extra columns (what probes train on) give the live step's features for every pooling."""
    step = _step()
    cols = token_pooled_columns(step)
    assert set(cols) == {"pulse_max", "pulse_token_mean"}
    np.testing.assert_allclose(cols["pulse_max"], pool_token_transitions(step.token_transitions, "max"))
    ds = StepDataset.from_columns({
        "hidden_mean": [step.hidden_mean], "hidden_last": [step.hidden_last], "output": [np.ones(4)],
        "labels": [0], "label_names": ["correct"], "error_kinds": [""], "question_ids": ["q"], "subjects": ["A"],
        "relations": ["mother"], "step_index": [1], "hops": [1], "question_correct": [True], "contents": ["x"],
        **{k: [v] for k, v in cols.items()}}, {})
    for pooling in ("mean", "last", "max", "token_mean"):
        spec = FeatureSpec("pulse", layers=(0, 2), pooling=pooling)
        np.testing.assert_allclose(ds.features(spec), spec.step_features(step), atol=1e-6, err_msg=pooling)
    # subset / concat / save keep the extra columns
    both = StepDataset.concat(ds, ds.subset(np.array([0])))
    assert both.extras["pulse_max"].shape == (2, 2, 2)


def test_missing_per_token_transitions_are_masked_or_a_clear_error(tmp_path):
    step = _step(with_tokens=False)
    with pytest.raises(SignalUnavailable, match="per-token layer transitions"):
        FeatureSpec("pulse", layers=(0, 2), pooling="max").step_features(step)
    assert token_pooled_columns(step) == {}
    with pytest.raises(ValueError, match="unknown pooling 'max' for a reprobe probe"):
        FeatureSpec("reprobe", pooling="max")
    from envs.core.config import ConfigError
    from policies.probes.pipeline import ProbeTrainConfig

    with pytest.raises(ConfigError, match="unknown pooling 'median'"):
        ProbeTrainConfig.from_dict({"pooling": "median"})
    with pytest.raises(ConfigError, match="pooling 'chosen' searches PUlSE poolings"):
        ProbeTrainConfig.from_dict({"signal": "reprobe", "pooling": "chosen"})


def _synthetic_with_tokens(qs, seed, signal="max"):
    """Two steps per question; errors have ONE token with a large layer 0 -> 1 change: visible to max pooling of the
    per-token features, diluted in the mean-pooled states and in the token mean."""
    rng = np.random.default_rng(seed)
    n, T, L = 2 * len(qs), 12, 2
    y = rng.integers(0, 2, n).astype(np.int8)
    tt = np.abs(rng.normal(1.0, 0.3, size=(n, T, 2, L))).astype(np.float32)
    spike = rng.integers(0, T, n)
    tt[np.arange(n), spike, 0, 0] += 1.2 * y  # one token's magnitude
    tt[np.arange(n), (spike + 1) % T, 0, 0] -= 1.2 * y * (rng.random(n) < 0.5)  # keeps the token mean uninformative
    h = rng.normal(size=(n, L + 1, 16)).astype(np.float32)  # states: no signal
    return StepDataset(
        hidden_mean=h, hidden_last=h, output=rng.uniform(0.1, 2, (n, 4)).astype(np.float32), labels=y,
        label_names=np.where(y == 1, "wrong", "correct"), error_kinds=np.where(y == 1, "unseen", ""),
        question_ids=np.repeat([q.id for q in qs], 2), subjects=np.repeat([q.head for q in qs], 2),
        relations=np.repeat([q.path[0] for q in qs], 2), step_index=np.tile([1, 2], len(qs)).astype(np.int16),
        hops=np.repeat([q.hops for q in qs], 2).astype(np.int8), question_correct=np.zeros(n, bool),
        contents=np.array(["A 's mother is B ."] * n), meta={"synthetic": True},
        extras={"pulse_max": tt.max(1), "pulse_token_mean": tt.mean(1)})


def test_pooling_and_interval_chosen_on_validation_are_recorded_with_the_probe(tiny_world, tmp_path):
    """``--pooling chosen --layers chosen``: every pooling with its interval search, max pooling wins on validation
    (the only one that sees the errors' one-token spike); the probe records both searches and each pooling's
    held-out AUROC (reported, not chosen on)."""
    from envs.core.microworld.artifact import artifact_fingerprint, world_model_id
    from policies.probes.dataset import dataset_cache_path, select_questions
    from policies.probes.pipeline import ProbeTrainConfig, format_report, train_probe
    from policies.probes.probe import Probe

    cache, out = tmp_path / "cache", tmp_path / "probe"
    fp = artifact_fingerprint(tiny_world.path)
    for split, n, seed in (("train", 100, 0), ("dev", 40, 1)):
        qs = select_questions(tiny_world.questions[split], n, 0)
        _synthetic_with_tokens(qs, seed).save(dataset_cache_path(cache, fp, [q.id for q in qs], 24))
    cfg = ProbeTrainConfig(artifact=str(tiny_world.path), out=str(out), n_questions=100, n_eval_questions=40,
                           cache_dir=str(cache), n_boot=0, max_epochs=40, patience=10, layers="chosen",
                           pooling="chosen")
    _, report = train_probe(cfg)
    ps = report["pooling_search"]
    assert ps["on"] == "validation" and set(ps["val_auroc"]) == {"mean", "last", "max", "token_mean"}
    assert ps["chosen"] == "max" == report["spec"]["pooling"]
    assert ps["val_auroc"]["max"] == max(ps["val_auroc"].values()) > 0.8
    assert ps["val_auroc"]["mean"] < 0.7 and ps["val_auroc"]["token_mean"] < 0.7
    assert set(ps["eval_auroc"]) == {"split", "mean", "last", "max", "token_mean"} and ps["eval_auroc"]["max"] > 0.8
    assert report["interval_search"]["chosen"] == report["spec"]["layers"] == ps["candidates"]["max"]["layers"]
    assert "PUlSE pooling chosen on validation: max" in format_report(report)
    probe = Probe.load(out, expected_model_id=world_model_id(tiny_world), expected_spec={"pooling": "max"})
    info = probe.info
    assert info["pooling_search"]["chosen"] == "max" and info["interval_search"]["on"] == "validation"
    assert info["train_config"]["pooling"] == "chosen" and info["resolved"]["pooling"] == "max"
    assert all("probe" not in c for c in info["pooling_search"]["candidates"].values())


def _pulse_step_rows():
    """(config, row name, probe path) of every micro-world bench row that thresholds the PUlSE probe."""
    from pathlib import Path

    import yaml

    from envs.env_config import pending_probes
    from eval.bench.config import BenchConfig, bench_env_config

    repo = Path(__file__).resolve().parents[2]
    rows = []
    for path in sorted((repo / "configs").glob("bench_microworld*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        # the config with its PUlSE rows and its reference row alone: other rows may need outputs under runs/ to load (RSUS weights, a
        # U_verb proxy), which a fresh clone does not have
        raw["methods"] = [m for m in raw.get("methods") or [] if m.get("signal") == "pulse_prob"
                          or m.get("name") == raw.get("reference")]
        if not any(m.get("signal") == "pulse_prob" for m in raw["methods"]):
            continue
        # the env these rows run in may read a U_verb proxy the job trains before anything reads it
        proxies = [e["rsus_options"]["verb_proxy"] for e in [raw.get("env") or {}] + [m.get("env") or {} for m in raw["methods"]]
                   if (e.get("rsus_options") or {}).get("verb_proxy")]
        with pending_probes(*proxies):
            cfg = BenchConfig.from_dict(raw, where=str(path))
            rows += [(path.name, m.name, bench_env_config(cfg, m).probes["pulse_prob"]) for m in cfg.methods
                     if getattr(m, "signal", None) == "pulse_prob"]
    return rows


def test_pulse_step_rows_load_the_probe_chosen_on_validation():
    """Every PUlSE row loads (through the env's loader) the shipped probe whose interval and pooling are the
    best validation AUROC of the searches recorded with it; in the env it scores real steps."""
    import gymnasium as gym

    import envs  # noqa: F401
    from envs.core.microworld.artifact import load_artifact, world_model_id
    from envs.env_signals import DETECTORS

    rows = _pulse_step_rows()
    assert any(name == "PUlSE-step[q: step, θ: dev]" for _, name, _ in rows) and len({p for _, _, p in rows}) == 1, rows
    path = rows[0][2]
    world = load_artifact(with_model=False)
    probe = DETECTORS.make("probe", path, expected_model_id=world_model_id(world), model_layers=6)
    info = probe.info
    iv, ps = info["interval_search"], info["pooling_search"]
    assert iv["on"] == ps["on"] == "validation"
    assert list(probe.spec.layers) == iv["chosen"] and iv["val_auroc"][",".join(map(str, iv["chosen"]))] == max(
        iv["val_auroc"].values())
    assert len(iv["val_auroc"]) == 15  # every interval [a, b], b - a >= 2, of the 6-layer model
    assert probe.spec.pooling == ps["chosen"] and ps["val_auroc"][ps["chosen"]] == max(ps["val_auroc"].values())
    assert set(ps["val_auroc"]) == {"mean", "last", "max", "token_mean"}
    assert info["train_config"]["layers"] == info["train_config"]["pooling"] == "chosen"
    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "probes": {"pulse_prob": path}}).unwrapped
    _, step_info = env.reset(options={"question_index": 0})
    assert 0.0 <= step_info["signals"]["pulse_prob"] <= 1.0
