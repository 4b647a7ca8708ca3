"""``kairos``: the facade's public names, and ``kairos.Pipeline`` — a policy answering user questions through the
env's own decision loop, with the trace — equal to the benchmark's evaluation of the same policy."""

import json
import math

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

needs_world = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")
ENV = {"split": "dev", "rsus_components": ["ent"], "query_modes": ["info_need", "step"]}


# ------------------------------------------------------------------------------------------- the facade
def test_the_facade_names_the_public_api():
    import tomllib

    import kairos

    version = tomllib.loads(open("pyproject.toml").read())["project"]["version"]
    assert kairos.__version__ == version
    for name in kairos.__all__:
        assert getattr(kairos, name) is not None, name
    regs = kairos.registries()
    assert {"REASONERS", "SIGNALS", "RETRIEVERS", "COSTS", "TASKS", "TRIGGERS", "QUERY_MODES"} <= set(regs)
    assert all(hasattr(r, "names") for r in regs.values())
    assert "questions" in kairos.TASKS.names() and "answer" in kairos.COMMANDS.names()
    from kairos.pipeline import Pipeline

    assert kairos.Pipeline is Pipeline and "Pipeline" in dir(kairos)
    with pytest.raises(AttributeError, match="no attribute 'Pipelin'.*Pipeline"):
        kairos.Pipelin  # noqa: B018


def test_load_policy_specs(tmp_path):
    from kairos import load_policy

    t = load_policy("rsus>0.65")
    assert (t.signal, t.threshold, t.direction) == ("rsus", 0.65, "above")
    assert load_policy("never").decide({}, {}) == 0
    with pytest.raises(ValueError, match="gold step labels"):
        load_policy("oracle")
    with pytest.raises(FileNotFoundError, match=r"no exported policy at .*nope.*kairos quickstart"):
        load_policy(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="without spec.json"):
        load_policy(tmp_path / "empty")


# ------------------------------------------------------------------------------------------- fixtures
def _export(tmp_path, name="policy", env_config=True, **env_over):
    """A random-weight learned policy with a QueryGen head over [info_need, step], exported with its env."""
    import torch

    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    cfg = {**ENV, "querygen": True, **env_over}
    env = make_env("microworld", cfg)
    torch.manual_seed(0)
    net = PolicyNet(spec_from_spaces(env.observation_space, env.action_space,
                                     {"arch": "mlp", "query_modes": list(cfg["query_modes"])}))
    record = env.unwrapped.config.to_dict() if env_config else None
    env.close()
    with torch.no_grad():  # retrieve at some steps and not others; both query modes in use
        net.retrieve_head.weight.normal_(0.0, 2.0)
        net.query_head.weight.normal_(0.0, 2.0)
        net.retrieve_head.bias[1] += 3.2  # (seeded: π(retrieve) spreads around 0.5 over the dev questions' steps)
        net.query_head.bias[1] += 4.2
    return export_policy(net, tmp_path / name, heads=("retrieve", "query"), env_config=record)


@pytest.fixture(scope="module")
def world_questions():
    from envs.core.microworld.artifact import load_artifact

    return [q.text for q in load_artifact(None, with_model=False).questions["dev"]]


@pytest.fixture(scope="module")
def never(world_questions):
    from kairos import Pipeline

    p = Pipeline("never", ENV, batch_size=4)
    yield p
    p.close()


def _bench_view(row):
    return (row["calls"], row["answer"], row["answer_status"],
            [(d["action"][0], d["action"][1], d["query"] if d["action"][0] else None,
              list(d["passage_ids"]) if d["action"][0] else []) for d in row["decisions"]])


def _pipe_view(a):
    return (a.calls, a.answer_line, a.answer_status,
            [(int(s.retrieved), s.action[1] if isinstance(s.action, list) else 0, s.query,
              [p.id for p in s.passages if p.injected]) for s in a.steps])


# ------------------------------------------------------------------------------------------- the pipeline
@needs_world
def test_triggers_answer_micro_world_questions_with_a_trace(never, world_questions):
    qs = world_questions[:5]
    none = never.answer_many(qs)
    assert [a.question for a in none] == qs and all(a.calls == 0 for a in none)
    assert all(a.answer and a.answer_status == "answered" for a in none)
    always = never.with_policy("always").answer_many(qs)
    assert all(a.calls > 0 for a in always) and always[0].policy == "Always"
    s = always[0].steps[0]
    assert s.retrieve and s.retrieved and s.query and s.query_mode == "info_need"  # the env's first mode
    assert s.passages and sum(p.injected for p in s.passages) == 1 and s.regenerated
    assert s.probability is None and s.tokens > 0 and s.seconds >= 0 and s.reward == pytest.approx(-0.1)
    assert {"minprob", "rsus"} <= set(s.signals)
    flare = never.with_policy("minprob<0.999", query_mode="step").answer_many(qs)
    steps = [s for a in flare for s in a.steps]
    assert all(s.threshold == 0.999 and s.details["signal"] == "minprob" for s in steps)
    assert all(s.retrieve == (s.details["value"] < 0.999) for s in steps if s.details["value"] is not None)
    assert all(s.query_mode == "step" for s in steps if s.retrieved)
    # the trace is plain JSON, and reads back
    d = flare[0].to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    from kairos import Answer

    assert Answer.from_dict(d) == flare[0]
    assert never.answer(qs[0]).answer == none[0].answer  # replays from the trajectory cache: the same answer


@needs_world
@pytest.mark.parametrize("policy", ["never", "always", "minprob<0.999", "learned"])
def test_the_pipeline_decides_and_answers_as_evaluate_policy(tmp_path, never, world_questions, policy):
    """The same decisions, calls, queries, passages and answers as the benchmark's evaluation: one loop."""
    from kairos import load_policy
    from train.evaluate import evaluate_policy

    env = dict(ENV)
    if policy == "learned":
        policy = _export(tmp_path)
        env["querygen"] = True
    idx = list(range(0, 12))
    ref = evaluate_policy(load_policy(policy), env, idx, batch_size=4, return_episodes=True)
    pipe = never.with_policy(policy)
    got = pipe.answer_many([world_questions[i] for i in idx])
    assert [_pipe_view(a) for a in got] == [_bench_view(r) for r in ref["episodes"]]
    assert [a.tokens for a in got] == [r["tokens"] for r in ref["episodes"]]
    for a, r in zip(got, ref["episodes"]):  # the reward reports costs only (nothing scores an ungraded answer)
        assert -a.cost == pytest.approx(r["reward"] - r["quality"])
    if isinstance(pipe.policy, type(load_policy("never"))):
        return
    steps = [s for a in got for s in a.steps]
    if hasattr(pipe.policy, "net"):  # a learned policy: its probability, threshold, and both query modes used
        assert all(0 <= s.probability <= 1 and s.threshold == 0.5 for s in steps)
        assert all(s.retrieve == (s.probability > 0.5) for s in steps)
        assert {s.query_mode for s in steps if s.retrieved} == {"info_need", "step"}
        assert {s.retrieve for s in steps} == {True, False}


@needs_world
def test_stream_yields_json_events_step_by_step(never, world_questions):
    events = list(never.with_policy("always").stream(world_questions[:2]))
    kinds = [e["event"] for e in events]
    assert kinds.count("answer") == 2 and kinds[-1] == "answer" and kinds[0] == "step"
    json.dumps(events, allow_nan=False)
    answers = [e["answer"] for e in events if e["event"] == "answer"]
    n_steps = {i: sum(e["event"] == "step" and e["question_index"] == i for e in events) for i in (0, 1)}
    assert [len(a["steps"]) for a in sorted(answers, key=lambda a: world_questions.index(a["question"]))] == \
        [n_steps[0], n_steps[1]]


@needs_world
def test_from_policy_rebuilds_the_env_it_was_trained_in(tmp_path, world_questions):
    from kairos import Pipeline
    from policies.rl.export import LearnedTrigger

    path = _export(tmp_path)
    assert LearnedTrigger.load(path).env_config["query_modes"] == ["info_need", "step"]
    p = Pipeline.from_policy(path, knowledge=None, batch_size=2)
    assert p.env_config.task == "questions" and p.env_config.querygen and p.env_config.cache_path is None
    a = p.answer(world_questions[0])
    assert a.answer and a.steps[0].details["mode_probabilities"].keys() == {"info_need", "step"}
    # an export that records no env: the run's config.json next to it, else an error naming what to pass
    old = _export(tmp_path / "run", env_config=False)
    with pytest.raises(ValueError, match=r"records no env config.*--env-config"):
        Pipeline.from_policy(old)
    (tmp_path / "run" / "config.json").write_text(json.dumps({"env": "microworld", "env_config": ENV}))
    assert Pipeline.from_policy(old, batch_size=1).env_config.query_modes == ["info_need", "step"]
    # a learned policy reads fields of fixed sizes: an env without them is refused, naming them
    with pytest.raises(ValueError, match=r"reads observation fields.*pulse"):
        Pipeline.from_policy(path, env_config={**ENV, "signals": ["output", "rsus"]})
    p.close()


@needs_world
def test_in_memory_passages_and_a_corpus_file(tmp_path, never):
    from kairos import Pipeline

    facts = ["Mira 's father is Tovan .", "Tovan was born in Kasford .", "Tovan works for Zixco ."]
    p = Pipeline("always", ENV, knowledge=[(f"f{i}", t) for i, t in enumerate(facts)], batch_size=2)
    a = p.answer("Which company does Mira 's father work for ?")
    ids = {x.id for s in a.steps for x in s.passages}
    assert ids and ids <= {"f0", "f1", "f2"} and a.calls > 0 and a.answer_line
    jl = tmp_path / "c.jsonl"
    jl.write_text("".join(json.dumps({"id": f"d{i}", "contents": f"T\n{t}"}) + "\n" for i, t in enumerate(facts)))
    q = Pipeline("always", ENV, knowledge=jl, batch_size=2).answer("Where was Mira 's father born ?")
    assert {x.id for s in q.steps for x in s.passages} <= {"d0", "d1", "d2"}
    assert p.describe()["passages"] == 3


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A benchmark on the shipped world: CoT, FLARE with its query mode calibrated on dev, a learned QueryGen
    policy selected on dev among its run's snapshots, and IRCoT, Single RAG and FLARE as published."""
    import shutil

    from eval.bench.policies import BenchConfig, run_bench

    tmp_path = tmp_path_factory.mktemp("bench")
    policy = _export(tmp_path / "run", name="policy")
    shutil.copytree(_export(tmp_path / "other", name="policy"), tmp_path / "run" / "snapshots" / "iter_0001")
    env = {**ENV, "cache_path": str(tmp_path / "cache.sqlite")}
    methods = [{"name": "CoT", "kind": "never"},
               {"name": "FLARE[q: dev]", "kind": "threshold", "signal": "minprob", "direction": "below",
                "query_modes": ["all"], "curve": False},
               {"name": "learned", "kind": "learned", "path": str(policy), "select_on_dev": True, "querygen": True,
                "lam": 0.1},
               # the published baselines: each in its own env (query mode, passages a call, caps), replayed as run
               {"name": "IRCoT", "kind": "ircot", "k": 2},
               {"name": "SingleRAG", "kind": "single", "k": 3, "injection": "front"},
               {"name": "FLARE", "kind": "flare", "curve": False}]
    # dev questions where retrieval pays at λ = 0.1 (CoT answers half of them): a threshold with its query mode is
    # calibrated, not the sweep's never-fire point
    cfg = BenchConfig.from_dict({"name": "t", "out_dir": str(tmp_path / "bench"), "env": env, "dev": "12:16",
                                 "test": "4:12", "n_resamples": 200, "methods": methods, "test_curves": False,
                                 "batch_size": 4})
    return tmp_path / "bench", run_bench(cfg), policy


@needs_world
def test_from_bench_repeats_what_the_benchmark_evaluated(bench, world_questions, tmp_path):
    """The learned row selected on dev among snapshots (QueryGen head), a threshold calibrated on dev with its
    query mode: the pipeline over the benchmark's test questions makes its decisions and answers."""
    from eval.bench.policies import evaluated_policy
    from kairos import Pipeline

    out, s, policy = bench
    test = world_questions[4:12]
    for name in ("learned", "FLARE[q: dev]", "IRCoT", "SingleRAG", "FLARE"):
        ref = sorted((json.loads(x) for x in open(s["methods"][name]["per_question"]).read().splitlines()),
                     key=lambda r: r["question_index"])  # the configuration evaluated on test
        p = Pipeline.from_bench(out, name)
        assert p.batch_size == 4
        got = p.answer_many(test)
        assert [_pipe_view(a) for a in got] == [_bench_view(r) for r in ref], name
        assert sum(a.calls for a in got) / len(got) == pytest.approx(s["methods"][name]["calls"])
        if name == "learned":
            steps = [x for a in got for x in a.steps]
            assert {x.retrieved for x in steps} == {True, False} and len({x.query_mode for x in steps}) == 3
            assert s["calibration"]["learned"]["chosen"] in (str(policy), str(policy.parent / "snapshots" /
                                                                              "iter_0001"))
        elif name == "FLARE[q: dev]":
            assert s["calibration"][name]["chosen"] != "never" and s["calibration"][name]["mode"]
            assert p.policy.trigger.threshold == s["calibration"][name]["chosen"]
            assert p.policy.mode == s["calibration"][name]["mode"]
        p.close()
    cfg2 = json.loads((out / "config.json").read_text())
    cfg2["methods"].append({"name": "R", "kind": "random", "p": 0.5})
    (tmp_path / "bench2").mkdir()
    (tmp_path / "bench2" / "summary.json").write_text(json.dumps({"methods": {"R": {}}, "skipped": {}}))
    (tmp_path / "bench2" / "config.json").write_text(json.dumps(cfg2))
    with pytest.raises(ValueError, match="not a policy an application can run"):
        evaluated_policy(tmp_path / "bench2", "R")
    (tmp_path / "bench2" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="records no config.json.*bench_microworld.yaml"):
        evaluated_policy(tmp_path / "bench2", "R")
    with pytest.raises(ValueError, match=r"no method 'nope' \(methods: CoT"):
        Pipeline.from_bench(out, "nope")
    with pytest.raises(FileNotFoundError, match="no finished benchmark"):
        Pipeline.from_bench(tmp_path, "learned")


@needs_world
@pytest.mark.slow
def test_the_reproduction_script_agrees(bench):
    """``scripts/pipeline_vs_bench.py`` (what measures the target on the quickstart's benchmark) says the same."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "scripts/pipeline_vs_bench.py", "--bench", str(bench[0]), "--method",
                        "learned"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "learned: 8/8 test questions identical" in r.stdout, r.stdout + r.stderr[-2000:]


def test_answer_to_dict_has_no_nan():
    from kairos import Answer
    from kairos.pipeline import TraceStep

    s = TraceStep(index=1, step_index=1, text="Step 1 : x", is_answer=False, signals={"minprob": math.nan},
                  masked_signals=[], action=0, retrieve=False, capped=False, retrieved=False, probability=None,
                  threshold=None, details={}, query=None, query_mode=None, passages=[], regenerated=None, refined=None,
                  tokens=3, seconds=0.1, reward=0.0, costs={})
    a = Answer("q", "q-1", None, None, "none", 0, [s])
    assert a.to_dict()["steps"][0]["signals"]["minprob"] is None and json.loads(a.to_json())["answer"] is None


def test_a_training_run_records_the_env_its_exports_come_from():
    from envs.env_config import EnvConfig, pending_probes
    from eval.quickstart import TRAIN_CONFIG
    from train.config import TrainConfig
    from train.run import policy_env_config

    with pending_probes("runs/probes/rsus_proxy"):  # the quickstart trains the proxy its recipe reads first
        env = policy_env_config(TrainConfig.from_yaml(TRAIN_CONFIG))  # what the quickstart's exports record
    assert env["task"] == "microworld" and env["reasoner"] == "micro" and env["querygen"]
    assert env["query_modes"] == ["info_need", "step"] and env["signals"] == ["pulse", "output", "rsus", "content"]
    assert env["rsus_components"] == ["verb", "ent"] and env["rsus_options"] == {"verb_proxy": "runs/probes/rsus_proxy"}
    with pending_probes("runs/probes/rsus_proxy"):
        assert EnvConfig.from_dict(env).to_dict() == env
