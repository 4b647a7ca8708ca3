"""RLlib-level tests on the toy env: a tiny run changes the parameters, the curriculum reaches the runners,
QueryGen actions flow through RLlib, resume continues the iteration counter, the policy learns to retrieve
where it pays (slow), and the CLI survives a kill and resumes (slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))  # kairos_toy_env, importable by factory path in the driver

from kairos_toy_env import T, ToyTimingEnv  # noqa: E402

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_init():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}})
    yield
    ray.shutdown()


def _cfg(tmp_path, **over):
    from train.config import TrainConfig

    base = {"out_dir": str(tmp_path / "run"), "iterations": 4, "num_env_runners": 0,
            "num_envs_per_env_runner": 4, "env": "kairos_toy_env:make_toy_env", "env_config": {},
            "algo": {"episodes_per_batch": 16}, "model": {"d_model": 16, "ff_dim": 32},
            "checkpoint_every": 2,
            "curriculum": {"retrieval_calls": {"kind": "linear", "start": 0.5, "end": 0.1, "iterations": 4}}}
    for k, v in over.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return TrainConfig.from_dict(base)


def test_tiny_run_changes_parameters_and_applies_curriculum(ray_init, tmp_path):
    from train.run import build_algo_config, iteration_metrics, learner_net

    algo = build_algo_config(_cfg(tmp_path)).build_algo()
    try:
        before = {k: v.clone() for k, v in learner_net(algo).state_dict().items()}
        metrics = [iteration_metrics(algo.train()) for _ in range(2)]
        after = learner_net(algo).state_dict()
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert "retrieve_head.weight" in changed and any(k.startswith("proj.") for k in changed)
        assert metrics[0]["curriculum_lambda_retrieval_calls"] == pytest.approx(0.5)
        assert metrics[1]["curriculum_lambda_retrieval_calls"] == pytest.approx(0.4)
        assert metrics[1]["lambda_retrieval_calls"] == pytest.approx(0.4)  # what the envs reported
        for k in ("quality", "retrievals_per_episode", "cost_retrieval_calls", "entropy", "policy_loss",
                  "vf_loss", "total_loss"):
            assert np.isfinite(metrics[1][k]), k
        lam = algo.env_runner.env.unwrapped.envs[0].lam
        assert lam == pytest.approx(0.4)
    finally:
        algo.stop()


def test_querygen_tuple_actions_train(ray_init, tmp_path):
    from train.run import build_algo_config

    cfg = _cfg(tmp_path, env_config={"querygen": True}, algo={"baseline": "mean"})
    algo = build_algo_config(cfg).build_algo()
    try:
        res = algo.train()
        assert np.isfinite(res["learners"]["default_policy"]["total_loss"])
    finally:
        algo.stop()


def test_resume_continues_iteration_counter(ray_init, tmp_path):
    import json

    from train.run import list_checkpoints, train

    cfg = _cfg(tmp_path)
    s1 = train(cfg, stop_after=2, show_progress=False)
    assert s1["iteration"] == 2
    ckpts = list_checkpoints(Path(cfg.out_dir) / "checkpoints")
    assert [p.name for p in ckpts] == ["iter_000002"]
    s2 = train(cfg, resume=True, show_progress=False)
    assert s2["first_iteration"] == 2 and s2["iteration"] == 4
    its = [json.loads(line)["iteration"] for line in (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines()]
    assert its == [1, 2, 3, 4]
    assert (Path(cfg.out_dir) / "policy" / "weights.pt").is_file()
    assert any((Path(cfg.out_dir) / "tb").iterdir())


def _greedy_on_toy(trigger, n=200, seed=0):
    env = ToyTimingEnv({"costs": {"retrieval_calls": 0.1}})
    hard_hits = easy_calls = easy_steps = 0
    for ep in range(n):
        obs, _ = env.reset(seed=seed + ep)
        for _ in range(T):
            a = trigger.decide(obs, {})
            hard = env.t == env.hard
            if hard:
                hard_hits += a
            else:
                easy_calls += a
                easy_steps += 1
            obs, _, done, _, _ = env.step(a)
    return hard_hits / n, easy_calls / easy_steps


@pytest.mark.slow
def test_learns_to_retrieve_where_it_pays_after_lambda_decays(ray_init, tmp_path):
    """λ 0.5 → 0.1: at λ=0.5 never retrieving is optimal (collapse pressure); at 0.1 the optimum is to
    retrieve exactly at the hard step. The exploration floor must keep the policy able to find it."""
    from policies.rl.export import LearnedTrigger
    from train.run import train

    cfg = _cfg(tmp_path, iterations=60, algo={"episodes_per_batch": 32, "lr": 0.01},
               curriculum={"retrieval_calls": {"kind": "linear", "start": 0.5, "end": 0.1, "iterations": 20}},
               checkpoint_every=60)
    summary = train(cfg, show_progress=False)
    hit, easy = _greedy_on_toy(LearnedTrigger.load(Path(cfg.out_dir) / "policy_trigger"))
    assert hit >= 0.9 and easy <= 0.1, (hit, easy, summary["final_metrics"])


def _toy_yaml(out: Path, **over) -> Path:
    """A `python -m train` config of the toy env writing to ``out`` (next to it: ``<out>.yaml``)."""
    cfg = {"out_dir": str(out), "num_env_runners": 0, "num_envs_per_env_runner": 2, "env": "kairos_toy_env:make_toy_env",
           "env_config": {}, "algo": {"episodes_per_batch": 8}, "model": {"arch": "mlp", "d_model": 8, "ff_dim": 16},
           **over}
    p = out.with_suffix(".yaml")
    p.write_text(yaml.safe_dump(cfg))
    return p


@pytest.mark.slow
def test_tune_sweep_runs_grid_and_writes_tensorboard(ray_init, tmp_path):
    from train.sweep import sweep

    cfg = _cfg(tmp_path, iterations=2, checkpoint_every=1)
    cfg = cfg.replace(sweep={"seeds": [0, 1], "lambda_end": [0.1]}, snapshot_every=1, snapshot_from=2)
    out = sweep(cfg)
    assert [t["seed"] for t in out["trials"]] == [0, 1] and all(t["lambda_end"] == 0.1 for t in out["trials"])
    for t in out["trials"]:
        assert (Path(t["policy_trigger"]) / "spec.json").is_file()
        assert t["final"]["iteration"] == 2
        snaps = sorted(p.name for p in (Path(t["out_dir"]) / "snapshots").iterdir())
        assert snaps == ["iter_0002"]  # snapshot_from = 2
    events = list(Path(out["tune_dir"]).rglob("events.out.tfevents*"))
    assert len(events) >= 2  # Tune's TensorBoard logger, one per trial
    assert (tmp_path / "run" / "sweep_summary.json").is_file()


def _rows(out: Path) -> list[dict]:
    import json

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if "time" not in k and "seconds" not in k and not k.endswith("_s")}
            for r in rows]


def test_resumed_run_reproduces_the_uninterrupted_run(ray_init, tmp_path):
    """Stop after iteration 2, resume: every later iteration's metrics and the final weights equal the run that was
    never interrupted (each iteration's sampling is seeded by (seed, iteration, runner), so no RNG state is lost)."""
    from train.run import train

    full = _cfg(tmp_path / "a", checkpoint_every=1)
    train(full, show_progress=False)
    part = _cfg(tmp_path / "b", checkpoint_every=1)
    train(part, stop_after=2, show_progress=False)
    train(part, resume=True, show_progress=False)
    a, b = _rows(Path(full.out_dir)), _rows(Path(part.out_dir))
    assert [r["iteration"] for r in b] == [1, 2, 3, 4]
    assert a == b
    wa = torch.load(Path(full.out_dir) / "policy" / "weights.pt", weights_only=True)
    wb = torch.load(Path(part.out_dir) / "policy" / "weights.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_iterations_draw_new_episodes(ray_init, tmp_path):
    """Regression: with one fixed seed RLlib reset the envs identically at every sample() call."""
    from train.run import build_algo_config

    algo = build_algo_config(_cfg(tmp_path)).build_algo()
    try:
        seen = []
        for _ in range(2):
            algo.train()
            seen.append([e.np_random.bit_generator.state["state"]["state"]
                         for e in algo.env_runner.env.unwrapped.envs])
        assert seen[0] != seen[1]
    finally:
        algo.stop()


@pytest.mark.slow
def test_kill_9_at_three_points_then_resume_equals_the_uninterrupted_run(tmp_path):
    """`python -m train` killed with SIGKILL three times (after checkpoints 2, 4 and 6 appear), resumed each time
    with `--resume` from the newest complete checkpoint: the metrics of every iteration and the final weights equal
    an uninterrupted run's."""
    def cfg_file(out: Path) -> Path:
        return _toy_yaml(out, iterations=8, checkpoint_every=1, keep_checkpoints=3)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]), "RAY_AUTH_MODE": "disabled"}

    def cmd(p: Path) -> list[str]:
        return [sys.executable, "-m", "train", "--config", str(p), "--no-progress", "--num-cpus", "1"]

    full = tmp_path / "full"
    r = subprocess.run(cmd(cfg_file(full)), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    killed = tmp_path / "killed"
    p = cfg_file(killed)
    kills = []
    for point in (2, 4, 6):
        proc = subprocess.Popen(cmd(p) + ["--resume"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline and not (killed / "checkpoints" / f"iter_{point:06d}").exists():
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills.append(point)
    # the last resume also sets --iterations on the command line (the config's value): the flag reaches the run
    r = subprocess.run(cmd(p) + ["--resume", "--iterations", "8"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert kills == [2, 4, 6]
    summary = json.loads((killed / "summary.json").read_text())  # resumed from the newest complete checkpoint
    assert summary["first_iteration"] >= 6 and summary["iteration"] == 8
    a, b = _rows(full), _rows(killed)
    assert [x["iteration"] for x in b] == list(range(1, 9))
    assert a == b
    wa = torch.load(full / "policy" / "weights.pt", weights_only=True)
    wb = torch.load(killed / "policy" / "weights.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.slow
def test_a_remote_env_runner_failure_shows_its_own_error(tmp_path):
    """An env that fails inside a remote EnvRunner: `python -m train` ends with that error's own message (one line
    naming the file), not Ray's wrapping of it."""
    p = _toy_yaml(tmp_path / "run", iterations=2, num_env_runners=1, env="kairos_toy_env:make_failing_env")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]), "RAY_AUTH_MODE": "disabled"}
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(p), "--no-progress", "--num-cpus", "2"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "ValueError: toy env: data file /nonexistent/toy.jsonl not found" in last, r.stderr[-3000:]
