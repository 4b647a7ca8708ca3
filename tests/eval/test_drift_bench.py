"""``kairos bench drift``: its comparisons on hand-made inputs, its errors, and the whole run at smoke size."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from envs.core.config import ConfigError, read_yaml_mapping
from eval.perf import drift as db


def test_isa_environ_pins_torch_onednn_and_mkl_to_one_thread():
    env = db.isa_environ("avx2")
    assert (env["ATEN_CPU_CAPABILITY"], env["ONEDNN_MAX_CPU_ISA"], env["MKL_ENABLE_INSTRUCTIONS"]) == \
        ("avx2", "AVX2", "AVX2")
    assert env["OMP_NUM_THREADS"] == "1"
    with pytest.raises(ValueError, match="unknown instruction set 'sse9'.*known: avx2, avx512, default"):
        db.isa_environ("sse9")


def test_check_isa_refuses_an_instruction_set_torch_falls_back_from(monkeypatch):
    assert db.check_isa("default") == "DEFAULT"  # every CPU runs torch's scalar kernels

    class Done:
        returncode, stdout, stderr = 0, "AVX2\n", ""
    monkeypatch.setattr(db.subprocess, "run", lambda *a, **k: Done())
    with pytest.raises(ValueError, match="--isa avx512: .*'AVX2' kernels: this CPU does not support it"):
        db.check_isa("avx512")


def _records(path: Path, step_embedding: np.ndarray, texts: list[str]) -> Path:
    keys = np.array([f"never|q{i}|{i}|0" for i in range(len(step_embedding))])
    np.savez(path, **{"obs/step_embedding": step_embedding, "obs/history": np.zeros((len(keys), 2), np.float32),
                      "keys": keys, "text_keys": np.array([f"never|q{i}|0" for i in range(len(texts))]),
                      "texts": np.array(texts)})
    return path


def test_compare_env_measures_each_field_and_the_step_texts(tmp_path):
    x = np.zeros((4, 3), np.float32)
    y = x.copy()
    y[1, 2] = 1e-3  # one decision's one coordinate moved
    out = db.compare_env(_records(tmp_path / "a.npz", x, ["s1", "s2"]),
                         _records(tmp_path / "b.npz", y, ["s1", "s2 changed"]), None)
    assert out["decisions"] == 4 and out["only_in_one"] == 0
    assert out["fields"]["step_embedding"]["max_abs"] == pytest.approx(1e-3)
    assert out["fields"]["step_embedding"]["share_differs"] == 0.25
    assert out["fields"]["history"] == {"max_abs": 0.0, "share_differs": 0.0}
    assert out["share_decisions_differ"] == 0.25 and out["share_step_texts_differ"] == 0.5
    assert "policy" not in out


def test_first_differing_iteration_reads_the_sampled_batch_not_the_losses(tmp_path):
    def write(p, rows):
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return p

    base = [{"iteration": i, "episode_return": 0.5, "quality": 0.6, "retrievals_per_episode": 1.0,
             "episode_len": 4.0, "total_loss": 0.1} for i in range(1, 6)]
    other = [dict(r, total_loss=0.1 + 1e-7) for r in base]  # float drift in the loss alone
    a, b = write(tmp_path / "a.jsonl", base), write(tmp_path / "b.jsonl", other)
    assert db.first_differing_iteration(a, b) is None
    other[2]["episode_return"] = 0.51  # iteration 3 sampled another action somewhere
    assert db.first_differing_iteration(a, write(b, other)) == 3


def test_max_weight_diff_over_the_tensors_of_two_exports(tmp_path):
    for name, shift in (("a", 0.0), ("b", 0.25)):
        (tmp_path / name).mkdir()
        torch.save({"w": torch.zeros(3), "v": torch.ones(2) + shift}, tmp_path / name / "weights.pt")
    assert db.max_weight_diff(tmp_path / "a", tmp_path / "b") == pytest.approx(0.25)
    assert db.max_weight_diff(tmp_path / "a", tmp_path / "missing") is None


def test_decisions_agree_is_the_share_of_questions_with_every_action_equal(tmp_path):
    def write(p, acts):
        p.write_text("".join(json.dumps({"question_index": q, "decisions": [{"action": x} for x in a]}) + "\n"
                             for q, a in enumerate(acts)))
        return str(p)

    a = write(tmp_path / "a.jsonl", [[[0, 0], [1, 0]], [[0, 0]], [[1, 1]]])
    b = write(tmp_path / "b.jsonl", [[[0, 0], [1, 0]], [[1, 0]], [[1, 0]]])  # q1: when; q2: which query
    assert db.decisions_agree(a, b) == pytest.approx(1 / 3)


def _bench_yaml(tmp_path: Path) -> str:
    """The main job's benchmark without the U_verb proxy (a fresh clone has not trained it: the config's check of
    its path would fail first)."""
    b = yaml.safe_load(open("configs/bench_microworld.yaml"))
    b["env"].update(rsus_components=["ent"], retriever="bm25", index_path=None)  # no ColBERT index in a fresh clone
    b["env"].pop("rsus_options")
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(b))
    return str(tmp_path / "bench.yaml")


def test_bench_config_repeats_the_learned_rows_per_run_and_names_what_is_wrong(tmp_path):
    names = db.run_names(["avx512", "avx2"])
    assert names == ["avx512", "avx2", "avx2[records: avx512]", "avx2[warm start, records: avx512]"]
    assert [(r.records_from_reference, r.warmstart_from_reference) for r in db.plan_runs(["avx512", "avx2"])] == \
        [(False, False), (False, False), (True, False), (True, True)]
    bench = _bench_yaml(tmp_path)
    cfg, learned = db.bench_config(bench, "runs/train/microworld_conditioned", tmp_path,
                                   names, ["CoT", "CacheOracle[q: info_need, step]"])
    rows = {m.name: m for m in cfg.methods}
    main = "conditioned[QueryGen](λ: 0.5→[0.02, 0.5])(s0)"
    assert {m["name"] for m in learned} == {main}
    assert set(rows) == {"CoT", "CacheOracle[q: info_need, step]"} | {
        f"{m['name']} [{n}]" for m in learned for n in names}
    moved = rows[f"{main} [avx2[warm start, records: avx512]]"]
    assert moved.path == str(tmp_path / "runs" / "avx2_warm_start_records_avx512" / "train" / "policy")
    assert moved.select_on_dev and cfg.out_dir == str(tmp_path / "bench") and cfg.lambdas == []
    with pytest.raises(ConfigError, match="no learned row reads a policy under runs/train/microworld_cond "):
        db.bench_config(bench, "runs/train/microworld_cond", tmp_path, names, ["CoT"])  # a prefix is not a folder
    with pytest.raises(ConfigError, match=r"--keep names rows it lacks: \['Nope'\]"):
        db.bench_config(bench, "runs/train/microworld_conditioned", tmp_path, names, ["Nope"])
    with pytest.raises(ConfigError, match="no learned row reads a policy under runs/train/elsewhere"):
        db.bench_config(bench, "runs/train/elsewhere", tmp_path, names, ["CoT"])


def test_copy_sqlite_copies_committed_rows_once(tmp_path):
    src = tmp_path / "src.sqlite"
    with sqlite3.connect(src) as c:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE steps (k TEXT)")
        c.executemany("INSERT INTO steps VALUES (?)", [("a",), ("b",)])
    c.close()
    dst = tmp_path / "copy" / "dst.sqlite"
    assert db.copy_sqlite(src, dst) and db.cache_rows(dst) == 2
    assert not db.copy_sqlite(src, dst)  # a resumed run keeps its own copy (and the records it added)
    assert not db.copy_sqlite(tmp_path / "none.sqlite", tmp_path / "x.sqlite") and db.cache_rows(tmp_path / "x") is None


def test_the_cli_refuses_one_instruction_set_twice(tmp_path):
    r = subprocess.run([sys.executable, "-m", "eval", "bench", "drift", "--isa", "avx2", "avx2", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--isa: two different instruction sets are compared, got avx2 avx2" in r.stderr


@pytest.mark.slow
def test_the_whole_run_at_smoke_size(tmp_path):
    """Four tiny training runs under two instruction sets every x86-64 CPU has, their env records, and one
    benchmark of their policies: the runs on the reference's records find them, the REINFORCE-only run starts from
    the reference's warm start exactly."""
    t = read_yaml_mapping("configs/train_microworld_conditioned.yaml")  # the main job's recipe, its base merged
    t.update(iterations=2, checkpoint_every=1, snapshot_every=1, out_dir=str(tmp_path / "ref"))
    t["algo"]["episodes_per_batch"] = 16
    t["env_config"].update(max_questions=32, cache_path=str(tmp_path / "cache.sqlite"), rsus_components=["ent"],
                           retriever="bm25", index_path=None)
    t["env_config"].pop("rsus_options")
    t["warmstart"].update(questions=24, epochs=3)
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(t))
    b = yaml.safe_load(open(_bench_yaml(tmp_path)))
    b["env"].update(cache_path=str(tmp_path / "bench_cache.sqlite"))
    b.update(dev="0:10", test="10:26", n_resamples=200, test_curves=False, workers=1)
    for m in b["methods"]:
        if m["kind"] == "learned":
            m["path"] = m["path"].replace("runs/train/microworld_conditioned", str(tmp_path / "ref"))
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(b))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "eval", "bench", "drift", "--config", str(tmp_path / "train.yaml"), "--bench",
           str(tmp_path / "bench.yaml"), "--isa", "avx2", "default", "--keep", "CoT", "--env-questions", "6",
           "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "drift.json").read_text())
    assert d["capability"] == {"avx2": "AVX2", "default": "DEFAULT"}
    assert d["env"]["decisions"] > 0 and 0.0 <= d["env"]["share_step_texts_differ"] <= 1.0
    assert d["env"]["policy_decisions_flipped"] >= 0
    first = d["reinforce"]["snapshots"][0]
    assert first["snapshot"] == "iter_0000" and first["avx2 vs default[warm start, records: avx2]"] == 0.0
    rec = d["cache_records"]  # the reference's records copied: the run on them adds fewer than the reference did
    assert rec["(copied from)"] == 0 and 0 <= rec["default[records: avx2]"] - rec["avx2"] < rec["avx2"]
    main = "conditioned[QueryGen](λ: 0.5→[0.02, 0.5])(s0)"  # the main job's learned row, per run
    assert set(d["rows"]) == {"CoT"} | {f"{main} [{n}]" for n in d["runs"]}
    assert len(d["agreement"]) == 3 and "| REINFORCE |" in (out / "drift.md").read_text()
