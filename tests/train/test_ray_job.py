"""The `ray job submit` path: scripts/ray_job_smoke.sh starts a local head, submits a short training job,
checks it succeeded and exported a policy, and stops the cluster (slow; CI runs it with the suite).

One test, the multi-node form: it runs every step of the single-head form (the same script: head, job submit,
exported policy, own-process stop) and adds two joined nodes and the shared reasoner service, so a separate
single-head run (55 s of CI) would test nothing more."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _needs import needs_hotpotqa, needs_vllm

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@needs_vllm
@needs_hotpotqa  # the job trains on HotpotQA
def test_ray_job_submit_on_a_simulated_multinode_cluster_with_a_vllm_replica(tmp_path):
    """Head + a "GPU node" (custom resource reasoner_node) + a CPU node on this machine: the reasoner replica — a
    vLLM engine serving SmolLM2 — lands on the reasoner node, the two EnvRunners elsewhere, and the job trains on
    HotpotQA through it."""
    r = subprocess.run(["bash", str(REPO / "scripts" / "ray_job_smoke.sh"), "--multinode", "--vllm",
                        str(tmp_path / "multi")],
                       capture_output=True, text=True, timeout=900, cwd=REPO,
                       env={**os.environ, "RAY_SMOKE_PORT_BASE": "27391"})  # its own ports
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "placement: vLLM engine pid" in r.stdout and "ray_job_smoke: OK" in r.stdout
    assert (tmp_path / "multi" / "run" / "policy_trigger" / "spec.json").is_file()
