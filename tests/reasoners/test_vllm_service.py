"""vLLM engines as the replicas of the reasoner service (envs.services): a served vllm env produces the records of a
local one, the replica hands concurrent callers straight to vLLM's scheduler (no batcher of ours: the engine ran them
in one batch), features are computed in the replica (the step travels without its hidden states), and a killed
replica is restarted by Ray and the episodes go on with the same results."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _needs import needs_hotpotqa, needs_smollm2, needs_vllm

ray = pytest.importorskip("ray")

pytestmark = [
    pytest.mark.slow,
    needs_vllm,
    needs_smollm2,
    needs_hotpotqa,
]


@pytest.fixture(scope="module")
def cfg():
    from envs.env_config import EnvConfig

    return EnvConfig.from_preset("hotpotqa", {
        "reasoner": "vllm", "reasoner_options": {"kv_cache_gib": 1}, "split": "dev[0:4]", "max_steps": 3,
        "max_step_tokens": 16, "rsus_components": ["ent"], "signals": ["pulse", "output", "rsus", "content"]})


def _rollout(vec, seed: int, n_steps: int, kill=None):
    rng = np.random.default_rng(seed)
    obs, _ = vec.reset(seed=seed)
    out = [obs]
    for i in range(n_steps):
        if kill is not None and i == 1:
            kill()
        obs, rew, te, tr, _ = vec.step(rng.integers(0, 2, size=vec.num_envs))
        out.append((obs, rew, te, tr))
    return out


def _assert_same(a, b):
    for x, y in zip(a, b):
        if isinstance(x, tuple):
            for k in x[0]:  # content fields travel in float16: one unit in the last place at most
                np.testing.assert_allclose(x[0][k], y[0][k], atol=2e-3, rtol=2e-3, err_msg=k)
            np.testing.assert_allclose(x[1], y[1], atol=1e-6)
            assert (x[2] == y[2]).all() and (x[3] == y[3]).all()
        else:
            for k in x:
                np.testing.assert_allclose(x[k], y[k], atol=2e-3, rtol=2e-3, err_msg=k)


def test_a_vllm_replica_serves_envs_batches_callers_in_its_engine_and_survives_a_kill(ray_local, cfg):
    from envs.served import ServedReasoner, replica_handles, service_stats
    from envs.services import ReasonerServiceConfig, start_service, stop_service
    from envs.vector import make_batched

    local = make_batched(2, cfg)
    ref = _rollout(local, 5, n_steps=4)
    spec = start_service(cfg, ReasonerServiceConfig(replicas=1, num_cpus=1))
    try:
        served = make_batched(2, cfg.with_overrides({"reasoner_service": spec}))
        assert isinstance(served.reasoner, ServedReasoner)
        assert served.envs[0].c.namespace == local.envs[0].c.namespace  # the service is transport, not outcome
        assert served.reasoner.capabilities == local.reasoner.capabilities
        _assert_same(_rollout(served, 5, n_steps=4), ref)
        st = service_stats(spec)[0]
        assert st["engine"]["requests"] > 0 and "engine_mean_batch" in st
        # concurrent callers: two clients (threads, each its own env) stepping at once share the engine's batch
        a, b = make_batched(2, cfg.with_overrides({"reasoner_service": spec})), \
            make_batched(2, cfg.with_overrides({"reasoner_service": spec}))
        before = service_stats(spec)[0]["engine"]["running_max"]
        ts = [threading.Thread(target=_rollout, args=(v, 9, 3)) for v in (a, b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert max(before, 0) <= service_stats(spec)[0]["engine"]["running_max"]
        assert service_stats(spec)[0]["engine"]["running_max"] >= 3  # > one client's 2 envs: vLLM batched both
        # the replica dies mid-episode: Ray restarts it (a new engine), the client's next call rebuilds from snapshots
        (h,) = replica_handles(spec)
        pid = st["pid"]
        served2 = make_batched(2, cfg.with_overrides({"reasoner_service": spec}))
        _assert_same(_rollout(served2, 5, n_steps=4, kill=lambda: ray.kill(h, no_restart=False)), ref)
        st2 = service_stats(spec)[0]
        assert st2["pid"] != pid and st2["restored"] > 0
    finally:
        stop_service(spec)
        local.close()
