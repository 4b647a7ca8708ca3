"""RSUS's U_verb by prompt (agents.reasoners.confidence): after each step the model is asked "Rate your confidence
that the current conclusion is factually correct (0-100)" in a side turn of the chat; the reply lands in the signal,
its tokens and seconds in the step's cost, the record in the trajectory cache (a replay does not ask again); a reply
without a usable number masks U_verb with the reason. Through a fake OpenAI-compatible chat server (fast) and
SmolLM2-135M-Instruct on the hf backend (slow); the vLLM backend's side turn is tested in test_vllm.py."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from _needs import needs_smollm2

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import openai_server  # noqa: E402
from test_openai_env import _dataset  # noqa: E402

import envs  # noqa: E402,F401
from agents.signals.rsus import CONFIDENCE_PROMPT  # noqa: E402


@pytest.fixture()
def server():
    srv = openai_server.start(lifetime_s=120)
    yield srv
    srv.stop_event.set()


def _config(srv, data: Path, components=("verb", "ent"), api="chat", **kw) -> dict:
    return {"task": "hotpotqa", "data_path": str(data), "split": "dev", "reasoner": "openai",
            "reasoner_options": {"base_url": srv.url, "model": "fake", "retry_backoff_s": 0.01, "api": api},
            "signals": ["output", "rsus"], "rsus_components": list(components), **kw}


def _side_requests(srv) -> list[dict]:
    return [req for path, req, _ in srv.requests
            if path.endswith("/chat/completions") and req["messages"][-1]["content"] == CONFIDENCE_PROMPT]


def _episode(env, q: int, actions=(0, 0, 0, 0)) -> list[dict]:
    _, info = env.reset(options={"question_index": q})
    infos = [info]
    for a in actions:
        _, _, te, tr, info = env.step(a)
        infos.append(info)
        if te or tr:
            break
    return infos


def test_the_side_question_is_asked_with_the_step_and_its_reply_is_u_verb(server, tmp_path):
    env = gym.make("kairos/RetrievalTiming-v0", config=_config(server, _dataset(tmp_path / "hq.jsonl")))
    _, info = env.reset(options={"question_index": 0})
    side = _side_requests(server)
    assert len(side) == 1
    msgs = side[0]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert "Question: Which lake is Sable Point Lighthouse on?" in msgs[0]["content"]
    assert msgs[1]["content"] == info["step_text"]  # the chain up to and including the step
    assert side[0]["temperature"] == 0.0 and side[0]["max_tokens"] == 16
    assert info["signals"]["u_verb"] == pytest.approx(0.2)  # "I am 80% confident."
    assert "u_verb" not in info["masked_signals"] and "masked_reasons" not in info
    assert info["verbal_confidence"]["confidence"] == 80.0 and info["verbal_confidence"]["tokens"] == 4
    rsus = env.unwrapped._obs()["rsus"]
    assert rsus[1] == pytest.approx(0.2) and rsus[4] == 1.0  # U_verb and its availability flag


def test_the_reply_tokens_are_charged_and_the_chain_is_unchanged(server, tmp_path):
    data = _dataset(tmp_path / "hq.jsonl")
    asking = gym.make("kairos/RetrievalTiming-v0", config=_config(server, data, costs={"tokens": 0.01}))
    plain = gym.make("kairos/RetrievalTiming-v0", config=_config(server, data, ("ent",), costs={"tokens": 0.01}))
    a, p = _episode(asking, 0, (1, 0)), _episode(plain, 0, (1, 0))
    assert [i["step_text"] for i in a] == [i["step_text"] for i in p]
    assert all("verbal_confidence" not in i for i in p) and all(i["verbal_confidence"]["tokens"] == 4 for i in a)
    # each record's side reply is paid with it, 4 generated tokens: the first step; the retrieval's regenerated step
    # and the next line (the answer) it goes on to; accepting the answer generates nothing
    assert [i["tokens"] - j["tokens"] for i, j in zip(a, p)] == [4, 12, 12]
    assert a[1]["costs"]["tokens"] - p[1]["costs"]["tokens"] == pytest.approx(8)  # in the retrieval's decision
    assert a[2]["costs"]["tokens"] == p[2]["costs"]["tokens"] == 0


def test_a_replay_from_the_cache_does_not_ask_again(server, tmp_path):
    cfg = _config(server, _dataset(tmp_path / "hq.jsonl"), cache_path=str(tmp_path / "c.sqlite"))
    env = gym.make("kairos/RetrievalTiming-v0", config=cfg)
    first = _episode(env, 0, (1, 0))
    n = len(server.requests)
    assert len(_side_requests(server)) == 3
    again = _episode(env, 0, (1, 0))
    assert len(server.requests) == n  # nothing sent: steps and replies come from the cache
    env2 = gym.make("kairos/RetrievalTiming-v0", config=cfg)  # a new env on the same file
    assert _episode(env2, 0, (1, 0))[-1]["tokens"] == first[-1]["tokens"] and len(server.requests) == n
    for x, y in zip(first, again):
        assert x["signals"] == y["signals"] and x["tokens"] == y["tokens"]
        assert x["verbal_confidence"] == y["verbal_confidence"]


def test_an_unparsable_reply_masks_u_verb_with_the_reason(server, tmp_path):
    server.confidence_reply = "Step 2: I cannot say."  # a step index is no confidence
    env = gym.make("kairos/RetrievalTiming-v0", config=_config(server, _dataset(tmp_path / "hq.jsonl")))
    obs, info = env.reset(options={"question_index": 0})
    assert "u_verb" in info["masked_signals"] and "u_verb" not in info["signals"]
    assert info["masked_reasons"] == {"u_verb": "no number in the reply"}
    assert info["verbal_confidence"]["confidence"] is None and info["verbal_confidence"]["tokens"] == 5
    assert obs["rsus"][4] == 0.0 and obs["rsus"][5] == 1.0  # U_verb flagged missing, U_ent real
    assert info["signals"]["rsus"] == pytest.approx(info["signals"]["u_ent"])  # RSUS over the components it has


def test_a_reply_cut_inside_its_number_is_masked(server, tmp_path):
    server.confidence_reply = "my confidence is 85 out of a hundred"
    cfg = _config(server, _dataset(tmp_path / "hq.jsonl"), rsus_options={"verb_max_tokens": 4})
    _, info = gym.make("kairos/RetrievalTiming-v0", config=cfg).reset(options={"question_index": 0})
    assert info["verbal_confidence"]["reply"] == "my confidence is 85"
    assert info["masked_reasons"] == {"u_verb": "the reply was cut at 4 tokens inside its number"}


def test_asked_only_when_the_signals_need_it_and_the_namespace_moves_only_then(server, tmp_path):
    data = _dataset(tmp_path / "hq.jsonl")
    for comps, extra in ((("ent",), {}), (("verb", "ent"), {"signals": ["output"]}),
                         (("verb", "ent"), {"rsus_options": {"weights": str(_weights(tmp_path))}})):
        env = gym.make("kairos/RetrievalTiming-v0", config=_config(server, data, comps, **extra))
        env.reset(options={"question_index": 0})
        assert env.unwrapped.c.reasoner.confidence is None and not _side_requests(server), (comps, extra)
    # a backend that cannot be asked (the completions api): U_verb masked with the reason; its namespace is the one
    # without the question (the side question's budget does not enter either)
    cfg = _config(server, data, api="completions", rsus_options={"verb_max_tokens": 8})
    env = gym.make("kairos/RetrievalTiming-v0", config=cfg)
    _, info = env.reset(options={"question_index": 0})
    assert "u_verb" in info["masked_signals"] and "api 'completions' has no chat turn" in info["masked_reasons"]["u_verb"]
    c = env.unwrapped.c
    assert c.namespace == _namespace_of(c, {**cfg, "rsus_options": {}})
    # asking: the question enters the namespace
    chat = _config(server, data)
    asking = gym.make("kairos/RetrievalTiming-v0", config=chat).unwrapped.c
    assert asking.namespace == _namespace_of(asking, chat, asking.reasoner) != _namespace_of(asking, chat)


def _namespace_of(c, cfg: dict, reasoner=None) -> str:
    from envs.components import _namespace, _task_file
    from envs.env_config import EnvConfig

    return _namespace("openai", ["openai", c.task.corpus(None).fingerprint(), _task_file(c.task)],
                      EnvConfig.from_dict(cfg), reasoner)


def _weights(tmp_path: Path) -> Path:
    from agents.signals.rsus import save_rsus_weights

    return save_rsus_weights("no_verb", (0.0, 1.0, 0.0), folder=tmp_path)


def test_the_side_requests_of_a_batch_are_one_per_step(server):
    from agents.reasoners.confidence import ConfidenceQuestion
    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

    r = OpenAIReasoner(OpenAIReasonerConfig(base_url=server.url, model="fake", api="chat"))
    r.confidence = ConfidenceQuestion(max_tokens=3)
    res = r.next_step([r.start(f"Which lake is {x} on?") for x in ("A", "B", "C")])
    assert len(_side_requests(server)) == 3
    for step, after in res:  # the reply is the step's; the chain's state does not hold it
        assert step.meta["confidence_reply"]["reply"] == "I am 80%"
        assert step.meta["verbal_confidence"] == 80.0 and after.transcript == (step.text + "\n",)


@pytest.mark.slow  # (a Ray instance of its own: ~35 s)
def test_through_the_reasoner_service_the_replica_asks_with_the_batch(ray_local, server, tmp_path):
    """With the reasoner service the replica asks, next to the model, for the batch it generates (every client's
    steps); the env gets the replies with the steps: the records, namespace and signals of a local env."""
    from envs.retrieval_env import reset_batch
    from envs.services import ReasonerServiceConfig, start_service, stop_service
    from envs.vector import make_batched

    cfg = _config(server, _dataset(tmp_path / "hq.jsonl"))
    spec = start_service(cfg, ReasonerServiceConfig(replicas=1, max_wait_ms=1.0))
    try:
        served, local = make_batched(2, {**cfg, "reasoner_service": spec}), make_batched(2, cfg)
        assert served.reasoner.confidence == local.reasoner.confidence is not None
        assert served.envs[0].c.namespace == local.envs[0].c.namespace
        n = len(server.requests)
        got = {}
        for name, vec in (("served", served), ("local", local)):
            got[name] = [info for _, info in reset_batch(vec.envs, options=[{"question_index": i} for i in (1, 2)])]
        assert len(_side_requests(server)) == 4 and len(server.requests) - n == 8  # a step and its question each
        for a, b in zip(got["served"], got["local"]):
            assert a["step_text"] == b["step_text"] and a["signals"] == b["signals"] and a["tokens"] == b["tokens"]
            assert a["signals"]["u_verb"] == pytest.approx(0.2) and a["verbal_confidence"]["tokens"] == 4
    finally:
        stop_service(spec)


# ---------------------------------------------------------------------------------------------- hf (SmolLM2)
@pytest.mark.slow
@needs_smollm2
def test_smollm2_is_asked_in_the_env_batched_and_its_chains_are_unchanged(tmp_path):
    """SmolLM2-135M-Instruct through the env (two copies in one vector env): one side generation per batched step
    generation, the replies in info, their tokens charged, the chains token for token those of an env that does not
    ask."""
    data = _dataset(tmp_path / "hq.jsonl")
    base = {"task": "hotpotqa", "data_path": str(data), "split": "dev", "reasoner": "hf", "max_steps": 3,
            "max_step_tokens": 16, "signals": ["output", "rsus"]}
    runs = {}
    for name, comps in (("asking", ["verb", "ent"]), ("plain", ["ent"])):
        envs_ = _vector(dict(base, rsus_components=comps), 2)
        c = envs_.envs[0].c
        calls = []
        if name == "asking":
            assert c.reasoner.confidence is not None and c.namespace
            inner = c.reasoner._complete
            c.reasoner._complete = lambda gens, *a, _f=inner, _c=calls: _c.append(len(gens)) or _f(gens, *a)
        runs[name] = (_vector_episode(envs_), calls)
    asking, calls = runs["asking"]
    plain, _ = runs["plain"]
    assert [[i["step_text"] for i in ep] for ep in asking] == [[i["step_text"] for i in ep] for ep in plain]
    assert calls and calls[0] == 2  # both copies' first steps asked in one side generation
    n_asked = 0
    for ep_a, ep_p in zip(asking, plain):
        for ia in ep_a:
            vc = ia["verbal_confidence"]
            assert vc["tokens"] >= 1 and vc["reply"] is not None
            if vc["confidence"] is None:
                assert ia["masked_reasons"]["u_verb"] == vc["masked"]
            else:
                n_asked += 1
                assert ia["signals"]["u_verb"] == pytest.approx(1 - vc["confidence"] / 100)
        assert ep_a[-1]["tokens"] - ep_p[-1]["tokens"] == sum(i["verbal_confidence"]["tokens"] for i in ep_a)
    print(f"SmolLM2 replies with a usable confidence: {n_asked} of {sum(len(e) for e in asking)}")


def _vector(cfg: dict, n: int):
    from envs.vector import make_batched

    return make_batched(n, cfg)


def _vector_episode(venv) -> list[list[dict]]:
    """One closed-book episode per copy (question i in copy i), accepting every step."""
    from envs.retrieval_env import reset_batch, step_batch

    envs_ = venv.envs
    out = [[info] for _, info in reset_batch(envs_, options=[{"question_index": i} for i in range(len(envs_))])]
    live = list(range(len(envs_)))
    while live:
        res = step_batch([envs_[i] for i in live], [0] * len(live))
        nxt = []
        for i, (_, _, te, tr, info) in zip(live, res):
            out[i].append(info)
            if not (te or tr):
                nxt.append(i)
        live = nxt
    assert all(np.isfinite(ep[-1]["tokens"]) for ep in out)
    return out
