"""Issue 19: every dataset loader is an env task, the metric its answer kind calls for, bring-your-own corpus, and
answers that survive injection (answer closing)."""

from __future__ import annotations

import json

import pytest

from envs.core.data.loaders import LOADERS, load_dataset
from envs.tasks import TASKS


@pytest.fixture()
def shared_data():
    from envs.core.data.loaders import shared_data_dir

    if not (shared_data_dir() / "medmcqa" / "dev.jsonl").is_file():
        pytest.skip(f"shared real data not available under {shared_data_dir()}")
    return shared_data_dir()


# ------------------------------------------------------------------------------------------ tasks from loaders
def test_every_registered_loader_is_a_task_and_a_new_loader_becomes_one():
    assert set(LOADERS.names()) <= set(TASKS.names())
    assert TASKS.info("musique")["dataset"] == "musique" and TASKS.info("microworld")["labels"] is True

    def load_mine(path, skip_bad_lines=False, limit=None):
        return load_dataset("flashrag", path, skip_bad_lines, limit)

    LOADERS.register("my_flashrag", load_mine)
    try:
        assert "my_flashrag" in TASKS.names()  # registered after TASKS was first read: still a task
        from envs.env_config import EnvConfig

        EnvConfig.from_dict({"task": "my_flashrag", "reasoner": "hf"})  # validates on the driver
    finally:
        LOADERS.unregister("my_flashrag")
        TASKS.unregister("my_flashrag")


def _flashrag(tmp_path, rows, corpus=None):
    q = tmp_path / "questions.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if corpus is not None:
        c = tmp_path / "corpus.jsonl"
        c.write_text("".join(json.dumps(r) + "\n" for r in corpus))
        return q, c
    return q


CORPUS = [{"id": "d1", "contents": "Paris\nParis is the capital of France."},
          {"id": "d2", "contents": "Rome\nRome is the capital of Italy."}]


def test_answer_kinds_name_their_metrics(tmp_path):
    from envs.qa_task import QATask

    q = _flashrag(tmp_path, [
        {"id": "o", "question": "Capital of France?", "golden_answers": ["Paris"]},
        {"id": "m", "question": "Capital of Italy?", "golden_answers": [1], "choices": ["Paris", "Rome", "Oslo"]},
        {"id": "y", "question": "Is Rome in Italy?", "golden_answers": ["yes"], "choices": ["yes", "no", "maybe"]}])
    t = QATask("flashrag", "dev", str(q))
    o, m, y = t.questions
    assert t.quality_metric == "quality" and t.answer_kinds == ["extractive", "multiple_choice", "yes_no_maybe"]
    assert t.metric_names == ("f1", "em", "acc", "acc_strict")
    assert t.metrics(o, "the city of Paris") == {"f1": pytest.approx(0.5), "em": 0.0}  # partial credit, not EM
    assert t.metrics(o, None) == {"f1": 0.0, "em": 0.0}
    # multiple choice: the option letter, never token overlap with a wrong option's words
    assert t.metrics(m, "B") == {"acc": 1.0, "acc_strict": 1.0}
    assert t.metrics(m, "I think it is (B)") == {"acc": 1.0, "acc_strict": 0.0}  # lenient reads it, strict not
    assert t.metrics(m, "Paris") == {"acc": 0.0, "acc_strict": 0.0}
    assert t.quality(m, "B") == 1.0 and t.quality(o, "Paris") == 1.0
    assert t.metrics(y, "Yes, it is.") == {"acc": 1.0, "acc_strict": 1.0}
    assert t.question_attr(y, "answer_kind") == "yes_no_maybe"
    single = QATask("flashrag", "dev[1:2]", str(q))
    assert single.quality_metric == "acc" and single.metric_names == ("acc", "acc_strict")


def test_unanswerable_questions_are_left_out_and_counted(tmp_path):
    from envs.qa_task import QATask

    src = tmp_path / "musique.jsonl"
    para = [{"idx": 0, "title": "T", "paragraph_text": "T is a town.", "is_supporting": True}]
    src.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Where is T{i}?", "answer": "there",
                                       "paragraphs": para, "answerable": i != 1}) + "\n" for i in range(3)))
    t = QATask("musique", "dev", str(src))
    assert [q.id for q in t.questions] == ["q0", "q2"] and t.excluded == ["q1"]


def test_shared_benchmarks_load_as_tasks(shared_data):
    from envs.qa_task import DEFAULT_PATHS, QATask

    kinds = {}
    for name in DEFAULT_PATHS:
        t = QATask(name, "dev[0:5]")
        kinds[name] = (t.quality_metric, t.answer_kinds)
    assert kinds["musique"] == ("f1", ["extractive"]) and kinds["hotpotqa"] == ("f1", ["extractive"])
    assert kinds["medqa"] == ("acc", ["multiple_choice"]) and kinds["mmlu_pro"] == ("acc", ["multiple_choice"])
    assert kinds["pubmedqa"] == ("acc", ["yes_no_maybe"])


# ------------------------------------------------------------------------------------------ bring your own corpus
def test_corpus_is_its_own_config_entry(tmp_path):
    from envs.qa_task import QATask

    q, c = _flashrag(tmp_path, [{"id": "o", "question": "Capital of France?", "golden_answers": ["Paris"]}], CORPUS)
    t = QATask("flashrag", "dev", str(q))
    with pytest.raises(ValueError, match="set EnvConfig.corpus"):
        t.corpus()  # questions without passages: the error says what to set
    assert [p.id for p in t.corpus(str(c))] == ["d1", "d2"]
    assert [p.id for p in t.corpus(f"flashrag:{c}")] == ["d1", "d2"]
    with pytest.raises(ValueError, match="EnvConfig.corpus 'nonsense'"):
        t.corpus("nonsense")


def test_medmcqa_explanations_leave_the_evaluated_questions_out(shared_data):
    from envs.qa_task import QATask

    med = QATask("medqa", "test[0:5]")
    corpus = med.corpus("medmcqa_explanations:medmcqa/dev.jsonl")  # relative: read from the shared data folder
    mc = QATask("medmcqa", "dev[0:20]")
    own = mc.corpus("medmcqa_explanations")
    ids = {p.id for p in own}
    assert not ids & {f"medmcqa-{q.id}" for q in mc.questions}  # no evaluated question's own explanation
    assert len(corpus) > len(own)  # nothing of MedQA is excluded from the MedMCQA file


def test_env_builds_on_any_corpus_and_refuses_a_mismatched_index_with_a_hint_that_fits(tmp_path):
    from agents.retrievers.index import build_index
    from envs.components import task_retriever
    from envs.core.data.loaders import load_flashrag_corpus
    from envs.env_config import EnvConfig

    q, c = _flashrag(tmp_path, [{"id": "o", "question": "Capital of France?", "golden_answers": ["Paris"]}], CORPUS)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "z", "contents": "Oslo\nOslo is in Norway."}) + "\n")
    build_index("bm25", load_flashrag_corpus(other), tmp_path / "idx", corpus_spec=f"flashrag:{other}")
    cfg = EnvConfig.from_dict({"task": "flashrag", "data_path": str(q), "corpus": str(c), "index_path":
                               str(tmp_path / "idx")})
    from envs.qa_task import QATask

    corpus = QATask("flashrag", "dev", str(q)).corpus(cfg.corpus)
    with pytest.raises(ValueError) as e:
        task_retriever(cfg, corpus)
    msg = str(e.value)
    assert f"built from corpus 'flashrag:{other}'" in msg and "set EnvConfig.corpus" in msg
    assert "kairos index build" in msg
    ok = EnvConfig.from_dict({**cfg.to_dict(), "corpus": f"flashrag:{other}"})
    r = task_retriever(ok, QATask("flashrag", "dev", str(q)).corpus(ok.corpus))
    assert r.search(["Oslo Norway"], k=1)[0][0].id == "z"


def test_questions_and_corpus_enter_the_cache_namespace_by_content(tmp_path):
    from envs.components import _namespace, _task_file
    from envs.env_config import EnvConfig
    from envs.qa_task import QATask

    q, c = _flashrag(tmp_path, [{"id": "o", "question": "Capital of France?", "golden_answers": ["Paris"]}], CORPUS)
    t = QATask("flashrag", "dev", str(q))
    cfg = EnvConfig.from_dict({"task": "flashrag", "data_path": str(q), "corpus": str(c)})

    def ns(corpus, task_file):
        return _namespace("hf", ["m", corpus.fingerprint(), task_file], cfg)

    base = ns(t.corpus(str(c)), _task_file(t))
    moved = tmp_path / "copy.jsonl"
    moved.write_text(c.read_text())
    assert ns(t.corpus(str(moved)), _task_file(t)) == base  # the corpus by content, not by path
    c.write_text(c.read_text().replace("Italy", "Lazio"))
    assert ns(t.corpus(str(c)), _task_file(t)) != base  # another corpus, same questions
    q.write_text(q.read_text().replace("France", "Gaul"))
    assert ns(t.corpus(str(moved)), _task_file(QATask("flashrag", "dev", str(q)))) != base


# ------------------------------------------------------------------------------------------ MMLU CSV
def test_mmlu_csv_loader(tmp_path):
    p = tmp_path / "clinical_knowledge_test.csv"
    p.write_text('"What is x, really?",one,two,three,four,C\nQ2,a,b,c,d,Z\n')
    from envs.core.data.errors import DataFormatError

    with pytest.raises(DataFormatError, match=r"clinical_knowledge_test.csv:2: field 'column 6 \(answer\)'"):
        load_dataset("mmlu", p)
    rows = load_dataset("mmlu", p, skip_bad_lines=True)
    assert rows[0].question == "What is x, really?" and rows[0].answer_index == 2
    assert rows[0].metadata["subject"] == "clinical_knowledge" and rows.skipped == 1


# ------------------------------------------------------------------------------------------ answer closing
@pytest.fixture()
def micro_cfg(tiny_world, tmp_path):
    return {"artifact": str(tiny_world.path), "max_steps": 2, "max_step_tokens": 8, "signals": ["output"],
            "cache_path": str(tmp_path / "cache.sqlite"), "rsus_components": ["ent"]}


def _episode(env, q):
    obs, info = env.reset(options={"question_index": q})
    done = False
    while not done:
        obs, r, te, tr, info = env.step(0)
        done = te or tr
    return info


def test_answer_closing_asks_a_chain_without_an_answer_once(micro_cfg):
    from envs.retrieval_env import RetrievalTimingEnv

    off = RetrievalTimingEnv({**micro_cfg, "answer_closing": False})
    on = RetrievalTimingEnv({**micro_cfg, "answer_closing": True})
    closed = 0
    for q in range(12):
        a, b = _episode(off, q), _episode(on, q)
        if a["answer_status"] == "answered":  # a usable answer line: closing changes nothing
            assert b["answer"] == a["answer"] and b["quality"] == a["quality"] and b["tokens"] == a["tokens"]
            continue
        assert a["answer_status"] == "none"
        # asked once: the last line is the answer the model wrote after "Answer :"; its tokens count
        assert b["answer"].startswith("Answer :") and b["answer_status"] in ("closed", "none")
        assert b["tokens"] > a["tokens"] and b["action_prefix"].endswith("c")
        assert b["metrics"] == {"quality": b["quality"]} or set(b["metrics"]) >= {"acc"}
        closed += b["answer_status"] == "closed"
        assert _episode(on, q) == b  # the closing record is replayed from the trajectory cache
    assert closed > 0


def test_closing_records_replay_in_a_fresh_env_and_the_namespace_is_unchanged(micro_cfg):
    from envs.retrieval_env import RetrievalTimingEnv

    on = RetrievalTimingEnv({**micro_cfg, "answer_closing": True})
    off = RetrievalTimingEnv({**micro_cfg, "answer_closing": False})
    assert on.c.namespace == off.c.namespace  # closing adds records under a prefix of its own, changes none
    first = [_episode(on, q)["answer"] for q in range(6)]
    fresh = RetrievalTimingEnv({**micro_cfg, "answer_closing": True, "cache_path": None})
    assert [_episode(fresh, q)["answer"] for q in range(6)] == first


def test_usable_answer_rules():
    from envs.retrieval_env import StepRecord, usable_answer

    def rec(content, is_answer=True):
        return StepRecord(text="Answer: " + content, content=content, is_answer=is_answer, n_tokens=1, seconds=0.0,
                          features={}, signals={}, mask={})

    assert usable_answer(rec("Paris")) and not usable_answer(rec(""))
    assert not usable_answer(rec("Answer: Paris")) and not usable_answer(rec("Paris", is_answer=False))
    assert not usable_answer(None)
