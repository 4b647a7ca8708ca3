"""End to end, as a user runs them: every entry point's one top-level handler (:mod:`envs.core.cli_errors`) —
failures of the HTTP reasoner, ``kairos answer -`` without questions, a failed ``kairos bench engine`` worker, Ctrl-C
during training or a benchmark — connections with a deadline (a stale ``RAY_ADDRESS`` for ``python -m train`` and
``kairos serve``), ``python -m train --set`` as the benchmark's, and a question cut to fit the reasoner's window.

Each test asserts the return code, one line on stderr (no ``Traceback``) and, where files are written, what is left.
"""

from __future__ import annotations

import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from test_errors_e2e_runs import (
    ROOT,
    _env,
    _iterations,
    _one_line_error,
    _tiny_bench,
    _toy_yaml,
    _train,
)

QUESTION = "Where was Mira 's father born ?"


def _kairos(*args: str, env: dict | None = None, timeout: int = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, env=env or _env(), capture_output=True,
                          text=True, timeout=timeout, **kw)


def _free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ======================================================================= the HTTP reasoner
class _Endpoint(http.server.BaseHTTPRequestHandler):
    """An endpoint that fails as ``self.server.mode`` says: an HTML page, HTTP 500, or a reply later than the
    client's timeout."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "slow":
            time.sleep(3)
        body = b"<html>\n<body><h1>Welcome to nginx</h1></body>\n</html>\n"
        self.send_response(500 if mode == "500" else 200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    """``start(mode)`` → the base URL of a local endpoint failing that way."""
    servers = []

    def start(mode: str) -> str:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
        srv.mode = mode  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("mode, needles", [
    ("refused", ["cannot reach the server", "start it, or point base_url at a running one"]),
    ("html", ["the answer is not JSON", "base_url must be an OpenAI-compatible API root"]),
    ("500", ["HTTP 500", "Welcome to nginx", "the server failed: see its log"]),
    ("slow", ["no answer within timeout_s=0.5 s", "raise timeout_s"]),
])
def test_http_reasoner_failure_is_one_line_naming_url_cause_and_fix(endpoint, mode, needles):
    url = f"http://127.0.0.1:{_free_port()}/v1" if mode == "refused" else endpoint(mode)
    r = _kairos("answer", "--policy", "never", "--reasoner", "openai", "--corpus", "microworld",
                "--reasoner-option", f"base_url={url}", "--reasoner-option", "timeout_s=0.5",
                "--reasoner-option", "retries=0", QUESTION)
    _one_line_error(r, "kairos answer: error: " + url, *needles)


# ======================================================================= kairos answer -
@pytest.mark.parametrize("stdin, needle", [("closed", "stdin is closed"), ("empty", "stdin held no questions"),
                                           ("latin-1", "cannot read questions from stdin ('utf-8' codec")])
def test_answer_dash_without_readable_questions_is_one_line(stdin, needle):
    cmd = [sys.executable, "-m", "eval", "answer", "--policy", "never", "-"]
    if stdin == "closed":  # fd 0 closed before Python starts: sys.stdin is None
        r = subprocess.run(["bash", "-c", 'exec "$@" <&-', "_", *cmd], cwd=ROOT, env=_env(), capture_output=True,
                           text=True, timeout=120)
    else:
        r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, timeout=120,
                           input=b"" if stdin == "empty" else "Où est né le père de Mira ?\n".encode("latin-1"))
        r = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())
    _one_line_error(r, "kairos answer: error: '-': ", needle, "echo 'QUESTION' | kairos answer -")


# ======================================================================= kairos bench engine
def test_bench_engine_worker_failure_is_the_workers_own_line_and_leaves_no_spec(tmp_path):
    out = tmp_path / "engine"
    r = _kairos("bench", "engine", "--questions", "0:64", "--backends", "hf", "--out", str(out))
    line = _one_line_error(r, "the env_hf_b16_0 worker failed (exit 2): split '0:64' is not of the form NAME, NAME[a:b]")
    assert "Traceback" not in line and "RuntimeError" not in r.stderr
    assert list(out.iterdir()) == []  # no spec, no result file left behind


# ======================================================================= python -m train --set
def test_train_set_is_the_benchs_set(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out, iterations=3)
    r = _train(cfg, "--set", "iterations=1", "algo.episodes_per_batch=4")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _iterations(out) == [1]
    assert json.loads((out / "config.json").read_text())["algo"]["episodes_per_batch"] == 4


@pytest.mark.parametrize("sets, needles", [
    (["iterations=0"], ["--set iterations=0", "iterations"]),
    (["nope=1"], ["--set nope=1", "nope"]),
    (["iterations"], ["--set expects KEY=VALUE"]),
])
def test_train_set_refuses_a_bad_override_naming_it(tmp_path, sets, needles):
    out = tmp_path / "run"
    r = _train(_toy_yaml(tmp_path, out), "--set", *sets)
    _one_line_error(r, "python -m train: error: ", *needles)
    assert not out.exists()


# ======================================================================= connections with a deadline
def _stale_ray_env() -> tuple[dict, str]:
    address = f"127.0.0.1:{_free_port()}"
    return {**_env(), "RAY_ADDRESS": address, "KAIROS_RAY_CONNECT_TIMEOUT_S": "2"}, address


def test_train_with_a_stale_ray_address_fails_within_the_deadline(tmp_path):
    env, address = _stale_ray_env()
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(_toy_yaml(tmp_path, tmp_path / "run")),
                        "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60
    _one_line_error(r, f"python -m train: error: no Ray cluster at {address} (from the RAY_ADDRESS environment "
                       "variable)", "within 2 s", "ray start --head", "unset RAY_ADDRESS to start a local one")


def test_serve_treats_a_stale_ray_address_as_train_does():
    env, address = _stale_ray_env()
    t0 = time.monotonic()
    r = _kairos("serve", "--policy", "never", "--port", str(_free_port()), env=env)
    assert time.monotonic() - t0 < 60
    _one_line_error(r, f"kairos serve: error: no Ray cluster at {address} (from the RAY_ADDRESS environment "
                       "variable)", "unset RAY_ADDRESS to start a local one")


def test_serve_with_a_stale_ray_address_flag_names_the_flag():
    env, _ = _stale_ray_env()
    address = f"127.0.0.1:{_free_port()}"
    r = _kairos("serve", "--policy", "never", "--port", str(_free_port()), "--ray-address", address, env=env)
    _one_line_error(r, f"no Ray cluster at {address} (from ray_address (--ray-address))",
                    "drop ray_address (--ray-address) to start a local one")


# ======================================================================= Ctrl-C
def _interrupt_when(cmd: list[str], started, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``cmd``, send SIGINT once ``started()`` holds (its work has begun), wait for it to end."""
    # a terminal's Ctrl-C: SIGINT at its default disposition in the child (a pytest-xdist worker ignores SIGINT, and
    # an ignored signal stays ignored across exec — Python would then install no KeyboardInterrupt handler)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + timeout
    while not started() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _one_interrupted_line(r: subprocess.CompletedProcess, text: str) -> None:
    assert r.returncode == 130, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ": interrupted" in ln]
    assert lines == [text], r.stderr[-3000:]


@pytest.mark.slow
def test_ctrl_c_during_training_is_one_line_and_status_130(tmp_path):
    out = tmp_path / "run"
    cfg = _toy_yaml(tmp_path, out, iterations=500)
    metrics = out / "metrics.jsonl"
    r = _interrupt_when([sys.executable, "-m", "train", "--config", str(cfg), "--no-progress"],
                        lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1)
    _one_interrupted_line(r, "python -m train: interrupted — rerun with --resume to continue from the last checkpoint")
    assert _iterations(out)  # what finished is kept


def test_ctrl_c_during_a_benchmark_is_one_line_and_status_130(tmp_path):
    out = tmp_path / "bench"
    cfg = _tiny_bench(tmp_path, out, test="2:400")
    r = _interrupt_when([sys.executable, "-m", "eval", "bench", "policies", "--config", str(cfg)],
                        lambda: out.is_dir() and any(out.rglob("*.jsonl")))
    _one_interrupted_line(r, "kairos bench: interrupted — rerun the same command to resume (finished questions are "
                             "kept)")


# ======================================================================= a question cut to fit the window
def test_a_question_longer_than_the_window_is_cut_and_says_so():
    question = " ".join([QUESTION] * 600)  # ~ 20,000 characters, ~ 4,200 micro-world tokens: the window is 256
    assert len(question) > 19_000
    r = _kairos("answer", "--policy", "never", "--json", question)
    assert r.returncode == 0, r.stderr[-3000:]
    warnings = [ln for ln in r.stderr.splitlines() if "cut to fit the reasoner's context window" in ln]
    assert len(warnings) == 1 and "of 256 tokens" in warnings[0], r.stderr[-3000:]
    ans = json.loads(r.stdout.splitlines()[0])
    cut = ans["cut_to_window"]
    assert cut["field"] == "question" and cut["window"] == 256 and cut["to_tokens"] == 128
    assert cut["from_tokens"] > 4000 and len(ans["question"]) < len(question)


def test_a_question_that_fits_carries_no_cut():
    r = _kairos("answer", "--policy", "never", "--json", QUESTION)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[0])["cut_to_window"] is None
    assert "cut to fit" not in r.stderr



SERVICE_CALL = """
import sys, time
import ray
from envs.core.cli_errors import run_handled
from envs.served import call_service

def call():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    call_service(ray.remote(num_cpus=0)(lambda: time.sleep(60)).remote(), "reasoner")

sys.exit(run_handled("python -m train", call))
"""


def test_a_service_call_past_its_deadline_is_one_line():
    env = {**_env(), "KAIROS_SERVICE_TIMEOUT_S": "1"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", SERVICE_CALL], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    _one_line_error(r, "python -m train: error: the reasoner service did not answer within 1 s "
                       "(KAIROS_SERVICE_TIMEOUT_S)", "raise KAIROS_SERVICE_TIMEOUT_S")
