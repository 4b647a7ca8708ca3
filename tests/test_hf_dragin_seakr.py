"""DRAGIN (RIND + QFS) and SeaKR (EigenScore) on the real default LM, SmolLM2-135M-Instruct on the hf backend: the
signals on real HotpotQA steps, what EigenScore's samples cost, and both benchmark rows through the bench machinery
on a few questions of the shipped seed config."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from _needs import needs_hotpotqa, needs_smollm2

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, needs_smollm2, needs_hotpotqa]


@pytest.fixture(scope="module")
def question():
    from envs.qa_task import QATask

    task = QATask("hotpotqa", "dev[1:500:2]")
    return task.question_text(task.questions[0])


@pytest.fixture(scope="module")
def eager():
    """SmolLM2 with eager attention, the attention each content token receives captured (what the env loads for
    signals 'rind' / query mode 'qfs')."""
    from agents.reasoners.hf import HFReasoner, HFReasonerConfig

    return HFReasoner.from_config(HFReasonerConfig(max_step_tokens=32, attn_implementation="eager",
                                                   capture_attentions=True))


def test_rind_and_qfs_on_a_real_step(eager, question):
    """RIND of a real step is finite, > 0 (a 135M model is never certain of every content word) and within its
    bound max_i ā_i·H_i·n <= n·log V; QFS gives a non-empty query made of words of the question and the step."""
    from agents.signals.attention import RIND, qfs_terms

    (step, _), = eager.next_step([eager.start(question)])
    a = step.meta["attn_received"]
    n = len(a)
    assert n >= 1 and len(step.meta["token_texts"]) == n and np.all(a >= 0) and np.all(a <= 1)
    rind = float(RIND()(step)[0])
    assert math.isfinite(rind) and 0.0 < rind <= n * math.log(len(eager.tok))
    terms = qfs_terms(**eager.qfs_pass(question, [], step.text))
    assert terms, step.text
    words = set((question + " " + step.content).replace("?", " ").split())
    assert all(any(t in w or w in t for w in words) for t in terms), (terms, question, step.text)


def test_eigenscore_on_real_steps(eager, question):
    """EigenScore from k = 4 seeded sampled continuations + the greedy step (middle layer, last content token):
    the samples differ, the same seed gives the same rows, and the score lies in its range — above log α (all
    rows alike) and at most log(mean squared norm of the centred rows + α) (AM-GM on the Gram matrix's
    eigenvalues)."""
    from agents.signals.hidden import eigenscore, sample_states_batch

    s0 = eager.start(question)
    (step, _), = eager.next_step([s0])
    got, = sample_states_batch(eager, [s0], k=4, seed=0, greedy=[step])
    Z = got.Z
    assert Z.shape == (5, eager.hidden_size) and np.array_equal(Z[-1], step.hidden_last[eager.n_layers // 2])
    assert len({row.tobytes() for row in Z[:4]}) == 4  # the k samples differ
    assert got.tokens >= 4 and got.seconds > 0
    again, = sample_states_batch(eager, [s0], k=4, seed=0, greedy=[step])
    np.testing.assert_allclose(again.Z, Z, rtol=1e-5, atol=1e-4)
    score, alpha = eigenscore(Z), 1e-3
    Zc = Z.astype(np.float64) - Z.mean(1, keepdims=True)
    assert math.log(alpha) < score <= math.log((Zc ** 2).sum(1).mean() + alpha) + 1e-9


def test_eigenscore_env_pays_for_its_samples_and_caches_the_signal(tmp_path):
    """signals [output, eigen] on HotpotQA (hf): EigenScore is an observation and a scalar; the step's record is
    charged the samples' tokens (more than the same step without EigenScore by at least one token per sample); the
    record (signals included) comes back from the trajectory cache unchanged."""
    from envs.registration import make_env

    base = {"task": "hotpotqa", "reasoner": "hf", "split": "dev[1:500:2]", "max_steps": 2, "max_step_tokens": 32}
    plain = make_env(None, {**base, "signals": ["output"], "cache_path": str(tmp_path / "p.sqlite")})
    _, ip = plain.reset(options={"question_index": 0})
    plain.close()
    cfg = {**base, "signals": ["output", "eigen"], "cache_path": str(tmp_path / "e.sqlite")}
    env = make_env(None, cfg)
    obs, info = env.reset(options={"question_index": 0})
    assert info["step_text"] == ip["step_text"]  # sdpa both: the same greedy step
    assert obs["eigen"].shape == (1,) and np.isfinite(info["signals"]["eigenscore"])
    assert info["tokens"] >= ip["tokens"] + 4
    env.close()
    again = make_env(None, cfg)  # a new env on the same cache: the record is read back, not regenerated
    _, i2 = again.reset(options={"question_index": 0})
    assert i2["signals"]["eigenscore"] == info["signals"]["eigenscore"] and i2["tokens"] == info["tokens"]
    again.close()


def test_dragin_and_seakr_rows_of_the_seed_benchmark_run(tmp_path):
    """configs/seed/hotpotqa.yaml as shipped, its DRAGIN[step-level] and SeaKR[no rerank] rows (and CoT, the
    reference) on 1 dev + 2 test questions, two steps of <= 16 tokens: thresholds calibrated on dev, both rows evaluated on test, every
    decision carrying its signal (RIND / EigenScore), every DRAGIN retrieval querying with QFS words."""
    from eval.bench.policies import load_config, run_bench

    cfg = yaml.safe_load((REPO / "configs" / "seed" / "hotpotqa.yaml").read_text())
    rows = ("CoT", "DRAGIN[step-level]", "SeaKR[no rerank]")
    cfg["methods"] = [m for m in cfg["methods"] if m["name"] in rows]
    assert [m["name"] for m in cfg["methods"]] == list(rows)
    cfg.update(out_dir=str(tmp_path / "out"), n_resamples=200)
    cfg["env"]["cache_path"] = str(tmp_path / "cache.sqlite")
    path = tmp_path / "hotpotqa.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    s = run_bench(load_config(str(path), overrides=["dev=0:1", "test=1:3", "env.max_steps=2",
                                                                     "env.max_step_tokens=16"]))
    signal = {"DRAGIN[step-level]": "rind", "SeaKR[no rerank]": "eigenscore"}
    for name, sig in signal.items():
        m = s["methods"][name]
        assert m["n"] == 2 and math.isfinite(m["accuracy"]), m
        files = list((tmp_path / "out" / "per_question" / "test").glob(f"{name.split('[')[0]}*.jsonl"))
        got = [json.loads(x) for f in files for x in f.read_text().splitlines()]
        assert len(got) == 2, files
        decisions = [d for r in got for d in r["decisions"]]
        assert decisions and all(math.isfinite(d["signals"][sig]) for d in decisions if d["signals"])
        if name.startswith("DRAGIN"):
            assert all(d["query"] for d in decisions if d["action"] == 1)
