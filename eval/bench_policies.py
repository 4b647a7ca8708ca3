"""``kairos bench policies``: learned policies versus calibrated fixed triggers and published baselines (DESIGN §8).

The main flow (:func:`run_bench`), top to bottom:

1. build the env components once (one reasoner, one retriever, one corpus for every method);
2. run CoT (never retrieve) on the **dev** questions — its step signals give each threshold trigger an
   automatic threshold grid (quantiles), when the config does not list one;
3. **calibrate** every threshold trigger on dev: sweep its grid, keep the threshold with the best reward
   ``quality − Σ λ·cost`` (ties: fewer calls). Thresholds are never copied from papers;
4. run every method on the **test** questions (one JSONL row per question: decisions, signals, queries,
   passages, answer, costs, tokens, seconds; rerunning skips finished questions, so a crash resumes);
   threshold triggers also sweep their grid on test, which draws their accuracy-vs-calls curve;
   Random runs at the retrieval rate of the method it is matched to, over several seeds;
5. statistics (:mod:`eval.stats`): bootstrap CIs, paired bootstrap and exact McNemar (Holm-corrected) of
   every method against the reference, accuracy at matched retrieval budgets, frontier dominance, the
   Pareto frontier;
6. the report (:mod:`eval.bench_report`): ``summary.json``, ``report.md``, ``report.html`` with PNG plots.

A method whose signal the env does not produce (e.g. DRAGIN's RIND on a backend without attentions) is
*skipped with its reason in the report*, never silently replaced.

Example config (``configs/bench_microworld.yaml``)::

    env: {task: microworld, split: dev, rsus_components: [ent]}
    dev: "0:100"
    test: "100:400"
    lambda_retrieval: 0.1
    methods:
      - {name: CoT, kind: never}
      - {name: FLARE, kind: threshold, signal: minprob, direction: below}
      - {name: Random, kind: random, match: FLARE, seeds: 3}
      - {name: learned, kind: learned, path: runs/train/microworld/policy_trigger, lam: 0.1}
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.core.config import ConfigBase, ConfigError, helpf, read_yaml_mapping
from envs.env_config import EnvConfig, EnvOverrides

log = logging.getLogger(__name__)

KINDS = ("never", "always", "single", "threshold", "random", "oracle", "cache_oracle", "learned", "trigger")
#: the report's grouping of method kinds
REPORT_KIND = {"never": "baseline", "always": "baseline", "single": "baseline", "threshold": "fixed",
               "random": "random", "oracle": "oracle", "cache_oracle": "oracle", "learned": "learned", "trigger": "fixed"}
QUANTILES = (0.01, 0.02, 0.05, 0.08, 0.12, 0.16, 0.2, 0.3, 0.4, 0.5, 0.7)


@dataclass
class MethodSpec(ConfigBase):
    """One method of the benchmark."""

    name: str = helpf("", "display name (unique)")
    kind: str = helpf("threshold", "never | always | single (Single RAG: one retrieval with the question as query "
                                   "— query_mode to use another — before step 1) | threshold | random | oracle | "
                                   "cache_oracle | "
                                   "learned | trigger (cache_oracle: per question the best action sequence at the "
                                   "bench λ, found by enumerating the decision tree; an upper bound for any timing "
                                   "policy; trigger: any registered trigger, see 'trigger')")
    trigger: str | None = helpf(None, "trigger: a name registered in policies.triggers.TRIGGERS (e.g. your own) or "
                                      "a dotted path 'package.module:Class', built with 'options'")
    options: dict = helpf({}, "trigger: keyword arguments of the trigger's constructor")
    signal: str | None = helpf(None, "threshold: the step signal (info['signals'] name, e.g. minprob, rsus)")
    direction: str = helpf("below", "threshold: retrieve when the signal is 'below' or 'above' the threshold")
    thresholds: list[float] | None = helpf(None, "threshold: the dev sweep grid (null: quantiles of the "
                                                 "signal under CoT on dev)")
    fixed_threshold: float | None = helpf(None, "threshold: use this value instead of calibrating (for "
                                                "baselines whose published operating point is part of the "
                                                "method, e.g. RSUS τ = 0.65); it is still reported as fixed")
    match: str | None = helpf(None, "random: the method whose per-decision retrieval rate on test it matches")
    p: float | None = helpf(None, "random: the retrieval probability (instead of match)")
    seeds: int = helpf(3, "random: seeds (per-question quality is averaged over them)")
    path: str | None = helpf(None, "learned: exported policy directory (policies.rl.export)")
    lam: float | None = helpf(None, "learned: the λ_retrieval it was trained at (label only)")
    group: str | None = helpf(None, "learned: methods sharing a group are seeds of one training configuration — "
                                    "pooled against the best fixed trigger; each group is one point of the "
                                    "learned λ curve (methods without a group are reported on their own)")
    select_on_dev: bool = helpf(False, "learned: pick, by dev reward, among path and the run's snapshots "
                                       "(<run>/snapshots/iter_*; train with snapshot_every) — model selection on "
                                       "dev, as thresholds are calibrated on dev")
    env: EnvOverrides = field(default_factory=EnvOverrides, metadata={"help": (
        "env config overrides for this method only (EnvConfig keys, e.g. {injection: front} for PUlSE-front; a "
        "key replaces the bench env's value); it gets its own components and trajectory-cache namespace")})
    querygen: bool = helpf(False, "learned: also choose the query mode with the policy's QueryGen head (the env "
                                  "runs with querygen on; path must hold an export with the query head)")
    query_mode: str | None = helpf(None, "retrieve with this query formulation (one of env.query_modes; null: "
                                         "the env's default, its first) — e.g. a learned policy trained with it")
    query_modes: list[str] = helpf([], "threshold: calibrate the query formulation on dev too — the (mode, "
                                       "threshold) pair with the best dev reward is evaluated on test; 'all' = "
                                       "every env query mode")
    curve: bool = helpf(True, "threshold: also sweep the grid on test for the plot's curve (when test_curves is on)")
    calibrate: bool = helpf(False, "learned: calibrate the retrieve-probability threshold on dev (grid "
                                   "'thresholds', default 0.05…0.95) instead of the greedy 0.5")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> MethodSpec:
        """As :meth:`ConfigBase.from_dict`; errors in a method name it (``BenchConfig.methods['X'].env…``)."""
        name = data.get("name") if isinstance(data, dict) else None
        return super().from_dict(data, f"{where}['{name}']" if where and name else where)

    def validate(self) -> None:
        if not self.name:
            raise ConfigError("MethodSpec: every method needs a name")
        if self.kind not in KINDS:
            raise ConfigError(f"MethodSpec '{self.name}': kind must be one of {KINDS}, got '{self.kind}'")
        if self.kind == "trigger":
            from policies.triggers import TRIGGERS

            if not self.trigger:
                raise ConfigError(f"MethodSpec '{self.name}': kind 'trigger' needs 'trigger' (a registered name: "
                                  f"{', '.join(TRIGGERS.names())}; or 'package.module:Class')")
            TRIGGERS.check(self.trigger, f"MethodSpec '{self.name}'.trigger", ConfigError)
        elif self.trigger or self.options:
            raise ConfigError(f"MethodSpec '{self.name}': 'trigger' and 'options' are for kind 'trigger'")
        if self.kind == "threshold" and not self.signal:
            raise ConfigError(f"MethodSpec '{self.name}': a threshold method needs 'signal'")
        if self.direction not in ("below", "above"):
            raise ConfigError(f"MethodSpec '{self.name}': direction must be below or above")
        if self.kind == "random" and (self.match is None) == (self.p is None):
            raise ConfigError(f"MethodSpec '{self.name}': a random method needs exactly one of 'match' or 'p'")
        if self.kind == "learned" and not self.path:
            raise ConfigError(f"MethodSpec '{self.name}': a learned method needs 'path' (an exported policy)")
        if self.query_modes and self.kind not in ("threshold", "cache_oracle"):
            raise ConfigError(f"MethodSpec '{self.name}': query_modes (calibrating the query mode) is for threshold "
                              f"methods (and the cache oracle's search); use query_mode to fix one")
        if self.query_modes and self.query_mode:
            raise ConfigError(f"MethodSpec '{self.name}': give query_mode (fixed) or query_modes (calibrated), not both")
        if self.query_mode and self.querygen:
            raise ConfigError(f"MethodSpec '{self.name}': query_mode fixes the mode, querygen lets the policy choose "
                              f"it — not both")
        if self.calibrate and self.kind != "learned":
            raise ConfigError(f"MethodSpec '{self.name}': calibrate is for learned methods (threshold methods are "
                              f"always calibrated)")


@dataclass
class BenchConfig(ConfigBase):
    """A policy benchmark (``kairos bench policies --config …``)."""

    name: str = helpf("microworld", "benchmark name (report title)")
    out_dir: str = helpf("runs/bench/microworld", "output directory (per-question JSONL, summary, reports)")
    env: EnvConfig = field(
        default_factory=lambda: EnvConfig.from_dict({"task": "microworld", "split": "dev", "rsus_components": ["ent"]}),
        metadata={"help": "env config (EnvConfig fields; default: {task: microworld, split: dev, rsus_components: "
                          "[ent]}); its split holds both the dev and the test questions"})
    dev: str = helpf("0:100", "calibration questions: a 'start:stop' slice of the split")
    test: str = helpf("100:400", "evaluation questions: a 'start:stop' slice, disjoint from dev")
    lambda_retrieval: float = helpf(0.1, "λ of retrieval calls in the reward used to calibrate and report")
    reference: str = helpf("CoT", "the method every other is compared with (paired tests)")
    methods: list[MethodSpec] = field(default_factory=list, metadata={"help": "the methods to run"})
    test_curves: bool = helpf(True, "sweep each threshold trigger's grid on test too (the plot's curves)")
    group_by: list[str] = helpf([], "question attributes to break results down by (e.g. hops)")
    batch_size: int = helpf(16, "questions in flight per batched generation call")
    n_resamples: int = helpf(10_000, "bootstrap resamples (fixed seed)")
    seed: int = helpf(0, "seed of the statistics (and base seed of Random)")
    skip_missing_policies: bool = helpf(False, "a learned method whose exported policy is missing is skipped (and "
                                               "listed with the reason) instead of stopping the benchmark")

    def validate(self) -> None:
        names = [m.name for m in self.methods]
        if not names:
            raise ConfigError("BenchConfig: 'methods' is empty")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"BenchConfig: duplicate method name(s) {sorted(dup)}")
        if self.reference not in names:
            raise ConfigError(f"BenchConfig: reference '{self.reference}' is not one of the methods {names}")
        for m in self.methods:
            if m.kind == "random" and m.match is not None and m.match not in names:
                raise ConfigError(f"BenchConfig: method '{m.name}' matches unknown method '{m.match}'")
        # the env and each method's overrides are typed (a typo or bad value failed on load, naming the key); an
        # override must also make a valid env with the bench's
        for m in self.methods:
            self.env.with_overrides(m.env, where=f"BenchConfig.methods['{m.name}'].env")
        modes = list(self.env.query_modes)
        for m in self.methods:
            for q in ([m.query_mode] if m.query_mode else []) + [q for q in m.query_modes if q != "all"]:
                if q not in modes:
                    raise ConfigError(f"BenchConfig: method '{m.name}' names query mode '{q}', which is not one of "
                                      f"env.query_modes {modes}")
        d, t = parse_slice(self.dev, "dev"), parse_slice(self.test, "test")
        if set(d) & set(t):
            raise ConfigError(f"BenchConfig: dev {self.dev} and test {self.test} overlap")


def parse_slice(text: str, key: str) -> range:
    """``"100:400"`` → ``range(100, 400)``; ``"0:250:25"`` → every 25th (spread over a split whose order
    means something, e.g. HotpotQA's by question type); a clear error naming the key otherwise."""
    try:
        parts = [int(x) for x in str(text).split(":")]
        if len(parts) not in (2, 3):
            raise ValueError
    except ValueError:
        raise ConfigError(f"BenchConfig: key '{key}' must look like 'start:stop' or 'start:stop:step', "
                          f"got {text!r}") from None
    a, b, step = (*parts, 1) if len(parts) == 2 else parts
    if not 0 <= a < b or step < 1:
        raise ConfigError(f"BenchConfig: key '{key}' needs 0 <= start < stop and step >= 1, got {text!r}")
    return range(a, b, step)


# ---------------------------------------------------------------- triggers
def make_trigger(m: MethodSpec, threshold: float | None = None, p: float | None = None, seed: int = 0):
    """The :class:`policies.triggers.Trigger` of a method (threshold / rate filled in by the caller)."""
    from policies.triggers import TRIGGERS

    if m.kind in ("never", "always", "single", "oracle"):
        t = TRIGGERS.make(m.kind)
    elif m.kind == "threshold":
        t = TRIGGERS.make("threshold", m.signal, float(threshold), m.direction, name=m.name)
    elif m.kind == "random":
        t = TRIGGERS.make("random", float(p), seed=seed, name=m.name)
    elif m.kind == "trigger":
        t = TRIGGERS.make(m.trigger, **m.options)
    else:
        from policies.rl.export import LearnedTrigger

        path = Path(m.path)
        if not (path / "spec.json").is_file():
            raise FileNotFoundError(f"method '{m.name}': no exported policy at {path} (train one with "
                                    "`kairos train --config configs/train_microworld.yaml`; it writes "
                                    "<out_dir>/policy_trigger)")
        t = LearnedTrigger.load(path, name=m.name, querygen=m.querygen,
                                threshold=0.5 if threshold is None else float(threshold))
        if m.querygen and t.net.query_head is None:
            raise ValueError(f"method '{m.name}': querygen is on but {path} has no query head (export the "
                             "run's 'policy' directory of a QueryGen run, not 'policy_trigger')")
    t.name = m.name
    return t


def auto_grid(rows: list[dict], signal: str, direction: str) -> list[float]:
    """Thresholds at quantiles of ``signal`` over every step of ``rows`` (CoT episodes on dev)."""
    vals = np.array([d["signals"][signal] for r in rows for d in r["decisions"] if signal in d.get("signals", {})],
                    dtype=float)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return []
    qs = QUANTILES if direction == "below" else tuple(1.0 - q for q in QUANTILES)
    grid = sorted({float(np.quantile(vals, q)) for q in qs})
    # "below t" with t = min never fires: nudge so every grid point retrieves somewhere
    eps = 1e-9 * max(1.0, float(np.abs(vals).max()))
    return [g + eps if direction == "below" else g - eps for g in grid]


def retrieval_rate(rows: list[dict]) -> float:
    """Retrievals per decision (what a matched Random trigger needs)."""
    decisions = sum(len(r["decisions"]) for r in rows)
    return sum(r["calls"] for r in rows) / decisions if decisions else 0.0


# ---------------------------------------------------------------- the run
def bench_env_config(cfg: BenchConfig, method: MethodSpec | None = None) -> EnvConfig:
    """The env a benchmark runs: its ``env`` with the λ of retrieval calls set to ``lambda_retrieval`` — and, for a
    ``method``, that method's ``env`` overrides applied."""
    env = cfg.env.replace(costs={**cfg.env.costs, "retrieval_calls": cfg.lambda_retrieval})
    return env.with_overrides(method.env) if method is not None else env


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
        fp = {"namespace": self.components.namespace, "split": ec.split, "lambda_retrieval": self.cfg.lambda_retrieval,
              # what an episode reaches and how it ends, beside what its records hold (the namespace)
              "episode": {"max_retrievals_per_question": ec.max_retrievals_per_question,
                          "max_retrievals_per_step": ec.max_retrievals_per_step,
                          "answer_closing": bool(ec.answer_closing and self.components.can_close)}}
        path = self.out / "per_question" / "fingerprint.json"
        if path.is_file():
            old = json.loads(path.read_text())
            if old != fp:
                diff = sorted(k for k in fp if old.get(k) != fp[k])
                raise ConfigError(f"{self.out}: holds per-question results of a different setup ({', '.join(diff)} "
                                  "changed); use another out_dir or delete this one to start over")
        else:
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
        res = evaluate_policy(trigger, env_config, list(questions), batch_size=self.cfg.batch_size,
                              components=components, return_episodes=True, jsonl_path=jsonl,
                              progress=f"{split} {tag or trigger.name}")
        res["per_question"] = str(jsonl)  # (the summary names each method's file: its decisions, answers)
        return res


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


def evaluated_policy(out_dir: str | Path, method: str, config: str | Path | None = None):
    """What the benchmark at ``out_dir`` evaluated on test for ``method``: ``(env config, trigger, batch size)`` —
    the snapshot ``select_on_dev`` chose, the threshold and query mode calibrated on dev, as ``summary.json``
    records them, in the env the method ran in (the bench env with its overrides and λ). Running the trigger
    in that env config (``kairos.Pipeline.from_bench``) repeats the benchmark's decisions.

    Args:
        out_dir: the benchmark's output directory (``summary.json``, and ``config.json``, which ``run_bench``
            writes).
        method: a method name of the benchmark.
        config: the benchmark's YAML, for an output directory written before ``config.json`` was.

    Raises:
        FileNotFoundError: no finished benchmark at ``out_dir``, or no config (naming what to pass).
        ValueError: an unknown or skipped method, or one an application cannot run (Random, the oracles).
    """
    import dataclasses

    out = Path(out_dir)
    if not (out / "summary.json").is_file():
        raise FileNotFoundError(f"no finished benchmark at {out} (summary.json missing); run `kairos bench policies "
                                f"--config …` (or `kairos quickstart`, whose benchmark is runs/quickstart/bench)")
    if config is not None:
        cfg = BenchConfig.from_dict(read_yaml_mapping(config), where=str(config))
    elif (out / "config.json").is_file():
        cfg = BenchConfig.from_dict(json.loads((out / "config.json").read_text()), where=str(out / "config.json"))
    else:
        raise FileNotFoundError(f"{out}: the benchmark records no config.json (written before it was recorded); pass "
                                "the benchmark's YAML (config=…, `--bench-config`), e.g. configs/bench_microworld.yaml")
    summary = json.loads((out / "summary.json").read_text())
    specs = {m.name: m for m in cfg.methods}
    if method not in specs:
        raise ValueError(f"benchmark {out}: no method '{method}' (methods: {', '.join(specs)})")
    if method in summary.get("skipped", {}):
        raise ValueError(f"benchmark {out}: method '{method}' was skipped ({summary['skipped'][method]})")
    if method not in summary.get("methods", {}):
        raise ValueError(f"benchmark {out}: method '{method}' has no results in summary.json")
    m = specs[method]
    if m.kind in ("random", "oracle", "cache_oracle"):
        raise ValueError(f"method '{method}' (kind {m.kind}) is not a policy an application can run: Random is "
                         "matched to another method's rate over seeds, the oracles read gold labels; pick a trigger "
                         "or a learned method")
    env_config = bench_env_config(cfg, m)  # as the Runner builds it
    calib = summary.get("calibration", {}).get(method, {})
    mode, threshold = (m.query_mode or None), None
    if m.kind == "threshold":
        threshold, mode = calib["chosen"], calib.get("mode")
    elif m.kind == "learned" and m.select_on_dev:
        m = dataclasses.replace(m, path=calib["chosen"], select_on_dev=False)
    elif m.kind == "learned" and m.calibrate:
        threshold = calib["chosen"]
    elif m.kind == "single" and not m.query_mode:  # as _run_method: one retrieval with the question as query
        if "question" not in env_config.query_modes:
            env_config = env_config.replace(query_modes=list(env_config.query_modes) + ["question"])
        mode = "question"
    trigger = make_trigger(m, threshold=threshold)
    env_config, trigger = evaluated_setup(env_config, trigger, mode, m.querygen and m.kind != "threshold")
    return env_config, trigger, cfg.batch_size


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


def runner_probe_names(cfg: BenchConfig) -> list[str]:
    """Signal names the bench env's probes add (``env.probes`` keys, and those of method overrides)."""
    names = list(cfg.env.probes)
    for m in cfg.methods:
        names += list(m.env.get("probes") or {})
    return names


def run_bench(cfg: BenchConfig, components=None) -> dict[str, Any]:
    """Calibrate on dev, evaluate on test, compute statistics and write the report. Returns the summary."""
    from envs.core.io import write_json
    from eval.bench_report import write_report

    dev, test = parse_slice(cfg.dev, "dev"), parse_slice(cfg.test, "test")
    runner = Runner(cfg, components)
    write_json(Path(cfg.out_dir) / "config.json", cfg.to_dict())  # what ran (evaluated_policy reads it back)
    lam = cfg.lambda_retrieval
    n_split = len(runner.components.questions)
    if max(test) >= n_split or max(dev) >= n_split:
        raise ConfigError(f"BenchConfig: dev {cfg.dev} / test {cfg.test} exceed the {n_split} questions of "
                          f"split '{runner.env_config.split}'")
    from envs.components import scalar_signals

    known = set(scalar_signals()) | set(runner_probe_names(cfg))
    for m in cfg.methods:  # a typo is an error; a known signal this env does not produce is a reported skip
        if m.kind == "threshold" and m.signal not in known:
            raise ConfigError(f"method '{m.name}': unknown signal '{m.signal}' (known: {', '.join(sorted(known))})")
    for m in cfg.methods:  # a missing policy is an error now, not after every other method ran
        if m.kind == "learned" and not cfg.skip_missing_policies and not (Path(m.path) / "spec.json").is_file():
            raise FileNotFoundError(f"method '{m.name}': no exported policy at {m.path} (train one with `kairos train "
                                    "--config configs/train_microworld.yaml`; it writes <out_dir>/policy_trigger), "
                                    "or set skip_missing_policies: true")
    log.info("bench %s: dev %s, test %s, λ = %g, %d methods", cfg.name, cfg.dev, cfg.test, lam, len(cfg.methods))
    from policies.triggers import NeverTrigger

    cot_dev = runner.run(NeverTrigger(), "dev", dev, tag="CoT")
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    calib: dict[str, dict[str, Any]] = {}
    order = sorted(cfg.methods, key=lambda m: m.kind == "random")  # random ones match others: run last
    for m in order:
        try:
            scalars = runner.scalars_of(m.env)
            if m.kind == "threshold" and m.signal not in scalars:
                raise _Skip(f"signal '{m.signal}' is not produced by this env (available: "
                            f"{', '.join(sorted(scalars))})")
            if m.kind == "oracle" and not runner.components.has_labels:
                raise _Skip("no ground-truth step labels for this task")
            if m.kind == "learned" and cfg.skip_missing_policies and not (Path(m.path) / "spec.json").is_file():
                raise _Skip(f"no exported policy at {m.path} (not trained yet)")
            results[m.name] = _run_method(m, runner, cot_dev, dev, test, results, calib, lam)
        except _Skip as e:
            skipped[m.name] = str(e)
            log.warning("skipping %s: %s", m.name, e)
    summary = summarize(cfg, runner, results, calib, skipped)
    paths = write_report(summary, cfg.out_dir)
    log.info("report: %s", paths["html"])
    return summary


class _Skip(Exception):
    """A method that cannot run here (its reason goes into the report)."""


def _modes(m: MethodSpec, runner: Runner) -> list[str | None]:
    """The query modes a method is calibrated over (``[None]``: the env's default mode)."""
    if m.query_mode:
        return [m.query_mode]
    if not m.query_modes:
        return [None]
    return list(runner.env_config.query_modes) if "all" in m.query_modes else list(m.query_modes)


def _tag(name: str, mode: str | None, suffix: str) -> str:
    return f"{name}[{mode}]@{suffix}" if mode else f"{name}@{suffix}"


#: learned policies' retrieve-probability grid when ``calibrate`` is on and no ``thresholds`` are given
PROB_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _calibrate(m: MethodSpec, runner: Runner, dev: range, grid: list[float], modes: list[str | None]
               ) -> tuple[dict, list[dict]]:
    """Sweep (mode, threshold) on dev: ``(best point, sweep)``, best by reward (ties: fewer calls)."""
    sweep = []
    for mode in modes:
        for t in grid:
            r = runner.run(make_trigger(m, threshold=t), "dev", dev, tag=_tag(m.name, mode, f"{t:.6g}"), env=m.env,
                           mode=mode, querygen=m.querygen)
            sweep.append({"threshold": t, "mode": mode, "accuracy": r["accuracy"], "calls": r["calls_per_question"],
                          "reward": r["reward"]})
    return max(sweep, key=lambda s: (s["reward"], -s["calls"])), sweep


def _run_method(m: MethodSpec, runner: Runner, cot_dev, dev, test, results, calib, lam) -> dict[str, Any]:
    modes = _modes(m, runner)
    if m.kind == "threshold":
        if m.env and not m.thresholds:  # the grid comes from the signal's values in the method's own env
            from policies.triggers import NeverTrigger

            cot_dev = runner.run(NeverTrigger(), "dev", dev, tag=f"CoT[{runner.env_tag(m.env)}]", env=m.env)
        grid = m.thresholds or auto_grid(cot_dev["episodes"], m.signal, m.direction)
        if m.fixed_threshold is None and not grid:
            raise _Skip(f"signal '{m.signal}' has no finite values on dev")
        best, sweep = _calibrate(m, runner, dev, [m.fixed_threshold] if m.fixed_threshold is not None else grid,
                                 modes)
        chosen, mode = best["threshold"], best["mode"]
        calib[m.name] = {"grid": grid, "sweep": sweep, "chosen": chosen, "mode": mode, "dev_reward": best["reward"]}
        log.info("%s: threshold %.6g%s (%s)", m.name, chosen, f", query mode {mode}" if mode else "",
                 "fixed by the config" if m.fixed_threshold is not None else "calibrated on dev")
        res = runner.run(make_trigger(m, threshold=chosen), "test", test, tag=_tag(m.name, mode, f"{chosen:.6g}"),
                         env=m.env, mode=mode)
        res["threshold"], res["query_mode"] = chosen, mode or (m.env.get("query_modes") or [None])[0]
        if runner.cfg.test_curves and m.curve and grid:
            curve = []
            for t in sorted(set(grid) | {chosen}):
                r = runner.run(make_trigger(m, threshold=t), "test", test, tag=_tag(m.name, mode, f"{t:.6g}"),
                               env=m.env, mode=mode)
                curve.append({"threshold": t, "accuracy": r["accuracy"], "calls": r["calls_per_question"]})
            res["curve"] = sorted(curve, key=lambda c: c["calls"])
        return res
    if m.kind == "random":
        p = m.p if m.p is not None else retrieval_rate(results[m.match]["episodes"]) if m.match in results else None
        if p is None:
            raise _Skip(f"the matched method '{m.match}' did not run")
        mode = modes[0]
        runs = [runner.run(make_trigger(m, p=p, seed=s), "test", test, tag=_tag(m.name, mode, f"p{p:.4f}_s{s}"),
                           env=m.env, mode=mode) for s in range(m.seeds)]
        return _average_seeds(runs, p)
    if m.kind == "cache_oracle":
        if m.env:  # a silently ignored override printed the default oracle's numbers before
            raise ConfigError(f"method '{m.name}': kind cache_oracle searches the bench env's own decision tree; "
                              "it takes no 'env' override")
        res = _cache_oracle(runner, test, lam, modes=None if modes == [None] else modes)
        res["query_mode"] = "+".join(modes) if modes != [None] else None
        return res
    if m.kind == "learned" and m.select_on_dev:
        return _select_learned(m, runner, dev, test, calib, modes[0])
    if m.kind == "learned" and m.calibrate:
        best, sweep = _calibrate(m, runner, dev, list(m.thresholds or PROB_GRID), modes)
        chosen, mode = best["threshold"], best["mode"]
        calib[m.name] = {"grid": list(m.thresholds or PROB_GRID), "sweep": sweep, "chosen": chosen,
                         "dev_reward": best["reward"]}
        res = runner.run(make_trigger(m, threshold=chosen), "test", test, tag=_tag(m.name, mode, f"{chosen:.6g}"),
                         env=m.env, mode=mode, querygen=m.querygen)
        res["threshold"] = chosen
        return res
    if m.kind == "single" and not m.query_mode:  # Single RAG as published: ONE retrieval, the question as query
        env = m.env
        qm = list(env.get("query_modes") or runner.env_config.query_modes)
        if "question" not in qm:  # the question mode only for this method (its own trajectory-cache namespace)
            env = env.updated(query_modes=qm + ["question"])
        return runner.run(make_trigger(m), "test", test, tag=f"{m.name}[question]", env=env, mode="question")
    return runner.run(make_trigger(m), "test", test, tag=_tag(m.name, modes[0], "greedy") if modes[0] else m.name,
                      querygen=m.querygen, env=m.env, mode=modes[0])


def snapshot_candidates(path: str | Path) -> list[Path]:
    """The exported policy at ``path`` plus its run's snapshots (``<run>/snapshots/iter_*``), oldest first."""
    path = Path(path)
    snaps = sorted((path.parent / "snapshots").glob("iter_*")) if (path.parent / "snapshots").is_dir() else []
    return [p for p in snaps if (p / "spec.json").is_file()] + [path]


def _select_learned(m: MethodSpec, runner: Runner, dev: range, test: range, calib: dict, mode: str | None = None
                    ) -> dict[str, Any]:
    """Evaluate every candidate export on dev, keep the best by reward at the policy's own training λ
    (``m.lam``; else the bench's) — ties: fewer calls — and run it on test."""
    import dataclasses

    lam = m.lam if m.lam is not None else runner.cfg.lambda_retrieval
    sweep = []
    for c in snapshot_candidates(m.path):
        spec = dataclasses.replace(m, path=str(c), select_on_dev=False)
        r = runner.run(make_trigger(spec), "dev", dev, tag=_tag(m.name, mode, f"{c.parent.name}_{c.name}"), env=m.env,
                       mode=mode, querygen=m.querygen)
        sweep.append({"path": str(c), "accuracy": r["accuracy"], "calls": r["calls_per_question"],
                      "reward": r["accuracy"] - lam * r["calls_per_question"]})
    best = max(sweep, key=lambda s: (s["reward"], -s["calls"]))
    calib[m.name] = {"candidates": sweep, "chosen": best["path"], "dev_reward": best["reward"]}
    log.info("%s: selected %s on dev (reward %.3f of %d candidates)", m.name, best["path"], best["reward"],
             len(sweep))
    spec = dataclasses.replace(m, path=best["path"], select_on_dev=False)
    res = runner.run(make_trigger(spec), "test", test, tag=_tag(m.name, mode, Path(best["path"]).name), env=m.env,
                     mode=mode, querygen=m.querygen)
    res["selected"] = best["path"]
    return res


def _cache_oracle(runner: Runner, questions: range, lam: float, max_leaves: int = 4096,
                  modes: list[str] | None = None) -> dict[str, Any]:
    """Per question, the best leaf of the decision tree at λ (:mod:`eval.oracle`, searched breadth first over all
    questions with batched generation and branch and bound at λ; replays hit the trajectory cache). ``modes``: each retrieval may use any of
    these query modes (the tree branches per mode; QueryGen actions, same cache namespace); None: the env's
    default mode."""
    from tqdm.auto import tqdm

    from envs.vector import BatchedRetrievalEnv
    from eval.oracle import best_leaf, enumerate_leaves_batched
    from train.evaluate import summarize_rows

    cfg = runner.env_config.replace(max_questions=max(questions.stop, runner.env_config.max_questions or 0),
                                    querygen=modes is not None)
    idx = [list(cfg.query_modes).index(m) for m in modes] if modes is not None else None
    venv = BatchedRetrievalEnv(runner.cfg.batch_size, cfg, components=runner.components)
    try:
        with tqdm(desc="test cache oracle (decision-tree search)", unit="leaf", leave=False) as bar:
            trees = enumerate_leaves_batched(venv, list(questions), max_leaves=max_leaves, progress=bar, modes=idx,
                                             prune_lambda=lam)
        rows = []
        env = venv.envs[0]
        for q in questions:
            leaf = best_leaf(trees[q], {"retrieval_calls": lam})
            _, info = env.reset(options={"question_index": q})
            rows.append({"question_index": q, "question_id": info["question_id"], "quality": leaf.quality,
                         "calls": leaf.calls, "reward": leaf.quality - lam * leaf.calls,
                         "steps": len(leaf.actions), "tokens": float("nan"), "seconds": float("nan"), "answer": None,
                         "truncated": False, "decisions": [{"action": list(a) if isinstance(a, tuple) else [a, 0]}
                                                           for a in leaf.actions],
                         "leaves": len(trees[q])})
    finally:
        venv.close()
    return {"policy": "cache oracle", "n": len(rows), **summarize_rows(rows), "episodes": rows}


def _average_seeds(runs: list[dict[str, Any]], p: float) -> dict[str, Any]:
    """Per-question means over seeds (a paired comparison stays question-level); seed spread kept."""
    from train.evaluate import summarize_rows

    by_q: dict[int, list[dict]] = {}
    for r in runs:
        for e in r["episodes"]:
            by_q.setdefault(e["question_index"], []).append(e)
    rows = []
    for q in sorted(by_q):
        es = by_q[q]
        rows.append({**es[0], **{k: float(np.mean([e[k] for e in es]))
                                 for k in ("quality", "calls", "reward", "steps", "tokens", "seconds")},
                     "metrics": {k: float(np.mean([(e.get("metrics") or {}).get(k, 0.0) for e in es]))
                                 for k in (es[0].get("metrics") or {})},
                     "answer_status": None})
    out = {"policy": runs[0]["policy"], "n": len(rows), **summarize_rows(rows), "episodes": rows, "p": p,
           "seed_accuracy": [r["accuracy"] for r in runs], "seed_calls": [r["calls_per_question"] for r in runs]}
    return out


# ---------------------------------------------------------------- statistics and summary
def summarize(cfg: BenchConfig, runner: Runner, results: dict[str, dict], calib: dict, skipped: dict) -> dict:
    """The report's summary dict (see :mod:`eval.bench_report` for its schema)."""
    from eval import stats

    kinds = {m.name: m for m in cfg.methods}
    ref = cfg.reference if cfg.reference in results else next(iter(results), None)
    qual = {k: np.array([e["quality"] for e in r["episodes"]], dtype=float) for k, r in results.items()}
    methods: dict[str, dict[str, Any]] = {}
    ref_acc = results[ref]["accuracy"] if ref else float("nan")
    for name, r in results.items():
        m = kinds[name]
        ci = stats.bootstrap_mean_ci(qual[name], n_resamples=cfg.n_resamples, seed=cfg.seed)
        calls = r["calls_per_question"]
        methods[name] = {
            "kind": REPORT_KIND[m.kind], "accuracy": r["accuracy"], "acc_lo": ci["lo"], "acc_hi": ci["hi"],
            "calls": calls, "tokens": r["tokens_per_question"], "seconds": r["seconds_per_question"],
            "reward": r["reward"], "n": r["n"],
            # accuracy gained over the reference per retrieval call; the share of gold passages that were injected
            # (not Recall@k of the ranked lists, which the retrieval benchmark measures)
            "gain_per_call": (r["accuracy"] - ref_acc) / calls if calls > 0 and name != ref else None,
            "gold_injected_share": _evidence_recall(runner, r["episodes"]),
            "recall_at_k": _recall_at_k(runner, r["episodes"]),
            "threshold": r.get("threshold"), "curve": r.get("curve"),
            "lambda": m.lam if m.kind == "learned" else None,
            "harm_rate": (float(np.mean(qual[name] < qual[ref] - 1e-9)) if ref and name != ref else None),
            "query_mode": r.get("query_mode") or m.query_mode or ("policy's QueryGen head" if m.querygen else None),
            "dev_reward": calib.get(name, {}).get("dev_reward"),
            # the task's answer metrics (F1 and EM; lenient and strict accuracy) and how the episodes ended
            "metrics": r.get("metrics"), "no_answer_share": r.get("no_answer_share"),
            "closed_share": r.get("closed_share"), "per_question": r.get("per_question"),
        }
        if m.kind == "random":
            methods[name]["p"] = r["p"]
            methods[name]["seed_accuracy"] = r["seed_accuracy"]
    comparisons = stats.compare_methods(qual, ref, n_resamples=cfg.n_resamples, seed=cfg.seed) if ref else []
    points = [(v["calls"], v["accuracy"]) for v in methods.values()]
    names = list(methods)
    frontier = [names[i] for i in stats.pareto_frontier(points)] if points else []
    curves = {k: [(c["calls"], c["accuracy"]) for c in (v["curve"] or [])] or [(v["calls"], v["accuracy"])]
              for k, v in methods.items()}
    learned = [k for k, v in methods.items() if v["kind"] == "learned"]
    fixed = [k for k, v in methods.items() if v["kind"] == "fixed"]
    budgets = sorted({round(methods[k]["calls"], 4) for k in learned + fixed})
    matched = [{"budget": b, "method": k, "accuracy": stats.accuracy_at_budget(curves[k], b)}
               for b in budgets for k in methods]
    dominance = _dominance(methods, curves, _learned_groups(kinds, learned), fixed)
    # the best fixed trigger is chosen on DEV (its calibrated dev reward), then reported on test: choosing it on
    # test would hand the fixed side a selection bias the learned side does not get
    best_fixed = max(fixed, key=lambda k: (calib.get(k, {}).get("dev_reward", -np.inf), -methods[k]["calls"])
                     ) if fixed else None
    notes = [f"Reward = quality − {cfg.lambda_retrieval:g} · retrieval calls. Thresholds (and query modes where "
             f"listed) calibrated on dev {cfg.dev} (best reward), evaluated on test {cfg.test}. Harm rate: share of "
             f"test questions whose quality is below {ref}'s."]
    if best_fixed:
        mode = methods[best_fixed].get("query_mode")
        notes.append(f"Best fixed trigger (chosen on dev reward {calib[best_fixed]['dev_reward']:.3f}): {best_fixed}"
                     f"{f' with {mode} queries' if mode else ''} — test reward {methods[best_fixed]['reward']:.3f}.")
    oracles = [k for k in results if kinds[k].kind == "cache_oracle"]
    oracle = max(oracles, key=lambda k: methods[k]["reward"]) if oracles else None  # the highest ceiling
    gap = {}
    for k in learned:
        if best_fixed:
            d = stats.paired_bootstrap(np.array([e["reward"] for e in results[k]["episodes"]]),
                                       np.array([e["reward"] for e in results[best_fixed]["episodes"]]),
                                       n_resamples=cfg.n_resamples, seed=cfg.seed)
            methods[k]["vs_best_fixed"] = {"method": best_fixed, **d}
            line = (f"{k} − {best_fixed} on reward: {d['diff']:+.3f} [95% CI {d['lo']:+.3f}, {d['hi']:+.3f}]"
                    f", p = {d['p_value']:.4f} (paired bootstrap)")
            if oracle:
                g = stats.gap_fraction([e["reward"] for e in results[k]["episodes"]],
                                       [e["reward"] for e in results[best_fixed]["episodes"]],
                                       [e["reward"] for e in results[oracle]["episodes"]],
                                       n_resamples=cfg.n_resamples, seed=cfg.seed)
                gap[k] = g
                methods[k]["oracle_gap_fraction"] = g
                line += (f"; oracle-gap fraction (learned − best fixed) / ({oracle} − best fixed) = "
                         f"{g['fraction']:.2f} [95% CI {g['lo']:.2f}, {g['hi']:.2f}]")
            notes.append(line + ".")
    notes += _seed_pooled_notes(cfg, kinds, results, learned, best_fixed, oracle)
    for k, why in skipped.items():
        notes.append(f"Skipped {k}: {why}.")
    breakdowns = _breakdowns(cfg, runner, results)
    return {
        "title": f"Kairos benchmark: {cfg.name}",
        "setup": {"task": runner.env_config.task, "split": runner.env_config.split, "dev": cfg.dev,
                  "test": cfg.test, "n_test": len(parse_slice(cfg.test, "test")),
                  "reasoner": runner.env_config.reasoner, "retriever": runner.env_config.retriever,
                  "lambda_retrieval": cfg.lambda_retrieval, "bootstrap_resamples": cfg.n_resamples,
                  "seed": cfg.seed, "quality_metric": runner.components.quality_metric,
                  "metrics": list(getattr(runner.components.task, "metric_names", ()))
                  or [runner.components.quality_metric],
                  "answer_closing": bool(runner.env_config.answer_closing and runner.components.can_close)},
        "reference": ref, "methods": methods, "comparisons": comparisons, "matched_budget": matched,
        "dominance": dominance, "frontier": frontier, "breakdowns": breakdowns, "notes": notes,
        "calibration": calib, "skipped": skipped, "best_fixed": best_fixed, "oracle": oracle,
        "oracle_gap": gap,
    }


def _seed_pooled_notes(cfg: BenchConfig, kinds: dict, results: dict, learned: list[str], best_fixed: str | None,
                       oracle: str | None = None) -> list[str]:
    """Learned methods of one ``group`` (seeds of one configuration): per-question rewards averaged over the
    seeds, then a paired bootstrap against the best fixed trigger — the 'over N seeds' comparison."""
    from eval import stats

    if best_fixed is None:
        return []
    out = []
    ref = np.array([e["reward"] for e in results[best_fixed]["episodes"]])
    for group, names in _learned_groups(kinds, learned).items():
        if len(names) < 2:
            continue
        pooled = np.mean([[e["reward"] for e in results[k]["episodes"]] for k in names], axis=0)
        d = stats.paired_bootstrap(pooled, ref, n_resamples=cfg.n_resamples, seed=cfg.seed)
        per_seed = ", ".join(f"{results[k]['reward']:.3f}" for k in names)
        wins = sum(results[k]["reward"] > results[best_fixed]["reward"] for k in names)
        line = (f"Learned '{group}' over {len(names)} seeds (rewards {per_seed}; {wins}/{len(names)} above "
                f"{best_fixed}): mean reward {pooled.mean():.3f} vs {best_fixed} {ref.mean():.3f}, difference "
                f"{d['diff']:+.3f} [95% CI {d['lo']:+.3f}, {d['hi']:+.3f}], p = {d['p_value']:.4f} (paired "
                "bootstrap over questions, seeds averaged per question)")
        if oracle:
            g = stats.gap_fraction(pooled, ref, [e["reward"] for e in results[oracle]["episodes"]],
                                   n_resamples=cfg.n_resamples, seed=cfg.seed)
            line += f"; oracle-gap fraction {g['fraction']:.2f} [95% CI {g['lo']:.2f}, {g['hi']:.2f}]"
        out.append(line + ".")
    return out


def _learned_groups(kinds: dict, learned: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for k in learned:
        if kinds[k].group:
            groups.setdefault(kinds[k].group, []).append(k)
    return groups


def _evidence_recall(runner: Runner, rows: list[dict]) -> float | None:
    """Mean share of each question's supporting passages that were injected during its episode (questions
    with supporting passages only; None when the task has none)."""
    qs = runner.components.questions
    if not any("passage_ids" in d for r in rows for d in r["decisions"]):
        return None  # no passage log (the cache oracle)
    vals = []
    for r in rows:
        gold = set(runner.components.gold_passages(qs[r["question_index"]]))
        if not gold:
            continue
        got = {pid for d in r["decisions"] for pid in (d.get("passage_ids") or [])}
        vals.append(len(gold & got) / len(gold))
    return float(np.mean(vals)) if vals else None


def _recall_at_k(runner: Runner, rows: list[dict]) -> float | None:
    """Recall@k of the retrieved lists: per retrieval call, the share of the question's supporting passages in
    the retriever's top-k (k = the env's ``top_k``), averaged over calls (questions with supporting passages only).
    None when nothing was retrieved, the task has no supporting passages, or a call's list was not recorded
    (records cached before ranked lists were kept)."""
    qs = runner.components.questions
    vals = []
    for r in rows:
        gold = set(runner.components.gold_passages(qs[r["question_index"]]))
        for d in r["decisions"]:
            if not gold or not d.get("action", [0])[0]:
                continue
            if "ranked_ids" not in d:
                return None
            vals.append(len(gold & set(d["ranked_ids"])) / len(gold))
    return float(np.mean(vals)) if vals else None


def _dominance(methods: dict, curves: dict, groups: dict[str, list[str]], fixed: list[str]) -> list[str]:
    """Frontier-dominance sentences: the learned curve (one seed-averaged point per group, e.g. per λ) against
    each fixed trigger's threshold curve; with one group its point is compared at its own budget instead."""
    from eval import stats

    if not groups or not fixed:
        return []
    points = {g: (float(np.mean([methods[k]["calls"] for k in ks])), float(np.mean([methods[k]["accuracy"]
                                                                                  for k in ks])))
              for g, ks in groups.items()}
    if len(points) >= 2:
        curve = sorted(points.values())
        return [stats.dominance(curve, curves[b], name_a="learned (λ curve)", name_b=b)["summary"] for b in fixed]
    (g, (calls, acc)), = points.items()
    out = []
    for b in fixed:
        acc_b = stats.accuracy_at_budget(curves[b], calls)
        if acc_b is None:
            out.append(f"{b} has no operating point at or below the budget of learned '{g}' ({calls:.2f} calls/question)")
            continue
        verdict = "above" if acc > acc_b + 1e-9 else "below" if acc < acc_b - 1e-9 else "level with"
        out.append(f"At the budget of learned '{g}' ({calls:.2f} calls/question, seeds averaged) it is {verdict} {b}'s "
                   f"threshold curve: {acc:.3f} vs {acc_b:.3f}")
    return out


def _attr(q: Any, name: str, task: Any = None) -> Any:
    fn = getattr(task, "question_attr", None)
    if callable(fn):
        v = fn(q, name)
        if v is not None:
            return v
    v = getattr(q, name, None)
    if v is None:
        meta = getattr(q, "meta", None) or getattr(q, "metadata", None) or {}
        v = meta.get(name) if isinstance(meta, dict) else None
    return v() if callable(v) else v


def _breakdowns(cfg: BenchConfig, runner: Runner, results: dict[str, dict]) -> dict:
    out: dict[str, dict] = {}
    qs = runner.components.questions
    for attr in cfg.group_by:
        table: dict[str, dict] = {}
        for name, r in results.items():
            groups: dict[str, list[dict]] = {}
            for e in r["episodes"]:
                g = _attr(qs[e["question_index"]], attr, runner.components.task)
                if g is None:
                    raise ConfigError(f"BenchConfig.group_by: questions have no attribute '{attr}'")
                groups.setdefault(str(g), []).append(e)
            for g, es in groups.items():
                table.setdefault(g, {})[name] = {"accuracy": float(np.mean([e["quality"] for e in es])),
                                                 "calls": float(np.mean([e["calls"] for e in es])), "n": len(es)}
        out[f"by {attr}"] = dict(sorted(table.items()))
    return out


# ---------------------------------------------------------------- CLI
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policies", help="learned vs calibrated fixed triggers and baselines (report + plots)")
    p.add_argument("--config", required=True, help="BenchConfig YAML (e.g. configs/bench_microworld.yaml)")
    p.add_argument("--out", default=None, help="override out_dir")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override keys, e.g. test=100:200 n_resamples=2000 env.answer_closing=false")
    p.set_defaults(func=main)


def load_config(path: str, out: str | None = None, overrides: list[str] | None = None) -> BenchConfig:
    import yaml

    raw = read_yaml_mapping(path)
    for kv in overrides or []:
        if "=" not in kv:
            raise ConfigError(f"--set expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        *parents, leaf = k.split(".")  # env.answer_closing=false sets a key of the env mapping
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {k}: '{part}' is not a mapping in {path}")
        node[leaf] = yaml.safe_load(v) if k not in ("dev", "test") else v
    if out:
        raw["out_dir"] = out
    return BenchConfig.from_dict(raw, where=str(path))


def main(args) -> int:
    import torch

    torch.set_num_threads(1)
    cfg = load_config(args.config, args.out, args.set)
    summary = run_bench(cfg)
    rows = [f"{'method':<26} {'acc':>6} {'CI':>15} {'calls':>6} {'reward':>7}"]
    for k, v in summary["methods"].items():
        rows.append(f"{k:<26} {v['accuracy']:6.3f} [{v['acc_lo']:.3f},{v['acc_hi']:.3f}] {v['calls']:6.2f} "
                    f"{v['reward']:7.3f}")
    print("\n".join(rows))
    print(f"report: {Path(cfg.out_dir).resolve() / 'report.html'}")
    return 0 if not math.isnan(next(iter(summary["methods"].values()))["accuracy"]) else 1
