"""PUlSE as published, as a retrieval trigger (the ``PUlSE-step`` rows of configs/experiments/seed_vllm_pulse/ and
configs/experiments/microworld/bench_microworld_pulse_published.yaml): the probe's p(error) above 0.5 fires, the
query is the flagged step's content words, and of the top 3 the first passage this question has not used yet is the
evidence the step is regenerated with."""

import gymnasium as gym

import envs  # noqa: F401  (registers the env ids)
from agents.query import QueryGenerator
from policies.triggers import ThresholdTrigger

SHIPPED_PULSE = "envs/core/microworld/artifacts/default/probes/pulse"


def test_pulse_step_asks_with_content_words_and_injects_the_first_unused_of_the_top_3():
    env = gym.make("kairos/MicroWorld-v0", config={
        "split": "dev", "rsus_components": ["ent"], "probes": {"pulse_prob": SHIPPED_PULSE},
        "query_modes": ["content_words"]}).unwrapped
    assert (env.config.top_k, env.config.passages_per_retrieval) == (3, 1)  # the paper's top 3, one passage
    trigger = ThresholdTrigger("pulse_prob", 0.5, "above", name="PUlSE-step")
    words = QueryGenerator(["content_words"])
    fired = kept = 0
    for q in range(4):
        obs, info = env.reset(options={"question_index": q})
        used: list[str] = []
        done = False
        while not done:
            before = info
            obs, _, terminated, truncated, info = env.step(trigger.decide(obs, before))
            done = terminated or truncated
            if info["query"] is None:
                kept += 1
                assert info["capped"] or before["signals"]["pulse_prob"] <= 0.5
                continue
            fired += 1
            assert before["signals"]["pulse_prob"] > 0.5
            assert info["query"] == words(before["step_text"], before["question"], "content_words")
            assert info["query"] != before["step_text"]  # not the step's text: its content words
            top3 = [p.id for p in env.c.retriever.search([info["query"]], k=3)[0]]
            assert info["passage_ids"] == [next(p for p in top3 if p not in used)]
            used += info["passage_ids"]
    env.close()
    assert fired and kept  # it fires on some steps of these questions and not on others
