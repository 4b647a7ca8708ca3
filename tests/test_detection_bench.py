"""``kairos bench detection`` end to end on the tiny world with synthetic cached step datasets, and its CLI errors."""

import json

import numpy as np
import pytest

from envs.core.config import ConfigError
from envs.core.microworld.artifact import artifact_fingerprint
from eval.detection.bench import run_bench
from eval.detection.data import DETECTORS, METRICS, DetectionBenchConfig
from eval.detection.rsus import RSUS_DETECTORS
from eval.stats import group_bootstrap_indices
from policies.probes.dataset import StepDataset, dataset_cache_path, select_questions

KINDS = ("mislearned", "conflicting", "unseen", "evidence_only")


def _synthetic(qs, people, seed):
    """Two steps per question. Errors take a larger layer-0 -> 1 step (PUlSE-separable); 'unseen' errors also
    have a low MinProb, MISLEARNED ones are as confident as correct steps."""
    rng = np.random.default_rng(seed)
    n = 2 * len(qs)
    y = (rng.random(n) < 0.35).astype(np.int8)
    h = rng.normal(size=(n, 3, 16)).astype(np.float32)
    h[:, 1] = h[:, 0] + rng.normal(size=(n, 16)) * (0.3 + 1.0 * y[:, None])
    h[:, 2] = h[:, 1] + 0.1 * rng.normal(size=(n, 16))
    kinds = np.where(y == 1, rng.choice(KINDS, n), "")
    minprob = np.where(kinds == "unseen", rng.uniform(0.05, 0.4, n), rng.uniform(0.7, 1.0, n))
    maxprob = np.clip(minprob + 0.05, 0, 1)
    ppl = 1 / minprob
    entropy = 1 - maxprob + rng.uniform(0, 0.1, n)
    output = np.stack([ppl, maxprob, entropy, minprob], axis=1).astype(np.float32)
    subjects = np.array([q.head if i % 2 == 0 else people[rng.integers(len(people))]
                         for q in qs for i in range(2)])
    # each token's PUlSE transitions pooled over the step (the dataset's pulse_max / pulse_token_mean columns, [N, 2, L])
    mag = np.linalg.norm(np.diff(h, axis=1), axis=2)
    tok = np.stack([mag, rng.uniform(0, 1, mag.shape)], axis=1).astype(np.float32)
    return StepDataset(
        hidden_mean=h, hidden_last=h, output=output, labels=y, label_names=np.where(y == 1, "wrong", "correct"),
        error_kinds=kinds, question_ids=np.repeat([q.id for q in qs], 2), subjects=subjects,
        relations=np.repeat([q.path[0] for q in qs], 2), step_index=np.tile([1, 2], len(qs)).astype(np.int16),
        hops=np.repeat([q.hops for q in qs], 2).astype(np.int8), question_correct=np.zeros(n, bool),
        contents=np.array(["A 's mother is B ."] * n), meta={"synthetic": True, "n_questions": len(qs)},
        extras={"pulse_max": 1.5 * tok, "pulse_token_mean": tok})


@pytest.fixture
def seeded_cache(tiny_world, tmp_path):
    """Synthetic step datasets where the benchmark looks for its cache (so nothing is generated)."""
    cache = tmp_path / "cache"
    fp = artifact_fingerprint(tiny_world.path)
    people = tiny_world.kb.entities["person"]
    sizes = {}
    for split, n, seed in (("train", 120, 0), ("test", 60, 1)):
        qs = select_questions(tiny_world.questions[split], n, 0)
        sizes[split] = len(qs)
        _synthetic(qs, people, seed).save(dataset_cache_path(cache, fp, [q.id for q in qs], 24))
    return cache, sizes


def test_end_to_end_outputs_metrics_and_cis(tiny_world, seeded_cache, tmp_path, capsys):
    from eval.cli import main

    cache, sizes = seeded_cache
    out = tmp_path / "out"
    rc = main(["bench", "detection", "--artifact", str(tiny_world.path), "--out", str(out), "--cache-dir", str(cache),
               "--n-train-questions", str(sizes["train"]), "--n-test-questions", str(sizes["test"]),
               "--n-boot", "200", "--max-epochs", "40", "--patience", "8", "--reprobe-max-epochs", "5",
               "--interval-search", "named", "--progress", "false", "--rsus", "false"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "PUlSE probe" in printed and "AUROC" in printed
    for f in ("detection_bench.md", "detection_bench.json", "roc.png"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0
    res = json.loads((out / "detection_bench.json").read_text())
    assert set(res["splits"]) == {"question", "entity"}
    for name, sp in res["splits"].items():
        assert set(sp["detectors"]) == set(DETECTORS) - set(RSUS_DETECTORS)  # rsus: false
        for det, d in sp["detectors"].items():
            for m in METRICS:
                v, (lo, hi) = d[m], d[f"{m}_ci95"]
                assert 0.0 <= v <= 1.0, (name, det, m, v)
                assert lo - 1e-9 <= v <= hi + 1e-9, (name, det, m, v, lo, hi)
        assert sp["detectors"]["pulse"]["auroc"] > 0.75  # the synthetic errors are PUlSE-separable
        assert set(sp["by_error_kind"]) == set(KINDS)
        for row in sp["by_error_kind"].values():
            assert 0 < row["error_ratio"] < 1
            assert all(0 <= r["auroc"] <= 1 and 0 <= r["pr_auc"] <= 1 for r in row["detectors"].values())
        # MinProb sees 'unseen' errors but not MISLEARNED ones (as built)
        assert sp["by_error_kind"]["unseen"]["detectors"]["minprob"]["auroc"] > 0.9
        assert sp["by_error_kind"]["mislearned"]["detectors"]["minprob"]["auroc"] < 0.75
        assert sp["hedging"]["n_hedging_steps"] == 0 and "no step matches" in sp["hedging"]["note"]
        for prefix in ("interval early", "interval whole", "interval chosen on validation", "parts magnitude only",
                       "parts angle only", "parts both", "pooling mean", "pooling last", "pooling max",
                       "pooling token_mean"):
            assert any(k.startswith(prefix) for k in sp["ablations"]), prefix
        # the PUlSE row is the config's pooling (mean): the same scores as its 'pooling mean' ablation row
        pool_mean = next(v for k, v in sp["ablations"].items() if k.startswith("pooling mean"))
        assert sp["pulse_pooling"] == "mean" and pool_mean["test_auroc"] == pytest.approx(sp["detectors"]["pulse"]["auroc"])
        assert sp["interval_search"]["used"] == sp["interval_search"]["chosen"]
    ent = res["splits"]["entity"]["info"]
    assert ent["held_out_subjects"] and ent["test_steps"] < res["data"]["test"]["steps"]
    cal = res["calibration"]["rows"]
    assert {"correct", *KINDS} <= set(cal) and cal["mislearned"]["mean_minprob"] > cal["unseen"]["mean_minprob"]
    md = (out / "detection_bench.md").read_text()
    for title in ("## Main table", "## Per error kind", "## Calibration", "## PUlSE ablations", "## Non-hedging"):
        assert title in md


def test_bootstrap_resamples_whole_questions():
    groups = np.array(["a", "a", "b", "c", "c", "c"])
    for idx in group_bootstrap_indices(groups, 20, seed=0):
        assert len(idx) in range(3, 10)
        for g in np.unique(groups[idx]):  # a question is drawn with all its steps (a multiple of its size)
            assert (groups[idx] == g).sum() % (groups == g).sum() == 0
    a, b = group_bootstrap_indices(groups, 5, 1), group_bootstrap_indices(groups, 5, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_benefit_split_end_to_end_on_microworld_labels(tmp_path):
    """Splits (c) and (d)'s machinery (benefit labels -> regenerated states -> probes -> tables) on micro-world
    labels: (d) fits on one label file and tests on another's questions, never fitted on."""
    import yaml

    from eval.detection.labels import run

    env = {"split": "test", "max_questions": 16, "signals": ["output"], "rsus_components": ["ent"]}
    (tmp_path / "env.yaml").write_text(yaml.safe_dump({"env": env}))
    labels = tmp_path / "labels.jsonl"
    run(env, labels, progress=False)
    out = tmp_path / "out"
    cfg = DetectionBenchConfig(
        splits=["benefit"], out=str(out), benefit_labels=str(labels), benefit_config=str(tmp_path / "env.yaml"),
        benefit_split="test", cache_dir=str(tmp_path / "cache"), n_boot=50, max_epochs=20, patience=5,
        reprobe_max_epochs=3, interval_search="named", progress=False, benefit_folds=1)
    res = run_bench(cfg)
    data = res["data"]["benefit"]
    rows = [json.loads(x) for x in labels.read_text().splitlines()]
    assert data["questions"] == 16 and data["steps"] == sum(len(r["steps"]) for r in rows)
    assert data["label_names"].get("helps", 0) == sum(s["benefit"] > 0 for r in rows for s in r["steps"])
    sp = res["splits"]["benefit"]
    info = sp["info"]
    assert info["train_steps"] + info["test_steps"] == data["steps"] and 1 <= info["test_questions"] < 16
    assert set(sp["detectors"]) == set(DETECTORS) - set(RSUS_DETECTORS)  # RSUS: micro-world splits only
    # k-fold: every labelled step is scored once, out of fold, against its own fold's threshold
    cv = run_bench(cfg.replace(benefit_folds=4, out=str(tmp_path / "cv")))["splits"]["benefit"]
    assert cv["info"]["test_steps"] == data["steps"] and cv["info"]["folds"] == 4
    for d in cv["detectors"].values():
        assert 0 <= d["fire_rate"] <= 1 and len(d["threshold_per_fold"]) == 4
    assert len(cv["interval_search"]["used"]) == 4
    assert "model_id" not in res and "calibration" not in res  # no micro-world split was asked for
    md = (out / "detection_bench.md").read_text()
    assert "(c) benefit" in md and "retrieval helps" in md
    assert (out / "roc.png").stat().st_size > 0
    # (d): fitted on these 16 questions, tested on 8 others' labels (same reasoner); (c) is not asked for
    env2 = {**env, "split": "dev", "max_questions": 8}
    (tmp_path / "env2.yaml").write_text(yaml.safe_dump({"env": env2}))
    labels2 = tmp_path / "labels2.jsonl"
    run(env2, labels2, progress=False)
    ood = run_bench(cfg.replace(splits=["benefit_ood"], out=str(tmp_path / "ood"), ood_labels=str(labels2),
                                ood_config=str(tmp_path / "env2.yaml"), ood_split="dev"))
    assert list(ood["splits"]) == ["benefit_ood"]
    oi = ood["splits"]["benefit_ood"]["info"]
    steps2 = sum(len(json.loads(x)["steps"]) for x in labels2.read_text().splitlines())
    assert oi["train_steps"] == data["steps"] and oi["test_steps"] == steps2 == ood["data"]["benefit_ood"]["steps"]
    assert oi["test_questions"] == 8 and ood["data"]["benefit_ood"]["env_split"] == "dev"
    assert "(d) out of distribution" in (tmp_path / "ood" / "detection_bench.md").read_text()


def test_benefit_split_without_labels_says_how_to_make_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="eval.detection.labels"):
        run_bench(DetectionBenchConfig(splits=["benefit"], benefit_labels=str(tmp_path / "none.jsonl"),
                                       out=str(tmp_path / "o"), progress=False))
    with pytest.raises(FileNotFoundError, match="ood_labels: no benefit-label file"):  # before any chain is rebuilt
        run_bench(DetectionBenchConfig(splits=["benefit_ood"], benefit_labels=str(tmp_path / "none.jsonl"),
                                       ood_labels=str(tmp_path / "none2.jsonl"), ood_config="c.yaml", ood_split="dev",
                                       out=str(tmp_path / "o"), progress=False))
    with pytest.raises(ConfigError, match="benefit_ood' needs ood_labels, ood_config, ood_split"):
        DetectionBenchConfig.from_dict({"splits": ["benefit_ood"]})
    with pytest.raises(ConfigError, match="split 'hotpotqa' is now 'benefit'"):
        DetectionBenchConfig.from_dict({"splits": ["hotpotqa"]})


def test_unknown_split_api_refusal_and_help(tmp_path, capsys):
    from eval.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "detection", "--help"])
    assert e.value.code == 0 and "--n-boot" in capsys.readouterr().out

    assert main(["bench", "detection", "--split", "entiti", "--out", str(tmp_path / "o")]) == 2
    assert "unknown split 'entiti'" in capsys.readouterr().err
    assert main(["bench", "detection", "--pulse-pooling", "maxx", "--out", str(tmp_path / "o")]) == 2
    assert "pulse_pooling must be one of mean, last, max, token_mean, got 'maxx'" in capsys.readouterr().err


def test_shifted_split_needs_its_artifact_and_the_same_lm_shape(tmp_path, tiny_world):
    from envs.core.microworld.artifact import load_artifact
    from eval.detection.data import shifted_test_steps

    world = load_artifact()
    cfg = DetectionBenchConfig(splits=["shifted"], shifted_artifact=str(tmp_path / "nowhere"), progress=False)
    with pytest.raises(FileNotFoundError, match="microworld_shifted.yaml"):
        shifted_test_steps(cfg, world, None)
    cfg = cfg.replace(shifted_artifact=str(tiny_world.path))
    with pytest.raises(ValueError, match="another LM shape"):
        shifted_test_steps(cfg, world, None)


@pytest.mark.slow  # 24 s at load 6 on 2 CPUs, 97 s at load 10: 60 questions' chains replayed and sampled
def test_rsus_rows_on_a_tiny_config_of_the_shipped_world(tmp_path):
    """RSUS in the detection benchmark (eval.detection.rsus): every RSUS row on the micro-world split with a finite
    AUROC, its threshold rule, the components' cost; the components cached (a rerun reads them) and checked against
    the step dataset (a dataset of other steps is refused)."""
    from eval.detection.rsus import attach_rsus, rsus_columns

    cfg = DetectionBenchConfig(out=str(tmp_path / "out"), splits=["question"], n_train_questions=40,
                               n_test_questions=20, cache_dir=str(tmp_path / "cache"), n_boot=20, max_epochs=15,
                               patience=5, reprobe_max_epochs=1, interval_search="named", ablations=False,
                               progress=False)
    res = run_bench(cfg)
    sp = res["splits"]["question"]
    assert set(RSUS_DETECTORS) <= set(sp["detectors"])
    for det, (label, _, _) in RSUS_DETECTORS.items():
        d = sp["detectors"][det]
        assert d["label"] == label and 0.0 <= d["auroc"] <= 1.0, (det, d["auroc"])
        assert d["threshold_rule"].startswith("Youden's J on the train part") == (det in ("rsus_ent", "rsus_cons",
                                                                                          "rsus_ent_cons"))
    assert "surface+minilm" in sp["detectors"]["rsus_verb_minilm"]["fit"]["spec"]
    assert "surface+minilm" not in sp["detectors"]["rsus_verb_surface"]["fit"]["spec"]
    cost = res["data"]["rsus"]
    assert cost["train"]["steps"] == res["data"]["train"]["steps"] and cost["test"]["steps"] == res["data"]["test"]["steps"]
    assert cost["train"]["u_ent_masked"] == 0 and cost["train"]["u_cons_masked"] == 0
    md = (tmp_path / "out" / "detection_bench.md").read_text()
    assert "RSUS[verb(proxy: surface+MiniLM),ent,cons]" in md and "RSUS rows (micro-world splits" in md
    # cached: the same columns without regenerating; a dataset of other steps is an error naming the row
    from envs.core.microworld.artifact import load_artifact
    from eval.detection.data import load_datasets

    world = load_artifact()
    train, _ = load_datasets(world, cfg, _NoProgress())
    cols = rsus_columns(world, train, "train", 40, 0, 3, cfg.cache_dir)
    again = attach_rsus(world, train, "train", 40, cfg, None)
    np.testing.assert_array_equal(again.extras["u_ent"], cols["u_ent"])
    other = train.subset(np.arange(1, len(train)))
    with pytest.raises(ValueError, match="does not match the step dataset at row 0"):
        rsus_columns(world, other, "train", 40, 0, 3, tmp_path / "elsewhere")


class _NoProgress:
    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass

    def update(self, *a, **k):
        pass
