"""Ungraded questions (user questions, no gold answers) as an env task: quality is not defined — NaN, no metrics —
and the reward is the costs alone; the knowledge sources an application gives (passages, corpus files, indexes)."""

import json
import math

import gymnasium as gym
import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT
from envs.ungraded import UngradedTask, knowledge_config, knowledge_corpus, ungraded_components

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")

ENV = {"task": "questions", "rsus_components": ["ent"], "costs": {"retrieval_calls": 0.1}}


@pytest.fixture(scope="module")
def dev_questions():
    from envs.core.microworld.artifact import load_artifact

    return [q.text for q in load_artifact(None, with_model=False).questions["dev"][:4]]


@pytest.fixture(scope="module")
def components(dev_questions):
    from envs.env_config import EnvConfig

    return ungraded_components(EnvConfig.from_dict(ENV), UngradedTask(dev_questions))


def test_an_ungraded_episode_reports_no_quality_and_a_reward_of_costs_alone(components):
    from envs.retrieval_env import RetrievalTimingEnv

    env = RetrievalTimingEnv(components.config, components=components)
    _, info = env.reset(options={"question_index": 0})
    assert info["question_id"].startswith("q-") and info["tokens"] > 0 and "seconds" in info
    rewards, done = [], False
    while not done:
        tokens = info["tokens"]
        _, r, te, tr, info = env.step(1)
        rewards.append(r)
        done = te or tr
        retrieved = info["query"] is not None
        assert ("regenerated_step" in info) == retrieved and info["tokens"] >= tokens
    # nothing scores the answer: quality NaN, no metrics, and no quality in the reward — the costs alone
    assert math.isnan(info["quality"]) and info["metrics"] == {}
    assert sum(rewards) == pytest.approx(-0.1 * info["retrievals"])
    assert info["answer_status"] in ("answered", "closed", "none")
    assert info["answer_content"] and info["answer"].endswith(info["answer_content"])
    assert not components.graded and math.isnan(components.quality(env.ep.q, env.ep.answer))
    env.close()


def test_a_graded_task_still_adds_the_quality(components):
    from envs.core.microworld.artifact import load_artifact
    from envs.microworld.task import MicroWorldTask

    task = MicroWorldTask(load_artifact(None, with_model=False), "dev")
    from envs.components import Components

    graded = Components(**{**components.__dict__, "task": task})
    assert graded.graded and graded.quality(task.questions[0], None) == 0.0


def test_the_questions_task_reads_a_file_through_gym_make(tmp_path, dev_questions):
    import envs  # noqa: F401  (registers the ids)

    qfile = tmp_path / "qs.jsonl"
    qfile.write_text("".join(json.dumps({"question": q}) + "\n" for q in dev_questions[:2]))
    env = gym.make("kairos/RetrievalTiming-v0", config={**ENV, "data_path": str(qfile)})
    _, info = env.reset(options={"question_index": 1})
    assert info["question"] == dev_questions[1]
    _, r, *_ = env.step(0)
    assert r == 0.0
    env.close()


def test_knowledge_sources(tmp_path):
    from envs.env_config import EnvConfig

    c = knowledge_corpus(["a b c", ("x1", "d e"), ("x2", "T", "f g"), {"id": "x3", "contents": "h"}])
    assert [p.id for p in c] == ["p0", "x1", "x2", "x3"] and c.get("x2").title == "T"
    with pytest.raises(ValueError, match="passage 1 is int"):
        knowledge_corpus(["a", 3])
    with pytest.raises(ValueError, match="no passages"):
        knowledge_corpus([])
    base = EnvConfig.from_dict(ENV)
    txt = tmp_path / "facts.txt"
    txt.write_text("Mira 's father is Tovan .\n\nTovan was born in Kasford .\n")
    cfg, corpus = knowledge_config(base, str(txt))
    assert len(corpus) == 2 and cfg.index_path is None
    jl = tmp_path / "corpus.jsonl"
    jl.write_text(json.dumps({"id": "d1", "contents": "Title\nSome text ."}) + "\n")
    assert knowledge_config(base, jl)[1].get("d1").text == "Some text ."
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl.*FlashRAG"):
        knowledge_config(base, str(tmp_path / "missing.jsonl"))
    with pytest.raises(FileNotFoundError, match="kairos index build"):
        knowledge_config(base, index=tmp_path / "no_index")


def test_a_prebuilt_index_is_checked_against_the_knowledge(tmp_path):
    from agents.retrievers.index import IndexMismatchError, build_index
    from envs.core.data.loaders import load_flashrag_corpus
    from envs.env_config import EnvConfig

    jl = tmp_path / "corpus.jsonl"
    jl.write_text("".join(json.dumps({"id": f"d{i}", "contents": f"T{i}\nfact number {i} ."}) + "\n"
                          for i in range(6)))
    build_index("bm25", load_flashrag_corpus(jl), tmp_path / "idx", corpus_spec=f"flashrag:{jl}")
    base = EnvConfig.from_dict(ENV)
    cfg, corpus = knowledge_config(base, tmp_path / "idx")  # a directory: the index, its corpus from the manifest
    assert cfg.index_path == str(tmp_path / "idx") and cfg.retriever == "bm25" and corpus is None
    comps = ungraded_components(cfg, UngradedTask(["Who ?"]))
    assert len(comps.retriever) == 6
    other = tmp_path / "other.txt"
    other.write_text("one passage .\n")
    cfg, corpus = knowledge_config(base, other, index=tmp_path / "idx")
    with pytest.raises(IndexMismatchError, match=r"does not match the knowledge source.*kairos index build"):
        ungraded_components(cfg, UngradedTask(["Who ?"]), corpus)
