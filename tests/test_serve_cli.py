"""The command lines end to end: ``kairos serve`` as a process (starts, answers, stops on SIGTERM), and ``kairos
bench serve`` at a small size (the server under concurrent ``openai`` requests, no errors, requests batched, the
same answers with 1 and 2 replicas, the table and JSON written)."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]


def test_the_load_benchmark_at_a_small_size(tmp_path):
    pytest.importorskip("openai")
    r = subprocess.run([sys.executable, "-m", "eval", "bench", "serve", "--requests", "12", "--bursts", "1",
                        "--replicas", "1", "2", "--warmup", "2", "--batch-wait-timeout-s", "0.2",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "serve_bench.json").read_text())
    assert res["answers_equal_across_configs"] and res["machine"]["cores"] and res["command"].startswith(
        "kairos bench serve --requests 12")
    one, two = res["configs"]
    assert (one["replicas"], two["replicas"], two["replicas_seen"]) == (1, 2, 2)
    for c in (one, two):
        assert c["requests"] == 12 and c["errors"] == 0 and 0 < c["p50_s"] <= c["p95_s"] <= c["max_s"]
        assert c["requests_per_s"] > 0 and c["batches"] >= 1
    assert one["mean_batch_size"] > 1 and one["states_per_generation_call"] > 1
    md = (tmp_path / "serve_bench.md").read_text()
    assert md.count("\n") == 4 and "| 2 | 12 | 0 |" in md
    assert "kairos serve under load" in r.stdout


def test_kairos_serve_starts_answers_and_stops_on_sigterm(tmp_path):
    openai = pytest.importorskip("openai")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    y = tmp_path / "serve.yaml"
    y.write_text("max_batch_size: 4\nmodels: [flare]\npipeline:\n  policy: minprob<0.5\n  env_config:\n"
                 "    rsus_components: [ent]\n")
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="/tmp/kcli-")}  # its own Ray session directory
    proc = subprocess.Popen([sys.executable, "-m", "eval", "serve", "--config", str(y), "--port", str(port),
                             "--num-cpus", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        deadline, models = time.time() + 240, None
        while time.time() < deadline and proc.poll() is None:
            try:
                models = [m.id for m in client.models.list().data]
                break
            except openai.APIConnectionError:
                time.sleep(2)
        assert models == ["flare"], f"no server on port {port}"
        r = client.chat.completions.create(model="flare", messages=[{"role": "user", "content":
                                           "Who is Gomlaith 's father 's father 's spouse ?"}])
        assert r.choices[0].message.content == "Stumvur" and r.model_extra["kairos"]["answer"]["calls"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert f"http://127.0.0.1:{port}" in out and "trace inspector" in out
