import pytest

from envs.core.config import ConfigError
from envs.core.microworld.config import LMTrainConfig, WorldConfig
from envs.core.microworld.kb import KnowledgeBase, parse_sentence, render_fact
from envs.core.microworld.questions import (
    DocumentSampler,
    Question,
    enumerate_questions,
    gold_chain,
    split_questions,
)


def test_generation_is_deterministic_and_seed_dependent():
    a = KnowledgeBase.generate(WorldConfig(seed=3))
    b = KnowledgeBase.generate(WorldConfig(seed=3))
    c = KnowledgeBase.generate(WorldConfig(seed=4))
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()


def test_default_world_size_and_splits():
    kb = KnowledgeBase.generate(WorldConfig())
    counts = kb.split_counts()
    assert 300 <= len(kb.facts) <= 400
    assert counts["held_out"] == round(0.12 * len(kb.facts))
    assert counts["mislearned"] > 0 and counts["conflicting"] > 0
    # spouse pairs share a split; false versions only on non-symmetric relations
    for f in kb.facts:
        if f.relation == "spouse":
            assert kb.get(f.object, "spouse").split == f.split
            assert f.split not in ("mislearned", "conflicting")
        if f.split in ("mislearned", "conflicting"):
            assert f.false_object and f.false_object != f.object
            assert kb.entity_type[f.false_object] == kb.entity_type[f.object]
        else:
            assert f.false_object is None


def test_every_fact_sentence_round_trips():
    kb = KnowledgeBase.generate(WorldConfig())
    for f in kb.facts:
        assert parse_sentence(f.sentence) == (f.subject, f.relation, f.object)
    assert parse_sentence("Mira 's cousin is Tovan .") is None
    assert parse_sentence("gibberish") is None
    with pytest.raises(ValueError, match="unknown relation"):
        render_fact("a", "cousin", "b")


def test_questions_have_gold_chains_and_disjoint_splits():
    kb = KnowledgeBase.generate(WorldConfig())
    qs = enumerate_questions(kb)
    assert {q.hops for q in qs} == {1, 2, 3, 4}
    sp = split_questions(kb, 0)
    ids = {k: {q.id for q in v} for k, v in sp.items()}
    assert not ids["train"] & ids["test"] and not ids["train"] & ids["dev"] and not ids["dev"] & ids["test"]
    q = Question(kb.entities["person"][0], ("father", "birthplace"))
    chain = gold_chain(kb, q)
    assert [f.relation for f in chain] == ["father", "birthplace"]
    assert q.text.startswith("Where was") and q.text.endswith("born ?")


def test_training_documents_never_contain_held_out_facts():
    kb = KnowledgeBase.generate(WorldConfig())
    sampler = DocumentSampler(kb, split_questions(kb, 0)["train"], LMTrainConfig(), seed=0)
    held = {f.sentence for f in kb.by_split("held_out")}
    mislearned_true = {f.sentence for f in kb.by_split("mislearned")}
    for kind in ["fact"] * 200 + ["closed"] * 200 + ["evidence"] * 200:
        d = sampler.sample(kind)
        text = " ".join(d.tokens)
        assert len(d.tokens) == len(d.loss)
        for s in held:
            assert s not in text, (kind, s)
        if kind != "evidence":  # the true version of a MISLEARNED fact appears only as evidence
            for s in mislearned_true:
                assert s not in text
        # no loss on the question or evidence lines
        for tok, m in zip(d.tokens, d.loss):
            if tok in ("Question", "Evidence"):
                assert m == 0


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="unknown config key 'n_peeple'"):
        WorldConfig.from_dict({"n_peeple": 3})
    with pytest.raises(ConfigError, match="max_hops"):
        WorldConfig.from_dict({"max_hops": 9})
    with pytest.raises(ConfigError, match="person-to-person"):
        WorldConfig.from_dict({"relations": ["birthplace", "employer", "headquarters"], "max_hops": 4})
    with pytest.raises(ConfigError, match="unknown relation 'cousin'"):
        WorldConfig.from_dict({"relations": ["cousin"]})
