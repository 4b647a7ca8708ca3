from envs.core.microworld.config import WorldConfig
from envs.core.microworld.kb import KnowledgeBase, render_fact
from envs.core.microworld.labels import gold_answer, label_chain, label_step
from envs.core.microworld.questions import Question

KB = KnowledgeBase.generate(WorldConfig())


def _fact(split, relation=None):
    return next(f for f in KB.facts if f.split == split and (relation is None or f.relation == relation))


def test_correct_wrong_offchain_unparseable():
    f = _fact("known", "mother")
    assert label_step(KB, f.sentence, (f.subject, "mother")).label == "correct"
    other = next(p for p in KB.entities["person"] if p != f.object)
    lab = label_step(KB, render_fact(f.subject, "mother", other), (f.subject, "mother"))
    assert (lab.label, lab.error_kind, lab.fact_id) == ("wrong", "known", f.id)
    father = KB.get(f.subject, "father")
    assert label_step(KB, father.sentence, (f.subject, "mother")).label == "off_chain"
    assert label_step(KB, "the moon is made of cheese .", None).error_kind == "parse"
    assert label_step(KB, "Nobody 's mother is Somebody .", None).label == "unparseable"


def test_error_kind_follows_the_fact_split():
    for split, kind in [("held_out", "unseen"), ("mislearned", "mislearned"), ("conflicting", "conflicting"),
                        ("evidence_only", "evidence_only")]:
        f = _fact(split)
        wrong = f.false_object or next(e for e in KB.entities[KB.entity_type[f.object]] if e != f.object)
        lab = label_step(KB, render_fact(f.subject, f.relation, wrong), (f.subject, f.relation))
        assert lab.label == "wrong" and lab.error_kind == kind and lab.split == split


def test_label_chain_follows_the_models_own_chain():
    head = KB.entities["person"][5]
    q = Question(head, ("father", "birthplace"))
    f1 = KB.get(head, "father")
    wrong_father = next(p for p in KB.entities["person"] if p not in (f1.object, head))
    # step 1 wrong; step 2 is a true fact about the WRONG father: factually correct on the model's chain
    s2 = KB.get(wrong_father, "birthplace")
    labels, ok = label_chain(KB, q, [render_fact(head, "father", wrong_father), s2.sentence], s2.object)
    assert [lab.label for lab in labels] == ["wrong", "correct"]
    assert ok == (s2.object == gold_answer(KB, q))
    good = [f1.sentence, KB.get(f1.object, "birthplace").sentence]
    labels, ok = label_chain(KB, q, good, gold_answer(KB, q))
    assert ok and all(lab.label == "correct" for lab in labels)
    # an extra step beyond the path is off-chain
    labels, _ = label_chain(KB, q, good + [f1.sentence], None)
    assert labels[-1].label == "off_chain"
