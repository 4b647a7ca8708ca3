"""The env on the shipped micro-world: real steps, real retrieval, labels, and the oracle beating never."""

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from envs.core.microworld.artifact import DEFAULT_ARTIFACT
from policies.triggers import NeverTrigger, OracleTrigger

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(),
                                reason=f"no shipped artifact at {DEFAULT_ARTIFACT}")


@pytest.fixture(scope="module")
def env():
    e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"]})
    return e.unwrapped


def _episode(env, trig, idx):
    obs, info = env.reset(options={"question_index": idx})
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(trig.decide(obs, info))
        done = term or trunc
    return info


def test_real_steps_have_real_signals_and_labels(env):
    obs, info = env.reset(seed=1)
    assert obs["mask"].tolist() == [1.0, 1.0, 1.0]
    assert info["step_text"].startswith("Step 1 :")
    assert info["label"] in ("correct", "wrong", "off_chain", "unparseable")
    obs, r, term, trunc, info = env.step(1)
    assert info["query"] and len(info["passage_ids"]) == 1


def test_oracle_labels_fix_errors(env):
    never = oracle = 0.0
    n = 40
    for i in range(n):
        never += _episode(env, NeverTrigger(), i)["quality"]
        oracle += _episode(env, OracleTrigger(), i)["quality"]
    assert oracle > never


@pytest.mark.slow  # ~35 s on 2 CPUs (trains a probe on the shipped world)
def test_probe_signal_through_the_env_and_mismatch_error(tmp_path, tiny_world):
    import subprocess
    import sys

    from policies.probes.probe import ProbeMismatchError
    from policies.triggers import ThresholdTrigger

    out = tmp_path / "pulse"
    r = subprocess.run([sys.executable, "-m", "eval", "probe", "train", "--signal", "pulse", "--layers", "0,6",
                        "--n-questions", "30", "--n-eval-questions", "0", "--max-epochs", "5", "--out", str(out),
                        "--cache-dir", str(tmp_path / "steps")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "probes": {"pulse_prob": str(out)}}).unwrapped
    info = _episode(env, ThresholdTrigger("pulse_prob", 0.5, name="PUlSE"), 0)
    assert "quality" in info
    obs, info = env.reset(seed=0)
    assert 0.0 <= info["signals"]["pulse_prob"] <= 1.0
    with pytest.raises(ProbeMismatchError, match="was trained for model"):
        gym.make("kairos/MicroWorld-v0", config={"artifact": str(tiny_world.path), "probes": {"p": str(out)}})


@pytest.mark.slow
def test_seakr_eigenscore_as_an_env_signal():
    """signals: [..., eigen] exposes SeaKR's EigenScore (k sampled continuations per step) as obs + scalar."""
    from policies.triggers import ThresholdTrigger

    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "signals": ["output", "eigen"]}).unwrapped
    obs, info = env.reset(options={"question_index": 0})
    assert obs["eigen"].shape == (1,) and np.isfinite(obs["eigen"]).all()
    assert "eigenscore" in info["signals"] and "eigenscore" in env.c.scalar_names()
    info = _episode(env, ThresholdTrigger("eigenscore", -1e9, "above", name="SeaKR"), 1)
    assert info["retrievals"] >= 1
    with pytest.raises(ValueError, match="reasoner 'vllm' cannot"):  # a backend that cannot sample hidden states
        from envs.components import _extractor
        from envs.env_config import EnvConfig

        _extractor(EnvConfig(signals=["eigen"]), object(), 1, 1, ["x"], "vllm")


def test_dragin_rind_on_the_microworld_from_the_generation_pass():
    """signals: [..., rind] on the micro-world: eager attention captured in the generation pass; RIND is
    max over content words of ā_i·H_i·n with ā from attention_received over the step's own tokens — recomputed
    here from one full eager forward pass over the prompt + step; and the greedy steps equal sdpa's."""
    import torch

    from agents.signals.attention import attention_received, content_token_mask, rind_scores
    from policies.triggers import ThresholdTrigger

    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "signals": ["output", "rind"]}).unwrapped
    assert env.c.reasoner.capabilities.attentions
    obs, info = env.reset(options={"question_index": 3})
    plain = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                     "signals": ["output"]}).unwrapped
    _, info_plain = plain.reset(options={"question_index": 3})
    assert info["step_text"] == info_plain["step_text"]
    assert obs["rind"].shape == (1,) and info["signals"]["rind"] > 0
    # recompute from scratch: one eager forward over prompt + step, attention of the last layer
    r = env.c.reasoner
    before = env.ep.before if env.ep.before is not None else r.restore(env.ep.record.before)
    step_ids = r.tok.encode(info["step_text"].split(" "))
    ids = list(before.gen.ids) + step_ids
    with torch.no_grad():
        att = r.model(torch.tensor([ids]), output_attentions=True).attentions[-1][0].numpy()
    n_prompt = len(before.gen.ids)
    header = step_ids.index(r.colon_id) + 1
    n_content = len(step_ids) - header
    pos = [n_prompt + header + i for i in range(n_content)]
    # the pass sees queries up to the step's last content token (its end token is never fed)
    a = attention_received(att[:, : pos[-1] + 1, : pos[-1] + 1], pos)
    texts = [" " + w for w in info["step_text"].split(" ")[header:]]
    keep = content_token_mask(texts)
    step, _ = r.next_step([before])[0]
    np.testing.assert_allclose(step.meta["attn_received"], a, rtol=1e-4, atol=1e-6)
    expect = rind_scores(a, step.entropies)[keep].max()
    assert info["signals"]["rind"] == pytest.approx(expect, rel=1e-4)
    info = _episode(env, ThresholdTrigger("rind", -1.0, "above", name="DRAGIN"), 4)
    assert info["retrievals"] >= 1


def test_seakr_self_refinement_keeps_the_step_with_the_lower_eigenscore():
    """self_refine: eigenscore — after each retrieval the step with the lower EigenScore stands (the original
    one or the evidence-conditioned one); the retrieval is paid either way; a config without 'eigen' is an error."""
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="add 'eigen'"):
        EnvConfig(signals=["output"], self_refine="eigenscore").validate()
    # two retrievals allowed per step: after one, the step that stood is still the current one (info shows it)
    cfg = {"split": "dev", "rsus_components": ["ent"], "signals": ["output", "eigen"], "max_retrievals_per_step": 2}
    refine = gym.make("kairos/MicroWorld-v0", config={**cfg, "self_refine": "eigenscore"}).unwrapped
    plain = gym.make("kairos/MicroWorld-v0", config=cfg).unwrapped
    assert refine.c.namespace != plain.c.namespace
    seen = set()
    for q in range(12):
        _, i1 = refine.reset(options={"question_index": q})
        plain.reset(options={"question_index": q})
        original = (i1["step_text"], i1["signals"]["eigenscore"])
        _, _, _, _, i1 = refine.step(1)
        _, _, _, _, i2 = plain.step(1)
        if not i2["passage_ids"]:
            continue
        regenerated = (i2["step_text"], i2["signals"]["eigenscore"])
        kept = "original" if original[1] < regenerated[1] else "augmented"
        assert i1["refined"] == kept and i1["retrievals"] == 1 and i1["passage_ids"] == i2["passage_ids"]
        assert (i1["step_text"], i1["signals"]["eigenscore"]) == (original if kept == "original" else regenerated)
        seen.add(kept)
    assert seen == {"original", "augmented"}  # both outcomes occur on these questions


def test_seakr_reranking_injects_the_passage_with_the_lowest_eigenscore():
    """rerank: eigenscore — every unused top-k passage regenerates the step; the one whose step has the lowest
    EigenScore is injected. The first candidate's score is the EigenScore of the step the plain env regenerates
    with that same passage; the chosen one's is the standing step's; on some questions it is not the first."""
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="add 'eigen'"):
        EnvConfig(signals=["output"], rerank="eigenscore").validate()
    with pytest.raises(ConfigError, match="rerank must be"):
        EnvConfig(signals=["output", "eigen"], rerank="bm25").validate()
    # two retrievals allowed per step: after one, the regenerated step is still the current one (info shows it)
    cfg = {"split": "dev", "rsus_components": ["ent"], "signals": ["output", "eigen"], "max_retrievals_per_step": 2}
    rerank = gym.make("kairos/MicroWorld-v0", config={**cfg, "rerank": "eigenscore"}).unwrapped
    plain = gym.make("kairos/MicroWorld-v0", config=cfg).unwrapped
    assert rerank.c.namespace != plain.c.namespace
    not_first = 0
    for q in range(10):
        rerank.reset(options={"question_index": q})
        plain.reset(options={"question_index": q})
        _, _, _, _, i1 = rerank.step(1)
        _, _, _, _, i2 = plain.step(1)
        if not i2["passage_ids"]:
            continue
        cands = i1["rerank"]["candidates"]
        assert len(cands) >= 1 and cands[0][0] == i2["passage_ids"][0]
        assert cands[0][1] == pytest.approx(i2["signals"]["eigenscore"], rel=1e-5)
        best = min(cands, key=lambda c: c[1])  # ties: the retriever's order (min keeps the first)
        assert i1["passage_ids"] == [best[0]] == [i1["rerank"]["chosen"]]
        assert i1["signals"]["eigenscore"] == pytest.approx(best[1], rel=1e-6)
        assert i1["rerank"]["tokens_generated"] >= len(cands) and i1["rerank"]["seconds"] > 0  # every one is paid
        not_first += best[0] != cands[0][0]
    assert not_first >= 1


def test_dragin_qfs_query_on_the_microworld():
    """query mode 'qfs': the query is DRAGIN's attention-selected content words of the question and the text so
    far (headers, function words and the trigger word excluded); a reasoner without an attention pass is an
    error when the env is built."""
    from agents.signals.attention import content_word_flags

    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "signals": ["output", "rind"],
                                                   "query_modes": ["qfs", "step"]}).unwrapped
    obs, info = env.reset(options={"question_index": 2})
    _, _, _, _, info2 = env.step(1)
    q = info2["query"]
    words = q.split()
    assert words and all(content_word_flags([w])[0] for w in words)
    assert not {"Question", "Step", ":"} & set(words)
    text = (info["question"] + " " + info["step_text"]).split()
    assert [w for w in text if w in words] and all(w in text for w in words)
    assert q == env.c.qfs(info["question"], [], info["step_text"])


def test_pulse_interval_from_a_probe_sets_the_observation(tmp_path):
    """``pulse_layers_from``: the env's PUlSE features use the interval recorded with the probe (a narrower interval,
    fewer PUlSE features), and that interval — not the probe's path — is in the cache namespace."""
    import json

    from envs.components import build_components
    from envs.env_config import EnvConfig

    probe = tmp_path / "pulse"
    probe.mkdir()
    (probe / "probe.json").write_text(json.dumps({"spec": {"signal": "pulse", "layers": [2, 5]}}))
    base = {"split": "dev", "signals": ["pulse", "output"]}
    whole = build_components(EnvConfig.from_dict(base))
    chosen = build_components(EnvConfig.from_dict({**base, "pulse_layers_from": str(probe)}))
    same = build_components(EnvConfig.from_dict({**base, "pulse_layers": [2, 5]}))
    assert chosen.config.pulse_layers == [2, 5] and whole.config.pulse_layers == [0, 6]
    assert chosen.feature_dims["pulse"] < whole.feature_dims["pulse"]
    assert chosen.namespace == same.namespace != whole.namespace
