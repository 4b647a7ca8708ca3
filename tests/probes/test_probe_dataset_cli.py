"""Labelled step datasets from the micro-world (cached) and ``kairos probe train`` through subprocess."""

import json
import subprocess
import sys

import numpy as np
import pytest

from agents.reasoners.base import Step
from envs.core.microworld.kb import render_fact
from envs.core.microworld.labels import SPLIT_TO_KIND
from envs.core.microworld.questions import gold_chain
from policies.probes import Probe, ProbeMismatchError
from policies.probes.dataset import (
    StepDataset,
    artifact_fingerprint,
    build_step_dataset,
    dataset_cache_path,
    select_questions,
    world_model_id,
)

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


class ScriptedReasoner:
    """Step 1 states the true first fact; step 2 a false second fact; 3+-hop chains get an empty step."""

    max_step_tokens = 24

    def __init__(self, world):
        self.world = world
        self.by_text = {q.text: q for qs in world.questions.values() for q in qs}

    def _step(self, i, content, wrong):
        h = np.full((3, 4), float(i), dtype=np.float32) + wrong
        return Step(i, f"Step {i} : {content}", content, False, logprobs=np.log([0.9, 0.5 if wrong else 0.9]),
                    entropies=np.ones(2), maxprobs=np.ones(2), hidden_mean=h, hidden_last=h)

    def run_chains(self, texts, max_steps):
        kb = self.world.kb
        chains = []
        for t in texts:
            q = self.by_text[t]
            gold = gold_chain(kb, q)
            chain = [self._step(1, gold[0].sentence, 0)]
            if q.hops >= 2:
                f = gold[1]
                other = next(e for e in kb.entities[kb.entity_type[f.object]] if e not in (f.object, f.subject))
                chain.append(self._step(2, render_fact(f.subject, f.relation, other), 1))
            if q.hops >= 3:
                chain.append(Step(3, "Step 3 :", "", False, logprobs=np.array([]), hidden_mean=None))
            chain.append(Step(len(chain) + 1, "Answer : x", "x", True))
            chains.append(chain)
        return chains


def test_dataset_labels_subjects_and_cache(tiny_world, tmp_path):
    r = ScriptedReasoner(tiny_world)
    ds = build_step_dataset(tiny_world, "train", n_questions=30, cache_dir=tmp_path, reasoner=r)
    qs = select_questions(tiny_world.questions["train"], 30, 0)
    assert {q.hops for q in qs} == {1, 2, 3}  # hop-balanced
    assert len(ds) == sum(1 + (q.hops >= 2) for q in qs)
    assert ds.meta["skipped_steps"] == sum(q.hops >= 3 for q in qs)
    assert ds.hidden_mean.shape == (len(ds), 3, 4) and ds.output.shape == (len(ds), 4)
    first = ds.step_index == 1
    assert (ds.labels[first] == 0).all() and (ds.label_names[first] == "correct").all()
    assert (ds.labels[~first] == 1).all() and (ds.label_names[~first] == "wrong").all()
    assert set(ds.error_kinds[first]) == {""} and set(ds.error_kinds[~first]) <= set(SPLIT_TO_KIND.values())
    by_id = {q.id: q for q in qs}
    for qid, subj, idx in zip(ds.question_ids, ds.subjects, ds.step_index):
        assert subj == gold_chain(tiny_world.kb, by_id[qid])[idx - 1].subject
    np.testing.assert_allclose(ds.output_column("minprob")[~first], 0.5, rtol=1e-6)
    # cached: a second call does not generate
    r.run_chains = None
    again = build_step_dataset(tiny_world, "train", n_questions=30, cache_dir=tmp_path, reasoner=r)
    assert np.array_equal(again.labels, ds.labels) and list(again.contents) == list(ds.contents)
    assert len(list(tmp_path.glob("steps-*.npz"))) == 1
    fp = artifact_fingerprint(tiny_world.path)
    assert (tmp_path / dataset_cache_path(tmp_path, fp, [q.id for q in qs], 24, "ScriptedReasoner").name).is_file()
    assert world_model_id(tiny_world) == f"microworld:tiny@{fp}"
    with pytest.raises(ValueError, match="unknown question split 'val'"):
        build_step_dataset(tiny_world, "val", cache_dir=tmp_path)


def test_dataset_with_the_real_reasoner_runs(tiny_world, tmp_path):
    # the tiny LM is barely trained: it may write no step with content tokens, which is a clear error
    try:
        ds = build_step_dataset(tiny_world, "dev", n_questions=6, cache_dir=tmp_path)
    except ValueError as e:
        assert "no labelled steps" in str(e)
    else:
        assert ds.hidden_mean.shape[1:] == (3, 32) and len(ds) == len(ds.question_ids)


def _synthetic(qs, seed):
    """Two steps per question; errors take a larger layer-0 -> 1 step (PUlSE-separable)."""
    rng = np.random.default_rng(seed)
    n = 2 * len(qs)
    y = rng.integers(0, 2, n).astype(np.int8)
    h = rng.normal(size=(n, 3, 32)).astype(np.float32)
    h[:, 1] = h[:, 0] + rng.normal(size=(n, 32)) * (0.2 + 1.0 * y[:, None])
    h[:, 2] = h[:, 1] + 0.1 * rng.normal(size=(n, 32))
    kinds = np.where(y == 1, np.where(rng.random(n) < 0.5, "unseen", "mislearned"), "")
    ids = np.repeat([q.id for q in qs], 2)
    return StepDataset(
        hidden_mean=h, hidden_last=h, output=rng.uniform(0.1, 2, (n, 4)).astype(np.float32), labels=y,
        label_names=np.where(y == 1, "wrong", "correct"), error_kinds=kinds, question_ids=ids,
        subjects=np.repeat([q.head for q in qs], 2), relations=np.repeat([q.path[0] for q in qs], 2),
        step_index=np.tile([1, 2], len(qs)).astype(np.int16), hops=np.repeat([q.hops for q in qs], 2).astype(np.int8),
        question_correct=np.zeros(n, bool), contents=np.array(["A 's mother is B ."] * n), meta={"synthetic": True})


def test_cli_probe_train_on_tiny_world(tiny_world, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "probe"
    fp = artifact_fingerprint(tiny_world.path)
    for split, n, seed in (("train", 60, 0), ("dev", 20, 1)):
        qs = select_questions(tiny_world.questions[split], n, 0)
        _synthetic(qs, seed).save(dataset_cache_path(cache, fp, [q.id for q in qs], 24))
    cmd = [sys.executable, "-m", "eval", "probe", "train", "--signal", "pulse", "--artifact", str(tiny_world.path),
           "--out", str(out), "--n-questions", "60", "--n-eval-questions", "20", "--cache-dir", str(cache),
           "--n-boot", "20", "--max-epochs", "60", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["spec"]["layers"] == [0, 2] and report["n_features"] == 4
    assert report["data"]["steps"] == 120 and report["data"]["val_steps"] == 36  # 30% of 60 questions x 2
    assert report["val"]["probe"]["auroc"] > 0.8 and report["eval"]["probe"]["auroc"] > 0.8
    assert {"ppl", "minprob", "coe_r"} <= set(report["val"]) and "unseen" in report["val"]["by_error_kind"]
    from policies.probes.pipeline import format_report

    text = format_report(report)
    assert "Detection on validation steps" in text and "held-out 'dev' questions" in text and "by error kind" in text
    lo, hi = report["val"]["probe"]["auroc_ci95"]
    assert lo <= report["val"]["probe"]["auroc"] <= hi
    assert (out / "probe.json").is_file() and (out / "weights.safetensors").is_file() and (out / "metrics.json").is_file()
    model_id = world_model_id(tiny_world)
    probe = Probe.load(out, expected_model_id=model_id, expected_spec={"layers": (0, 2), "pooling": "mean"})
    assert probe.info["metrics"]["val"]["probe"]["auroc"] == report["val"]["probe"]["auroc"]
    with pytest.raises(ProbeMismatchError, match=f"'{model_id}'.*'microworld:default@0123'"):
        Probe.load(out, expected_model_id="microworld:default@0123")
    with pytest.raises(ProbeMismatchError, match=r"layer interval \[0, 2\].*layer interval \[1, 2\]"):
        Probe.load(out, expected_spec={"layers": (1, 2)})


def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    from eval.cli import main

    assert main(["probe", "train", "--artifact", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no micro-world artifact" in capsys.readouterr().err
    assert main(["probe", "train", "--signal", "plse", "--out", str(tmp_path / "o")]) == 2
    assert "unknown signal 'plse'" in capsys.readouterr().err
    assert main(["probe", "train", "--layers", "5,2", "--out", str(tmp_path / "o")]) == 2
    assert "0 <= a < b" in capsys.readouterr().err


def test_pulse_interval_chosen_on_validation(tmp_path):
    """``layers: chosen`` fits a probe per interval and keeps the best validation AUROC: the errors' signal sits in
    the 3 -> 4 transition only, so every interval without it is near chance and the chosen one ends at row 4; the
    env reads the interval recorded with the probe (``pulse_layers_from``)."""
    from envs.components import probe_pulse_layers
    from envs.env_config import EnvConfig
    from policies.probes.pipeline import ProbeTrainConfig, candidate_intervals, choose_interval

    assert candidate_intervals(4) == [(0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (2, 4)]
    assert len(candidate_intervals(28)) < 80 and (0, 28) in candidate_intervals(28)
    rng = np.random.default_rng(0)
    n = 600
    y = rng.integers(0, 2, n).astype(np.int8)
    h = np.cumsum(rng.normal(size=(n, 5, 16)), axis=1).astype(np.float32)  # random-walk trajectories
    h[:, 4] = h[:, 3] + rng.normal(size=(n, 16)) * (0.3 + 1.5 * y[:, None])  # errors: a big last transition
    ds = StepDataset(hidden_mean=h, hidden_last=h, output=np.ones((n, 4), np.float32), labels=y,
                     label_names=np.where(y == 1, "wrong", "correct"), error_kinds=np.where(y == 1, "unseen", ""),
                     question_ids=np.arange(n).astype(str), subjects=np.full(n, "A"), relations=np.full(n, "mother"),
                     step_index=np.ones(n, np.int16), hops=np.ones(n, np.int8), question_correct=np.zeros(n, bool),
                     contents=np.array(["A 's mother is B ."] * n), meta={})
    cfg = ProbeTrainConfig(layers="chosen", max_epochs=40, patience=10, n_boot=0)
    search = choose_interval(cfg, ds, np.arange(400), np.arange(400, n), 4, "synthetic")
    auc = search["val_auroc"]
    assert search["on"] == "validation" and set(auc) == {f"{a},{b}" for a, b in candidate_intervals(4)}
    assert search["chosen"][1] == 4 and auc[",".join(map(str, search["chosen"]))] == max(auc.values()) > 0.85
    assert max(auc["0,2"], auc["0,3"], auc["1,3"]) < 0.65  # without the 3 -> 4 transition: near chance
    # the env takes the interval recorded with a probe; a disagreeing explicit one is an error naming both
    probe = tmp_path / "pulse"
    probe.mkdir()
    (probe / "probe.json").write_text(json.dumps({"spec": {"signal": "pulse", "layers": search["chosen"]}}))
    cfg_env = EnvConfig(pulse_layers_from=str(probe))
    assert probe_pulse_layers(cfg_env) == search["chosen"]
    with pytest.raises(ValueError, match=r"disagrees with the interval"):
        probe_pulse_layers(cfg_env.replace(pulse_layers=[0, 1]))
    (probe / "probe.json").write_text(json.dumps({"spec": {"signal": "reprobe"}}))
    with pytest.raises(ValueError, match="not a PUlSE one"):
        probe_pulse_layers(cfg_env)
    with pytest.raises(ValueError, match="'chosen' searches PUlSE intervals"):
        ProbeTrainConfig.from_dict({"signal": "reprobe", "layers": "chosen"})


def test_dataset_under_a_fact_holdout_samples_only_the_kept_questions(tiny_world, tmp_path):
    from envs.core.config import ConfigError
    from envs.microworld.task import MicroWorldTask, holdout_facts
    from policies.probes.pipeline import ProbeTrainConfig

    held = holdout_facts(tiny_world.kb, 0.33, 0)
    train_h, test_h = ({"share": 0.33, "seed": 0, "keep": k} for k in ("train", "test"))
    ds = build_step_dataset(tiny_world, "train", n_questions=None, cache_dir=tmp_path,
                            reasoner=ScriptedReasoner(tiny_world), fact_holdout=train_h)
    kept = {q.id for q in MicroWorldTask(tiny_world, "train", train_h).questions}
    assert kept and set(ds.question_ids) <= kept
    by_id = {q.id: q for q in tiny_world.questions["train"]}
    for qid in set(ds.question_ids):  # no step of the probe's data comes from a chain that needs a held-out fact
        assert not held & {f.id for f in gold_chain(tiny_world.kb, by_id[qid])}
    ev = build_step_dataset(tiny_world, "dev", n_questions=None, cache_dir=tmp_path,
                            reasoner=ScriptedReasoner(tiny_world), fact_holdout=test_h)
    by_id = {q.id: q for q in tiny_world.questions["dev"]}
    for qid in set(ev.question_ids):  # the held-out evaluation: every chain needs one
        assert held & {f.id for f in gold_chain(tiny_world.kb, by_id[qid])}
    assert ProbeTrainConfig(fact_holdout="0.33, 0").holdout("test") == test_h
    for bad, match in (("0.33", "must be 'share,seed'"), ("1.5,0", r"fact_holdout.share must be in \(0, 1\)")):
        with pytest.raises(ConfigError, match=match):
            ProbeTrainConfig(fact_holdout=bad).validate()


def test_cli_probe_train_under_a_fact_holdout_reports_held_out_and_seen_facts(tiny_world, tmp_path):
    from envs.microworld.task import MicroWorldTask, holdout_facts

    cache, out = tmp_path / "cache", tmp_path / "probe"
    fp = artifact_fingerprint(tiny_world.path)
    for split, n, seed, keep in (("train", 60, 0, "train"), ("dev", 20, 1, "test")):
        pool = MicroWorldTask(tiny_world, split, {"share": 0.33, "seed": 0, "keep": keep}).questions
        qs = select_questions(pool, n, 0)
        _synthetic(qs, seed).save(dataset_cache_path(cache, fp, [q.id for q in qs], 24))
    cmd = [sys.executable, "-m", "eval", "probe", "train", "--signal", "pulse", "--artifact", str(tiny_world.path),
           "--out", str(out), "--n-questions", "60", "--n-eval-questions", "20", "--cache-dir", str(cache),
           "--n-boot", "0", "--max-epochs", "30", "--fact-holdout", "0.33,0", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["eval"]["fact_holdout"] == {"share": 0.33, "seed": 0, "keep": "test"}
    by_fact = report["eval"]["by_fact"]
    held = holdout_facts(tiny_world.kb, 0.33, 0)
    dev = {q.id: q for q in tiny_world.questions["dev"]}
    qs = select_questions(MicroWorldTask(tiny_world, "dev", report["eval"]["fact_holdout"]).questions, 20, 0)
    n_held = sum(gold_chain(tiny_world.kb, dev[q.id])[i].id in held for q in qs for i in range(2))
    assert by_fact["held_out"]["n"] == n_held and by_fact["held_out"]["n"] + by_fact["seen"]["n"] == 40
    assert 0.0 <= by_fact["held_out"]["probe"] <= 1.0 and "entropy" in by_fact["seen"]
    bad = subprocess.run(cmd[:-3] + ["--fact-holdout", "0.33"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bad.returncode != 0 and "fact_holdout must be 'share,seed'" in bad.stderr
