"""Implicit evidence compression (agents.compression): importance from one eager pass, the keep rule, the env."""

import numpy as np
import pytest
import torch

from agents.compression import compress_evidence, sentence_importance, split_sentences


@pytest.fixture(scope="module")
def micro():
    from agents.reasoners.micro import MicroReasoner
    from envs.core.microworld.artifact import load_artifact

    world = load_artifact()
    return world, MicroReasoner(world)


def test_split_sentences():
    assert split_sentences("A is B. C is D . E?") == ["A is B.", "C is D .", "E?"]
    assert split_sentences("  one sentence  ") == ["one sentence"]
    assert split_sentences("3.5 is a number. ok") == ["3.5 is a number.", "ok"]


def test_importance_is_the_attention_mass_of_the_step_on_each_sentence(micro):
    world, r = micro
    enc = world.tokenizer.encode
    prefix, s1, s2, step = enc("Question : who ?"), enc("A B C"), enc("D E"), enc("F G H")
    imp = sentence_importance(world.model, prefix, [s1, s2], step)
    # by hand: eager forward, the step's rows, sum over each span, mean over layers, heads and step tokens
    ids = prefix + s1 + s2 + step
    prev = world.model.config._attn_implementation
    world.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = world.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    finally:
        world.model.set_attn_implementation(prev)
    a = torch.stack([x[0] for x in att])[:, :, -len(step):, :]
    p = len(prefix)
    want = [a[..., p:p + 3].sum(-1).mean().item(), a[..., p + 3:p + 5].sum(-1).mean().item()]
    assert np.allclose(imp, want, atol=1e-6)
    assert world.model.config._attn_implementation == prev  # restored


def test_keep_rule_and_accounting(micro):
    world, r = micro
    state = r.start("Who is the spouse of Buxgur ?")
    ev = ["Buxgur 's spouse is Dabra . Dabra 's mother is Kelo .", "Kelo 's father is Zim ."]
    step = "Step 1 : Buxgur 's spouse is Dabra ."
    kept, info = compress_evidence(r, state, ev, step, tau_rel=0.0)
    assert kept == ev and info["sentences_before"] == info["sentences_after"] == 3
    kept1, info1 = compress_evidence(r, state, ev, step, tau_rel=1.0)
    rel = np.array(info1["relative_importance"])
    assert info1["sentences_after"] == int((rel >= 1.0).sum()) >= 1
    kept45, info45 = compress_evidence(r, state, ev, step, tau_rel=0.45)
    assert info45["sentences_after"] == int((rel >= 0.45).sum())
    assert info45["tokens_after"] == sum(len(p.split()) for p in kept45) <= info45["tokens_before"]
    flat = [s for p in ev for s in split_sentences(p)]
    assert " ".join(kept45) == " ".join(s for s, x in zip(flat, rel) if x >= 0.45)  # order kept
    with pytest.raises(ValueError, match="tau_rel"):
        compress_evidence(r, state, ev, step, tau_rel=1.5)


def test_env_compresses_and_keeps_the_namespace_of_the_default(micro):
    from envs.components import _namespace
    from envs.env_config import EnvConfig
    from envs.registration import make_env

    base = EnvConfig(split="test", signals=["output"], rsus_components=["ent"], top_k=3)
    assert _namespace("micro", ["x"], base) == _namespace("micro", ["x"], base.replace(tau_rel=0.3))
    assert _namespace("micro", ["x"], base) != _namespace("micro", ["x"], base.replace(compress_evidence=True))
    env = make_env(None, base.replace(compress_evidence=True))
    env.reset(options={"question_index": 0})
    _, _, _, _, info = env.step(1)
    assert "compression" in info and info["compression"]["sentences_after"] >= 1
    with pytest.raises(Exception, match="tau_rel"):
        EnvConfig.from_dict({"tau_rel": 2.0})
