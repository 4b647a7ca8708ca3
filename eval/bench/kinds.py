"""The builtin method kinds of the benchmark (registered in :data:`eval.bench.methods.METHOD_KINDS`).

never · always · single · oracle — CoT, retrieval at every step, Single RAG (one retrieval with the question before
step 1, top-k injected) and the gold-label oracle; threshold — a step signal against a threshold calibrated on dev;
random — retrieval at a given or matched rate; cache_oracle — the best action sequence per question; learned — an
exported RL policy; trigger — any registered trigger. IRCoT and FLARE as published are kinds of their own
(``ircot``, ``flare``: :mod:`eval.bench.published`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.core.config import ConfigError, helpf
from envs.env_config import EnvOverrides
from eval.bench import calibration
from eval.bench.methods import KIND_HELP, METHOD_KINDS, MethodSpec, RunContext, Skip, policy_path_missing, tag

if TYPE_CHECKING:
    from envs.env_config import EnvConfig

_QUERY_MODES_HELP = ("calibrate the query formulation on dev too — the (mode, threshold) pair with the best dev "
                     "reward is evaluated on test; 'all' = every env query mode")


def _check_modes(m: MethodSpec) -> None:
    if getattr(m, "query_modes", None) and m.query_mode:
        raise ConfigError(f"MethodSpec '{m.name}': give query_mode (fixed) or query_modes (calibrated), not both")
    if m.query_mode and m.uses_querygen():
        raise ConfigError(f"MethodSpec '{m.name}': query_mode fixes the mode, querygen lets the policy choose it — "
                          f"not both")


def _calibrated_modes(m: MethodSpec, runner: Any) -> list[str | None]:
    if m.query_mode:
        return [m.query_mode]
    if not m.query_modes:  # type: ignore[attr-defined]
        return [None]
    return list(runner.env_config.query_modes) if "all" in m.query_modes else list(m.query_modes)  # type: ignore


# ---------------------------------------------------------------- baselines
@METHOD_KINDS.register("never")
@dataclass
class NeverMethod(MethodSpec):
    """CoT: never retrieve."""

    kind: str = helpf("never", KIND_HELP)


@METHOD_KINDS.register("always")
@dataclass
class AlwaysMethod(MethodSpec):
    """Retrieve at every step, with the env's query mode, passages and caps — IRCoT's timing only (the benchmark
    configs' ``IRCoT[step query, 1 passage, ≤4]`` row); IRCoT as published is kind ``ircot``."""

    kind: str = helpf("always", KIND_HELP)


def with_mode(env: EnvOverrides, base: EnvConfig, mode: str, **keys: Any) -> EnvOverrides:
    """A method's env overrides ``env`` with query ``mode`` added to the query modes (when missing) and ``keys``
    set: the method's own env, its own trajectory-cache namespace."""
    qm = list(env.get("query_modes") or base.query_modes)
    return env.updated(**({"query_modes": qm + [mode]} if mode not in qm else {}), **keys)


@METHOD_KINDS.register("single")
@dataclass
class SingleMethod(MethodSpec):
    """Single RAG: one retrieval with the question as query before step 1, the top-``k`` passages injected (as
    published; ``query_mode``: another query). ``k: 1`` keeps the env's ``top_k`` and injects the first passage —
    the ``SingleRAG[1 passage]`` variant. Step 1 is drafted closed-book and regenerated with the evidence, so the
    chain reads evidence → step 1 → … as when retrieving before step 1; the discarded draft counts in tokens and
    seconds."""

    kind: str = helpf("single", KIND_HELP)
    k: int | None = helpf(None, "passages injected: the top-k of the one search (required; the IRCoT paper's "
                                "one-step retrieval picks k on dev from 5…15; k: 1 injects the top one and keeps the "
                                "env's top_k — the SingleRAG[1 passage] variant)", ge=1)
    injection: str | None = helpf(None, "where the passages go: front (before the question: the published prompts' "
                                        "layout) | step (after the question, right before step 1); null: the env's "
                                        "(what the SingleRAG[1 passage] variant keeps)")

    def validate(self) -> None:
        super().validate()
        if self.k is None:
            raise ConfigError(f"MethodSpec '{self.name}': kind 'single' needs 'k', the passages injected (Single RAG "
                              "as published injects the top-k of the question's search, e.g. k: 3; k: 1 is the "
                              "SingleRAG[1 passage] variant)")
        if self.injection not in (None, "front", "step"):
            raise ConfigError(f"MethodSpec '{self.name}': injection must be front, step or null, got "
                              f"'{self.injection}'")

    def run_env(self, base: EnvConfig) -> EnvOverrides:
        """The method's env: the question as a query mode; with ``k > 1`` the top-k searched and injected."""
        keys: dict[str, Any] = {"top_k": self.k, "passages_per_retrieval": self.k} if (self.k or 1) > 1 else {}
        if self.injection is not None:
            keys["injection"] = self.injection
        if self.query_mode:
            return self.env.updated(**keys) if keys else self.env
        return with_mode(self.env, base.with_overrides(self.env), "question", **keys)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        env = self.run_env(ctx.runner.env_config)
        if self.query_mode:
            return ctx.runner.run(self.make_trigger(), "test", ctx.test, tag=tag(self.name, self.query_mode,
                                  "greedy"), env=env, mode=self.query_mode)
        return ctx.runner.run(self.make_trigger(), "test", ctx.test, tag=f"{self.name}[question]", env=env,
                              mode="question")

    def report_extras(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"k": self.k, "injection": self.injection}

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        # as run: one retrieval with the question as query (or the given mode), the top-k injected
        return (env_config.with_overrides(self.run_env(env_config)), self.make_trigger(),
                self.query_mode or "question", False)


@METHOD_KINDS.register("oracle")
@dataclass
class OracleMethod(MethodSpec):
    """Retrieve exactly at the steps the gold labels mark (tasks with step labels)."""

    report_kind = "oracle"
    replayable = False
    kind: str = helpf("oracle", KIND_HELP)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        if not ctx.runner.components.has_labels:
            raise Skip("no ground-truth step labels for this task")
        return super().run(ctx)


@METHOD_KINDS.register("trigger")
@dataclass
class TriggerMethod(MethodSpec):
    """Any trigger registered in :data:`policies.triggers.TRIGGERS` (e.g. a plug-in's), built with ``options``."""

    report_kind = "fixed"
    kind: str = helpf("trigger", KIND_HELP)
    trigger: str | None = helpf(None, "a name registered in policies.triggers.TRIGGERS (e.g. your own, from a "
                                      "plug-in) or a dotted path 'package.module:Class', built with 'options'")
    options: dict = helpf({}, "keyword arguments of the trigger's constructor")
    querygen: bool = helpf(False, "the trigger chooses the query mode too (the env runs with QueryGen actions)")

    def validate(self) -> None:
        super().validate()
        from policies.triggers import TRIGGERS

        if not self.trigger:
            raise ConfigError(f"MethodSpec '{self.name}': kind 'trigger' needs 'trigger' (a registered name: "
                              f"{', '.join(TRIGGERS.names())}; or 'package.module:Class')")
        TRIGGERS.check(self.trigger, f"MethodSpec '{self.name}'.trigger", ConfigError)
        _check_modes(self)

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        from policies.triggers import TRIGGERS

        t = TRIGGERS.make(self.trigger, **self.options)
        t.name = self.name
        return t


# ---------------------------------------------------------------- calibrated triggers
@METHOD_KINDS.register("threshold")
@dataclass
class ThresholdMethod(MethodSpec):
    """A step signal against a threshold calibrated on dev (best reward; ties: fewer calls). The dev sweep starts
    with the never-fire point (``never``: the trigger never retrieves, the row is CoT's in the method's env), so
    where retrieval does not pay on dev the calibrated trigger is CoT, never a worse threshold."""

    report_kind = "fixed"
    kind: str = helpf("threshold", KIND_HELP)
    signal: str | None = helpf(None, "the step signal (info['signals'] name, e.g. minprob, rsus, or a plug-in's)")
    direction: str = helpf("below", "retrieve when the signal is 'below' or 'above' the threshold")
    thresholds: list[float] | None = helpf(None, "the dev sweep grid (null: quantiles of the signal under CoT "
                                                 "on dev); the never-fire point 'never' is always swept too")
    fixed_threshold: float | None = helpf(None, "use this value instead of calibrating (for baselines whose "
                                                "published operating point is part of the method, e.g. RSUS τ = "
                                                "0.65); it is still reported as fixed, and it has no never-fire "
                                                "point: the published operating point is run as it is")
    query_modes: list[str] = helpf([], _QUERY_MODES_HELP)
    curve: bool = helpf(True, "also sweep the grid on test for the plot's curve (when test_curves is on; the "
                              "never-fire point is its 0-calls end)")

    def validate(self) -> None:
        super().validate()
        if not self.signal:
            raise ConfigError(f"MethodSpec '{self.name}': a threshold method needs 'signal'")
        if self.direction not in ("below", "above"):
            raise ConfigError(f"MethodSpec '{self.name}': direction must be below or above")
        _check_modes(self)

    def named_query_modes(self) -> list[str]:
        return super().named_query_modes() + [q for q in self.query_modes if q != "all"]

    def modes(self, runner: Any) -> list[str | None]:
        return _calibrated_modes(self, runner)

    def preflight(self, known_signals: set[str], skip_missing_policies: bool) -> None:
        if self.signal not in known_signals:  # a typo; a known signal this env does not produce is a skip
            raise ConfigError(f"method '{self.name}': unknown signal '{self.signal}' (known: "
                              f"{', '.join(sorted(known_signals))})")

    def make_trigger(self, threshold: float | str | None = None, p: float | None = None, seed: int = 0):
        """The signal trigger at ``threshold`` (``'never'``, :data:`calibration.NEVER`: one that never fires)."""
        from policies.triggers import TRIGGERS

        t = TRIGGERS.make("threshold", self.signal, calibration.signal_threshold(threshold, self.direction),
                          self.direction, name=self.name)
        t.name = self.name
        return t

    def run(self, ctx: RunContext) -> dict[str, Any]:
        runner = ctx.runner
        scalars = runner.scalars_of(self.env)
        if self.signal not in scalars:
            raise Skip(f"signal '{self.signal}' is not produced by this env (available: {', '.join(sorted(scalars))})")
        modes = self.modes(runner)
        cot_dev = ctx.cot_dev
        if self.env and not self.thresholds:  # the grid comes from the signal's values in the method's own env
            from policies.triggers import NeverTrigger

            cot_dev = runner.run(NeverTrigger(), "dev", ctx.dev, tag=f"CoT[{runner.env_tag(self.env)}]", env=self.env)
        grid = self.thresholds or calibration.auto_grid(cot_dev["episodes"], self.signal, self.direction)
        if self.fixed_threshold is None and not grid:
            raise Skip(f"signal '{self.signal}' has no finite values on dev")
        # the sweep: never retrieving first (it wins exact ties), then the grid; a fixed threshold is run as given
        points = [self.fixed_threshold] if self.fixed_threshold is not None else [calibration.NEVER, *grid]
        best, sweep = calibration.calibrate(self, runner, ctx.dev, points, modes)
        chosen, mode = best["threshold"], best["mode"]
        ctx.calib[self.name] = {"grid": grid if self.fixed_threshold is not None else points, "sweep": sweep,
                                "chosen": chosen, "mode": mode, "dev_reward": best["reward"], "dev_calls": best["calls"]}
        never = calibration.is_never(chosen)
        calibration.log.info("%s: %s%s (%s)", self.name, "never retrieve (the never-fire point)" if never else
                             f"threshold {calibration.threshold_label(chosen)}", f", query mode {mode}" if mode else "",
                             "fixed by the config" if self.fixed_threshold is not None else "calibrated on dev")
        res = runner.run(self.make_trigger(threshold=chosen), "test", ctx.test,
                         tag=tag(self.name, mode, calibration.threshold_label(chosen)), env=self.env, mode=mode)
        res["threshold"] = chosen
        res["query_mode"] = None if never else mode or (self.env.get("query_modes") or [None])[0]
        if runner.cfg.test_curves and self.curve and grid:
            res["curve"] = self._test_curve(ctx, points if self.fixed_threshold is None else [*grid, chosen], mode)
        return res

    def _test_curve(self, ctx: RunContext, points: list[float | str], mode: str | None) -> list[dict[str, Any]]:
        """The accuracy-vs-calls curve on test: every sweep point at the chosen query mode (the never-fire point
        with none: it retrieves nothing), by calls."""
        thresholds = [calibration.NEVER] * any(calibration.is_never(t) for t in points) + sorted(
            {float(t) for t in points if not calibration.is_never(t)})
        curve = []
        for t in thresholds:
            m = None if calibration.is_never(t) else mode
            r = ctx.runner.run(self.make_trigger(threshold=t), "test", ctx.test,
                               tag=tag(self.name, m, calibration.threshold_label(t)), env=self.env, mode=m)
            curve.append({"threshold": t, "accuracy": r["accuracy"], "calls": r["calls_per_question"]})
        return sorted(curve, key=lambda c: c["calls"])

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        return env_config, self.make_trigger(threshold=calib["chosen"]), calib.get("mode"), False


@METHOD_KINDS.register("random")
@dataclass
class RandomMethod(MethodSpec):
    """Retrieve with probability ``p`` — or at the per-decision rate of the method it ``match``es — over seeds."""

    report_kind = "random"
    runs_last = True
    replayable = False
    kind: str = helpf("random", KIND_HELP)
    match: str | None = helpf(None, "the method whose per-decision retrieval rate on test it matches")
    p: float | None = helpf(None, "the retrieval probability (instead of match)")
    seeds: int = helpf(3, "seeds (per-question quality is averaged over them)")

    def validate(self) -> None:
        super().validate()
        if (self.match is None) == (self.p is None):
            raise ConfigError(f"MethodSpec '{self.name}': a random method needs exactly one of 'match' or 'p'")

    def check_with(self, names: list[str], query_modes: list[str]) -> None:
        super().check_with(names, query_modes)
        if self.match is not None and self.match not in names:
            raise ConfigError(f"BenchConfig: method '{self.name}' matches unknown method '{self.match}'")

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        from policies.triggers import TRIGGERS

        t = TRIGGERS.make("random", float(p), seed=seed, name=self.name)
        t.name = self.name
        return t

    def run(self, ctx: RunContext) -> dict[str, Any]:
        results = ctx.results
        p = self.p if self.p is not None else (calibration.retrieval_rate(results[self.match]["episodes"])
                                               if self.match in results else None)
        if p is None:
            raise Skip(f"the matched method '{self.match}' did not run")
        mode = self.modes(ctx.runner)[0]
        runs = [ctx.runner.run(self.make_trigger(p=p, seed=s), "test", ctx.test, tag=tag(self.name, mode,
                f"p{p:.4f}_s{s}"), env=self.env, mode=mode) for s in range(self.seeds)]
        return calibration.average_seeds(runs, p)

    def report_extras(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"p": result["p"], "seed_accuracy": result["seed_accuracy"]}


@METHOD_KINDS.register("cache_oracle")
@dataclass
class CacheOracleMethod(MethodSpec):
    """Per question the best action sequence at the bench λ, found by enumerating the decision tree: an upper bound
    for any timing policy (``query_modes``: each retrieval may use any of them — the ceiling of that action
    space)."""

    report_kind = "oracle"
    ceiling = True
    replayable = False
    kind: str = helpf("cache_oracle", KIND_HELP)
    query_modes: list[str] = helpf([], "search the query mode of each retrieval too, over these ('all' = every env "
                                       "query mode)")

    def validate(self) -> None:
        super().validate()
        _check_modes(self)
        if self.env:  # a silently ignored override printed the default oracle's numbers before
            raise ConfigError(f"method '{self.name}': kind cache_oracle searches the bench env's own decision tree; "
                              "it takes no 'env' override")

    def named_query_modes(self) -> list[str]:
        return super().named_query_modes() + [q for q in self.query_modes if q != "all"]

    def modes(self, runner: Any) -> list[str | None]:
        return _calibrated_modes(self, runner)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        modes = self.modes(ctx.runner)
        res = calibration.cache_oracle(ctx.runner, ctx.test, ctx.lam, modes=None if modes == [None] else modes)
        res["query_mode"] = "+".join(modes) if modes != [None] else None
        return res


# ---------------------------------------------------------------- learned policies
@METHOD_KINDS.register("learned")
@dataclass
class LearnedMethod(MethodSpec):
    """An exported RL policy (``policies.rl.export``)."""

    report_kind = "learned"
    kind: str = helpf("learned", KIND_HELP)
    path: str | None = helpf(None, "exported policy directory (policies.rl.export)")
    lam: float | None = helpf(None, "the λ_retrieval it was trained at (label only)")
    group: str | None = helpf(None, "methods sharing a group are seeds of one training configuration — pooled "
                                    "against the best fixed trigger; each group is one point of the learned λ curve "
                                    "(methods without a group are reported on their own)")
    select_on_dev: bool = helpf(False, "pick, by dev reward, among path and the run's snapshots "
                                       "(<run>/snapshots/iter_*; train with snapshot_every) — model selection on "
                                       "dev, as thresholds are calibrated on dev")
    querygen: bool = helpf(False, "also choose the query mode with the policy's QueryGen head (the env runs with "
                                  "querygen on; path must hold an export with the query head)")
    calibrate: bool = helpf(False, "calibrate the retrieve-probability threshold on dev (grid 'thresholds', "
                                   "default 0.05…0.95) instead of the greedy 0.5")
    thresholds: list[float] | None = helpf(None, "the retrieve-probability grid of 'calibrate'")
    fixed_threshold: float | None = helpf(None, "retrieve when π(retrieve) > this value instead of the greedy 0.5 "
                                                "(ReaLM-Retrieve's rule a = 1[π(s) > τ], τ = 0.65); with "
                                                "select_on_dev the snapshots are chosen at it too")

    def validate(self) -> None:
        super().validate()
        if not self.path:
            raise ConfigError(f"MethodSpec '{self.name}': a learned method needs 'path' (an exported policy)")
        if self.fixed_threshold is not None:
            if not 0.0 <= self.fixed_threshold < 1.0:
                raise ConfigError(f"MethodSpec '{self.name}': fixed_threshold is a probability threshold in [0, 1), "
                                  f"got {self.fixed_threshold}")
            if self.calibrate:
                raise ConfigError(f"MethodSpec '{self.name}': fixed_threshold and calibrate both set the "
                                  "retrieve-probability threshold; keep one")
        _check_modes(self)

    def preflight(self, known_signals: set[str], skip_missing_policies: bool) -> None:
        if not skip_missing_policies and policy_path_missing(self.path):
            raise FileNotFoundError(f"method '{self.name}': no exported policy at {self.path} (train one with "
                                    "`kairos train --config configs/experiments/microworld/train_microworld.yaml`; it writes "
                                    "<out_dir>/policy_trigger), or set skip_missing_policies: true")

    def check_loaded(self, runner: Any) -> None:
        """Every export this method may run (``path``, and with ``select_on_dev`` the run's snapshots) fits the env
        it runs in — observation fields and sizes, query modes (:func:`policies.rl.compat.check_policy_env`) —
        before the benchmark's first method runs."""
        from envs.retrieval_env import observation_dims
        from policies.rl.compat import check_policy_env

        if runner.cfg.skip_missing_policies and policy_path_missing(self.path):
            return
        env_config, components = runner._with_overrides(self.env)
        dims = observation_dims(env_config, components.feature_dims)  # the env's observation space, as built
        paths = calibration.snapshot_candidates(self.path) if self.select_on_dev else [Path(self.path)]
        for path in paths:
            t = dataclasses.replace(self, path=str(path), select_on_dev=False).make_trigger()
            check_policy_env(t, dims, env_config, querygen=self.querygen,
                             where=f"bench method '{self.name}' (env.signals {list(env_config.signals)})")

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        from policies.rl.export import LearnedTrigger

        path = Path(self.path)
        if policy_path_missing(path):
            raise FileNotFoundError(f"method '{self.name}': no exported policy at {path} (train one with "
                                    "`kairos train --config configs/experiments/microworld/train_microworld.yaml`; it writes "
                                    "<out_dir>/policy_trigger)")
        if threshold is None:
            threshold = 0.5 if self.fixed_threshold is None else self.fixed_threshold
        t = LearnedTrigger.load(path, name=self.name, querygen=self.querygen, threshold=float(threshold))
        if self.querygen and t.net.query_head is None:
            raise ValueError(f"method '{self.name}': querygen is on but {path} has no query head (export the "
                             "run's 'policy' directory of a QueryGen run, not 'policy_trigger')")
        t.name = self.name
        return t

    def run(self, ctx: RunContext) -> dict[str, Any]:
        runner = ctx.runner
        if runner.cfg.skip_missing_policies and policy_path_missing(self.path):
            raise Skip(f"no exported policy at {self.path} (not trained yet)")
        modes = self.modes(runner)
        if self.select_on_dev or not self.calibrate:
            res = (calibration.select_learned(self, runner, ctx.dev, ctx.test, ctx.calib, modes[0])
                   if self.select_on_dev else super().run(ctx))
            if self.fixed_threshold is not None:
                res["threshold"] = self.fixed_threshold
            return res
        grid = list(self.thresholds or calibration.PROB_GRID)
        best, sweep = calibration.calibrate(self, runner, ctx.dev, grid, modes)
        chosen, mode = best["threshold"], best["mode"]
        ctx.calib[self.name] = {"grid": grid, "sweep": sweep, "chosen": chosen, "dev_reward": best["reward"]}
        res = runner.run(self.make_trigger(threshold=chosen), "test", ctx.test, tag=tag(self.name, mode,
                         f"{chosen:.6g}"), env=self.env, mode=mode, querygen=self.querygen)
        res["threshold"] = chosen
        return res

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        m, threshold = self, None
        if self.select_on_dev:
            m = dataclasses.replace(self, path=calib["chosen"], select_on_dev=False)
        elif self.calibrate:
            threshold = calib["chosen"]
        return env_config, m.make_trigger(threshold=threshold), self.query_mode or None, self.querygen
