"""RSUS overhead benchmark and retrieval-benefit labels (issue 4)."""

import json

import pytest


def test_rsus_bench_runs_on_the_microworld(tmp_path):
    from eval.rsus_bench import run_bench

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
    from eval.benefit_labels import _episode, run

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


def test_benefit_label_summary(tmp_path):
    from eval.benefit_labels import summarize

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
