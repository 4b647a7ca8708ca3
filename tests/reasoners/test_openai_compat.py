"""The OpenAI-compatible backend against a small fake server on 127.0.0.1 (canned steps with logprobs)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from agents.reasoners.base import Reasoner
from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig, ReasonerHTTPError
from envs.core.config import ConfigError

SERVER_LIFETIME_S = 60.0  # the server thread ends by itself after this, even if a test forgets it


def _canned(done_steps: int) -> tuple[list[str], str]:
    """Tokens of the next line: two steps, then the answer."""
    if done_steps < 2:
        k = str(done_steps + 1)
        return ["Step", " " + k, ":", " fact", " " + k, "."], "stop"
    return ["Answer", ":", " Paris"], "stop"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def do_POST(self):  # noqa: N802 (http.server's naming)
        srv = self.server
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append((self.path, req))
        mode = srv.mode
        if mode == "error" or (mode == "flaky" and len(srv.requests) == 1):
            return self._send(500, {"error": {"message": "model crashed"}})
        if mode == "slow":
            time.sleep(1.0)
        if self.path.endswith("/chat/completions"):
            msgs = req["messages"]
            transcript = msgs[-1]["content"] if msgs[-1]["role"] == "assistant" else ""
        else:
            transcript = req["prompt"].split("Question: ", 1)[1]
        done = len(re.findall(r"^Step \d+:", transcript, flags=re.M))
        choices, generated = [], 0
        for i in range(req.get("n", 1)):
            toks, finish = _canned(done)
            if req.get("temperature", 0) > 0:
                toks = toks[:-1] + [f" sample{i}"]
            if req["max_tokens"] < len(toks):
                toks, finish = toks[: req["max_tokens"]], "length"
            lps = [-0.1 * (j + 1) for j in range(len(toks))]
            tops = [{t: lp, "other": lp - 2.0} for t, lp in zip(toks, lps)]
            c = {"index": i, "finish_reason": finish, "stop_reason": "\n" if finish == "stop" else None}
            text = "".join(toks)
            with_lp = mode != "nologprobs" and req.get("logprobs")
            if self.path.endswith("/chat/completions"):
                c["message"] = {"role": "assistant", "content": text}
                c["logprobs"] = {"content": [
                    {"token": t, "logprob": lp, "top_logprobs": [{"token": k, "logprob": v} for k, v in tp.items()]}
                    for t, lp, tp in zip(toks, lps, tops)]} if with_lp else None
            else:
                c["text"] = text
                c["logprobs"] = {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops} if with_lp else None
            choices.append(c)
            generated += len(toks)
        # usage: the tokens of every choice, as servers count n > 1 ("nousage": a server that leaves it out)
        self._send(200, {"choices": choices, **({} if mode == "nousage" else {"usage": {"completion_tokens": generated}})})


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.timeout = 0.1
    srv.requests, srv.mode = [], "ok"
    stop = threading.Event()
    deadline = time.monotonic() + SERVER_LIFETIME_S

    def serve():
        while not stop.is_set() and time.monotonic() < deadline:
            srv.handle_request()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    yield srv
    stop.set()
    th.join(timeout=5)
    srv.server_close()


def _reasoner(srv, **kw) -> OpenAIReasoner:
    kw.setdefault("retry_backoff_s", 0.01)
    return OpenAIReasoner(OpenAIReasonerConfig(base_url=srv.url, model="fake", **kw))


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_chain_with_logprobs(server, api):
    r = _reasoner(server, api=api)
    assert isinstance(r, Reasoner)
    chains = r.run_chains(["Where is the Louvre?", "Capital of France?"])
    for chain in chains:
        assert [s.text for s in chain] == ["Step 1: fact 1.", "Step 2: fact 2.", "Answer: Paris"]
        assert chain[-1].is_answer and chain[-1].content == "Paris"
        st = chain[0]
        assert st.content == "fact 1." and st.meta["header_tokens"] == 3 and st.finished
        np.testing.assert_allclose(st.logprobs, [-0.4, -0.5, -0.6], atol=1e-6)  # content tokens only
        assert "".join(st.pieces).strip() == st.content and len(st.pieces) == 3  # the server's token strings
        np.testing.assert_allclose(st.maxprobs, np.exp([-0.4, -0.5, -0.6]), atol=1e-6)
        assert st.entropies is not None and np.all(st.entropies > 0)
        assert st.hidden_mean is None and st.n_tokens == 6
    caps = r.capabilities
    assert caps.logprobs and not caps.hidden_states and not caps.attentions
    path, req = server.requests[-1]
    assert path == f"/v1/{'chat/' if api == 'chat' else ''}completions" and req["stop"] == ["\n"]
    if api == "chat":
        assert req["messages"][-1]["role"] == "assistant" and req["continue_final_message"] is True


def test_without_logprobs_the_capability_turns_off(server):
    server.mode = "nologprobs"
    r = _reasoner(server)
    assert r.capabilities.logprobs
    (step, _), = r.next_step([r.start("q?")])
    assert step.text == "Step 1: fact 1." and step.logprobs is None
    assert not r.capabilities.logprobs
    assert not _reasoner(server).probe().logprobs


def test_evidence_modes_and_a_cut_step(server):
    r = _reasoner(server, max_step_tokens=2)
    (step, s), = r.next_step([r.start("q?")])
    assert not step.finished and step.text == "Step 1"
    r = _reasoner(server)
    (_, s), = r.next_step([r.start("q?")])
    r.regenerate([s], [["The Louvre is in Paris."]], mode="step")
    assert server.requests[-1][1]["prompt"].endswith("Step 1: fact 1.\nEvidence: The Louvre is in Paris.\n")
    (_, f), = r.regenerate([s], [["The Louvre is in Paris."]], mode="front")
    prompt = server.requests[-1][1]["prompt"]
    assert prompt.index("Evidence: The Louvre") < prompt.index("Question: q?") and f.front
    with pytest.raises(ValueError, match="injection mode"):
        r.regenerate([s], [["x"]], mode="both")


def test_sample_alternatives(server):
    r = _reasoner(server)
    alts = r.sample_alternatives(r.start("q?"), k=3, seed=7)
    assert alts == ["Step 1: fact 1 sample0", "Step 1: fact 1 sample1", "Step 1: fact 1 sample2"]
    assert server.requests[-1][1]["seed"] == 7 and server.requests[-1][1]["n"] == 3
    assert alts.tokens == 18  # the server's usage: 3 samples x 6 tokens (what the env charges the step for U_cons)
    server.mode = "nousage"  # a server without usage: the count is unknown, never guessed from the text
    assert r.sample_alternatives(r.start("q?"), k=3, seed=7).tokens is None


def test_server_error_is_a_clear_error(server):
    server.mode = "error"
    r = _reasoner(server, retries=1)
    with pytest.raises(ReasonerHTTPError, match=r"HTTP 500.*model crashed"):
        r.next_step([r.start("q?")])
    assert len(server.requests) == 2  # retried once


def test_a_transient_error_is_retried(server):
    server.mode = "flaky"
    r = _reasoner(server, retries=1)
    (step, _), = r.next_step([r.start("q?")])
    assert step.text == "Step 1: fact 1." and len(server.requests) == 2


def test_timeout_is_a_clear_error(server):
    server.mode = "slow"
    r = _reasoner(server, timeout_s=0.2, retries=0)
    t0 = time.monotonic()
    with pytest.raises(ReasonerHTTPError, match="no answer within timeout_s=0.2"):
        r.next_step([r.start("q?")])
    assert time.monotonic() - t0 < 1.0


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = OpenAIReasoner(OpenAIReasonerConfig(base_url=f"http://127.0.0.1:{port}/v1", retries=0, timeout_s=2))
    with pytest.raises(ReasonerHTTPError, match="cannot reach"):
        r.next_step([r.start("q?")])


def test_config_is_validated():
    with pytest.raises(ConfigError, match="api"):
        OpenAIReasonerConfig.from_dict({"api": "responses"})
    with pytest.raises(ConfigError, match="http"):
        OpenAIReasonerConfig.from_dict({"base_url": "127.0.0.1:8000"})


def test_answer_prompt_is_written_for_the_model(server):
    r = _reasoner(server)
    s = r.start("q?")
    for _ in range(2):
        (_, s), = r.next_step([s])
    closing = r.with_answer_prompt(s)
    assert r.restore(r.snapshot(closing)) == closing and "forced" not in r.snapshot(s)
    (step, after), = r.next_step([closing])
    assert server.requests[-1][1]["prompt"].endswith("Step 2: fact 2.\nAnswer:")
    # the model wrote its own "Answer:" again: the line is kept as it is, not "Answer: Answer: Paris"
    assert step.is_answer and step.text == "Answer: Paris" and step.content == "Paris" and after.done
    (_, one), = r.next_step([r.start("q?")])
    (step, _), = r.next_step([r.with_answer_prompt(one)])  # the model went on reasoning instead
    assert step.is_answer and step.text == "Answer: Step 2: fact 2." and step.meta["header_tokens"] == 0
    assert len(step.logprobs) == 6  # every token it wrote is content (the header was written for it)
