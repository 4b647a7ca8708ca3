"""The retriever service (envs.services): served search returns what in-process search returns, an env
whose retriever is served produces the records of a local env, and a missing service is a clear error."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray")

from envs.components import env_retriever  # noqa: E402
from envs.env_config import EnvConfig  # noqa: E402
from envs.served import ServedRetriever  # noqa: E402
from envs.services import RetrieverServiceConfig, start_retriever_service, stop_retriever_service  # noqa: E402
from envs.vector import make_batched  # noqa: E402


@pytest.fixture()
def cfg(tiny_world):
    return {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8, "rsus_components": ["ent"]}


def test_served_search_and_a_served_env_equal_in_process_ones(ray_local, cfg):
    spec = start_retriever_service(cfg, RetrieverServiceConfig(replicas=2, num_cpus=0.5))
    try:
        served, local = ServedRetriever(spec), env_retriever(EnvConfig.from_dict(cfg))
        queries = ["father born", "mother of", "headquarters company"]
        a, b = served.search(queries, k=3), local.search(queries, k=3)
        assert [[(p.id, p.score) for p in h] for h in a] == [[(p.id, p.score) for p in h] for h in b]
        assert len(served) == len(local) and served.describe()["served"] is True
        vs, vl = make_batched(2, {**cfg, "retriever_service": spec}), make_batched(2, cfg)
        assert isinstance(vs.envs[0].c.retriever, ServedRetriever)
        assert vs.envs[0].c.namespace == vl.envs[0].c.namespace
        rng = np.random.default_rng(2)
        os_, _ = vs.reset(seed=4)
        ol, _ = vl.reset(seed=4)
        for _ in range(4):
            acts = rng.integers(0, 2, size=2)
            (os_, rs, *_), (ol, rl, *_) = vs.step(acts), vl.step(acts)
            np.testing.assert_allclose(rs, rl)
            for k in os_:
                np.testing.assert_allclose(os_[k], ol[k], atol=1e-6)
    finally:
        stop_retriever_service(spec)


def test_a_missing_retriever_service_is_a_clear_error(ray_local, cfg):
    with pytest.raises(RuntimeError, match="start_retriever_service"):
        ServedRetriever({"name": "nope", "namespace": "kairos", "replicas": 1})
    with pytest.raises(Exception, match="retriever_service"):
        EnvConfig.from_dict({**cfg, "retriever_service": {"name": "x"}})
