"""``kairos serve`` without a server: its config (flags, YAML, validation on the driver before Ray starts), the
OpenAI request checks (every 4xx names its field), the benchmark trace files the inspector lists."""

import json
import re
import socket

import pytest

from envs.core.config import ConfigError
from envs.core.microworld.artifact import DEFAULT_ARTIFACT
from kairos.config import PipelineSpec, ServeConfig
from kairos.openai_api import APIError, completion, parse_chat_request

needs_world = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")
MODELS = ["kairos", "kairos-flare"]


def _parse(body, max_chars=50):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return parse_chat_request(raw, MODELS, max_chars)


def _refused(body, max_chars=50):
    with pytest.raises(APIError) as e:
        _parse(body, max_chars)
    err = e.value.body()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    return e.value.status, err["param"], err["code"], err["message"]


# ------------------------------------------------------------------------------------------- the protocol
def test_the_question_is_the_last_user_message():
    r = _parse({"model": "kairos-flare", "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "first ?"},
        {"role": "assistant", "content": "…"}, {"role": "user", "content": [{"type": "text", "text": " Who is"},
                                                                          {"type": "text", "text": "Mira ? "}]}],
        "stream": True, "temperature": 0.2})
    assert (r.model, r.question, r.stream) == ("kairos-flare", "Who is\nMira ?", True)
    assert _parse({"model": "kairos", "messages": [{"role": "user", "content": "q"}], "stream": None}).stream is False


def test_every_bad_request_names_its_field():
    ok = [{"role": "user", "content": "Who is Mira 's father ?"}]
    cases = {
        b"{not json": (400, None, "invalid_json"),
        b"[1, 2]": (400, None, "invalid_type"),
        json.dumps({"messages": ok}): (400, "model", "missing_required_parameter"),
        json.dumps({"model": 3, "messages": ok}): (400, "model", "invalid_type"),
        json.dumps({"model": "gpt-4o", "messages": ok}): (404, "model", "model_not_found"),
        json.dumps({"model": "kairos"}): (400, "messages", "missing_required_parameter"),
        json.dumps({"model": "kairos", "messages": "hi"}): (400, "messages", "invalid_type"),
        json.dumps({"model": "kairos", "messages": []}): (400, "messages", "empty_array"),
        json.dumps({"model": "kairos", "messages": ["hi"]}): (400, "messages[0]", "invalid_type"),
        json.dumps({"model": "kairos", "messages": [{"role": "robot", "content": "x"}]}):
            (400, "messages[0].role", "invalid_value"),
        json.dumps({"model": "kairos", "messages": [{"role": "system", "content": "x"}]}):
            (400, "messages", "no_user_message"),
        json.dumps({"model": "kairos", "messages": [{"role": "system", "content": "x"}, {"role": "user"}]}):
            (400, "messages[1].content", "missing_required_parameter"),
        json.dumps({"model": "kairos", "messages": [{"role": "user", "content": "  \n "}]}):
            (400, "messages[0].content", "empty_question"),
        json.dumps({"model": "kairos", "messages": [{"role": "user", "content": "x" * 51}]}):
            (400, "messages[0].content", "string_above_max_length"),
        json.dumps({"model": "kairos", "messages": [{"role": "user", "content": 42}]}):
            (400, "messages[0].content", "invalid_type"),
        json.dumps({"model": "kairos", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}):
            (400, "messages[0].content[0]", "unsupported_content"),
        json.dumps({"model": "kairos", "messages": ok, "stream": "yes"}): (400, "stream", "invalid_type"),
        json.dumps({"model": "kairos", "messages": ok, "n": 2}): (400, "n", "invalid_value"),
        json.dumps({"model": "kairos", "messages": ok, "kairos": 0.3}): (400, "kairos", "invalid_type"),
        json.dumps({"model": "kairos", "messages": ok, "kairos": {"lambda": -1}}): (400, "kairos.lambda", "invalid_value"),
        json.dumps({"model": "kairos", "messages": ok, "kairos": {"lambda": "high"}}):
            (400, "kairos.lambda", "invalid_value"),
        json.dumps({"model": "kairos", "messages": ok, "kairos": {"budget": 1}}):
            (400, "kairos.budget", "unknown_parameter"),
    }
    for body, want in cases.items():
        status, param, code, message = _refused(body)
        assert (status, param, code) == want, (body, message)
        assert message and (param is None or param.split("[")[0].split(".")[0] in message or param in message)
    assert "at most 50" in _refused({"model": "kairos", "messages": [{"role": "user", "content": "x" * 51}]})[3]
    assert "served: kairos, kairos-flare" in _refused({"model": "gpt-4o", "messages": ok})[3]


def test_a_request_may_set_its_budget():
    from kairos.openai_api import parse_chat_request

    ok = [{"role": "user", "content": "Who is Mira 's father ?"}]
    req = parse_chat_request(json.dumps({"model": "kairos", "messages": ok, "kairos": {"lambda": 0.3}}), ["kairos"], 50)
    assert req.lam == 0.3
    assert parse_chat_request(json.dumps({"model": "kairos", "messages": ok}), ["kairos"], 50).lam is None


def test_the_completion_shape():
    ans = {"answer": "Tovan", "answer_status": "answered", "truncated": False, "steps": []}
    body = completion("chatcmpl-1", 7, "kairos", ans, {"id": "r:1", "size": 3})
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {"role": "assistant",
                                                                                    "content": "Tovan"}
    assert body["choices"][0]["finish_reason"] == "stop" and body["kairos"] == {"answer": ans,
                                                                                "batch": {"id": "r:1", "size": 3}}
    cut = completion("c", 7, "kairos", {**ans, "answer": None, "answer_status": "none", "truncated": True}, None)
    assert cut["choices"][0]["finish_reason"] == "length" and cut["choices"][0]["message"]["content"] == ""


# ------------------------------------------------------------------------------------------- the config
def test_config_validation_names_the_key_and_the_fix():
    pipe = {"policy": "never"}
    for over, key, fix in [({"port": 0}, "port", "--port 8000"), ({"replicas": 0}, "replicas", "--replicas 1"),
                           ({"max_batch_size": 0}, "max_batch_size", "--max-batch-size"),
                           ({"batch_wait_timeout_s": -1}, "batch_wait_timeout_s", ">= 0"),
                           ({"max_ongoing_requests": 4}, "max_ongoing_requests", "max_batch_size (16)"),
                           ({"max_question_chars": 0}, "max_question_chars", "--max-question-chars"),
                           ({"models": []}, "models", "--model kairos"),
                           ({"models": ["a", "a"]}, "models", "unique"),
                           ({"models": ["bad name"]}, "models", "letters, digits"),
                           ({"health_check_period_s": 0}, "health_check_period_s", "> 0")]:
        with pytest.raises(ConfigError, match=rf"key '{key}'.*{re.escape(fix)}"):
            ServeConfig.from_dict({**over, "pipeline": pipe})
    with pytest.raises(ConfigError, match="unknown config key 'replica'"):
        ServeConfig.from_dict({"replica": 2, "pipeline": pipe})
    with pytest.raises(ConfigError, match="give --policy"):
        ServeConfig.from_dict({})
    with pytest.raises(ConfigError, match="--bench needs --method"):
        PipelineSpec.from_dict({"bench": "runs/x"})
    with pytest.raises(ConfigError, match=r"threshold.*\[0, 1\).*minprob<0.3"):
        PipelineSpec.from_dict({"policy": "p/", "threshold": 3})
    cfg = ServeConfig.from_dict({"pipeline": {"policy": "minprob<0.3", "env_config": {"max_steps": 6}}})
    assert cfg.ongoing_requests() == 32 and cfg.pipeline.env_config == {"max_steps": 6} and cfg.models == ["kairos"]


def test_paths_are_checked_before_ray_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"pipeline.policy: no exported policy at .*nope.*minprob<0.3"):
        PipelineSpec.from_dict({"policy": str(tmp_path / "nope")}).check_paths()
    with pytest.raises(FileNotFoundError, match="no finished benchmark.*summary.json"):
        PipelineSpec.from_dict({"bench": str(tmp_path), "method": "m"}).check_paths()
    with pytest.raises(FileNotFoundError, match="pipeline.env_config: .*env.yaml not found"):
        PipelineSpec.from_dict({"policy": "never", "env_config": str(tmp_path / "env.yaml")}).check_paths()
    with pytest.raises(FileNotFoundError, match="traces: .* is not a directory"):
        ServeConfig.from_dict({"traces": str(tmp_path / "no"), "pipeline": {"policy": "never"}}).check_paths()
    for ok in ("never", "minprob<0.3", "rsus>0.65"):
        PipelineSpec.from_dict({"policy": ok}).check_paths()
    (tmp_path / "env.yaml").write_text("env:\n  max_steps: 6\n")
    spec = PipelineSpec.from_dict({"policy": "never", "env_config": "env.yaml", "cache": "c.sqlite"})
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = spec.resolved()
    finally:
        os.chdir(cwd)
    assert r.env_config == str(tmp_path / "env.yaml") and r.cache == str(tmp_path / "c.sqlite")
    assert r.policy == "never"


def test_flags_override_the_yaml(tmp_path):
    from eval.cli import build_parser
    from kairos.server import config_from_args

    y = tmp_path / "serve.yaml"
    y.write_text("port: 8100\nreplicas: 2\nmax_batch_size: 8\npipeline:\n  policy: never\n  corpus: c.jsonl\n")
    args = build_parser().parse_args(["serve", "--config", str(y), "--replicas", "1", "--policy", "minprob<0.4",
                                      "--reasoner-option", "max_step_tokens=20", "--model", "a", "--model", "b"])
    cfg = config_from_args(args)
    assert (cfg.port, cfg.replicas, cfg.max_batch_size, cfg.models) == (8100, 1, 8, ["a", "b"])
    assert (cfg.pipeline.policy, cfg.pipeline.corpus, cfg.pipeline.reasoner_options) == \
        ("minprob<0.4", "c.jsonl", {"max_step_tokens": 20})
    y.write_text("port: 99999\npipeline:\n  policy: never\n")
    with pytest.raises(ConfigError, match="key 'port' = 99999: an HTTP port is in 1..65535"):
        config_from_args(build_parser().parse_args(["serve", "--config", str(y)]))


def test_the_cli_refuses_before_starting_ray(tmp_path, capsys):
    import ray

    from eval.cli import main

    assert main(["serve", "--policy", str(tmp_path / "missing_policy")]) == 2
    err = capsys.readouterr().err
    assert "kairos serve: error" in err and "missing_policy" in err and "no exported policy" in err
    assert main(["serve", "--policy", "never", "--replicas", "0"]) == 2
    assert "key 'replicas' = 0" in capsys.readouterr().err
    with socket.socket() as s:  # a port another server holds
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", "--policy", "never", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "--port" in err
    assert not ray.is_initialized()


# ------------------------------------------------------------------------------------------- trace files
@needs_world
def test_bench_trace_files_are_listed_and_read(tmp_path):
    from kairos import load_policy
    from kairos.traces import list_trace_files, read_trace_file
    from train.evaluate import evaluate_policy

    bench = tmp_path / "runs" / "bench"
    f = bench / "per_question" / "test" / "FLARE.jsonl"
    evaluate_policy(load_policy("minprob<0.5"), {"split": "dev", "rsus_components": ["ent"]}, list(range(8, 16)),
                    batch_size=4, jsonl_path=f)
    evaluate_policy(load_policy("never"), {"split": "dev", "rsus_components": ["ent"]}, [0, 1], batch_size=2,
                    jsonl_path=bench / "per_question" / "dev" / "CoT.jsonl")
    (bench / "summary.json").write_text(json.dumps({
        "methods": {"FLARE(minprob)": {"per_question": str(f)}},
        "calibration": {"FLARE(minprob)": {"chosen": 0.5}}}))
    (bench / "config.json").write_text(json.dumps({"methods": [
        {"name": "FLARE(minprob)", "kind": "threshold", "signal": "minprob", "direction": "below"}]}))
    files = list_trace_files(tmp_path)
    assert [(t.id, t.split, t.method) for t in files] == [
        ("runs/bench/per_question/test/FLARE.jsonl", "test", "FLARE(minprob)"),
        ("runs/bench/per_question/dev/CoT.jsonl", "dev", "CoT")]
    assert files[0].policy == {"kind": "threshold", "signal": "minprob", "direction": "below", "threshold": 0.5}
    rows = read_trace_file(tmp_path, files[0].id)["rows"]
    assert sorted(r["question_index"] for r in rows) == list(range(8, 16))
    data = read_trace_file(tmp_path, files[0].id, offset=2, limit=3)
    assert data["total"] == 8 and data["rows"] == rows[2:5]
    assert all(r["question"] and r["decisions"] for r in rows)  # the question's text, for the page
    retrieved = [d for r in rows for d in r["decisions"] if d["action"][0]]
    assert retrieved and all(d["regenerated"] and d["query"] for d in retrieved)  # how the step changed
    for bad in ("../x.jsonl", "runs/bench/summary.json", "/etc/passwd"):
        with pytest.raises(FileNotFoundError, match="no trace file"):
            read_trace_file(tmp_path, bad)
