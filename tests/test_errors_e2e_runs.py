"""End to end, as a user runs them (the CLI in a subprocess): runs that share an output folder (one lock per folder,
resume that refuses a changed config, explicit restarts, torn metrics lines), OS errors on every write path (one line
naming the path and the cause; nothing finished lost; the trajectory cache kept) and values checked on the driver
(``--set`` overrides named by the key the user wrote, cost weights before Ray starts).

Each test asserts the return code, one clear error line on stderr (no ``Traceback``) and that nothing is lost.

OS errors are *injected* (a wrapper patches ``os.fsync`` — the call every Kairos write path ends in — to raise
``OSError(ENOSPC | EROFS | EACCES)`` for files whose path contains a given text; the trajectory cache gets a real
SQLITE_FULL through ``PRAGMA max_page_count``): the tests run as root here, where ``chmod`` does not block writes.
The one ``chmod`` test skips under root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "train"  # kairos_toy_env: a tiny env for `python -m train`

#: a CLI run with injected faults: ``python -c WRAP <fault> <errno name> <path text> <module> <args…>``
WRAP = r"""
import errno, os, sys
fault, code, needle, module, *argv = sys.argv[1:]
if fault == "fsync":  # every write path fsyncs before it publishes: fail the files whose path holds `needle`
    real = os.fsync
    def fsync(fd):
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if needle in name:
            n = getattr(errno, code)
            raise OSError(n, os.strerror(n))
        return real(fd)
    os.fsync = fsync
elif fault == "sqlite_full":  # the trajectory cache's file cannot grow past its size at open: a real SQLITE_FULL
    import envs.trajectory_cache as tc
    real_open = tc.open_store
    def open_store(path):
        db = real_open(path)
        n = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count={max(n, 2)}")
        return db
    tc.open_store = open_store
import importlib
sys.argv = [module, *argv]
sys.exit(importlib.import_module(module + ".cli").main(argv))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TOY)]), "RAY_AUTH_MODE": "disabled",
            "OMP_NUM_THREADS": "1"}


def _run(args: list[str], fault: tuple[str, str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m <args>`` (``args[0]``: ``train`` or ``eval``), optionally with an injected fault."""
    if fault is None:
        cmd = [sys.executable, "-m", *args]
    else:
        cmd = [sys.executable, "-c", WRAP, *fault, args[0], *args[1:]]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with rc 2 and one clear error line holding every needle (no traceback)."""
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [ln for ln in r.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1, r.stderr[-3000:]
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


def _toy_yaml(tmp: Path, out: Path, name: str = "toy.yaml", **over) -> Path:
    cfg = {"out_dir": str(out), "num_env_runners": 0, "num_envs_per_env_runner": 2, "num_cpus": 1,
           "env": "kairos_toy_env:make_toy_env", "env_config": {}, "algo": {"episodes_per_batch": 8},
           "model": {"arch": "mlp", "d_model": 8, "ff_dim": 16}, "iterations": 2, "checkpoint_every": 1}
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    p = tmp / name
    p.write_text(yaml.safe_dump(cfg))
    return p


def _train(cfg: Path, *extra: str, fault=None) -> subprocess.CompletedProcess:
    return _run(["train", "--config", str(cfg), "--no-progress", *extra], fault=fault)


def _iterations(out: Path) -> list[int]:
    return [json.loads(ln)["iteration"] for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def _tiny_bench(tmp: Path, out: Path, cache: Path | None = None, **over) -> Path:
    cfg = {"name": "tiny", "out_dir": str(out),
           "env": {"task": "microworld", "split": "dev", "rsus_components": ["ent"], "signals": ["output"],
                   "cache_path": str(cache) if cache else None},
           "dev": "0:2", "test": "2:5", "n_resamples": 200, "test_curves": False, "reference": "CoT",
           "methods": [{"name": "CoT", "kind": "never"}, {"name": "IRCoT[step query, 1 passage, ≤4]", "kind": "always"}], **over}
    p = tmp / "bench.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _bench(cfg: Path, *extra: str, fault=None) -> subprocess.CompletedProcess:
    return _run(["eval", "bench", "policies", "--config", str(cfg), *extra], fault=fault)


# ======================================================================= class 1: runs sharing an output folder
def test_folder_lock_refuses_a_second_holder_and_takes_over_a_dead_ones(tmp_path):
    """The lock itself, across processes: a live holder is named (pid, host, command); a holder killed with
    SIGKILL leaves its lock file, which the next run takes over with a logged note."""
    code = ("import sys, time; from envs.core.runlock import FolderLock; "
            "l = FolderLock(sys.argv[1], 'holder-cmd').acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "d")], cwd=ROOT, env=_env(),
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        probe = ("import sys, logging; logging.basicConfig(); from envs.core.runlock import FolderLock\n"
                 "try:\n    FolderLock(sys.argv[1]).acquire(); print('got')\n"
                 "except ValueError as e:\n    print('refused:', e)")
        r = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "d")], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=60)
        assert f"refused: {tmp_path / 'd'} is in use by another run (pid {holder.pid} on host" in r.stdout
        assert "holder-cmd" in r.stdout
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    r = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "d")], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "got"
    assert f"taking over the lock left by a run that is no longer running (pid {holder.pid}" in r.stderr


@pytest.mark.slow
def test_two_trainings_on_one_out_dir_the_second_refuses_and_rows_stay_unique(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out, iterations=10_000)
    first = subprocess.Popen([sys.executable, "-m", "train", "--config", str(cfg), "--no-progress"], cwd=ROOT,
                             env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (out / "checkpoints" / "iter_000002").exists():
            time.sleep(0.1)
        assert (out / "checkpoints" / "iter_000002").exists()
        r = _train(cfg, "--resume")
        _one_line_error(r, f"{out} is in use by another run (pid {first.pid} on host", "python -m train --config")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    last = max(int(p.name[5:]) for p in (out / "checkpoints").glob("iter_*"))
    r = _train(cfg, "--resume", "--iterations", str(last + 1))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "taking over the lock left by a run that is no longer running" in r.stderr
    assert _iterations(out) == list(range(1, last + 2))  # each row once: the killed run's later rows dropped


@pytest.mark.slow
def test_resume_refuses_a_changed_config_naming_the_keys_and_a_new_run_refuses_an_old_folder(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out)
    r = _train(cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    before = (out / "config.json").read_text(), (out / "metrics.jsonl").read_text()
    # a model-size change before --resume: the config changed (not a raw size-mismatch traceback)
    bigger = _toy_yaml(tmp_path, out, "bigger.yaml", model={"d_model": 16})
    _one_line_error(_train(bigger, "--resume"), "the config changed", "model.d_model: 8 -> 16")
    lam = _toy_yaml(tmp_path, out, "lam.yaml", curriculum={"retrieval_calls": {"end": 0.3}})
    _one_line_error(_train(lam, "--resume"), "curriculum.retrieval_calls.end: 0.1 -> 0.3")
    # a new run (no --resume) into the folder of a finished one: refused, not appended to its metrics
    _one_line_error(_train(cfg), f"{out} already holds a training run", "--resume")
    assert ((out / "config.json").read_text(), (out / "metrics.jsonl").read_text()) == before  # nothing rewritten
    # what may change on resume (the length) does; rows past the restored iteration (here: fake ones) are dropped,
    # a torn line is named
    with (out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"iteration": 3, "time": 0, "quality": -1.0}) + "\n" + '{"iteration": 4, "ti\n')
    r = _train(cfg, "--resume", "--iterations", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{out / 'metrics.jsonl'}:4: dropping a torn metrics line" in r.stderr
    assert _iterations(out) == [1, 2, 3]
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[2])["quality"] != -1.0


def test_resume_without_a_checkpoint_restarts_explicitly_and_drops_the_stale_rows(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out, checkpoint_every=20)
    out.mkdir()
    (out / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "time": 0}) + "\n" for i in (1, 2)))
    (out / "checkpoints" / f".tmp-iter_000001-{os.getpid()}-deadbeef").mkdir(parents=True)  # a dead run's save
    r = _train(cfg, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "--resume: no checkpoint in" in r.stderr and "starting over from iteration 1" in r.stderr
    assert "its 2 metrics rows dropped" in r.stderr
    assert _iterations(out) == [1, 2]  # not [1, 2, 1, 2]
    assert not list((out / "checkpoints").glob(".tmp-*"))  # the dead run's temp folder cleared under the lock


def test_a_save_removes_only_its_own_temp_folder(tmp_path):
    """Two runs' saves never delete each other's temp folders (even with the same pid: the run token differs)."""
    from train.checkpoints import RUN_TOKEN, save_checkpoint

    class Algo:
        iteration = 1

        def save_to_path(self, path):
            Path(path).mkdir(parents=True)
            (Path(path) / "state.bin").write_bytes(b"x")

    ck = tmp_path / "checkpoints"
    other = ck / f".tmp-iter_000001-{os.getpid()}-0therrun"
    other.mkdir(parents=True)
    final = save_checkpoint(Algo(), ck, keep=2)
    assert final.name == "iter_000001" and (final / "state.bin").is_file()
    assert other.is_dir() and RUN_TOKEN not in other.name


def test_quickstart_refuses_a_foreign_non_empty_out(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    r = _run(["eval", "quickstart", "--out", str(out)])
    _one_line_error(r, f"--out {out}: the folder holds files kairos quickstart did not write (report.md)")
    assert (out / "report.md").read_text() == "my own notes\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_quickstart_refuses_a_proxy_config_that_trains_another_probe_than_the_recipe_reads(tmp_path):
    """The recipe's env reads the U_verb proxy at runs/probes/rsus_proxy; a --proxy-config that would train one
    elsewhere is an error naming both paths, before any work (no world check, nothing written but the marker)."""
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text("signal: rsus_proxy\nout: runs/probes/elsewhere\n")
    out = tmp_path / "qs"
    r = _run(["eval", "quickstart", "--out", str(out), "--proxy-config", str(cfg)])
    _one_line_error(r, "env_config.rsus_options.verb_proxy reads the probe at runs/probes/rsus_proxy",
                    f"--proxy-config {cfg} trains 'rsus_proxy' into runs/probes/elsewhere")
    assert sorted(p.name for p in out.iterdir()) == [".kairos-quickstart"]


def test_quickstart_refuses_to_resume_a_policy_trained_on_another_proxy(tmp_path):
    """A rerun into a quickstart folder whose U_verb proxy must be trained again (another proxy config, or none
    finished) while the folder holds a training run: that run's policy and warm-start labels saw the old proxy's
    scores, so resuming it would mix two observations — an error naming the training folder, before any work."""
    from eval.quickstart import MARKER

    out = tmp_path / "qs"
    (out / "train" / "checkpoints" / "checkpoint_000001").mkdir(parents=True)
    (out / MARKER).write_text("{}\n")
    r = _run(["eval", "quickstart", "--out", str(out)])
    _one_line_error(r, f"the U_verb proxy in {out / 'probes' / 'rsus_proxy'} was made with another config (or "
                    "not finished)", f"remove {out / 'train'} and {out / 'bench'}", "(train/checkpoints)")
    assert not (out / "microworld_eval.json").exists() and not (out / "probes").exists()


def test_quickstart_keeps_its_proxy_whether_out_was_spelled_relative_or_absolute(tmp_path, monkeypatch):
    """The proxy a run finished in <out>/probes is this job's whatever spelling of --out named the folder (its config
    differs from the rerun's only in ``out``); a config that differs in anything else is not kept."""
    from envs.core.config import read_yaml_mapping
    from eval.quickstart import PROXY_CONFIG, _kept_proxy, _proxy_plan

    monkeypatch.chdir(ROOT)
    raw = read_yaml_mapping("configs/train_microworld_rsus_verb_ent.yaml")
    rel = Path(os.path.relpath(tmp_path / "qs", ROOT))
    first, again = _proxy_plan(raw, PROXY_CONFIG, "t.yaml", rel), _proxy_plan(raw, PROXY_CONFIG, "t.yaml", tmp_path / "qs")
    assert first["config"].out != again["config"].out  # the two spellings
    folder = tmp_path / "qs" / "probes" / "rsus_proxy"
    folder.mkdir(parents=True)
    (folder / "probe.json").write_text(json.dumps({"info": {"train_config": first["config"].to_dict()}}))
    (folder / "metrics.json").write_text(json.dumps({"eval": {"probe": {"auroc": 0.7}}}))
    assert _kept_proxy(again) == {"eval": {"probe": {"auroc": 0.7}}}
    other = dict(again, config=again["config"].replace(seed=again["config"].seed + 1))
    assert _kept_proxy(other) is None


def test_quickstart_refuses_a_benchmark_whose_learned_rows_would_see_another_observation(tmp_path):
    """The policy this job trains observes RSUS[verb(proxy),ent]; a bench config whose env computes another RSUS would
    evaluate it on observations it never saw: an error naming the row and the key, before any work."""
    bench = yaml.safe_load((ROOT / "configs" / "bench_microworld.yaml").read_text())
    bench["env"]["rsus_components"] = ["ent"]
    bench["env"].pop("rsus_options")
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(bench))
    out = tmp_path / "qs"
    r = _run(["eval", "quickstart", "--out", str(out), "--bench-config", str(tmp_path / "bench.yaml")])
    _one_line_error(r, "method 'conditioned[QueryGen](λ: 0.5→[0.02, 0.5])(s0)' would run with env rsus_components = ['ent']",
                    "trains its policy with rsus_components = ['verb', 'ent']")
    assert sorted(p.name for p in out.iterdir()) == [".kairos-quickstart"]


def test_quickstart_refuses_a_folder_another_quickstart_holds(tmp_path):
    from envs.core.runlock import FolderLock

    out = tmp_path / "qs"
    with FolderLock(out, "kairos quickstart --out elsewhere"):
        r = _run(["eval", "quickstart", "--out", str(out)])
    _one_line_error(r, f"{out} is in use by another run (pid {os.getpid()}", "kairos quickstart --out elsewhere")


def test_an_aborted_bench_leaves_no_folder_that_blocks_the_next(tmp_path):
    out = tmp_path / "b"
    cfg = _tiny_bench(tmp_path, out)
    # aborted on a bad value: refused before anything is written
    _one_line_error(_bench(cfg, "--set", "lambda_retrieval=nan"), "lambda_retrieval")
    # aborted after the set-up (another λ, then a method whose signal does not exist): no result row was written
    r = _bench(cfg, "--set", "lambda_retrieval=0.3",
               "methods=[{name: CoT, kind: never}, {name: T, kind: threshold, signal: no_such_signal}]")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    r = _bench(cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["methods"]["IRCoT[step query, 1 passage, ≤4]"]["n"] == 3


def test_two_benches_on_one_out_dir_the_second_refuses(tmp_path):
    from envs.core.runlock import FolderLock

    out = tmp_path / "b"
    cfg = _tiny_bench(tmp_path, out)
    with FolderLock(out, "kairos bench policies --config other.yaml"):
        r = _bench(cfg)
    _one_line_error(r, f"{out} is in use by another run", "kairos bench policies --config other.yaml")
    assert not (out / "per_question").exists()


# ======================================================================= class 4: OS errors as one line
def test_train_checkpoint_on_a_full_disk_is_one_line_and_the_metrics_are_kept(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out, checkpoint_every=2, iterations=4)
    r = _train(cfg, fault=("fsync", "ENOSPC", "checkpoints/.tmp-iter_000002"))
    _one_line_error(r, f"cannot write the checkpoint {out / 'checkpoints' / 'iter_000002'}", "no space left")
    assert _iterations(out) == [1, 2]  # the metrics written before are intact
    assert not list((out / "checkpoints").glob(".tmp-*"))  # the half-written save freed its space


def test_train_metrics_on_a_forbidden_file_is_one_line(tmp_path):
    out = tmp_path / "run"
    r = _train(_toy_yaml(tmp_path, out), fault=("fsync", "EACCES", "metrics.jsonl"))
    _one_line_error(r, f"cannot write {out / 'metrics.jsonl'}: permission denied")


def test_train_on_a_read_only_out_dir_is_one_line(tmp_path):
    out = tmp_path / "run"
    r = _train(_toy_yaml(tmp_path, out), fault=("fsync", "EROFS", "config.json"))
    _one_line_error(r, f"cannot write {out / 'config.json'}: the file system is read-only")


@pytest.mark.parametrize("needle,errname,words", [
    ("per_question", "ENOSPC", "no space left on the device"),
    ("report.md", "EROFS", "the file system is read-only"),
])
def test_bench_outputs_on_os_errors_are_one_line(tmp_path, needle, errname, words):
    out = tmp_path / "b"
    r = _bench(_tiny_bench(tmp_path, out), fault=("fsync", errname, needle))
    line = _one_line_error(r, words, str(out))
    assert needle in line


def test_quickstart_on_a_read_only_out_fails_at_once_naming_the_path(tmp_path):
    out = tmp_path / "qs"
    t0 = time.time()
    r = _run(["eval", "quickstart", "--out", str(out)], fault=("fsync", "EROFS", ".kairos-quickstart"))
    _one_line_error(r, f"cannot write {out / '.kairos-quickstart'}: the file system is read-only")
    assert time.time() - t0 < 30  # before the world check, the training, the benchmark


def test_trajectory_cache_full_disk_says_full_keeps_the_cache_and_never_advises_deleting_it(tmp_path):
    from envs.trajectory_cache import TrajectoryCache

    cache = tmp_path / "cache.sqlite"
    r = _bench(_tiny_bench(tmp_path, tmp_path / "b", cache=cache), fault=("sqlite_full", "-", "-"))
    line = _one_line_error(r, f"trajectory cache {cache}: cannot write", "the disk is full", "keep the cache")
    assert "delete" not in line and "damaged —" not in line
    c = TrajectoryCache(cache, namespace="probe")  # still a readable SQLite cache
    assert c._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()


def test_trajectory_cache_damaged_file_still_says_damaged(tmp_path):
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"this is not sqlite" * 100)
    r = _bench(_tiny_bench(tmp_path, tmp_path / "b", cache=cache))
    _one_line_error(r, f"trajectory cache {cache} is not a usable SQLite file", "delete it")


def test_trajectory_cache_path_that_is_a_folder_is_named_as_such(tmp_path):
    (tmp_path / "c.sqlite").mkdir()
    r = _bench(_tiny_bench(tmp_path, tmp_path / "b", cache=tmp_path / "c.sqlite"))
    _one_line_error(r, f"trajectory cache {tmp_path / 'c.sqlite'}", "it is a folder, not a file")


def test_a_sweep_refuses_a_folder_another_run_holds(tmp_path):
    from envs.core.runlock import FolderLock

    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out)
    with FolderLock(out, "python -m train --config other.yaml"):
        r = _train(cfg, "--sweep")
    _one_line_error(r, f"{out} is in use by another run", "python -m train --config other.yaml")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; the injected EROFS/EACCES tests cover it")
def test_bench_into_a_chmod_read_only_folder_is_one_line(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        r = _bench(_tiny_bench(tmp_path, parent / "b"))
        _one_line_error(r, str(parent / "b"), "permission denied")
    finally:
        parent.chmod(0o755)


# ======================================================================= class 5: values checked on the driver
@pytest.mark.parametrize("setting,needles", [
    ("lambda_retrieval=nan", ["--set lambda_retrieval=nan", "key 'lambda_retrieval' must be a finite number"]),
    ("env.costs.retrieval_calls=.inf", ["--set env.costs.retrieval_calls=.inf", "costs.retrieval_calls",
                                        "finite number"]),
    ("env.costs.retrieval_calls=-0.5", ["costs.retrieval_calls", ">= 0"]),
    ("env.signals=[output", ["--set env.signals=[output: the value is not valid YAML"]),
    ("env=3", ["--set env=3", "key 'env' must be a mapping"]),
    ("env.signals.x=1", ["--set env.signals.x=1: 'env.signals' is not a mapping"]),
    ("lambda_retrieval", ["--set expects KEY=VALUE"]),
    ("n_resamples=1e400", ["--set n_resamples=1e400", "n_resamples"]),
    ("batch_size=0", ["--set batch_size=0", "key 'batch_size' must be >= 1"]),  # ran silently before
    ("n_resamples=0", ["--set n_resamples=0", "key 'n_resamples' must be >= 1"]),  # failed after the whole run
    ("lambda_retrieval=-1", ["--set lambda_retrieval=-1", "key 'lambda_retrieval' must be >= 0"]),
    ("env.top_k=0", ["--set env.top_k=0", "top_k"]),
])
def test_bench_set_overrides_are_checked_on_the_driver_naming_the_key(tmp_path, setting, needles):
    out = tmp_path / "b"
    r = _bench(_tiny_bench(tmp_path, out), "--set", setting)
    _one_line_error(r, *needles)
    assert not out.exists()  # refused before the folder is touched


@pytest.mark.parametrize("costs,needle", [({"retrieval_calls": float("inf")}, "costs.retrieval_calls"),
                                          ({"retrieval_calls": float("nan")}, "costs.retrieval_calls")])
def test_train_cost_weight_not_finite_is_refused_before_ray_starts(tmp_path, costs, needle):
    out = tmp_path / "run"
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump({"out_dir": str(out), "env_config": {"costs": costs, "max_questions": 4}}))
    t0 = time.time()
    r = _train(cfg)
    _one_line_error(r, f"{cfg}.env_config: key '{needle}' must be a finite number")
    assert time.time() - t0 < 30 and not out.exists()


def test_service_bench_set_values_are_checked_naming_the_key(tmp_path):
    r = _run(["eval", "bench", "efficiency", "--set", "max_steps=nan"])
    _one_line_error(r, "--set max_steps=nan", "max_steps")
    r = _run(["eval", "bench", "efficiency", "--set", "signals=[output"])
    _one_line_error(r, "--set signals=[output: the value is not valid YAML")
