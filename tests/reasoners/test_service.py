"""The shared reasoner service (envs.services): a served env produces the records of a local one, the
replica batches the requests of several callers into one generation call, a replica that dies is restarted and
the run goes on with the same results, bad specs and unplaceable replicas are clear errors, and (slow) training
through the service — with its EnvRunner and replica killed mid-run — learns what training without it learns."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _needs import needs_hotpotqa, needs_smollm2

ray = pytest.importorskip("ray")

from envs.core.config import ConfigError  # noqa: E402
from envs.served import ServedReasoner, replica_handles, service_stats  # noqa: E402
from envs.services import ReasonerServiceConfig, start_service, stop_service  # noqa: E402
from envs.vector import make_batched  # noqa: E402


@pytest.fixture()
def cfg(tiny_world):
    return {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8, "rsus_components": ["ent"],
            "query_modes": ["step", "info_need"]}


def _rollout(vec, seed: int, n_steps: int = 6):
    """Observations, rewards and terminations of ``vec`` under seeded random actions."""
    rng = np.random.default_rng(seed)
    obs, _ = vec.reset(seed=seed)
    out = [obs]
    for _ in range(n_steps):
        acts = rng.integers(0, 2, size=vec.num_envs)
        obs, rew, te, tr, _ = vec.step(acts)
        out.append((obs, rew, te, tr))
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, tuple):
            for k in x[0]:
                np.testing.assert_allclose(x[0][k], y[0][k], atol=1e-5, err_msg=k)
            np.testing.assert_allclose(x[1], y[1], atol=1e-6)
            assert (x[2] == y[2]).all() and (x[3] == y[3]).all()
        else:
            for k in x:
                np.testing.assert_allclose(x[k], y[k], atol=1e-5, err_msg=k)


def test_served_env_produces_the_records_of_a_local_env(ray_local, cfg):
    spec = start_service(cfg, ReasonerServiceConfig(replicas=2, max_wait_ms=1.0))
    try:
        served = make_batched(4, {**cfg, "reasoner_service": spec})
        assert isinstance(served.reasoner, ServedReasoner)
        local = make_batched(4, cfg)
        assert served.envs[0].c.namespace == local.envs[0].c.namespace  # the service is transport, not outcome
        _assert_same(_rollout(served, 3), _rollout(local, 3))
        # the records hold the same token-exact snapshots
        for e_s, e_l in zip(served.envs, local.envs):
            assert e_s.ep.record.before == e_l.ep.record.before
            assert e_s.ep.record.after == e_l.ep.record.after
        stats = service_stats(spec)
        assert sum(s["calls"] for s in stats) > 0 and sum(s["tokens"] for s in stats) > 0
        assert sum(s["live_hits"] for s in stats) > 0  # sticky routing reuses live states (their KV cache)
    finally:
        stop_service(spec)


def test_a_replica_batches_the_requests_of_concurrent_callers(ray_local, cfg):
    # active_s: both clients stay "active" however slow this machine is right now (the test is about the rule)
    spec = start_service(cfg, ReasonerServiceConfig(replicas=1, max_wait_ms=3000.0, max_batch=16, active_s=60.0))
    try:
        client = ServedReasoner(spec)
        (h,) = replica_handles(spec)
        def reqs(n):
            return [(None, None, (("start", f"Where was person {i} born ?", ()),)) for i in range(n)]

        # first contact: a lone client is served at once (nobody else is active yet)
        ray.get(h.next_step.remote(reqs(1), "a"))
        ray.get(h.next_step.remote(reqs(1), "b"))
        assert service_stats(spec)[0]["calls"] == 2
        # both active now: the batcher waits for the other one's request — one generation call of 16
        outs = ray.get([h.next_step.remote(reqs(8), c) for c in ("a", "b")])
        assert [len(o) for o in outs] == [8, 8]
        (st,) = service_stats(spec)
        assert (st["calls"], st["states"], st["requests"], st["max_batch_seen"]) == (3, 18, 4, 16)
        # a client's plain call: start → next_step resolves the start state's snapshot in the same call
        s0 = client.start("Where was person 1 born ?")
        (step, after), = client.next_step([s0])
        assert s0.resolved is not None and client.snapshot(s0) == s0.resolved
        assert step.n_tokens >= 1 and after.snap is not None and after.key is not None
        # the model-side signals came computed; the per-layer hidden states stayed in the replica
        assert step.hidden_mean is None and step.hidden_last is None and step.hidden_first is None
        assert set(step.meta["signals"]) == {"pulse"}  # (None here: the tiny world wrote no content tokens)
    finally:
        stop_service(spec)


def test_a_killed_replica_is_restarted_and_the_episode_goes_on(ray_local, cfg):
    spec = start_service(cfg, ReasonerServiceConfig(replicas=1, max_wait_ms=1.0))
    try:
        served = make_batched(2, {**cfg, "reasoner_service": spec, "max_steps": 4})
        local = make_batched(2, {**cfg, "max_steps": 4})
        ref = _rollout(local, 11, n_steps=5)
        rng = np.random.default_rng(11)
        obs, _ = served.reset(seed=11)
        got = [obs]
        (h,) = replica_handles(spec)
        pid = service_stats(spec)[0]["pid"]
        for i in range(5):
            if i == 2:  # the replica dies mid-episode: Ray restarts it, the client's next call rebuilds from snapshots
                ray.kill(h, no_restart=False)
            acts = rng.integers(0, 2, size=2)
            obs, rew, te, tr, _ = served.step(acts)
            got.append((obs, rew, te, tr))
        _assert_same(got, ref)
        st = service_stats(spec)[0]
        assert st["pid"] != pid and st["restored"] > 0  # a new process, which rebuilt the states it was sent
    finally:
        stop_service(spec)


def test_service_errors_name_the_fix(ray_local, cfg):
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="start_service"):
        EnvConfig.from_dict({**cfg, "reasoner_service": {"name": "x"}})
    with pytest.raises(RuntimeError, match="not running in this Ray cluster"):
        ServedReasoner({"name": "nope", "namespace": "kairos", "replicas": 1})
    with pytest.raises(RuntimeError, match="gpu_node_that_is_not_there"):
        start_service(cfg, ReasonerServiceConfig(resources={"gpu_node_that_is_not_there": 1}, start_timeout_s=3))
    with pytest.raises(RuntimeError, match="could not start.*no micro-world artifact"):  # the replica's own error
        start_service({**cfg, "artifact": "/nonexistent/world"}, ReasonerServiceConfig(start_timeout_s=60))
    with pytest.raises(ValueError, match="EigenScore"):
        make_batched(1, {**cfg, "signals": ["pulse", "eigen"], "reasoner_service": {"name": "x", "namespace": "k",
                                                                                    "replicas": 1}})
    with pytest.raises(ConfigError, match="replicas"):
        ReasonerServiceConfig.from_dict({"replicas": 0})


def test_train_config_refuses_a_service_for_a_custom_env():
    from train.config import TrainConfig

    with pytest.raises(ConfigError, match="reasoner_service"):
        TrainConfig.from_dict({"env": "kairos_toy_env:make_toy_env", "env_config": {}, "warmstart": {"enabled": False},
                               "reasoner_service": {"replicas": 1}})
    cfg = TrainConfig.from_dict({"reasoner_service": {"replicas": 2, "resources": {"reasoner_node": 1}},
                                 "warmstart": {"enabled": False}})
    assert cfg.reasoner_service.replicas == 2 and cfg.reasoner_service.resources == {"reasoner_node": 1}


@pytest.mark.slow
def test_training_through_the_service_survives_kills_and_learns_what_training_without_it_learns(ray_local, cfg,
                                                                                                 tmp_path):
    """Training through the service, with the EnvRunner process and the reasoner replica killed (SIGKILL) after
    iteration 1: RLlib restarts the runner, Ray the replica; every iteration is logged exactly once, the cache keeps
    every record committed before — and the run equals one WITHOUT the service and without faults (same seed): the
    same per-iteration metrics and the same trajectory-cache keys."""
    import signal
    import sqlite3

    from ray._private import state

    from train.config import TrainConfig
    from train.run import train

    cache = tmp_path / "c.sqlite"
    killed = {}

    def count():
        with sqlite3.connect(cache) as db:
            return db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]

    def on_iteration(it, _metrics):
        if it != 1:
            return
        alive = {a["ActorClassName"]: a["Pid"] for a in state.actors().values() if a["State"] == "ALIVE"}
        killed["records"] = count()
        for cls in ("SingleAgentEnvRunner", "ReasonerReplica"):  # actors of this test's private cluster only
            os.kill(alive[cls], signal.SIGKILL)
            killed[cls] = alive[cls]

    c = {"name": "faults", "out_dir": str(tmp_path / "run"), "iterations": 3, "num_env_runners": 1,
         "num_envs_per_env_runner": 4, "checkpoint_every": 1, "warmstart": {"enabled": False},
         "algo": {"episodes_per_batch": 8}, "model": {"d_model": 16, "ff_dim": 32, "content_dim": 0},
         "env_config": {**cfg, "split": "train", "max_questions": 16, "cache_path": str(cache)},
         "reasoner_service": {"replicas": 1, "max_wait_ms": 2.0}}
    summary = train(TrainConfig.from_dict(c), show_progress=False, on_iteration=on_iteration)
    assert set(killed) == {"records", "SingleAgentEnvRunner", "ReasonerReplica"}
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3] and summary["iteration"] == 3
    assert count() >= killed["records"] > 0
    (rep,) = summary["reasoner_service"]["replicas"]
    assert rep["pid"] != killed["ReasonerReplica"]  # the restarted replica served the rest of the run
    # ... and the run is the one a local, uninterrupted run produces (same seed, a fresh cache, no service)
    clean = {k: v for k, v in c.items() if k != "reasoner_service"}
    clean.update(out_dir=str(tmp_path / "clean"),
                 env_config={**c["env_config"], "cache_path": str(tmp_path / "clean.sqlite")})
    train(TrainConfig.from_dict(clean), show_progress=False)
    ref = [json.loads(x) for x in (tmp_path / "clean" / "metrics.jsonl").read_text().splitlines()]
    assert len(ref) == len(rows) == 3
    for a, b in zip(rows, ref):
        for k in ("episode_return", "quality", "retrievals_per_episode", "policy_loss", "total_loss",
                  "env_steps_lifetime"):
            assert a[k] == pytest.approx(b[k], abs=1e-6), (a["iteration"], k)

    def keys(path):
        with sqlite3.connect(path) as db:
            return sorted(k for (k,) in db.execute("SELECT key FROM steps"))

    assert keys(cache) == keys(tmp_path / "clean.sqlite")


@pytest.mark.slow
@needs_smollm2
@needs_hotpotqa
def test_a_served_smollm2_env_produces_the_records_of_a_local_one(ray_local):
    """SmolLM2 (Hugging Face backend) behind the service: same namespace, same steps (token-exact snapshots), same
    observations and rewards as the env that holds the model itself; probes are checked against the served model."""
    from envs.env_config import EnvConfig

    cfg = EnvConfig.from_preset("hotpotqa", {"split": "dev[0:4]", "max_steps": 2, "max_step_tokens": 16,
                                             "rsus_components": ["ent"], "signals": ["pulse", "output", "rsus", "content"]})
    spec = start_service(cfg, ReasonerServiceConfig(replicas=1, max_wait_ms=1.0))
    try:
        served, local = make_batched(2, cfg.with_overrides({"reasoner_service": spec})), make_batched(2, cfg)
        assert served.envs[0].c.namespace == local.envs[0].c.namespace
        assert served.reasoner.capabilities == local.reasoner.capabilities
        _assert_same(_rollout(served, 0, n_steps=3), _rollout(local, 0, n_steps=3))
        for e_s, e_l in zip(served.envs, local.envs):
            assert e_s.ep.record.after == e_l.ep.record.after
    finally:
        stop_service(spec)
