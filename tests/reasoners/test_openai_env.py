"""The OpenAI-compatible reasoner as a first-class env backend, against a local test server on 127.0.0.1.

The black-box path: RSUS and output-level signals from the returned logprobs, PUlSE masked; the env's trajectory
cache and batched regeneration through ``snapshot`` / ``restore`` / ``with_evidence``; end to end through
``kairos bench policies``. Plus the transport's reliability: an overall deadline, malformed answers named by field,
no API key over plain http to a remote host.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import openai_server  # noqa: E402

from agents.reasoners.base import BranchingReasoner  # noqa: E402
from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig, ReasonerHTTPError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LAKES = [("Sable Point Lighthouse", "Lake Kestrel"), ("Brant Tower", "Lake Osprey"), ("Gull Light", "Lake Plover"),
         ("Marsh Beacon", "Lake Teal"), ("Cedar Light", "Lake Grebe"), ("Fox Point Light", "Lake Wren"),
         ("Rocky Beacon", "Lake Heron"), ("North Light", "Lake Crane")]


def _dataset(path: Path) -> Path:
    """A small HotpotQA-style file (IRCoT format): which lake is lighthouse X on?"""
    with open(path, "w") as f:
        for i, (light, lake) in enumerate(LAKES):
            ctx = [{"id": "0", "title": light, "paragraph_text": f"{lake} hosts {light}, built in 18{70 + i}.",
                    "is_supporting": True},
                   {"id": "1", "title": lake, "paragraph_text": f"{lake} is a lake in Ontario.", "is_supporting": True}]
            f.write(json.dumps({"question_id": f"q{i}", "question_text": f"Which lake is {light} on?",
                                "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""},
                                                     "spans": [lake]}],
                                "contexts": ctx}) + "\n")
    return path


@pytest.fixture()
def server():
    srv = openai_server.start(lifetime_s=120)
    yield srv
    srv.stop_event.set()


def _env_config(srv, data: Path, **kw) -> dict:
    return {"task": "hotpotqa", "data_path": str(data), "split": "dev", "reasoner": "openai",
            "reasoner_options": {"base_url": srv.url, "model": "fake", "retry_backoff_s": 0.01},
            "signals": ["pulse", "output", "rsus"], "rsus_components": ["ent", "cons"], **kw}


def test_http_reasoner_drives_the_env(server, tmp_path):
    import envs  # noqa: F401

    cfg = _env_config(server, _dataset(tmp_path / "hq.jsonl"), cache_path=str(tmp_path / "c.sqlite"))
    env = gym.make("kairos/RetrievalTiming-v0", config=cfg)
    assert isinstance(env.unwrapped.c.reasoner, BranchingReasoner)
    obs, info = env.reset(options={"question_index": 0})
    groups = env.unwrapped.groups
    mask = dict(zip(groups, obs["mask"]))
    assert mask["pulse"] == 0 and mask["output"] == 1 and mask["rsus"] == 1  # PUlSE masked, the rest real
    assert {"minprob", "entropy", "rsus", "u_ent", "u_cons"} <= set(info["signals"])
    _, _, te, _, info = env.step(1)  # retrieve: step 1 is regenerated with the evidence (which names the lake)
    assert info["passage_ids"] and not te
    _, r, te, _, info = env.step(0)  # accept: the answer reads the evidence
    assert te and info["quality"] == pytest.approx(1.0) and info["step_text"] == "Answer: Lake Kestrel"
    # replay: the same episode again comes from the cache, without a request
    n = len(server.requests)
    env.reset(options={"question_index": 0})
    env.step(1)
    _, r2, te2, _, info2 = env.step(0)
    assert len(server.requests) == n and (r2, te2) == (r, te) and info2["step_text"] == info["step_text"]


def test_http_reasoner_end_to_end_through_bench_policies(server, tmp_path):
    data = _dataset(tmp_path / "hq.jsonl")
    cfg = {"name": "http", "out_dir": str(tmp_path / "bench"), "dev": "0:3", "test": "3:8", "n_resamples": 200,
           "env": _env_config(server, data, cache_path=str(tmp_path / "c.sqlite")),
           "methods": [{"name": "CoT", "kind": "never"}, {"name": "IRCoT[step query, 1 passage, ≤4]", "kind": "always"},
                       {"name": "FLARE[unmasked]", "kind": "threshold", "signal": "minprob", "direction": "below"},
                       {"name": "FLARE", "kind": "flare"},  # the masked query from the server's token logprobs
                       {"name": "RSUS[ent,cons]", "kind": "threshold", "signal": "rsus", "direction": "above"}]}
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([sys.executable, "-m", "eval", "bench", "policies", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    s = json.loads((tmp_path / "bench" / "summary.json").read_text())
    ircot = "IRCoT[step query, 1 passage, ≤4]"
    acc = {m: s["methods"][m]["accuracy"] for m in ("CoT", ircot, "FLARE[unmasked]", "FLARE", "RSUS[ent,cons]")}
    assert acc["CoT"] == 0.0 and acc[ircot] == pytest.approx(1.0) and acc["FLARE[unmasked]"] == pytest.approx(1.0), acc
    assert s["methods"]["FLARE"]["query_mode"] == "masked:0.4" and "FLARE" not in s["skipped"]
    assert (tmp_path / "bench" / "report.md").is_file()


# ------------------------------------------------------------------------------------------------ reliability
def _reasoner(srv, **kw) -> OpenAIReasoner:
    return OpenAIReasoner(OpenAIReasonerConfig(base_url=srv.url, model="fake", retry_backoff_s=0.01, **kw))


def test_a_trickling_server_is_cut_at_the_deadline(server):
    server.mode = "trickle"  # one byte every 0.3 s: each read is quick, the answer takes minutes
    r = _reasoner(server, timeout_s=2.0, deadline_s=1.5, retries=2)
    t0 = time.monotonic()
    with pytest.raises(ReasonerHTTPError, match="no complete answer within deadline_s=1.5"):
        r.next_step([r.start("Which lake?")])
    assert time.monotonic() - t0 < 3.0


@pytest.mark.parametrize("mode,match", [
    ("no_text", "malformed answer: a choice has neither 'text' nor 'message.content'"),
    ("bad_logprobs", r"malformed answer: field choices\[\].logprobs.tokens / .token_logprobs"),
    ("not_json", "answer is not JSON"),
])
def test_malformed_answers_name_the_field(server, mode, match):
    server.mode = mode
    r = _reasoner(server)
    with pytest.raises(ReasonerHTTPError, match=match):
        r.next_step([r.start("Which lake?")])


def test_no_api_key_over_plain_http_to_a_remote_host(monkeypatch, server):
    monkeypatch.setenv("KAIROS_TEST_KEY", "sk-secret")
    remote = OpenAIReasoner(OpenAIReasonerConfig(base_url="http://10.0.0.1:8000/v1", api_key_env="KAIROS_TEST_KEY",
                                                 retries=0, timeout_s=0.5))
    with pytest.raises(ReasonerHTTPError, match="refusing to send the API key .*KAIROS_TEST_KEY.* plain http to "
                                                "'10.0.0.1'"):
        remote.next_step([remote.start("q?")])
    local = _reasoner(server, api_key_env="KAIROS_TEST_KEY")  # loopback: sent
    local.next_step([local.start("q?")])
    assert server.requests[-1][2].get("Authorization") == "Bearer sk-secret"


def test_snapshot_restore_and_with_evidence_round_trip(server):
    r = _reasoner(server)
    s = r.start("Which lake is Gull Light on?")
    (_, s1), = r.next_step([s])
    assert r.restore(r.snapshot(s1)) == s1
    (step, _), = r.next_step([r.with_evidence(s1, ["Lake Plover hosts Gull Light."], "step")])
    (again, _), = r.regenerate([s1], [["Lake Plover hosts Gull Light."]], "step")
    assert step.text == again.text == "Answer: Lake Plover"
    assert np.all(np.isfinite(step.logprobs))


def test_reasoner_options_are_validated_on_the_driver(tmp_path):
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="EnvConfig.reasoner_options: unknown config key 'base_uri'"):
        EnvConfig.from_dict({"task": "hotpotqa", "reasoner": "openai", "reasoner_options": {"base_uri": "x"}})
    with pytest.raises(ConfigError, match="reasoner 'micro' takes no options"):
        EnvConfig.from_dict({"reasoner_options": {"model": "x"}})
