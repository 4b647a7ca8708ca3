"""Generative QueryGen: data, tokenizer, rewards, checkpoints, training end to end, env plug-in."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _needs import needs_hotpotqa

from policies.querygen.data import FlaggedStep, cloze_query, load_steps, save_steps
from policies.querygen.model import (
    GenerativeQueryGenerator,
    QueryGenCheckpointError,
    build_prompt,
    word_tokenizer_to_hf,
)
from policies.querygen.rewards import QueryTokens, RetrievalRR, gold_rank, make_reward


class _P:
    def __init__(self, pid: str):
        self.id = pid


class ToyRetriever:
    """Returns F1 first for queries naming Mira, F2 first otherwise."""

    def search(self, queries, k=3):
        return [([_P("F1"), _P("F2")] if "Mira" in q else [_P("F2"), _P("F3"), _P("F1")])[:k] for q in queries]


def test_cloze_query_cuts_at_the_object():
    assert cloze_query("Mira 's mother is Tovan .", "Tovan") == "Mira 's mother is"
    assert cloze_query("Mira was born in Lund .", "Lund") == "Mira was born in"
    assert cloze_query("Tovan 's spouse is Tovan .", "Tovan") == "Tovan 's spouse is"


def test_flagged_steps_roundtrip_and_bad_line(tmp_path):
    s = FlaggedStep("q", "Q ?", ["Step 1 : a ."], "Step 2 : b .", ["F1"], "b 's mother is", meta={"hop": 2})
    path = save_steps([s, s], tmp_path / "s.jsonl")
    assert load_steps(path) == [s, s] and s.step_index == 2
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"s\.jsonl:3"):
        load_steps(path)


def test_word_tokenizer_wrapper_keeps_ids():
    from envs.core.microworld.tokenizer import WordTokenizer

    wt = WordTokenizer(["Mira", "'s", "mother", "is", "Question", ":", "Evidence"])
    hf = word_tokenizer_to_hf(wt)
    text = "Question : Mira 's mother \n Evidence : Mira 's mother is"
    assert hf(text, add_special_tokens=False)["input_ids"] == wt.encode(text)
    assert hf("Mira is<eos>", add_special_tokens=False)["input_ids"] == [wt.index["Mira"], wt.index["is"], wt.eos_id]
    assert hf.decode(wt.encode("Mira 's mother"), skip_special_tokens=True) == "Mira 's mother"


def test_prompts():
    p = build_prompt("micro", "Who is Mira 's mother ?", ["Step 1 : x ."], "Step 2 : y .")
    assert p == "Question : Who is Mira 's mother ? \n Step 1 : x . \n Step 2 : y . \n Evidence :"
    t = build_prompt("text", "Where?", [], "Step 1: z")
    assert t.startswith("Question: Where?\nStep 1: z\n") and t.endswith("Search query:")
    with pytest.raises(ValueError, match="unknown prompt style"):
        build_prompt("chat", "q", [], "s")


def test_rewards_follow_the_trl_signature():
    rr = RetrievalRR(ToyRetriever(), k=3)
    assert rr.__name__ == "retrieval_rr"
    assert rr(["p"] * 3, ["Mira 's mother", "Tovan", ""], gold_ids=[["F1"], ["F1"], ["F1"]]) == [1.0, 1 / 3, 0.0]
    assert RetrievalRR(ToyRetriever(), k=2)(["p"], ["Tovan"], gold_ids=[["F1"]]) == [0.0]
    # conversational completions (message lists) are read too
    assert rr(["p"], [[{"role": "assistant", "content": "Mira"}]], gold_ids=[["F1"]]) == [1.0]
    assert QueryTokens()(["p", "p"], ["a b c", "  "]) == [3.0, 0.0]
    assert make_reward("query_tokens").__name__ == "query_tokens"
    assert make_reward("tests.test_querygen:_const_reward")(["p"], ["x"]) == [0.5]
    with pytest.raises(ValueError, match="unknown QueryGen reward 'nope'"):
        make_reward("nope")
    assert gold_rank([_P("a"), _P("b")], ["b"]) == 2 and gold_rank([_P("a")], ["z"]) is None


def _const_reward(**_):
    return lambda prompts, completions, **kw: [0.5] * len(completions)


def test_config_rejects_unknown_keys_and_bad_values():
    from envs.core.config import ConfigError
    from policies.querygen.config import QueryGenTrainConfig

    with pytest.raises(ConfigError, match="nope"):
        QueryGenTrainConfig.from_dict({"rl": {"nope": 1}})
    with pytest.raises(ConfigError, match="trainer"):
        QueryGenTrainConfig.from_dict({"rl": {"trainer": "ppo"}})
    with pytest.raises(ConfigError, match="world"):
        QueryGenTrainConfig.from_dict({"world": "mars"})
    assert QueryGenTrainConfig.from_dict({"world": "hotpotqa"}).splits == ("dev[0:500:2]", "dev[1:500:2]")


# ---------------------------------------------------------------------------------- end to end (tiny)

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """SFT + 2 RLOO steps on a few questions of the shipped micro-world (~20 s)."""
    from policies.querygen.config import QueryGenTrainConfig
    from policies.querygen.train import train_querygen

    out = tmp_path_factory.mktemp("qg")
    cfg = QueryGenTrainConfig.from_dict({
        "world": "microworld", "out_dir": str(out), "max_train_questions": 40, "max_eval_questions": 40,
        "sft": {"epochs": 1, "batch_size": 16, "save_steps": 2}, "rl": {"steps": 2, "prompts_per_step": 2}})
    summary = train_querygen(cfg, progress=False)
    return cfg, summary


def test_training_end_to_end_writes_checkpoints_and_tensorboard(tiny_run):
    cfg, summary = tiny_run
    from pathlib import Path

    out = Path(cfg.out_dir)
    assert summary["sft"]["optimizer_steps"] >= 2 and summary["rl"]["optimizer_steps"] == 2
    for stage in ("sft", "rl"):
        meta = json.loads((out / stage / "querygen.json").read_text())
        assert meta["stage"] == stage and meta["style"] == "micro"
        assert list((out / "tb" / stage).glob("events.out.tfevents*")), stage
    assert list((out / "trainer" / "sft").glob("checkpoint-*"))
    # rerunning skips finished stages (resume)
    from policies.querygen.train import train_querygen

    again = train_querygen(cfg, progress=False)
    assert "skipped" in again["sft"] and "skipped" in again["rl"]
    gen = GenerativeQueryGenerator.load(out / "rl")
    q = gen("Step 1 : Mira 's mother is Tovan .", "Who is Mira 's mother ?", {"prior_steps": []})
    assert isinstance(q, str) and "\n" not in q


def test_bad_checkpoints_are_clear_errors(tiny_run, tmp_path):
    cfg, _ = tiny_run
    from pathlib import Path

    src = Path(cfg.out_dir) / "sft"
    with pytest.raises(QueryGenCheckpointError, match="does not exist"):
        GenerativeQueryGenerator.load(tmp_path / "missing")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(QueryGenCheckpointError, match="not a Kairos QueryGen checkpoint"):
        GenerativeQueryGenerator.load(bare)
    bad = tmp_path / "corrupt"
    shutil.copytree(src, bad)
    w = bad / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(QueryGenCheckpointError, match="weights do not match"):
        GenerativeQueryGenerator.load(bad)
    other = tmp_path / "other_tok"
    shutil.copytree(src, other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = list(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(QueryGenCheckpointError, match="tokenizer mismatch"):
        GenerativeQueryGenerator.load(other)


def test_generator_plugs_into_querygenerator_and_env_by_name(tiny_run):
    cfg, _ = tiny_run
    from pathlib import Path

    from agents.query import QueryGenerator, mode_identity
    from envs.registration import make_env

    ckpt = str(Path(cfg.out_dir) / "rl")
    name = f"gen:{ckpt}"
    qg = QueryGenerator(["step", name])
    gen = GenerativeQueryGenerator.load(ckpt)
    state = {"question": "Who is Mira 's mother ?", "context": {"prior_steps": []}}
    expected = gen("Step 1 : Mira 's mother is Tovan .", state["question"], state["context"]) or "Mira 's mother is Tovan ."
    assert qg("Step 1 : Mira 's mother is Tovan .", state, 1) == expected
    assert mode_identity(name) == f"gen@{gen.fingerprint}"

    env = make_env("microworld", {"split": "test", "max_questions": 5, "querygen": True,
                                  "query_modes": ["step", name], "signals": ["output"]})
    obs, info = env.reset(seed=0, options={"question_index": 0})
    step1 = info["step_text"]
    obs, _, term, trunc, info = env.step((1, 1))  # retrieve at step 1 with the generator
    assert info["query"] == qg(step1, {"question": info["question"], "context": {"prior_steps": []}}, 1)
    accepted = list(env.unwrapped.ep.accepted_steps)  # the per-step cap (1) accepted the regenerated step 1
    assert len(accepted) == 1
    if not (term or trunc):
        step2 = info["step_text"]
        obs, _, term, trunc, info = env.step((1, 1))  # step 2: the generator sees step 1 as a prior step
        assert info["query"] == qg(step2, {"question": info["question"], "context": {"prior_steps": accepted}}, 1)


def test_querygen_bench_runs_and_writes_report(tiny_run, tmp_path):
    cfg, _ = tiny_run
    from eval.perf.querygen import run_bench

    res = run_bench(cfg, tmp_path / "bench", n_boot=200, batch1_n=3, progress=False)
    names = set(res["methods"])
    assert {"step", "content_words", "info_need", "generator (SFT)", "generator (RL)"} <= names
    for r in res["methods"].values():
        assert 0.0 <= r["r1"]["mean"] <= r["r3"]["mean"] <= 1.0
        assert "fixed" in r
    assert any(c["metric"] == "r3" and c["vs"] == "info_need" for c in res["comparisons"])
    assert (tmp_path / "bench" / "recall.png").stat().st_size > 1000
    assert "Recall@3" in (tmp_path / "bench" / "querygen_bench.md").read_text()


def test_train_cli_querygen_needs_config(capsys):
    from train.cli import main

    assert main(["querygen"]) == 2
    assert "needs --config" in capsys.readouterr().err


@needs_hotpotqa
def test_qatask_strided_split():
    from envs.qa_task import QATask

    even, odd = QATask("hotpotqa", "dev[0:10:2]"), QATask("hotpotqa", "dev[1:10:2]")
    assert len(even.questions) == len(odd.questions) == 5
    assert not {q.id for q in even.questions} & {q.id for q in odd.questions}
    with pytest.raises(ValueError, match="NAME"):
        QATask("hotpotqa", "dev[0:10:x]")
    assert np.all([q.id for q in QATask("hotpotqa", "dev[0:10]").questions[::2]] == [q.id for q in even.questions])


def test_generator_runs_in_bench_policies_by_name(tiny_run, tmp_path):
    """``kairos bench policies`` takes the generator through a method's env override (query_modes)."""
    from pathlib import Path

    from envs.core.microworld.artifact import _parse_qid
    from eval.bench.policies import BenchConfig, run_bench

    ckpt = Path(tiny_run[0].out_dir) / "rl"
    cfg = BenchConfig.from_dict({
        "name": "qg", "out_dir": str(tmp_path / "bench"), "dev": "0:2", "test": "2:5", "n_resamples": 50,
        "reference": "IRCoT[step query, 1 passage, ≤4]",
        "env": {"split": "dev", "signals": ["output"], "cache_path": str(tmp_path / "cache.sqlite")},
        "methods": [{"name": "IRCoT[step query, 1 passage, ≤4]", "kind": "always"},
                    {"name": "IRCoT[generator query, 1 passage, ≤4]", "kind": "always", "env": {"query_modes": [f"gen:{ckpt}"]}}]})
    s = run_bench(cfg)
    assert s["methods"]["IRCoT[generator query, 1 passage, ≤4]"]["calls"] > 0
    files = list((tmp_path / "bench" / "per_question" / "test").glob("IRCoT_generator_query*.jsonl"))
    assert files, list((tmp_path / "bench" / "per_question" / "test").iterdir())
    rows = [json.loads(x) for x in files[0].read_text().splitlines()]
    gen = GenerativeQueryGenerator.load(ckpt)
    checked = 0
    for r in rows:
        d0 = r["decisions"][0]  # step 1: no prior steps
        question = _parse_qid(r["question_id"]).text
        assert d0["query"] == (gen(d0["step"], question, {"prior_steps": []}) or d0["step"].split(":", 1)[-1].strip())
        checked += 1
    assert checked == 3


def test_grpo_trainer_option_runs(tiny_run, tmp_path):
    """``rl.trainer: grpo`` (TRL GRPOTrainer) trains from the same SFT checkpoint (the SFT stage is skipped)."""
    from pathlib import Path

    from policies.querygen.train import train_querygen

    cfg, _ = tiny_run
    src = Path(cfg.out_dir)
    for d in ("data", "sft"):
        shutil.copytree(src / d, tmp_path / d)
    grpo = cfg.replace(out_dir=str(tmp_path), rl=cfg.rl.replace(trainer="grpo", steps=1))
    s = train_querygen(grpo, progress=False)
    assert "skipped" in s["sft"] and s["rl"]["trainer"] == "grpo" and s["rl"]["optimizer_steps"] == 1
    assert json.loads((tmp_path / "rl" / "querygen.json").read_text())["history"][-1]["trainer"] == "grpo"


@needs_hotpotqa
def test_hotpotqa_question_form_attribute():
    """The shared dev file is ordered by type: questions 250–499 all name both supporting titles."""
    from collections import Counter

    from envs.qa_task import QATask, mentions_title

    t = QATask("hotpotqa", "dev")
    late = Counter(t.question_attr(q, "question_form") for q in t.questions[250:])
    early = Counter(t.question_attr(q, "question_form") for q in t.questions[:250])
    assert late == {"both titles named": 250}
    assert early["one title named"] > 100 and early["no title named"] > 50
    assert mentions_title("Shonen Jump (magazine)", "Which magazine, Shonen Jump or Rolling Stone?")
    assert not mentions_title("Adriana Trigiani", "Who directed Big Stone Gap?")
