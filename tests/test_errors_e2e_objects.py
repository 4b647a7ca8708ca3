"""End to end, as a user meets them: saved objects checked against what loads them (class 2), an env that
refuses misuse (class 3; every registered id: tests/test_env_checker.py), impossible Ray requests that fail at once
and waits that say what they wait for (class 6), and evidence bounded by the backend's context window with partial
HTTP log-probabilities masked, not trusted (class 7).

CLI cases run ``python -m eval …`` (the ``kairos`` command) in a subprocess and assert the exit status, ONE clear
error line (no traceback) naming the object's path, the fields or sizes on both sides and the fix — and that nothing
ran or was lost before the check.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {"split": "dev", "rsus_components": ["ent"]}


def _kairos(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The failed command's error line: rc 2, no traceback, every needle in it."""
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    line = [ln for ln in r.stderr.strip().splitlines() if "error:" in ln]
    assert len(line) == 1, r.stderr[-3000:]
    for n in needles:
        assert n in line[0], (n, line[0])
    return line[0]


def _yaml(path: Path, data: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------------------------------------------------ class 2: policies
@pytest.fixture(scope="module")
def pulse02_policy(tmp_path_factory):
    """A learned policy trained (random weights) on PUlSE over layers [0, 2], exported with its env."""
    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    env = make_env("microworld", {**ENV, "pulse_layers": [0, 2]})
    net = PolicyNet(spec_from_spaces(env.observation_space, env.action_space, {"arch": "mlp"}))
    record = env.config.to_dict()
    sizes = {k: int(np.prod(s.shape)) for k, s in env.observation_space.spaces.items()}
    env.close()
    path = export_policy(net, tmp_path_factory.mktemp("pol") / "policy", heads=("retrieve",), env_config=record)
    return path, sizes


def _bench_yaml(tmp: Path, env: dict, policy: Path) -> Path:
    return _yaml(tmp / "bench.yaml", {
        "name": "t", "out_dir": str(tmp / "bench"), "env": env, "dev": "0:2", "test": "2:4",
        "methods": [{"name": "CoT", "kind": "never"}, {"name": "IRCoT[step query, 1 passage, ≤4]", "kind": "always"},
                    {"name": "L", "kind": "learned", "path": str(policy)}]})


@pytest.mark.parametrize("env,needles", [
    # the policy reads PUlSE; the bench env has no PUlSE field at all
    ({**ENV, "signals": ["output", "rsus"]}, ["pulse (policy:", "env: none", "env.signals to ['pulse', 'output', "
                                             "'rsus'] (here ['output', 'rsus'])"]),
    # the PUlSE field has another size (the layer interval changed)
    (ENV, ["pulse (policy:", "env.pulse_layers to [0, 2] (here None)"]),
])
def test_bench_checks_a_learned_policy_before_any_method_runs(tmp_path, pulse02_policy, env, needles):
    policy, _ = pulse02_policy
    r = _kairos("bench", "policies", "--config", str(_bench_yaml(tmp_path, env, policy)))
    _one_line_error(r, str(policy), "method 'L'", "retrain", *needles)
    assert not list((tmp_path / "bench").rglob("*.jsonl")), "a method ran before the check"


def test_pipeline_and_answer_cli_check_the_policy_against_the_env(tmp_path, pulse02_policy):
    from kairos import Pipeline
    from policies.rl.compat import PolicyMismatchError

    policy, _ = pulse02_policy
    with pytest.raises(PolicyMismatchError, match=r"pulse \(policy: \d+ numbers; env: \d+\).*pulse_layers to \[0, 2\]"):
        Pipeline.from_policy(policy, env_config={**ENV, "pulse_layers": [0, 4]})
    env_yaml = _yaml(tmp_path / "env.yaml", {**ENV, "signals": ["output", "rsus"]})
    r = _kairos("answer", "--policy", str(policy), "--env-config", str(env_yaml), "Who is Buxgur 's mother ?")
    _one_line_error(r, str(policy), "pulse (policy:", "env: none", "env.signals")
    # the env it was trained in: it runs
    with Pipeline.from_policy(policy) as p:
        assert p.answer("Who is Buxgur 's mother ?").answer is not None


def test_serve_checks_the_policy_on_the_driver_before_ray_starts(tmp_path, pulse02_policy):
    policy, _ = pulse02_policy
    env_yaml = _yaml(tmp_path / "env.yaml", {**ENV, "signals": ["output", "rsus"]})
    t0 = time.monotonic()
    r = _kairos("serve", "--policy", str(policy), "--env-config", str(env_yaml), "--num-cpus", "1", "--port", "8937")
    _one_line_error(r, str(policy), "pulse (policy:", "env: none", "env.signals")
    assert time.monotonic() - t0 < 60 and "ray" not in r.stderr.lower(), "Ray started before the check"


def test_train_warm_start_from_a_policy_of_other_sizes_is_one_line(tmp_path, pulse02_policy):
    policy, _ = pulse02_policy
    cfg = _yaml(tmp_path / "train.yaml", {"env": "microworld", "out_dir": str(tmp_path / "run"), "iterations": 1,
                                          "num_env_runners": 0, "env_config": {**ENV, "max_questions": 4},
                                          "model": {"warm_start": str(policy), "arch": "mlp"}})
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(cfg)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    line = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(line) == 1 and str(policy) in line[0] and "model.warm_start" in line[0], r.stderr[-3000:]
    assert "pulse (policy:" in line[0] and "env.pulse_layers to [0, 2]" in line[0], line[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()


def test_query_modes_and_weights_are_checked(tmp_path, pulse02_policy):
    from policies.rl.compat import PolicyMismatchError, check_policy_env
    from policies.rl.export import LearnedTrigger, export_policy, load_policy
    from policies.rl.net import PolicyNet, PolicySpec

    _, sizes = pulse02_policy
    net = PolicyNet(PolicySpec(fields=sizes, arch="mlp", n_modes=2, query_modes=["info_need", "qfs"]))
    path = export_policy(net, tmp_path / "qg")
    t = LearnedTrigger.load(path)
    with pytest.raises(PolicyMismatchError, match=r"query head chooses among \['info_need', 'qfs'\].*lack \['qfs'\]"):
        check_policy_env(t, sizes, {"query_modes": ["step", "info_need"]}, querygen=True)
    check_policy_env(t, sizes, {"query_modes": ["step", "info_need"]}, querygen=False)  # no head used: fine
    # weights.pt of another export (another size) beside this spec.json: named, not a torch traceback
    other = export_policy(PolicyNet(PolicySpec(fields={**sizes, "output": sizes["output"] + 1}, arch="mlp")),
                          tmp_path / "other")
    shutil.copy(other / "weights.pt", path / "weights.pt")
    with pytest.raises(ValueError, match=r"qg: weights.pt does not match spec.json: .*proj.output.weight \(spec.json: "
                                         r"\[32, 4\]; weights.pt: \[32, 5\]\).*export the policy again"):
        load_policy(path)
    (path / "weights.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="unreadable policy weights"):
        load_policy(path)


def test_a_policy_on_another_model_with_fitting_fields_runs_with_a_warning(caplog, pulse02_policy):
    from policies.rl.compat import check_policy_env
    from policies.rl.export import LearnedTrigger

    policy, sizes = pulse02_policy
    t = LearnedTrigger.load(policy)
    with caplog.at_level(logging.WARNING, logger="policies.rl.compat"):
        check_policy_env(t, sizes, {**t.env_config, "artifact": "envs/core/microworld/artifacts/shifted"})
    assert "was trained on model None and runs on model 'envs/core/microworld/artifacts/shifted'" in caplog.text


# ------------------------------------------------------------------------------------------------ class 2: probes
@pytest.fixture(scope="module")
def world_probe(tmp_path_factory):
    """A PUlSE probe for the shipped micro-world's model (random features; what `kairos probe train` saves)."""
    from envs.core.microworld.artifact import load_artifact, world_model_id
    from policies.probes import FeatureSpec, FitConfig, fit_probe

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    probe, _ = fit_probe(FeatureSpec("pulse", layers=(0, 2)), X, y, np.arange(40), np.arange(40, 60),
                         model_id=world_model_id(load_artifact(None, with_model=False)),
                         fit=FitConfig(max_epochs=3, patience=2))
    return probe.save(tmp_path_factory.mktemp("probe") / "p")


def _edit_probe(src: Path, dst: Path, **meta_over) -> Path:
    shutil.copytree(src, dst)
    meta = json.loads((dst / "probe.json").read_text())
    for k, v in meta_over.items():
        node, *rest = k.split(".")
        if rest:
            meta[node][rest[0]] = v
        else:
            meta[node] = v
    (dst / "probe.json").write_text(json.dumps(meta))
    return dst


def test_probe_declared_sizes_vs_weights(tmp_path, world_probe):
    from policies.probes import Probe, ProbeMismatchError

    # probe.json declares 8 inputs everywhere, the weights read 6: both files named, both sizes
    p = _edit_probe(world_probe, tmp_path / "a", n_features=8, **{"arch.in_dim": 8},
                    normalization={"mean": [0.0] * 8, "std": [1.0] * 8})
    with pytest.raises(ProbeMismatchError, match=r"weights.safetensors does not match .*input size 8.*net.0.weight "
                                                  r"\(probe.json: \[128, 8\]; weights: \[128, 6\]\).*retrain"):
        Probe.load(p)
    # probe.json contradicts itself
    q = _edit_probe(world_probe, tmp_path / "b", n_features=9)
    with pytest.raises(ProbeMismatchError, match=r"probe.json: declares inconsistent input sizes \(n_features 9, "
                                                  r"normalization.mean 6"):
        Probe.load(q)
    # a layer interval the model does not have
    with pytest.raises(ProbeMismatchError, match=r"layer interval \[0, 2\], but the model has 1 layers"):
        Probe.load(world_probe, model_layers=1)


def test_env_with_a_bad_probe_fails_in_the_cli_naming_it(tmp_path, world_probe):
    p = _edit_probe(world_probe, tmp_path / "bad", n_features=8, **{"arch.in_dim": 8},
                    normalization={"mean": [0.0] * 8, "std": [1.0] * 8})
    env_yaml = _yaml(tmp_path / "env.yaml", {**ENV, "probes": {"pulse_prob": str(p)}})
    r = _kairos("answer", "--policy", "never", "--env-config", str(env_yaml), "Who is Buxgur 's mother ?")
    _one_line_error(r, str(p), "weights.safetensors does not match", "retrain")


# ------------------------------------------------------------------------------------------------ class 2: artifact
def _artifact_copy(tmp: Path) -> Path:
    from envs.core.microworld.artifact import DEFAULT_ARTIFACT

    dst = tmp / "world"
    shutil.copytree(DEFAULT_ARTIFACT, dst, ignore=shutil.ignore_patterns("probes"))
    return dst


def _reseal(path: Path) -> None:
    """Rewrite the manifest's digests (an artifact edited by hand, or two builds' files mixed, with a fresh
    manifest: the checksums alone do not catch it)."""
    from envs.core.io import sha256_file

    man = json.loads((path / "manifest.json").read_text())
    man["files"] = {rel: sha256_file(path / rel) for rel in man["files"]}
    (path / "manifest.json").write_text(json.dumps(man))


def test_artifact_parts_are_checked_against_each_other(tmp_path):
    from envs.core.microworld.artifact import ArtifactError, load_artifact

    world = _artifact_copy(tmp_path)
    kb = json.loads((world / "kb.json").read_text())
    kb["facts"][0]["object"] = "Qwzxqy"  # a word the tokenizer never saw
    (world / "kb.json").write_text(json.dumps(kb))
    _reseal(world)
    with pytest.raises(ArtifactError, match=r"kb.json uses 1 word\(s\) tokenizer.json does not know .*'Qwzxqy'.*"
                                            r"rebuild the artifact"):
        load_artifact(world, with_model=False)
    # the CLI names it too, as one line
    env_yaml = _yaml(tmp_path / "env.yaml", {**ENV, "artifact": str(world)})
    r = _kairos("answer", "--policy", "never", "--env-config", str(env_yaml), "Who is Buxgur 's mother ?")
    _one_line_error(r, str(world), "kb.json", "tokenizer.json", "rebuild")


def test_artifact_questions_and_weights_are_checked(tmp_path):
    from safetensors.torch import load_file, save_file

    from envs.core.microworld.artifact import ArtifactError, load_artifact

    world = _artifact_copy(tmp_path)
    qs = json.loads((world / "questions.json").read_text())
    qs["dev"][0] = "Nobodyx/" + qs["dev"][0].split("/", 1)[1]
    (world / "questions.json").write_text(json.dumps(qs))
    _reseal(world)
    with pytest.raises(ArtifactError, match=r"questions.json\['dev'\] question 'Nobodyx/.*entity 'Nobodyx'"):
        load_artifact(world, with_model=False)
    world2 = _artifact_copy(tmp_path / "w2")
    st = load_file(str(world2 / "model" / "model.safetensors"))
    k = next(k for k in st if k.endswith("mlp.up_proj.weight"))
    st[k] = st[k][:-1].contiguous()
    save_file(st, str(world2 / "model" / "model.safetensors"))
    _reseal(world2)
    with pytest.raises(ArtifactError, match=r"model.safetensors does not match model/config.json: .*up_proj"):
        load_artifact(world2)


# ------------------------------------------------------------------------------------------------ class 3 via the CLI
@pytest.mark.parametrize("over,needle", [({"max_step_tokens": 0}, "max_step_tokens must be >= 1"),
                                         ({"max_retrievals_per_question": -1}, "no 'unlimited' value")])
def test_bad_budgets_in_the_cli_are_one_line(tmp_path, over, needle):
    env_yaml = _yaml(tmp_path / "env.yaml", {**ENV, **over})
    r = _kairos("answer", "--policy", "always", "--env-config", str(env_yaml), "Who is Buxgur 's mother ?")
    _one_line_error(r, needle, str(env_yaml))


# ------------------------------------------------------------------------------------------------ class 6: Ray
def test_requests_checked_against_the_cluster_types():
    from envs.serving import ResourceRequestError, check_requests, ray_request

    nodes = [{"CPU": 2.0, "memory": 1e9}, {"CPU": 4.0, "reasoner_node": 1.0}]
    check_requests([("a", ray_request({"num_cpus": 4, "resources": {"reasoner_node": 1}}))], nodes)
    with pytest.raises(ResourceRequestError, match=r"reasoner_service \(per replica\) asks Ray for \{CPU: 1, GPU: 1\}"
                                                   r".*no node of the cluster has any 'GPU' \(no GPU at all\).*"
                                                   r"\{CPU: 2\}; \{CPU: 4, reasoner_node: 1\}"):
        check_requests([("reasoner_service (per replica)", ray_request({"num_cpus": 1, "num_gpus": 1}))], nodes)
    with pytest.raises(ResourceRequestError, match=r"'CPU': 8 asked, the largest node has 4"):
        check_requests([("num_env_runners", ray_request({"num_cpus": 8}))], nodes)
    with pytest.raises(ResourceRequestError, match=r"no node of the cluster has any 'gpu_node'"):
        check_requests([("retriever_service", ray_request({"num_cpus": 1, "resources": {"gpu_node": 1}}))], nodes)
    # each fits a node, but together they need more than the cluster has: they would wait forever
    with pytest.raises(ResourceRequestError, match=r"together the run's actors ask Ray for CPU: 8, more than the "
                                                   r"whole cluster has \(CPU: 6\).*num_env_runners: \{CPU: 1\} x 3"):
        check_requests([("num_env_runners", ray_request({"num_cpus": 1}), 3),
                        ("reasoner_service", ray_request({"num_cpus": 4}), 1),
                        ("retriever_service", ray_request({"num_cpus": 1}), 1)], nodes)
    # both types exist, but not on one node
    with pytest.raises(ResourceRequestError, match="no single node has all of them together"):
        check_requests([("x", ray_request({"num_cpus": 3, "resources": {"reasoner_node": 1}}))],
                       [{"CPU": 4.0}, {"CPU": 2.0, "reasoner_node": 1.0}])


def test_impossible_service_fails_at_once_and_waits_report(ray_local, caplog, monkeypatch):
    from envs import serving
    from envs.env_config import EnvConfig
    from envs.services import start_service
    from envs.serving import ResourceRequestError

    t0 = time.monotonic()
    with pytest.raises(ResourceRequestError, match=r"reasoner_service .*GPU: 1.*no GPU at all.*CPU: 2"):
        start_service(EnvConfig.from_dict(ENV), {"num_gpus": 1, "start_timeout_s": 300})
    assert time.monotonic() - t0 < 10, "the impossible request waited"
    class Slow:  # (defined here: Ray ships it by value, the test module is not importable in its workers)
        def info(self):
            return {"pid": 0, "node_id": "x"}

    # more replicas than the cluster can ever hold at once: an error now, not a wait that cannot end
    with pytest.raises(ResourceRequestError, match=r"together .* CPU: 4, more than the whole cluster has \(CPU: 2\)"):
        serving.start_replicas(Slow, "toomany", 2, (), {"num_cpus": 2}, 300.0, "demo service")
    # a request that can be placed, but not now (another actor holds the CPUs): the wait says what it waits for
    import ray

    hog = ray.remote(Slow).options(num_cpus=2).remote()
    ray.get(hog.info.remote())
    monkeypatch.setattr(serving, "PROGRESS_EVERY_S", 1.0)
    try:
        with caplog.at_level(logging.WARNING, logger="envs.serving"), \
                pytest.raises(RuntimeError, match="1 of 1 replicas did not start within 3 s"):
            serving.start_replicas(Slow, "slowpoke", 1, (), {"num_cpus": 1}, 3.0, "demo service")
    finally:
        ray.kill(hog)
    assert "demo service 'slowpoke': still waiting for 1 of 1 (each replica asks for {CPU: 1}" in caplog.text


def _long_passages(c, words: int = 20_000) -> None:
    """The env's retriever returns every passage with ``words`` more words (a huge document)."""
    search = c.retriever.search
    c.retriever.search = lambda queries, k=10: [[type(p)(**{**p.__dict__, "text": p.text + " filler" * words})
                                                 for p in h] for h in search(queries, k)]


def test_a_served_reasoner_bounds_the_evidence_next_to_the_model(ray_local):
    from envs.env_config import EnvConfig
    from envs.registration import make_env
    from envs.served import ServedReasoner
    from envs.services import start_service, stop_service

    cfg = EnvConfig.from_dict({**ENV, "signals": ["output"]})
    spec = start_service(cfg, {"max_wait_ms": 1.0})
    try:
        env = make_env(config=cfg.replace(reasoner_service=spec))
        assert isinstance(env.c.reasoner, ServedReasoner)
        _long_passages(env.c)
        env.reset(options={"question_index": 0})
        t0 = time.monotonic()
        _, _, _, _, info = env.step(1)
        assert time.monotonic() - t0 < 30 and info["evidence_truncated"] == 1
        env.close()
    finally:
        stop_service(spec)


def test_train_cli_with_a_gpu_service_on_a_cpu_cluster_fails_at_once(tmp_path):
    cfg = _yaml(tmp_path / "train.yaml", {"env": "microworld", "out_dir": str(tmp_path / "run"), "iterations": 1,
                                          "num_env_runners": 0, "env_config": {**ENV, "max_questions": 4},
                                          "reasoner_service": {"num_gpus": 1}})
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(cfg)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "reasoner_service" in r.stderr and "no GPU at all" in r.stderr, r.stderr[-3000:]
    assert time.monotonic() - t0 < 120


# ------------------------------------------------------------------------------------------------ class 7: evidence
def test_long_evidence_is_cut_logged_and_counted(caplog):
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.registration import make_env

    cfg = EnvConfig.from_preset("microworld", {**ENV, "signals": ["output"]})
    c = build_components(cfg)
    search = c.retriever.search

    def long_search(queries, k=10):
        hits = search(queries, k)
        return [[type(p)(**{**p.__dict__, "text": p.text + " filler" * (200_000 // 7)}) for p in h] for h in hits]

    c.retriever.search = long_search
    env = make_env(config=cfg, components=c)
    env.reset(options={"question_index": 0})
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="envs.hooks"):
        _, _, _, _, info = env.step(1)
    assert time.monotonic() - t0 < 20
    assert info["evidence_truncated"] == 1 and info["passage_ids"]
    assert "evidence cut to fit the reasoner's context window of 256 tokens: 1 passage(s) truncated" in caplog.text
    _, _, _, _, info = env.step(0)
    assert info["evidence_truncated"] == 0  # an accept cuts nothing
    env.close()


def test_answer_cli_with_a_long_corpus_is_bounded(tmp_path):
    corpus = tmp_path / "long.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": "Buxgur works for Acme . "
                                          + "filler word " * 5000}) + "\n" for i in range(3)))
    t0 = time.monotonic()
    r = _kairos("answer", "--policy", "always", "--corpus", str(corpus), "--json",
                "Which company does Buxgur 's spouse work for ?")
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.monotonic() - t0 < 90
    assert "evidence cut to fit the reasoner's context window of 256 tokens" in r.stderr


def test_every_backend_says_its_window():
    from agents.reasoners.base import fit_evidence
    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

    r = OpenAIReasoner(OpenAIReasonerConfig(context_window=400, max_step_tokens=16, chars_per_token=3.0))
    s = r.start("Who is Buxgur 's mother ?")
    texts, note = fit_evidence(r, s, (), ["short passage", "x" * 30_000])
    assert texts[0] == "short passage" and len(texts[1]) < 1200
    assert note["truncated"] == 1 and note["window"] == 400
    assert r.state_tokens(r.with_evidence(s, texts)) + r.max_step_tokens <= r.context_window
    same, none = fit_evidence(r, s, (), ["fits"])
    assert same == ["fits"] and none == {}
    # the hf / vLLM backends share the text-steps implementation: their window is the model's max length
    from agents.reasoners.textsteps import TextStepReasoner

    assert isinstance(TextStepReasoner.context_window, property)


def test_http_logprobs_covering_part_of_the_line_are_masked(caplog):
    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

    r = OpenAIReasoner(OpenAIReasonerConfig(model="m"))
    s = r.start("q")
    full = {"text": "Step 1: Paris is in France.", "finish_reason": "stop", "stop_reason": "\n",
            "logprobs": {"tokens": ["Step", " 1", ":", " Paris", " is", " in", " France", "."],
                         "token_logprobs": [-0.1] * 8, "top_logprobs": [None] * 8}}
    step, _ = r._to_step(s, full, {"usage": {"completion_tokens": 8}}, 0.1)
    assert step.logprobs is not None and "logprobs_partial" not in step.meta
    part = {**full, "logprobs": {"tokens": ["Step", " 1", ":"], "token_logprobs": [-0.1] * 3,
                                 "top_logprobs": [None] * 3}}
    with caplog.at_level(logging.WARNING, logger="agents.reasoners.openai_compat"):
        step, _ = r._to_step(s, part, {"usage": {}}, 0.1)
    assert step.logprobs is None and step.maxprobs is None
    assert step.meta["logprobs_partial"] == {"text_chars": 27, "covered_chars": 7, "tokens": 3}
    assert "the returned logprobs cover 7 of the line's 27 characters" in caplog.text
    other = {**full, "logprobs": {"tokens": ["Answer", ":", " Rome"], "token_logprobs": [-0.1] * 3,
                                  "top_logprobs": [None] * 3}}
    step, _ = r._to_step(s, other, {"usage": {}}, 0.1)
    assert step.logprobs is None  # logprobs of another text: masked too
