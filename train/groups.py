"""Group baselines for REINFORCE: several rollouts of each question in one batch (docs/design.md §7).

RLOO (Kool et al., 2019, "Buy 4 REINFORCE samples, get a baseline for free!") and GRPO (Shao et al., 2024,
DeepSeekMath) replace the learned value baseline with the other rollouts of the same question:

* ``rloo``: ``A_i = R_i − mean_{j≠i} R_j`` over the ``n`` rollouts of ``i``'s question (leave-one-out);
* ``grpo``: ``A_i = (R_i − mean_j R_j) / (std_j R_j + ε)`` (the group's mean *including* ``i``, its sample std —
  Bessel-corrected, as TRL's ``GRPOTrainer`` — and ``ε`` = :data:`GRPO_EPS`; a group of equal rewards gets 0).

``R_i`` is the episode's return (γ = 1: the answer quality minus every decision's ``λ·cost``) and the advantage
of each of the episode's decisions is ``A_i``. That is REINFORCE with returns-to-go and a baseline: at decision
``t``, ``A_i = G_t − b_t`` with ``b_t = mean_{j≠i} R_j − r_{<t}`` (the episode's own rewards before ``t``) —
``b_t`` depends only on the past and on the *other* rollouts, not on the action at ``t``, so the gradient stays
unbiased (for ``grpo`` only up to the per-group scale, as in GRPO).

The pieces, top to bottom: :func:`group_schedule` (which questions an EnvRunner samples, each ``G`` times),
:func:`sample_groups` (the EnvRunner's side: schedule its env, then RLlib's ``sample``), :func:`group_advantages`
(the formulas) and :func:`episode_group` (an RLlib episode's question); the learner connector that writes the
advantages into the batch is :class:`train.reinforce.ComputeGroupAdvantages`.

Example:
    >>> group_advantages([1.0, 0.0, 0.5, 0.9, 0.9], ["a", "a", "a", "b", "b"], "rloo").round(3).tolist()
    [0.75, -0.75, 0.0, 0.0, 0.0]
    >>> group_schedule(num_questions=10, n_episodes=6, group_size=3, seed=[0, 1], slot=0, n_slots=1)
    [4, 4, 4, 8, 8, 8]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

#: the baselines computed from a question's group of rollouts (``algo.group_size >= 2``)
GROUP_BASELINES = ("rloo", "grpo")
#: GRPO's ε in ``(R − mean) / (std + ε)`` (TRL's value)
GRPO_EPS = 1e-4


def group_advantages(returns: Sequence[float], groups: Sequence[Hashable], kind: str,
                     eps: float = GRPO_EPS) -> np.ndarray:
    """Per-episode advantages of ``returns`` against the other episodes of the same group (``groups[i]``: the
    key of episode ``i``'s question). ``kind``: ``rloo`` or ``grpo`` (module docstring). A group of one episode has
    no other rollout to compare with: a ``ValueError`` naming it (sample with ``group_size >= 2``)."""
    if kind not in GROUP_BASELINES:
        raise ValueError(f"group_advantages: kind must be one of {GROUP_BASELINES}, got '{kind}'")
    r = np.asarray(returns, dtype=np.float64)
    if len(groups) != len(r):
        raise ValueError(f"group_advantages: {len(r)} returns but {len(groups)} group keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    adv = np.zeros_like(r)
    for g, idx in members.items():
        if len(idx) < 2:
            raise ValueError(f"baseline '{kind}': question {g!r} has 1 rollout in the batch, no other to compare it "
                             "with — the group baselines need algo.group_size >= 2 rollouts of every question")
        x = r[idx]
        if kind == "rloo":
            adv[idx] = x - (x.sum() - x) / (len(x) - 1)
        else:
            adv[idx] = (x - x.mean()) / (x.std(ddof=1) + eps)
    return adv


def group_schedule(num_questions: int, n_episodes: int, group_size: int, seed: Any, slot: int,
                   n_slots: int) -> list[int]:
    """The question indices one EnvRunner samples in one iteration: ``n_episodes / group_size`` questions, each
    ``group_size`` times in a row (so a question's rollouts run side by side and share the trajectory cache).
    The ``n_slots`` runners' questions are one draw without replacement from ``range(num_questions)`` seeded by
    ``seed`` (the run's seed and the iteration), split by ``slot``: disjoint, and the same on a rerun."""
    if group_size < 1 or n_episodes % group_size:
        raise ValueError(f"group_schedule: {n_episodes} episodes are not whole groups of {group_size}")
    k = n_episodes // group_size
    if k * n_slots > num_questions:
        raise ValueError(f"group baseline: {k * n_slots} questions per iteration ({n_slots} EnvRunners × "
                         f"{k}) but the env has {num_questions}: lower algo.episodes_per_batch or raise "
                         "algo.group_size (or env_config.max_questions)")
    drawn = np.random.default_rng(seed).choice(num_questions, size=k * n_slots, replace=False)
    return [int(q) for q in np.repeat(drawn[slot * k:(slot + 1) * k], group_size)]


def sample_groups(runner: Any, n_episodes: int, group_size: int, seed: Any, n_slots: int):
    """On an EnvRunner: schedule its vector env with :func:`group_schedule` and sample exactly those episodes
    (``envs.vector.BatchedRetrievalEnv.schedule_questions``: once the schedule is used up its copies park, so
    ``sample(num_episodes=n_episodes)`` returns the scheduled episodes). Returns ``(episodes, metrics)``, or an
    error text (raising here would kill a remote runner); ``None`` for a runner without an env."""
    env = getattr(runner, "env", None)
    if env is None:
        return None
    u = getattr(env, "unwrapped", env)
    if not hasattr(u, "schedule_questions") or not hasattr(u, "num_questions"):
        return (f"algo.group_size > 1 samples each question {group_size} times through the env's question schedule, "
                f"and this env ({type(u).__name__}) has none: use a Kairos env preset (microworld, hotpotqa), give "
                "your vector env schedule_questions(indices) and num_questions (envs.vector.BatchedRetrievalEnv), "
                "or set algo.group_size: 1 with baseline none | mean | value")
    slot = max(0, int(runner.worker_index or 0) - 1) if n_slots > 1 else 0
    try:
        u.schedule_questions(group_schedule(u.num_questions, n_episodes, group_size, seed, slot, n_slots))
    except ValueError as e:
        return str(e)
    return runner.sample(num_episodes=n_episodes, explore=True), runner.get_metrics()


def episode_group(episode: Any) -> Hashable:
    """The group key of an RLlib episode: its question (``info["question_id"]`` at reset)."""
    infos = episode.get_infos()
    first = infos[0] if len(infos) else {}
    if not isinstance(first, dict) or "question_id" not in first:
        raise ValueError("group baseline: the episode's reset info has no 'question_id' to group its rollouts by "
                         "(a Kairos env writes it; a custom env must too)")
    return first["question_id"]
