"""The env components of task ``microworld_chain`` (registered in :mod:`envs.tasks`): the micro-world's components
(:mod:`envs.components`) with the chain task, the chained reasoner and the corpus with its distractors
(:mod:`envs.microworld.chain`). A module of its own so that neither of those two imports the other back."""

from __future__ import annotations

from typing import Any

from envs.microworld.chain import ChainTask, chain_corpus, chain_settings


def chain_components(config: Any):
    """The env components of task ``microworld_chain``: the micro-world's, with the chain task, the chained
    reasoner and the corpus with its distractors."""
    from agents.reasoners.chained import ChainedReasoner
    from envs.components import check_micro, world_components
    from envs.core.microworld.artifact import load_artifact

    check_micro(config, "microworld_chain")
    if config.reasoner_service is not None:
        raise ValueError("EnvConfig.reasoner_service: the microworld_chain task runs its chains in the env's process "
                         "(drop reasoner_service)")
    world = load_artifact(config.artifact)
    task = ChainTask(world, config.split, chain_settings(config))
    return world_components(config, world, task, chain_corpus(config, world), wrap=ChainedReasoner)


__all__ = ["chain_components"]
