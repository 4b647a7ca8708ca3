"""Is an exported policy compatible with the env it is about to run in? One check for every path that loads one.

A learned policy reads observation fields of fixed sizes (``spec.json``'s ``spec.fields``), may choose among named
query modes (``spec.query_modes``) and records the env it was trained in (``env_config``: reasoner, model, signals,
layer intervals). :func:`check_policy_env` compares all of that with the env's observation fields *before any
work* — the benchmark checks every learned method before its first method runs, :class:`kairos.Pipeline` (``kairos
answer``, ``kairos serve``) on construction, :func:`train.evaluate.evaluate_policy` before its first episode — and
raises a :class:`PolicyMismatchError` that names the export's path, each field with its size on both sides, and the
fix (the env keys to set, or retrain). A policy run on another reasoner or model whose fields still fit (a transfer
experiment, e.g. the shifted micro-world) is allowed with a logged warning naming both.
"""

from __future__ import annotations

import logging
import math
from typing import Any

log = logging.getLogger(__name__)

#: EnvConfig keys that shape the observation fields (what a mismatch is most likely to come from)
SHAPING_KEYS = ("reasoner", "signals", "pulse_layers", "pulse_layers_from", "content_layers", "probes",
                "rsus_components", "observe_costs")

__all__ = ["SHAPING_KEYS", "PolicyMismatchError", "check_policy_env", "env_field_sizes", "policy_net"]


class PolicyMismatchError(ValueError):
    """An exported policy does not fit the env it is loaded for (observation fields, sizes or query modes)."""


def policy_net(policy: Any):
    """The :class:`~policies.rl.net.PolicyNet` inside a policy (a learned trigger, or a wrapper of one such as
    :class:`~policies.triggers.FixedModeTrigger`); ``None`` for a fixed trigger."""
    for _ in range(4):
        if policy is None:
            return None
        net = getattr(policy, "net", None)
        if net is not None and hasattr(net, "spec"):
            return net
        policy = getattr(policy, "trigger", None) or getattr(policy, "inner", None)
    return None


def env_field_sizes(space_or_dims: Any) -> dict[str, int]:
    """Observation field → its flat size, from a Gymnasium ``Dict`` space or a ``{field: size}`` mapping."""
    spaces = getattr(space_or_dims, "spaces", None)
    if spaces is None:
        return {k: int(v) for k, v in dict(space_or_dims).items()}
    return {k: int(math.prod(s.shape)) if s.shape else 1 for k, s in spaces.items()}


def _model(cfg: dict[str, Any]) -> str | None:
    opts = cfg.get("reasoner_options") or {}
    if cfg.get("reasoner") == "micro":
        return cfg.get("artifact") or None
    return opts.get("model") or None


def check_policy_env(policy: Any, fields: Any, env_config: Any, *, querygen: bool | None = None,
                     where: str | None = None) -> None:
    """Raise :class:`PolicyMismatchError` unless ``policy`` (a learned trigger; a fixed trigger passes) can run in
    an env whose observation fields are ``fields`` (a ``Dict`` space or ``{field: size}``) and whose config is
    ``env_config`` (an :class:`~envs.env_config.EnvConfig` or its dict).

    Checks: every field the policy reads is produced, at the same size; with ``querygen`` (default: the policy's
    own) the query head's modes are among the env's ``query_modes``. A different reasoner or model than the one
    recorded at training is logged (fields that fit still run: transfer)."""
    net = policy_net(policy)
    if net is None:
        return
    env = env_config.to_dict() if hasattr(env_config, "to_dict") else dict(env_config or {})
    trained = getattr(policy, "env_config", None) or getattr(getattr(policy, "trigger", None), "env_config", None)
    trained = dict(trained) if isinstance(trained, dict) else None
    path = getattr(policy, "path", None) or getattr(getattr(policy, "trigger", None), "path", None)
    name = getattr(policy, "name", None) or "learned"
    what = f"policy '{name}'" + (f" ({path})" if path else "") + (f" in {where}" if where else "")
    have = env_field_sizes(fields)
    want = {k: int(v) for k, v in net.spec.fields.items()}
    missing = [k for k in want if k not in have]
    resized = [k for k in want if k in have and have[k] != want[k]]
    if missing or resized:
        parts = [f"{k} (policy: {want[k]} numbers; env: none)" for k in missing]
        parts += [f"{k} (policy: {want[k]} numbers; env: {have[k]})" for k in resized]
        raise PolicyMismatchError(f"{what} reads observation fields this env does not produce alike: "
                                  f"{', '.join(parts)}. {_fix(trained, env)}")
    qg = querygen if querygen is not None else bool(getattr(policy, "querygen", False))
    names = list(net.spec.query_modes)
    env_modes = list(env.get("query_modes") or [])
    if qg and names and env_modes:
        lack = [m for m in names if m not in env_modes]
        if lack:
            raise PolicyMismatchError(f"{what}: its query head chooses among {names}, but the env's query_modes "
                                      f"{env_modes} lack {lack}; fix: set env.query_modes to include {lack} (the "
                                      "training env's), or run it without querygen")
    if trained is not None:
        diff = [(k, trained.get(k), env.get(k)) for k in ("reasoner",) if trained.get(k) != env.get(k)]
        if _model(trained) != _model(env) and (trained.get("reasoner") == env.get("reasoner")):
            diff.append(("model", _model(trained), _model(env)))
        if diff:
            log.warning("%s was trained on %s and runs on %s: its fields fit, so it runs (a transfer); retrain on "
                        "this reasoner for a policy of its own", what,
                        ", ".join(f"{k} {a!r}" for k, a, _ in diff), ", ".join(f"{k} {b!r}" for k, _, b in diff))


def _fix(trained: dict[str, Any] | None, env: dict[str, Any]) -> str:
    """The fix of a field mismatch: the env keys that differ from the training env's, else retrain."""
    if trained is None:
        return ("The export records no training env (spec.json has no env_config): run it in the env it was "
                "trained in (its signals, pulse_layers, reasoner), or retrain on this env.")
    keys = [k for k in SHAPING_KEYS if trained.get(k) != env.get(k)]
    if _model(trained) != _model(env):
        keys.append("model")
    if not keys:
        return ("Its training env (spec.json's env_config) matches this env's signals, layers and reasoner: the "
                "reasoner's sizes changed (another model or artifact); retrain on this env.")
    sets = ", ".join(f"env.{k} to {trained.get(k)!r} (here {env.get(k)!r})" if k != "model" else
                     f"the model to {_model(trained)!r} (here {_model(env)!r})" for k in keys)
    return f"Fix: retrain on this env, or set {sets} — the env it was trained in."

