"""A new retrieval method is a hook, not a branch in the loop (envs.hooks): a selector registered and named in the
EnvConfig, or an after-regeneration hook handed to the components, changes what a retrieval does while the loop
(envs.retrieval_env.step_batch, envs.engine.make_records) stays as it is."""

from __future__ import annotations

import dataclasses

import pytest

from envs.core.config import ConfigError
from envs.env_config import EnvConfig
from envs.hooks import (
    AFTER_REGENERATION,
    EVIDENCE_TRANSFORMS,
    RETRIEVAL_SELECTORS,
    AfterRegeneration,
    EvidenceTransform,
    FirstUnused,
    LoopHooks,
    RetrievalSelector,
)

BASE = EnvConfig(split="test", signals=["output"], rsus_components=["ent"], top_k=3, max_retrievals_per_step=2)


class LastUnused(FirstUnused):
    """The last of the top-k passages not injected yet (the default takes the first)."""

    def choose(self, cfg, ep, hits):
        fresh = [p for p in hits[: cfg.top_k] if p.id not in ep.used]
        return fresh[-1:]


@pytest.fixture
def last_unused():
    RETRIEVAL_SELECTORS.register("last_unused_test", LastUnused)
    yield "last_unused_test"
    RETRIEVAL_SELECTORS.unregister("last_unused_test")


def test_a_registered_selector_is_chosen_by_the_config(last_unused):
    from envs.registration import make_env

    plain, mine = make_env(None, BASE), make_env(None, BASE.replace(rerank=last_unused))
    assert isinstance(mine.c.hooks.selector, LastUnused) and type(plain.c.hooks.selector) is FirstUnused
    assert mine.c.namespace != plain.c.namespace  # its records are its own in the trajectory cache
    got = {}
    for name, env in (("plain", plain), ("mine", mine)):
        env.reset(options={"question_index": 0})
        _, _, _, _, info = env.step(1)
        ranked = env.ep.record.ranked_ids
        assert len(ranked) == 3
        got[name] = (info["passage_ids"], ranked)
    assert got["plain"][1] == got["mine"][1]  # same query, same search ...
    assert got["plain"][0] == [got["plain"][1][0]] and got["mine"][0] == [got["mine"][1][-1]]  # ... its own pick
    with pytest.raises(ConfigError, match="rerank must be null or a registered retrieval selector"):
        BASE.replace(rerank="no_such_selector").validate()


def test_an_after_regeneration_hook_handed_to_the_components():
    from envs.registration import make_env

    class KeepOriginal:
        def __call__(self, original, regenerated):
            return original, "original"

    env = make_env(None, BASE)
    assert isinstance(env.c.hooks, LoopHooks) and env.c.hooks.listeners == ()  # (no prefetch)
    env.c.hooks = dataclasses.replace(env.c.hooks, after_regeneration=KeepOriginal())
    _, first = env.reset(options={"question_index": 0})
    _, _, _, _, info = env.step(1)
    assert info["refined"] == "original" and info["step_text"] == first["step_text"]
    assert info["regenerated_step"] == first["step_text"] and info["passage_ids"]  # retrieved, yet the step stands


@pytest.mark.parametrize("name,protocol", [("RETRIEVAL_SELECTORS", RetrievalSelector),
                                           ("EVIDENCE_TRANSFORMS", EvidenceTransform),
                                           ("AFTER_REGENERATION", AfterRegeneration)])
def test_every_registered_hook_meets_its_protocol(name, protocol):
    import kairos

    registry = kairos.registries()[name]
    assert registry is {"RETRIEVAL_SELECTORS": RETRIEVAL_SELECTORS, "EVIDENCE_TRANSFORMS": EVIDENCE_TRANSFORMS,
                        "AFTER_REGENERATION": AFTER_REGENERATION}[name]
    for entry in registry.names():
        assert isinstance(registry.make(entry), protocol), entry


def test_the_config_picks_the_hooks():
    from envs.seakr import EigenScoreRerank, SelfRefine

    seakr = LoopHooks.from_config(EnvConfig(signals=["output", "eigen"], rerank="eigenscore", self_refine="eigenscore"),
                                  prefetcher="a prefetcher")
    assert isinstance(seakr.selector, EigenScoreRerank) and isinstance(seakr.after_regeneration, SelfRefine)
    assert seakr.listeners == ("a prefetcher",)
    assert type(LoopHooks.from_config(BASE.replace(compress_evidence=True)).evidence).__name__ == "Compress"
