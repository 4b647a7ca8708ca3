"""Bad input, one row each: every case must fail with a clear error that names the file, line, key or field — no
raw traceback, no silent result, no hang (each case has a timeout through pytest-timeout's default).

The rows cover the reliability issue's list (configs, NaN costs, resume, caches, indexes, artifacts, the HTTP
reasoner, Ray-free driver checks, the CLI) plus cases of our own. A row is ``(id, fn, exception, regex)``; ``fn``
gets a temporary directory.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envs.core.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _train(over: dict):
    from train.config import TrainConfig

    return TrainConfig.from_dict(over)


def _env(over: dict):
    from envs.env_config import EnvConfig

    return EnvConfig.from_dict(over)


def _bench(tmp: Path, **over):
    from eval.bench.policies import BenchConfig

    base = {"name": "t", "out_dir": str(tmp / "b"), "env": {"split": "dev"}, "dev": "0:4", "test": "4:8",
            "methods": [{"name": "CoT", "kind": "never"}]}
    return BenchConfig.from_dict({**base, **over})


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _cli_error(*args: str) -> None:
    """Run a CLI command that must fail with one clear line (raised here as ValueError carrying stderr)."""
    r = _cli(*args)
    assert r.returncode != 0, f"{args} succeeded"
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    raise ValueError(r.stderr.strip().splitlines()[-1])


def _yaml(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def _cost_nan(tmp):
    from envs.costs import CostModel

    CostModel({"retrieval_calls": math.nan})


def _cost_returns_inf(tmp):
    from envs.costs import CostEvent, CostModel, register_cost

    class Inf:
        def __call__(self, event):
            return math.inf

    register_cost("_inf_cost")(Inf)
    try:
        CostModel({"_inf_cost": 1.0})(CostEvent())
    finally:
        from envs.costs import COSTS

        COSTS.unregister("_inf_cost")


def _cache_pickle(tmp):
    import pickle
    import sqlite3

    from envs.trajectory_cache import TrajectoryCache

    p = tmp / "c.sqlite"
    TrajectoryCache(p, "ns").put("q", (), 1)
    db = sqlite3.connect(p)
    db.execute("UPDATE steps SET value = ?", (pickle.dumps({"x": 1}),))
    db.commit()
    TrajectoryCache(p, "ns").get("q", ())


def _cache_not_sqlite(tmp):
    from envs.trajectory_cache import TrajectoryCache

    p = tmp / "c.sqlite"
    p.write_bytes(b"this is not a database" * 100)
    TrajectoryCache(p, "ns").get("q", ())


def _index(tmp):
    from agents.retrievers import build_index
    from envs.core.data.types import Corpus, Passage

    corpus = Corpus.from_passages([Passage(f"p{i}", f"T{i}", f"passage number {i} about topic {i}") for i in range(6)])
    out = tmp / "idx"
    build_index("bm25", corpus, out)
    return out, corpus


def _index_same_size_edit(tmp):
    from agents.retrievers import load_index

    out, corpus = _index(tmp)
    f = next(out.rglob("data.csc.index.npy"))
    arr = np.load(f)
    arr[0] *= 1.01
    np.save(f, arr)
    load_index(out, corpus)


def _index_other_corpus(tmp):
    from agents.retrievers import load_index
    from envs.core.data.types import Corpus, Passage

    out, _ = _index(tmp)
    load_index(out, Corpus.from_passages([Passage("x", "X", "another corpus")]))


def _index_missing(tmp):
    from agents.retrievers import load_index

    load_index(tmp / "nowhere")


def _artifact_edited(tmp):
    from envs.core.microworld.artifact import default_artifact_path, load_artifact

    bad = tmp / "world"
    shutil.copytree(default_artifact_path(), bad)
    kb = bad / "kb.json"
    kb.write_text(kb.read_text() + " ")
    load_artifact(bad)


def _probe_for_another_model(tmp):
    from envs.core.microworld.artifact import default_artifact_path
    from policies.probes.probe import Probe

    Probe.load(default_artifact_path() / "probes" / "pulse", expected_model_id="hf:some-other-model")


def _probe_missing(tmp):
    _env_build(tmp, probes={"p": str(tmp / "no_probe")})


def _env_build(tmp, **over):
    from envs.components import build_components

    build_components(_env({"split": "dev", "max_questions": 2, **over}))


def _step_before_reset(tmp):
    import gymnasium as gym

    import envs  # noqa: F401

    gym.make("kairos/MicroWorld-v0", config={"split": "dev", "max_questions": 2}).unwrapped.step(0)


def _bad_action(tmp):
    import gymnasium as gym

    import envs  # noqa: F401

    e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "max_questions": 2}).unwrapped
    e.reset(seed=0)
    e.step(7)


def _question_index(tmp):
    import gymnasium as gym

    import envs  # noqa: F401

    gym.make("kairos/MicroWorld-v0", config={"split": "dev", "max_questions": 2}).unwrapped.reset(
        options={"question_index": 5})


def _dataset_duplicate_id(tmp):
    from envs.core.data import load_dataset

    p = tmp / "mc.jsonl"
    rec = {"id": "x", "question": "Q?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 1}
    p.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    load_dataset("medmcqa", p)


def _dataset_bad_json_line(tmp):
    from envs.core.data import load_dataset

    p = tmp / "hq.jsonl"
    p.write_text((ROOT / "tests" / "fixtures" / "hotpotqa_ircot.jsonl").read_text().strip() + "\n{not json\n")
    load_dataset("hotpotqa", p)


def _http(mode: str):
    def run(tmp):
        sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
        import openai_server

        from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

        srv = openai_server.start(lifetime_s=30)
        srv.mode = mode
        try:
            r = OpenAIReasoner(OpenAIReasonerConfig(base_url=srv.url, model="m", retries=0, deadline_s=1.0))
            r.next_step([r.start("Which lake?")])
        finally:
            srv.stop_event.set()
    return run


def _http_unreachable(tmp):
    import socket

    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = OpenAIReasoner(OpenAIReasonerConfig(base_url=f"http://127.0.0.1:{port}/v1", retries=0, timeout_s=1))
    r.next_step([r.start("q?")])


def _registry_duplicate(tmp):
    from policies.triggers import TRIGGERS

    TRIGGERS.register("threshold", object)


def _record_unregistered(tmp):
    from dataclasses import dataclass

    from envs.records import encode

    @dataclass
    class Foreign:
        x: int = 1

    encode({"a": Foreign()})


def _vector_env_bad_config(tmp):
    from envs.vector import make_batched

    make_batched(2, {"split": "nope"})


CASES = [
    # --- training configs (driver-side, before Ray starts)
    ("train-lambda-negative", lambda t: _train({"curriculum": {"retrieval_calls": {"start": -0.1}}}), ConfigError,
     r"curriculum.retrieval_calls.start must be a finite λ >= 0"),
    ("train-lambda-nan", lambda t: _train({"curriculum": {"retrieval_calls": {"end": float("nan")}}}), ConfigError,
     r"curriculum.retrieval_calls.end must be a finite λ"),
    ("train-curriculum-uncharged-cost", lambda t: _train({"curriculum": {"tokens": {"start": 0.1}}}), ConfigError,
     r"curriculum for cost 'tokens', which the env does not charge"),
    ("train-env-config-typo", lambda t: _train({"env_config": {"splitt": "train"}}), ConfigError,
     r"TrainConfig.env_config: unknown config key 'splitt' .*did you mean 'split'\?"),
    ("train-env-config-nested-typo", lambda t: _train({"env_config": {"rsus_options": {"n_sampels": 2}}}),
     ConfigError, r"TrainConfig.env_config.rsus_options: unknown config key 'n_sampels' .*did you mean 'n_samples'"),
    ("train-env-config-hotpotqa-value", lambda t: _train({"env": "hotpotqa", "env_config": {"fact_holdout":
                                                                                             {"share": 0.3}}}),
     ConfigError, r"TrainConfig.env_config: fact_holdout is a micro-world condition"),
    ("train-bad-factory", lambda t: _train({"env": "envs.nowhere"}), ConfigError,
     r"env must be a preset .* or 'module:factory', got 'envs.nowhere'"),
    ("train-unknown-key", lambda t: _train({"iteratons": 3}), ConfigError, r"unknown config key 'iteratons'"),
    ("train-schedule-kind", lambda t: _train({"curriculum": {"retrieval_calls": {"kind": "step"}}}), ConfigError,
     r"ScheduleConfig.kind: unknown λ schedule 'step' \(registered: constant, linear"),
    ("train-exponential-zero", lambda t: _train({"curriculum": {"retrieval_calls": {"kind": "exponential",
                                                                                    "end": 0.0}}}),
     ConfigError, r"exponential schedules need start > 0 and end > 0"),
    ("train-warmstart-custom-env", lambda t: _train({"env": "my_pkg.envs:make", "env_config": {},
                                                     "warmstart": {"enabled": True}}),
     ConfigError, r"warm start labels through the Kairos env presets .*not a custom env factory"),
    ("train-yaml-invalid", lambda t: _train_yaml(t, "iterations: [1,\n"), ConfigError, r"train\.yaml:\d+:\d+"),
    # --- env configs
    ("env-unknown-task", lambda t: _env({"task": "hotpot"}), ConfigError,
     r"EnvConfig.task: unknown task 'hotpot' \(registered: microworld, (questions, )?(microworld_chain, )?hotpotqa, musique"),
    ("env-unknown-reasoner", lambda t: _env({"reasoner": "gpt"}), ConfigError,
     r"EnvConfig.reasoner: unknown reasoner 'gpt' \(registered: micro, hf, openai"),
    ("env-unknown-retriever", lambda t: _env({"retriever": "faiss"}), ConfigError,
     r"EnvConfig.retriever: unknown retriever 'faiss' \(registered: bm25, colbert"),
    ("env-unknown-query-mode", lambda t: _env({"query_modes": ["step", "infoneed"]}), ConfigError,
     r"EnvConfig.query_modes: unknown query mode 'infoneed'"),
    ("env-unknown-signal-group", lambda t: _env({"signals": ["pulse", "outptu"]}), ConfigError,
     r"unknown observation group 'outptu' in 'signals'"),
    ("env-rsus-options-key", lambda t: _env({"rsus_options": {"samples": 3}}), ConfigError,
     r"EnvConfig.rsus_options: unknown config key 'samples' \(valid keys: .*\); did you mean 'n_samples'\?"),
    ("env-reasoner-options-key", lambda t: _env({"task": "hotpotqa", "reasoner": "openai",
                                                 "reasoner_options": {"base_uri": "x"}}),
     ConfigError, r"EnvConfig.reasoner_options: unknown config key 'base_uri'"),
    ("env-reasoner-options-micro", lambda t: _env({"reasoner_options": {"model": "x"}}), ConfigError,
     r"reasoner 'micro' takes no options"),
    ("env-max-questions-negative", lambda t: _env({"max_questions": -3}), ConfigError, r"max_questions"),
    ("env-content-layers", lambda t: _env({"content_layers": [-1]}), ConfigError, r"content_layers must be"),
    ("env-fact-holdout-qa", lambda t: _env({"task": "hotpotqa", "reasoner": "hf", "fact_holdout": {"share": 0.3}}),
     ConfigError, r"fact_holdout is a micro-world condition"),
    ("env-top-k", lambda t: _env({"top_k": 0}), ConfigError, r"top_k and max_steps must be >= 1"),
    ("env-injection", lambda t: _env({"injection": "middle"}), ConfigError, r"injection must be 'step' or 'front'"),
    # --- costs
    ("cost-weight-nan", _cost_nan, ValueError, r"cost weight of 'retrieval_calls' must be a finite number >= 0"),
    ("cost-returns-inf", _cost_returns_inf, ValueError, r"cost '_inf_cost' returned inf"),
    ("cost-unknown", lambda t: __import__("envs.costs", fromlist=["x"]).CostModel({"tokenz": 1.0}), ValueError,
     r"unknown cost 'tokenz' \(registered: retrieval_calls"),
    ("cost-params-without-weight", lambda t: __import__("envs.costs", fromlist=["x"]).CostModel(
        {"retrieval_calls": 1.0}, {"latency": {"mode": "measured"}}), ValueError,
     r"cost params given for 'latency', which has no weight"),
    # --- benchmark configs
    ("bench-env-typo", lambda t: _bench(t, env={"split": "dev", "top_kk": 2}), ConfigError,
     r"BenchConfig.env: unknown config key 'top_kk'"),
    ("bench-method-env-typo", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never"},
                                                           {"name": "F", "kind": "always",
                                                            "env": {"injektion": "front"}}]),
     ConfigError, r"BenchConfig.methods\['F'\].env: unknown config key 'injektion'"),
    ("bench-method-env-nested-typo", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never"},
                                                                  {"name": "F", "kind": "always",
                                                                   "env": {"fact_holdout": {"shar": 0.3}}}]),
     ConfigError, r"BenchConfig.methods\['F'\].env.fact_holdout: unknown config key 'shar' .*did you mean 'share'"),
    ("bench-overlap", lambda t: _bench(t, dev="0:5", test="4:8"), ConfigError, r"dev 0:5 and test 4:8 overlap"),
    ("bench-duplicate-method", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never"},
                                                            {"name": "CoT", "kind": "always"}]),
     ConfigError, r"duplicate method name"),
    ("bench-unknown-kind", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "nevr"}]), ConfigError,
     r"kind must be one of"),
    ("bench-unknown-trigger", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never"},
                                                           {"name": "X", "kind": "trigger", "trigger": "evry"}]),
     ConfigError, r"MethodSpec 'X'.trigger: unknown trigger 'evry' \(registered: never, always"),
    ("bench-options-wrong-kind", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never",
                                                               "options": {"p": 1}}]),
     ConfigError, r"methods\['CoT'\]\.options: unknown config key 'options' for a 'never' method \(a key of kind "
                  r"trigger; valid keys: env, kind, name, query_mode\)"),
    ("bench-query-mode-not-in-env", lambda t: _bench(t, methods=[{"name": "CoT", "kind": "never"},
                                                                 {"name": "A", "kind": "always",
                                                                  "query_mode": "question"}]),
     ConfigError, r"names query mode 'question', which is not one of env.query_modes"),
    ("bench-slice", lambda t: _bench(t, test="4-8"), ConfigError, r"key 'test' must look like 'start:stop'"),
    ("bench-yaml-invalid", lambda t: _cli_error("bench", "policies", "--config",
                                                str(_yaml(t, "b.yaml", "methods: [\n  - {name: CoT\n")),
                                                "--out", str(t / "o")),
     ValueError, r"b\.yaml:\d+:\d+"),
    ("bench-without-config", lambda t: _cli_error("bench", "policies"), ValueError, r"--config"),
    # --- caches, indexes, artifacts, probes
    ("cache-planted-pickle", _cache_pickle, ValueError, r"c\.sqlite: record .*: not a Kairos record"),
    ("cache-not-sqlite", _cache_not_sqlite, ValueError, r"c\.sqlite is not a usable SQLite file .*delete it"),
    ("index-same-size-edit", _index_same_size_edit, ValueError, r"data\.csc\.index\.npy changed since the build"),
    ("index-other-corpus", _index_other_corpus, ValueError, r"holds 6 passages but the corpus"),
    ("index-missing", _index_missing, FileNotFoundError, r"nowhere: no index \(kairos_index\.json missing\); build it"),
    ("index-exists-cli", lambda t: (_index(t), _cli_error("index", "build", "--retriever", "bm25", "--corpus",
                                                          "microworld", "--out", str(t / "idx"))),
     ValueError, r"idx already holds an index \(pass --overwrite"),
    ("artifact-edited", _artifact_edited, ValueError, r"kb\.json: checksum mismatch"),
    ("artifact-build-over-existing", lambda t: _cli_error("microworld", "build", "--out",
                                                          "envs/core/microworld/artifacts/default"),
     ValueError, r"already holds a micro-world artifact; pass --overwrite"),
    ("probe-other-model", _probe_for_another_model, ValueError, r"was trained for model 'microworld:.*', but is "
                                                                r"being loaded for model 'hf:some-other-model'"),
    ("probe-missing", _probe_missing, FileNotFoundError, r"no probe at .*no_probe \(missing probe\.json\); train one"),
    # --- datasets
    ("dataset-duplicate-id", _dataset_duplicate_id, ValueError, r"mc\.jsonl:2: field 'id': duplicate id 'x'"),
    ("dataset-bad-json-line", _dataset_bad_json_line, ValueError, r"hq\.jsonl:2"),
    ("dataset-unknown", lambda t: __import__("envs.core.data", fromlist=["x"]).load_dataset("trivia", "x"), ValueError,
     r"unknown dataset 'trivia' \(registered: 2wikimultihopqa"),
    # --- env runtime
    ("env-step-before-reset", _step_before_reset, RuntimeError, r"call reset\(\) before step\(\)"),
    ("env-bad-action", _bad_action, ValueError, r"action 7 is outside the action space Discrete\(2\)"),
    ("env-question-index", _question_index, ValueError, r"question_index 5 out of range \[0, 2\)"),
    ("vector-env-bad-config", _vector_env_bad_config, ValueError, r"unknown micro-world split 'nope'"),
    # --- the HTTP reasoner
    ("http-no-text", _http("no_text"), RuntimeError, r"malformed answer: a choice has neither 'text'"),
    ("http-bad-logprobs", _http("bad_logprobs"), RuntimeError, r"malformed answer: field choices\[\]\.logprobs"),
    ("http-not-json", _http("not_json"), RuntimeError, r"answer is not JSON"),
    ("http-trickle", _http("trickle"), RuntimeError, r"no complete answer within deadline_s=1.0"),
    ("http-unreachable", _http_unreachable, RuntimeError, r"cannot reach the server"),
    # --- extension points
    ("registry-duplicate", _registry_duplicate, ValueError, r"trigger 'threshold' is already registered"),
    ("record-unregistered-type", _record_unregistered, TypeError, r"cannot store a Foreign in a record"),
    # --- a method the reasoner cannot run: refused when the config loads, not after the methods before it ran
    ("bench-dragin-on-vllm", lambda t: _bench(t, env={"split": "dev", "reasoner": "vllm"}, methods=[
        {"name": "CoT", "kind": "never"}, {"name": "DRAGIN[step-level]", "kind": "threshold", "signal": "rind",
                                           "env": {"signals": ["output", "rind"], "query_modes": ["qfs"]}}]),
     ConfigError, r"methods\['DRAGIN\[step-level\]'\]\.env: signals 'rind' / query mode 'qfs' \(DRAGIN\) read "
                  r"the reasoner's attentions; reasoner 'vllm' does not expose them"),
    ("env-eigen-on-openai", lambda t: _env({"reasoner": "openai", "signals": ["output", "eigen"]}), ConfigError,
     r"signals 'eigen' \(SeaKR's EigenScore\) .* reasoner 'openai' does not sample them \(reasoners that do: micro, "
     r"hf\)"),
]


def _train_yaml(tmp: Path, text: str):
    from train.config import TrainConfig

    return TrainConfig.from_yaml(_yaml(tmp, "train.yaml", text))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_a_clear_error(case, tmp_path):
    _, fn, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        fn(tmp_path)


def test_enough_cases():
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)


def test_a_failed_vector_env_constructor_leaves_no_stray_error(tmp_path):
    """Regression: a failed BatchedRetrievalEnv constructor printed an AttributeError from __del__."""
    code = ("from envs.vector import make_batched\n"
            "try:\n    make_batched(2, {'split': 'nope'})\nexcept ValueError:\n    pass\n"
            "import gc; gc.collect()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "AttributeError" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
