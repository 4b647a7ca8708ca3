"""``kairos serve`` with a cost-conditioned policy: each request may set its budget (``kairos.lambda``), and requests
at different budgets answered in one batch each get their own."""

import sys
import tempfile
from pathlib import Path

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]
openai = pytest.importorskip("openai")
sys.path.insert(0, str(Path(__file__).resolve().parent / "train"))


def test_each_request_sets_its_budget(tmp_path):
    import asyncio

    from test_conditioning import _budget_policy

    from kairos import server as srv
    from kairos.config import ServeConfig

    policy = _budget_policy(tmp_path)  # retrieves exactly when λ < 0.2
    cfg = ServeConfig.from_dict({"port": srv.free_port(), "num_cpus": 2, "replicas": 1, "max_batch_size": 8,
                                 "batch_wait_timeout_s": 0.5, "models": ["kairos"],
                                 "pipeline": {"policy": str(policy), "lam": 0.4}})
    url, cfg = srv.start_on_a_free_port(cfg, temp_dir=tempfile.mkdtemp(prefix="/tmp/kserve-"), log_to_driver=False)
    try:
        q = [{"role": "user", "content": "Which company does Teimshox 's mother work for ?"}]
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)

        async def ask(lam):
            extra = {"kairos": {"lambda": lam}} if lam is not None else None
            r = await client.chat.completions.create(model="kairos", messages=q, extra_body=extra)
            return r.model_extra["kairos"]

        async def both():
            return await asyncio.gather(ask(0.05), ask(None), ask(0.3))

        cheap, default, dear = asyncio.run(both())
        assert cheap["answer"]["calls"] >= 1 and cheap["answer"]["cost_weights"]["retrieval_calls"] == 0.05
        assert default["answer"]["calls"] == 0 and default["answer"]["cost_weights"]["retrieval_calls"] == 0.4
        assert dear["answer"]["calls"] == 0
        assert cheap["batch"]["size"] >= 2  # answered together, each at its own budget
    finally:
        srv.stop(cfg)
