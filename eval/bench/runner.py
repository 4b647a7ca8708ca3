"""The benchmark's runner: triggers through the env with shared components, one resumable JSONL per (method,
split)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from envs.core.config import ConfigError
from envs.env_config import EnvConfig, EnvOverrides
from eval.bench.config import BenchConfig, bench_env_config

__all__ = ["Runner", "evaluated_setup", "rewarded", "runner_probe_names"]

log = logging.getLogger("eval.bench.policies")


class Runner:
    """Runs triggers through the env with shared components; one resumable JSONL per (method, split)."""

    def __init__(self, cfg: BenchConfig, components=None):
        from envs.components import build_components

        self.cfg = cfg
        self.env_config = bench_env_config(cfg)
        self.components = components or build_components(self.env_config)
        self.scalars = set(self.components.scalar_names())
        self.out = Path(cfg.out_dir)
        self._variants: dict[str, tuple] = {}
        self._check_fingerprint()

    def _check_fingerprint(self) -> None:
        """Per-question rows are only reused by a run of the same env (outcome namespace) and λ: a changed
        config pointed at an old out_dir is an error, never a silent mix of results."""
        from envs.core.io import write_json

        ec = self.env_config
        self.fingerprint = fp = {"namespace": self.components.namespace, "split": ec.split, "lambda_retrieval": self.cfg.lambda_retrieval,
              # what an episode reaches and how it ends, beside what its records hold (the namespace)
              "episode": {"max_retrievals_per_question": ec.max_retrievals_per_question,
                          "max_retrievals_per_step": ec.max_retrievals_per_step,
                          "answer_closing": bool(ec.answer_closing and self.components.can_close)}}
        path = self.out / "per_question" / "fingerprint.json"
        # binding only once a result row exists: a run that stopped before its first row (a bad value, Ctrl-C in
        # the set-up) leaves nothing a later run could mix with, so the folder is simply taken over
        has_rows = any(p.stat().st_size > 0 for p in (self.out / "per_question").rglob("*.jsonl"))
        old = None
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except ValueError:
                old = {}
        if old is not None and old != fp and has_rows:
            diff = sorted(k for k in fp if not isinstance(old, dict) or old.get(k) != fp[k])
            raise ConfigError(f"{self.out}: holds per-question results of a different setup ({', '.join(diff)} "
                              "changed); use another out_dir or delete this one to start over")
        if old != fp:
            write_json(path, fp)

    def _with_overrides(self, env: EnvOverrides | None):
        """(env config, components) of the bench env with a method's overrides (built once per override)."""
        if not env:
            return self.env_config, self.components
        key = json.dumps(env.to_dict(), sort_keys=True)
        if key not in self._variants:
            from envs.components import build_components

            cfg = self.env_config.with_overrides(env)
            self._variants[key] = (cfg, build_components(cfg))
        return self._variants[key]

    def scalars_of(self, env: EnvOverrides | None) -> set[str]:
        """The scalar signals the bench env produces with a method's overrides."""
        return set(self._with_overrides(env)[1].scalar_names()) if env else self.scalars

    def _reuse(self, source: Path, jsonl: Path, questions: range, weights: dict[str, float]) -> bool:
        """Fill ``jsonl`` (absent) from ``source``: the same run of this benchmark at another λ, complete, whose
        rewards recomputed at its own λ are the ones it holds — then its rows with rewards at ``weights``, and the
        run reads them back instead of generating. The episodes are λ's to ignore (the caller's: a trigger that
        does not observe λ); anything else (a different env, a missing or torn row, rewards this arithmetic does not
        reproduce) and the run generates as usual."""
        from envs.core.io import read_done_rows, write_text

        if jsonl.exists() or not source.is_file():
            return False
        try:
            theirs = json.loads((source.parent.parent / "fingerprint.json").read_text())
        except (OSError, ValueError):
            return False
        lam = theirs.pop("lambda_retrieval", None) if isinstance(theirs, dict) else None
        if lam is None or theirs != {k: v for k, v in self.fingerprint.items() if k != "lambda_retrieval"}:
            return False
        try:
            done = read_done_rows(source)
        except ValueError:
            return False
        if any(int(q) not in done for q in questions):
            return False
        rows = [done[int(q)] for q in questions]
        if rewarded(rows, {**weights, "retrieval_calls": float(lam)}) != rows:
            log.warning("%s: rewards not reproduced at its λ %g; the run is generated again", source, lam)
            return False
        write_text(jsonl, "".join(json.dumps(r) + "\n" for r in rewarded(rows, weights)))
        log.debug("%s: copied from %s (λ %g), rewards at this λ", jsonl, source, lam)
        return True

    @staticmethod
    def env_tag(env: EnvOverrides) -> str:
        """A short stable name of a method's env overrides (its per-question files are its own): a hash of the keys
        as the config gives them."""
        import hashlib

        return hashlib.sha1(json.dumps(env.to_dict(), sort_keys=True).encode()).hexdigest()[:8]

    def run(self, trigger, split: str, questions: range, tag: str | None = None, querygen: bool = False,
            env: EnvOverrides | None = None, mode: str | None = None) -> dict[str, Any]:
        """One (method, split) run. ``mode``: retrieve with that query formulation (the env runs with QueryGen
        actions, the trigger's mode fixed; same trajectory-cache namespace as the env's default mode)."""
        from train.evaluate import evaluate_policy

        name = _slug(tag or trigger.name)
        if getattr(trigger, "fingerprint", None):  # a learned policy: its rows belong to these weights only
            name += f".w{trigger.fingerprint}"
        env_config, components = self._with_overrides(env)
        env_config, trigger = evaluated_setup(env_config, trigger, mode, querygen)
        jsonl = self.out / "per_question" / split / f"{name}.jsonl"
        if self.cfg.reuse_episodes_from and not getattr(trigger, "fingerprint", None):  # a learned policy observes λ
            self._reuse(Path(self.cfg.reuse_episodes_from) / "per_question" / split / jsonl.name, jsonl,
                        questions, env_config.costs)
        res = evaluate_policy(trigger, env_config, list(questions), batch_size=self.cfg.batch_size,
                              components=components, return_episodes=True, jsonl_path=jsonl,
                              progress=f"{split} {tag or trigger.name}")
        res["per_question"] = str(jsonl)  # (the summary names each method's file: its decisions, answers)
        return res


def rewarded(rows: list[dict[str, Any]], weights: dict[str, float]) -> list[dict[str, Any]]:
    """Per-question rows with every reward recomputed at cost ``weights``, as the env computes them
    (:func:`envs.retrieval_env._outcome`): a decision's reward is −Σ λ·cost, the answer quality added at the last
    decision of a graded task; the row's, the sum of its decisions' in order (:func:`envs.rollout.run_episodes`)."""
    import math

    out = []
    for row in rows:
        decisions, ret = [], 0.0
        for i, d in enumerate(row["decisions"]):
            raw = d["costs"]
            r = -sum(weights[k] * raw[k] for k in raw)
            if i == len(row["decisions"]) - 1 and not math.isnan(row["quality"]):
                r += row["quality"]
            ret += r
            decisions.append({**d, "reward": r})
        out.append({**row, "reward": float(ret), "decisions": decisions})
    return out


def evaluated_setup(env_config: EnvConfig, trigger, mode: str | None = None, querygen: bool = False):
    """``(env config, trigger)`` as the benchmark runs a trigger: with a fixed query ``mode`` the trigger is wrapped
    to retrieve with it and the env takes QueryGen actions; with ``querygen`` the env takes them from the policy."""
    from policies.triggers import FixedModeTrigger

    if mode is not None:
        trigger = FixedModeTrigger(trigger, list(env_config.query_modes).index(mode), mode)
        querygen = True
    if querygen:
        env_config = env_config.replace(querygen=True)
    return env_config, trigger


def runner_probe_names(cfg: BenchConfig) -> list[str]:
    """Signal names the bench env's probes add (``env.probes`` keys, and those of method overrides)."""
    names = list(cfg.env.probes)
    for m in cfg.methods:
        names += list(m.env.get("probes") or {})
    return names


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)
