"""``kairos serve`` on a private local Ray cluster, exercised with the real ``openai`` client: plain and streamed
answers equal to the local pipeline's, concurrent requests sharing batched loops, every 4xx, the benchmark trace
routes, the inspector page asking through the endpoint in headless Chromium, and a killed replica replaced by Serve.

One server for the module (micro-world reasoner, the FLARE-style trigger of the inspector tests, 16 requests per
batch); its start (Ray, Serve, the replica's pipeline) takes most of the time."""

import asyncio
import json
import tempfile
import time

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]
openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")


@pytest.fixture(scope="module")
def questions():
    from envs.core.microworld.artifact import load_artifact

    return [q.text for q in load_artifact(None, with_model=False).questions["dev"]]


@pytest.fixture(scope="module")
def traces_dir(tmp_path_factory, trace_policy):
    """A benchmark output with a test-split trace file (as ``kairos bench policies`` writes it)."""
    from kairos import load_policy
    from train.evaluate import evaluate_policy

    root = tmp_path_factory.mktemp("traces")
    f = root / "bench" / "per_question" / "test" / "FLARE_unmasked_.jsonl"
    evaluate_policy(load_policy(trace_policy[0]), {**trace_policy[1], "split": "dev"}, [10, 11, 12], batch_size=3,
                    jsonl_path=f)
    (root / "bench" / "summary.json").write_text(json.dumps({
        "methods": {"FLARE[unmasked]": {"per_question": str(f)}}, "calibration": {"FLARE[unmasked]": {"chosen": 0.5}}}))
    (root / "bench" / "config.json").write_text(json.dumps({"methods": [
        {"name": "FLARE[unmasked]", "kind": "threshold", "signal": "minprob", "direction": "below"}]}))
    return root


@pytest.fixture(scope="module")
def server(trace_policy, traces_dir):
    """``(base URL, config)`` of a running ``kairos serve`` (its own Ray session directory and ports)."""
    from kairos import server as srv
    from kairos.config import ServeConfig

    policy, env = trace_policy
    cfg = ServeConfig.from_dict({
        "port": srv.free_port(), "num_cpus": 2, "replicas": 1, "max_batch_size": 16, "batch_wait_timeout_s": 0.3,
        "max_question_chars": 200, "models": ["kairos", "kairos-flare"], "traces": str(traces_dir),
        "health_check_period_s": 1.0, "health_check_timeout_s": 10.0,
        "pipeline": {"policy": policy, "env_config": env}})
    url, cfg = srv.start_on_a_free_port(cfg, temp_dir=tempfile.mkdtemp(prefix="/tmp/kserve-"), log_to_driver=False)
    yield url, cfg
    srv.stop(cfg)


@pytest.fixture(scope="module")
def local(trace_policy):
    """The same pipeline in this process: what every served answer must equal."""
    from kairos import Pipeline

    p = Pipeline(trace_policy[0], trace_policy[1], batch_size=16)
    yield p
    p.close()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=120)


def _decisions(steps):
    return [(s["index"], s["text"], s["retrieved"], s["query"], [p["id"] for p in s["passages"] if p["injected"]])
            for s in steps]


def _same_as_local(answer: dict, ref) -> None:
    assert answer["question"] == ref.question and answer["answer"] == ref.answer and answer["calls"] == ref.calls
    assert _decisions(answer["steps"]) == _decisions(ref.to_dict()["steps"])


# ------------------------------------------------------------------------------------------- plain and streamed
def test_models_and_health(server, client):
    url, cfg = server
    assert [m.id for m in client.models.list().data] == ["kairos", "kairos-flare"]
    assert client.models.retrieve("kairos-flare").id == "kairos-flare"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.response.json()["error"]["param"] == "model"
    h = requests.get(url + "/health").json()
    assert h["status"] == "ok" and h["pipeline"]["reasoner"] == "micro" and h["pipeline"]["policy"].startswith(
        "minprob<0.5") and h["max_batch_size"] == 16 and h["replica"]
    page = requests.get(url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html") and "inspector.js" in page.text
    assert requests.get(url + "/inspector.js").headers["content-type"].startswith("text/javascript")
    missing = requests.get(url + "/v2/anything")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_a_plain_completion_carries_the_answer_and_its_trace(client, four_step_trace, local):
    q = four_step_trace.question
    r = client.chat.completions.create(model="kairos", messages=[{"role": "system", "content": "be brief"},
                                                                  {"role": "user", "content": q}])
    assert r.object == "chat.completion" and r.model == "kairos" and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == four_step_trace.answer
    k = r.model_extra["kairos"]
    _same_as_local(k["answer"], local.answer(q))
    assert k["answer"]["calls"] == 1 and len(k["answer"]["steps"]) == 4
    assert k["batch"]["size"] >= 1 and k["batch"]["generation_calls"] >= 4


def test_streaming_sends_each_step_as_it_is_decided(client, four_step_trace, local):
    q = four_step_trace.question
    chunks = list(client.chat.completions.create(model="kairos-flare", stream=True,
                                                 messages=[{"role": "user", "content": q}]))
    assert all(c.object == "chat.completion.chunk" and c.model == "kairos-flare" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    events = [(c.model_extra or {}).get("kairos", {}).get("event") for c in chunks]
    assert events == [None] + ["step"] * 4 + [None, "answer"]  # role, the 4 decisions, the content, the end
    steps = [c.model_extra["kairos"]["step"] for c in chunks[1:5]]
    assert [s["index"] for s in steps] == [1, 2, 3, 4] and sum(s["retrieved"] for s in steps) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == four_step_trace.answer
    end = chunks[-1]
    assert end.choices[0].finish_reason == "stop" and end.model_extra["kairos"]["answer"]["steps"] == steps
    _same_as_local(end.model_extra["kairos"]["answer"], local.answer(q))


def test_concurrent_requests_share_batched_loops(server, questions, local):
    """16 requests at once (12 plain, 4 streamed): each answered as the local pipeline answers it, in batches
    of more than one request whose generation calls serve several questions each."""
    url = server[0]
    qs = questions[300:316]
    ref = {a.question: a for a in local.answer_many(qs)}

    async def one(c, q, stream):
        if not stream:
            r = await c.chat.completions.create(model="kairos", messages=[{"role": "user", "content": q}])
            return r.choices[0].message.content, r.model_extra["kairos"]
        text, last = "", None
        async for ch in await c.chat.completions.create(model="kairos", stream=True,
                                                        messages=[{"role": "user", "content": q}]):
            text += ch.choices[0].delta.content or "" if ch.choices else ""
            last = (ch.model_extra or {}).get("kairos") or last
        return text, last

    async def all_at_once():
        c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=180)
        return await asyncio.gather(*[one(c, q, i % 4 == 3) for i, q in enumerate(qs)])

    got = asyncio.run(all_at_once())
    batches: dict[str, dict] = {}
    for q, (text, k) in zip(qs, got):
        assert text == ref[q].answer
        _same_as_local(k["answer"], ref[q])
        b = k["batch"]
        prev = batches.setdefault(b["id"], b)
        if b["generation_calls"] > prev["generation_calls"]:
            batches[b["id"]] = b  # (the request answered last saw all of its batch's generation calls)
    sizes = [b["size"] for b in batches.values()]
    assert sum(sizes) == len(qs) and max(sizes) > 1, sizes
    shared = [b for b in batches.values() if b["size"] > 1]
    assert all(b["generation_states"] / b["generation_calls"] > 1 for b in shared), shared
    stats = requests.get(url + "/v1/kairos/stats").json()
    assert stats["max_batch_size"] == max(sizes) and stats["states_per_generation_call"] > 1


# ------------------------------------------------------------------------------------------- bad requests
def test_bad_requests_get_a_4xx_naming_the_field(server, client):
    url, cfg = server
    user = [{"role": "user", "content": "Who is Mira 's father ?"}]

    def refused(call):
        with pytest.raises(openai.APIStatusError) as e:
            call()
        body = e.value.response.json()
        assert set(body["error"]) == {"message", "type", "param", "code"}
        return e.value.status_code, body["error"]["param"], body["error"]["code"]

    create = client.chat.completions.create
    assert refused(lambda: create(model="kairos", messages=[])) == (400, "messages", "empty_array")
    assert refused(lambda: create(model="kairos", messages=[{"role": "system", "content": "x"}])) == \
        (400, "messages", "no_user_message")
    assert refused(lambda: create(model="kairos", messages=[{"role": "user", "content": "   "}])) == \
        (400, "messages[0].content", "empty_question")
    assert refused(lambda: create(model="kairos", messages=[{"role": "user", "content": "why " * 60}])) == \
        (400, "messages[0].content", "string_above_max_length")
    assert refused(lambda: create(model="gpt-4o", messages=user)) == (404, "model", "model_not_found")
    assert refused(lambda: create(model="kairos", messages=user, extra_body={"stream": "yes"})) == \
        (400, "stream", "invalid_type")
    assert refused(lambda: create(model="kairos", messages=user, n=3)) == (400, "n", "invalid_value")
    # a budget for a policy trained at one λ: refused, naming the field (it would change no decision)
    assert refused(lambda: create(model="kairos", messages=user, extra_body={"kairos": {"lambda": 0.3}})) == \
        (400, "kairos.lambda", "unsupported_parameter")
    raw = requests.post(url + "/v1/chat/completions", data=b'{"model": "kairos", "messages": [',
                     headers={"Content-Type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_json"
    raw = requests.post(url + "/v1/chat/completions", json={"model": "kairos"})
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "messages"
    assert "Who" in create(model="kairos", messages=user).model_extra["kairos"]["answer"]["question"]  # still fine


# ------------------------------------------------------------------------------------------- the inspector
def test_trace_routes_list_and_read_the_benchmark_files(server):
    url = server[0]
    files = requests.get(url + "/v1/kairos/traces").json()
    assert files["enabled"] and [(f["id"], f["method"], f["policy"].get("threshold")) for f in files["data"]] == \
        [("bench/per_question/test/FLARE_unmasked_.jsonl", "FLARE[unmasked]", 0.5)]
    data = requests.get(url + "/v1/kairos/traces/bench/per_question/test/FLARE_unmasked_.jsonl").json()
    assert data["total"] == 3 and sorted(r["question_index"] for r in data["rows"]) == [10, 11, 12]
    bad = requests.get(url + "/v1/kairos/traces/bench/summary.json")
    assert bad.status_code == 404 and "no trace file" in bad.json()["error"]["message"]
    assert requests.get(url + "/v1/kairos/traces/x.jsonl", params={"limit": 0}).status_code == 400
    bad = requests.get(url + "/v1/kairos/traces/x.jsonl", params={"offset": "first"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "offset"


def test_the_page_asks_through_the_endpoint_and_opens_benchmark_traces(server, browser, four_step_trace,
                                                                       assert_trace_page, screenshot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url = server[0]
    browser.get(url + "/")
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    assert "standalone" not in browser.find_element(By.TAG_NAME, "body").get_attribute("class")
    assert [o.text for o in Select(browser.find_element(By.ID, "model")).options] == ["kairos", "kairos-flare"]
    assert "minprob<0.5" in browser.find_element(By.ID, "server-info").text
    browser.find_element(By.ID, "question").send_keys(four_step_trace.question)
    browser.find_element(By.ID, "ask").click()
    assert_trace_page(browser, four_step_trace)  # streamed, then the final answer
    screenshot(browser, "inspector_served_four_step_trace.png")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#history li")) == 1
    # a bad question: the endpoint's 4xx, shown with its field
    q = browser.find_element(By.ID, "question")
    q.clear()
    q.send_keys("why " * 60)
    browser.find_element(By.ID, "ask").click()
    err = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "error").text or None)
    assert "at most 200" in err and "messages[0].content" in err
    # a benchmark trace file, picked from the list
    Select(browser.find_element(By.ID, "trace-file")).select_by_value("bench/per_question/test/FLARE_unmasked_.jsonl")
    WebDriverWait(browser, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#trace-rows li")) == 3)
    browser.find_elements(By.CSS_SELECTOR, "#trace-rows li")[0].click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#steps > li.step")
                                     and "FLARE" in d.find_element(By.CSS_SELECTOR, "#trace-head .meta").text)
    assert browser.find_element(By.CSS_SELECTOR, "#decision-chart").get_attribute("data-series") == "minprob"
    assert browser.find_elements(By.CSS_SELECTOR, "#decision-chart line.threshold")


# ------------------------------------------------------------------------------------------- a killed replica
def test_a_killed_replica_is_replaced_by_serve(server, client, questions):
    import ray

    from kairos.server import DEPLOYMENT

    url, cfg = server
    before = requests.get(url + "/health").json()["replica"]
    names = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::") and f"#{DEPLOYMENT}#" in a["name"]]
    assert len(names) == cfg.replicas, names
    ray.kill(ray.get_actor(names[0]["name"], namespace=names[0]["namespace"]), no_restart=True)
    deadline, answer, failures = time.time() + 180, None, 0
    while time.time() < deadline:
        try:
            r = client.chat.completions.create(model="kairos", messages=[{"role": "user", "content": questions[400]}],
                                               timeout=30)
            answer = r.model_extra["kairos"]
            if answer["batch"]["replica"] != before:
                break
        except (openai.APIStatusError, openai.APIConnectionError, openai.APITimeoutError):
            failures += 1
        time.sleep(1.0)
    assert answer is not None and answer["batch"]["replica"] != before, "no answer from a new replica in 180 s"
    assert requests.get(url + "/health").json()["replica"] == answer["batch"]["replica"]


def test_free_port_binds_below_the_ephemeral_range():
    """The benchmark's and tests' ports come from below the kernel's ephemeral range (where outgoing connections
    take their local ports — the cause of a CI failure: the proxy's port taken before it bound) and bind now."""
    import socket as so
    from pathlib import Path

    from kairos.server import free_port

    rng = Path("/proc/sys/net/ipv4/ip_local_port_range")
    ports = {free_port() for _ in range(20)}
    if rng.is_file():
        assert max(ports) < int(rng.read_text().split()[0])
    assert min(ports) >= 20000 and len(ports) > 1
    for port in list(ports)[:3]:
        with so.socket() as s:
            s.bind(("127.0.0.1", port))


def test_start_on_a_free_port_moves_on_when_the_proxy_cannot_bind(monkeypatch):
    """Serve's proxy failing to bind the drawn port: Serve is shut down and started again on another port; any
    other start error goes up unchanged, and the last bind failure too."""
    from ray import serve

    from kairos import server as srv
    from kairos.config import ServeConfig

    seen, shutdowns = [], []

    def fake_start(config, **kw):
        seen.append(config.port)
        if len(seen) < 2:
            raise RuntimeError("ray::ProxyActor.ready() ... Failed to bind to address '127.0.0.1:%d'." % config.port)
        return f"http://127.0.0.1:{config.port}"

    monkeypatch.setattr(srv, "start", fake_start)
    monkeypatch.setattr(serve, "shutdown", lambda: shutdowns.append(1))
    cfg = ServeConfig.from_dict({"port": 8000, "pipeline": {"policy": "never"}})
    url, got = srv.start_on_a_free_port(cfg)
    assert seen[0] == 8000 and seen[1] != 8000 and got.port == seen[1] and url.endswith(f":{seen[1]}")
    assert shutdowns == [1]

    monkeypatch.setattr(srv, "start", lambda config, **kw: (_ for _ in ()).throw(ValueError("bad pipeline")))
    with pytest.raises(ValueError, match="bad pipeline"):
        srv.start_on_a_free_port(cfg)
    monkeypatch.setattr(srv, "start", lambda config, **kw: (_ for _ in ()).throw(RuntimeError("Failed to bind")))
    with pytest.raises(RuntimeError, match="Failed to bind"):
        srv.start_on_a_free_port(cfg, attempts=2)
    assert len(shutdowns) == 2
