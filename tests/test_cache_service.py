"""The trajectory cache shared across nodes (envs.cache_service): clients share one server's records, an env replays
what another env wrote, a killed server is restarted with every committed record, a server that is gone leaves the
env working from memory (warned), and a file that is not a cache is an error on the driver."""

from __future__ import annotations

import logging

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from envs.cache_service import (  # noqa: E402
    SharedTrajectoryCache,
    cache_server_stats,
    start_cache_service,
    stop_cache_service,
)
from envs.trajectory_cache import TrajectoryCache, TrajectoryCacheError  # noqa: E402


def test_clients_share_one_servers_records_and_the_file_is_a_plain_cache(ray_local, tmp_path):
    path = tmp_path / "c.sqlite"
    spec = start_cache_service(str(path))
    try:
        a, b = SharedTrajectoryCache(spec, "ns"), SharedTrajectoryCache(spec, "ns")
        a.put_many([("q1", (0,), {"text": "Step 1", "x": np.arange(3.0)}), ("q2", (0, 1), {"text": "Step 2"})])
        got = b.get_many([("q1", (0,)), ("q2", (0, 1)), ("q3", ())])
        assert got[0]["text"] == "Step 1" and np.array_equal(got[0]["x"], np.arange(3.0))
        assert got[1] == {"text": "Step 2"} and got[2] is None
        assert len(b) == 2 and SharedTrajectoryCache(spec, "other").get("q1", (0,)) is None  # namespaces never mix
        assert (b.hits, b.misses) == (2, 1)
        st = cache_server_stats(spec)
        assert st["puts"] == 2 and st["path"] == str(path.resolve())
    finally:
        stop_cache_service(spec)
    assert TrajectoryCache(path, "ns").get("q2", (0, 1)) == {"text": "Step 2"}  # the same file format as today


def test_an_env_replays_what_another_env_wrote_through_the_server(ray_local, tiny_world, tmp_path):
    from envs.vector import make_batched

    spec = start_cache_service(str(tmp_path / "c.sqlite"))
    try:
        cfg = {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8, "rsus_components": ["ent"],
               "cache_service": spec}

        def play(vec):
            rng = np.random.default_rng(0)
            obs, _ = vec.reset(seed=1)
            out = [obs]
            for _ in range(4):
                out.append(vec.step(rng.integers(0, 2, size=vec.num_envs))[:2])
            return out

        first = make_batched(2, cfg)
        a = play(first)
        assert first.envs[0].cache.misses > 0
        second = make_batched(2, cfg)  # another "node": nothing in its memory, everything on the server
        b = play(second)
        assert second.envs[0].cache.misses == 0 and second.envs[0].cache.hits > 0
        for x, y in zip(a, b):
            x, y = (x, y) if isinstance(x, tuple) else ((x,), (y,))
            for u, v in zip(x, y):
                if isinstance(u, dict):
                    for k in u:
                        np.testing.assert_allclose(u[k], v[k], atol=1e-6)
                else:
                    np.testing.assert_allclose(u, v)
    finally:
        stop_cache_service(spec)


def test_a_killed_server_is_restarted_with_every_committed_record(ray_local, tmp_path):
    spec = start_cache_service(str(tmp_path / "c.sqlite"))
    try:
        c = SharedTrajectoryCache(spec, "ns")
        c.put_many([(f"q{i}", (0,), {"i": i}) for i in range(50)])
        pid = cache_server_stats(spec)["pid"]
        ray.kill(ray.get_actor(spec["name"], namespace=spec["namespace"]), no_restart=False)
        fresh = SharedTrajectoryCache(spec, "ns")  # empty memory: every record comes from the restarted server
        assert [r["i"] for r in fresh.get_many([(f"q{i}", (0,)) for i in range(50)])] == list(range(50))
        assert cache_server_stats(spec)["pid"] != pid and fresh.unreachable == 0
    finally:
        stop_cache_service(spec)


def test_an_env_keeps_working_when_the_server_is_gone(ray_local, tmp_path, caplog):
    spec = start_cache_service(str(tmp_path / "c.sqlite"))
    c = SharedTrajectoryCache(spec, "ns", timeout_s=5, retry_s=60)
    c.put("q", (0,), {"a": 1})
    stop_cache_service(spec)  # for good (no restart)
    with caplog.at_level(logging.WARNING, logger="envs.cache_service"):
        assert c.get("q", (0,)) == {"a": 1}  # its own memory still serves it
        assert c.get("q", (1,)) is None  # a miss: the env generates the record again
        c.put("q", (2,), {"a": 2})  # no error: kept in memory
    assert c.unreachable >= 1 and "unreachable" in caplog.text and c.get("q", (2,)) == {"a": 2}


def test_a_file_that_is_not_a_cache_is_an_error_on_the_driver(ray_local, tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(Exception, match="not a usable SQLite file"):
        start_cache_service(str(bad))
    with pytest.raises(TrajectoryCacheError):
        TrajectoryCache(bad, "ns")
