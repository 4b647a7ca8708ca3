"""RSUS overhead benchmark and retrieval-benefit labels."""

import json

import pytest


def test_rsus_bench_runs_on_the_microworld(tmp_path):
    from eval.perf.rsus import run_bench

    res = run_bench(tmp_path / "rsus.json", n_micro=4, n_hotpot=0, batch=4)
    row = res["rows"][0]
    assert row["steps"] > 0 and row["generation_cpu_s"] > 0
    v = row["variants"]
    assert v["ent+cons@all"]["steps_with_cons"] == row["steps"]
    assert v["ent+cons@markers"]["steps_with_cons"] == row["steps_with_marker"]
    assert v["ent"]["steps_with_cons"] == 0
    assert (tmp_path / "rsus.json").is_file()


def test_retrieval_benefit_labels_resume_and_match_the_env(tmp_path):
    from envs.registration import make_env
    from eval.detection.labels import _episode, run

    cfg = {"split": "test", "max_questions": 3, "signals": ["output"], "rsus_components": ["ent"]}
    out = tmp_path / "labels.jsonl"
    s = run(cfg, out, max_questions=2, progress=False)
    assert s["questions"] == 2 and s["new_questions"] == 2
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    env = make_env(None, cfg)
    for r in rows:
        assert r["steps"], r
        q0, chain = _episode(env, r["question_index"], None)
        assert q0 == r["quality_never"]
        for st in r["steps"]:
            qi, _ = _episode(env, r["question_index"], st["index"])
            assert st["benefit"] == qi - q0 and -1.0 <= st["benefit"] <= 1.0
    out.write_text(out.read_text() + '{"question_index": 2, "torn')  # a killed writer
    s2 = run(cfg, out, max_questions=3, progress=False)
    assert s2["new_questions"] == 1 and s2["questions"] == 3
    assert [json.loads(x)["question_index"] for x in out.read_text().splitlines()] == [0, 1, 2]


def test_benefit_labels_in_two_processes_equal_one_and_a_killed_run_merges(tmp_path):
    """``workers=2`` labels the questions left in two processes (own reasoner each, the cache shared): the merged file
    holds exactly the rows one process writes, in question order; a killed run's shard file is merged by the next."""
    from eval.detection.labels import run

    cfg = {"split": "test", "max_questions": 4, "signals": ["output"], "rsus_components": ["ent"],
           "cache_path": str(tmp_path / "cache.sqlite")}
    one, two = tmp_path / "one.jsonl", tmp_path / "two_dev[0:4].jsonl"  # a name that is not a glob of itself
    run({**cfg, "cache_path": str(tmp_path / "c1.sqlite")}, one, progress=False)
    rows_one = [json.loads(x) for x in one.read_text().splitlines()]
    first = json.dumps({**rows_one[0], "seconds": 0.0})
    two.with_name(two.name + ".shard1").write_text(first + "\n" + '{"question_index": 3, "to')  # a killed worker's file
    s = run(cfg, two, progress=False, workers=2)
    assert s["questions"] == 4 and s["new_questions"] == 3, s
    assert not [p for p in tmp_path.iterdir() if ".shard" in p.name]
    rows_two = [json.loads(x) for x in two.read_text().splitlines()]
    assert [r["question_index"] for r in rows_two] == [0, 1, 2, 3]
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert [strip(r) for r in rows_two] == [strip(r) for r in rows_one]
    with pytest.raises(ValueError, match="workers: expected an integer >= 1"):
        run(cfg, two, progress=False, workers=0)
    # another process holds the file: a second run refuses, naming it and its holder, and writes nothing
    import re
    import subprocess
    import sys

    from envs.core.runlock import FolderBusyError, output_lock

    before = two.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from envs.core.runlock import output_lock; "
                               "output_lock(sys.argv[1], 'label run A').acquire(); print('held', flush=True); "
                               "time.sleep(120)", str(two)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusyError, match=re.escape(str(two)) + " is in use by another run .*label run A.*"
                           "another output file"):
            run(cfg, two, progress=False, max_questions=1)
        with output_lock(tmp_path / "other.jsonl"):  # a run writing another file of the folder is not excluded
            pass
    finally:
        holder.kill()
        holder.wait()
    assert two.read_bytes() == before


def test_benefit_label_summary(tmp_path):
    from eval.detection.labels import summarize

    rows = [{"question_index": q, "quality_never": 0.0,
             "steps": [{"benefit": b, "quality_retrieve": b, "signals": {"minprob": m, "entropy": 1 - m}}
                       for b, m in steps]}
            for q, steps in enumerate([[(1.0, 0.1), (0.0, 0.9)], [(0.0, 0.8), (0.5, 0.2)], [(0.0, 0.7)]])]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(path, n_boot=50)
    assert (s["questions"], s["steps"], s["helped"], s["hurt"]) == (3, 5, 2, 0)
    assert s["auroc"]["minprob"]["auroc"] == 1.0 and s["auroc"]["entropy"]["auroc"] == 1.0  # low MinProb = helped
    assert s["mean_best_single_retrieval"] == pytest.approx(0.5)
    assert "u_verb" not in s["auroc"] and s["auroc"]["minprob"]["coverage"] == 1.0
    # U_verb masked on one step (a reply without a number): ranked on the four steps that have it
    for r, verbs in zip(rows, [[0.9, 0.1], [0.2, 0.8], [None]]):
        for st, v in zip(r["steps"], verbs):
            if v is not None:
                st["signals"]["u_verb"] = v
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    v = summarize(path, n_boot=50)["auroc"]["u_verb"]
    assert (v["auroc"], v["n"], v["coverage"]) == (1.0, 4, 0.8)


def test_benefit_step_dataset_joins_labels_with_the_generation_states(tmp_path):
    import numpy as np

    from envs.env_config import EnvConfig
    from eval.detection.labels import run
    from policies.probes.benefit_dataset import benefit_step_dataset

    cfg = {"split": "test", "max_questions": 6, "signals": ["output"], "rsus_components": ["ent"]}
    out = tmp_path / "labels.jsonl"
    run(cfg, out, max_questions=6, progress=False)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    ecfg = EnvConfig.from_dict(cfg)
    ds = benefit_step_dataset(out, ecfg, cache_dir=tmp_path / "cache", batch=4)
    steps = [(r["question_id"], s) for r in rows for s in r["steps"]]
    assert len(ds) == len(steps) and ds.meta["n_questions"] == 6
    assert ds.hidden_mean.shape[0] == len(ds) and ds.hidden_mean.ndim == 3
    assert ds.labels.tolist() == [int(s["benefit"] > 0) for _, s in steps]
    assert ds.question_ids.tolist() == [q for q, _ in steps]
    assert ds.step_index.tolist() == [s["index"] for _, s in steps]
    # the output-level signals are the labelling env's (same generation pass)
    env_minprob = np.array([s["signals"]["minprob"] for _, s in steps])
    assert np.allclose(ds.output_column("minprob"), env_minprob, atol=1e-5)
    assert list((tmp_path / "cache").glob("benefit-*.npz"))
    # labels that do not match the reasoner's chain: an error naming the file and line
    bad = rows[1] | {"steps": [rows[1]["steps"][0] | {"text": "Step 1 : not what the model wrote ."}]}
    out.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], bad]))
    with pytest.raises(ValueError, match=r"labels.jsonl:2: the reasoner's closed-book chain"):
        benefit_step_dataset(out, ecfg, cache_dir=tmp_path / "cache")
    # labels of another split
    with pytest.raises(ValueError, match=r"labels.jsonl:1: question 0 is"):
        benefit_step_dataset(out, ecfg.replace(split="train"), cache_dir=tmp_path / "cache")


def test_probe_train_on_benefit_labels_saves_a_probe_for_the_labels_model(tmp_path):
    import yaml

    from eval.detection.labels import run
    from policies.probes.pipeline import ProbeTrainConfig, train_probe
    from policies.probes.probe import Probe

    env = {"split": "test", "max_questions": 12, "signals": ["output"], "rsus_components": ["ent"]}
    (tmp_path / "env.yaml").write_text(yaml.safe_dump({"env": env}))
    run(env, tmp_path / "labels.jsonl", progress=False)
    cfg = ProbeTrainConfig(benefit_labels=str(tmp_path / "labels.jsonl"), benefit_config=str(tmp_path / "env.yaml"),
                           benefit_split="test", out=str(tmp_path / "probe"), cache_dir=str(tmp_path / "c"),
                           max_epochs=5, n_boot=20)
    probe, report = train_probe(cfg)
    assert report["model_id"] == "micro:micro" and report["data"]["steps"] > 0
    Probe.load(tmp_path / "probe", expected_model_id="micro:micro")
    with pytest.raises(Exception, match="entity"):
        train_probe(cfg.replace(split="entity"))
