"""The command lines end to end: ``kairos serve`` as a process (starts, answers, stops on SIGTERM), and ``kairos
bench serve`` at a small size (the server under concurrent ``openai`` requests, no errors, requests batched, the
same answers with 1 and 2 replicas, the table and JSON written)."""

import json
import os
import signal
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


def test_kairos_serve_starts_answers_and_stops_on_sigterm(tmp_path, learned_export):
    """A learned policy's export (``--policy DIR`` over the YAML's trigger): the answer and its trace are the local
    pipeline's, π(retrieve) and the query-mode choice in each step."""
    openai = pytest.importorskip("openai")
    from kairos import Pipeline
    from kairos.server import free_port

    q = "Which company does Kresvais 's spouse 's father 's mother work for ?"
    with Pipeline.from_policy(learned_export) as p:
        ref = p.answer(q).to_dict()
    port = free_port()
    y = tmp_path / "serve.yaml"
    y.write_text("max_batch_size: 4\nmodels: [learned]\npipeline:\n  policy: never\n")
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="/tmp/kcli-")}  # its own Ray session directory
    proc = subprocess.Popen([sys.executable, "-m", "eval", "serve", "--config", str(y), "--port", str(port),
                             "--num-cpus", "1", "--policy", str(learned_export)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        deadline, models = time.time() + 240, None
        while time.time() < deadline and proc.poll() is None:
            try:
                models = [m.id for m in client.models.list().data]
                break
            except (openai.APIConnectionError, openai.NotFoundError, openai.InternalServerError):
                time.sleep(2)  # not listening yet, or Serve's proxy up before the application's routes
        assert models == ["learned"], f"no server on port {port}"
        r = client.chat.completions.create(model="learned", messages=[{"role": "user", "content": q}])
        got = r.model_extra["kairos"]["answer"]
        assert r.choices[0].message.content == ref["answer"] and got["calls"] == ref["calls"]
        assert [(s["text"], s["retrieved"], s["query"], s["query_mode"]) for s in got["steps"]] == \
            [(s["text"], s["retrieved"], s["query"], s["query_mode"]) for s in ref["steps"]]
        assert all(0 <= s["probability"] <= 1 and s["threshold"] == 0.5 and s["details"]["mode_probabilities"]
                   for s in got["steps"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert f"http://127.0.0.1:{port}" in out and "trace inspector" in out
