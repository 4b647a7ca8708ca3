"""The benchmark's config: :class:`BenchConfig` (a YAML of ``kairos bench policies``), the dev/test slices, loading
with ``--set`` overrides, and the env a benchmark (or one of its methods) runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envs.core.config import ConfigBase, ConfigError, helpf, read_yaml_mapping
from envs.env_config import EnvConfig
from eval.bench.methods import MethodSpec

__all__ = ["BenchConfig", "bench_env_config", "load_config", "load_record", "parse_slice"]


@dataclass
class BenchConfig(ConfigBase):
    """A policy benchmark (``kairos bench policies --config …``)."""

    name: str = helpf("microworld", "benchmark name (report title)")
    out_dir: str = helpf("runs/bench/microworld", "output directory (per-question JSONL, summary, reports)")
    env: EnvConfig = field(
        default_factory=lambda: EnvConfig.from_dict({"task": "microworld", "split": "dev", "rsus_components": ["ent"]}),
        metadata={"help": "env config (EnvConfig fields; default: {task: microworld, split: dev, rsus_components: "
                          "[ent]}); its split holds both the dev and the test questions"})
    plugins: list[str] = helpf([], "plug-in modules imported first (on the driver; a user's signal, trigger, cost, "
                                   "retriever … registers on import, then its name is valid anywhere in this config); "
                                   "the env carries them (env.plugins); a method kind of eval.bench.methods.METHOD_KINDS too")
    dev: str = helpf("0:100", "calibration questions: a 'start:stop' slice of the split")
    test: str = helpf("100:400", "evaluation questions: a 'start:stop' slice, disjoint from dev")
    lambda_retrieval: float = helpf(0.1, "λ of retrieval calls in the reward used to calibrate and report", ge=0)
    lambdas: list[float] = helpf([], "run the benchmark at every λ of this list (each in <out_dir>/lambda=<λ>: fixed "
                                     "triggers calibrated at that λ, a cost-conditioned policy told it) and report "
                                     "the frontier (eval.bench.budgets); must hold lambda_retrieval, the headline "
                                     "λ. Empty: one λ", ge=0)
    reference: str = helpf("CoT", "the method every other is compared with (paired tests)")
    methods: list[MethodSpec] = field(default_factory=list, metadata={"help": (
        "the methods to run; each mapping's 'kind' picks its spec class (eval.bench.methods.METHOD_KINDS)")})
    compare: list[list[str]] = helpf([], "pairs [A, B] of learned groups (seeds of one recipe) to compare: A − B on "
                                         "reward and calls, seeds pooled per question, paired bootstrap (two "
                                         "recipes' rows in one benchmark)")
    test_curves: bool = helpf(True, "sweep each threshold trigger's grid on test too (the plot's curves)")
    reuse_episodes_from: str = helpf("", "the folder of this benchmark at another λ (same env, questions and "
                                         "episode limits): a run of a trigger that does not observe λ is copied from "
                                         "it with its rewards recomputed at this λ instead of rerun — the rows a rerun "
                                         "writes (`lambdas` sets it for every λ after the first; empty: run all)")
    group_by: list[str] = helpf([], "question attributes to break results down by (e.g. hops)")
    batch_size: int = helpf(16, "questions in flight per batched generation call", ge=1)
    workers: int = helpf(1, "processes that run the methods (one torch thread each; set it to the CPUs you give "
                            "the benchmark): helpers fill the per-question files, the rows are a one-process "
                            "run's (eval.bench.parallel)", ge=1)
    n_resamples: int = helpf(10_000, "bootstrap resamples (fixed seed; at most 1,000,000)", ge=1)
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
        # the env and each method's overrides are typed (a typo or bad value failed on load, naming the key); an
        # override must also make a valid env with the bench's
        for m in self.methods:
            self.env.with_overrides(m.env, where=f"BenchConfig.methods['{m.name}'].env")
        modes = list(self.env.query_modes)
        for m in self.methods:  # what a method names of the whole benchmark: matched methods, query modes
            m.check_with(names, modes)
        groups = {m.group or m.name for m in self.methods if m.kind == "learned"}
        for pair in self.compare:
            if len(pair) != 2 or any(g not in groups for g in pair):
                raise ConfigError(f"BenchConfig: compare entry {pair} must name two learned groups (groups: "
                                  f"{', '.join(sorted(groups)) or 'none'})")
        if self.n_resamples > 1_000_000:
            raise ConfigError(f"BenchConfig: n_resamples {self.n_resamples} is above 1,000,000 (each resample of each "
                              "comparison is an array over the test questions; 10,000 is the default)")
        if self.lambdas and not any(abs(x - self.lambda_retrieval) < 1e-12 for x in self.lambdas):
            raise ConfigError(f"BenchConfig: lambdas {self.lambdas} must include lambda_retrieval "
                              f"({self.lambda_retrieval:g}), the λ of the headline summary")
        if len(set(self.lambdas)) != len(self.lambdas):
            raise ConfigError(f"BenchConfig: lambdas {self.lambdas} lists a λ twice")
        if self.reuse_episodes_from and not (Path(self.reuse_episodes_from) / "per_question").is_dir():
            raise ConfigError(f"BenchConfig: reuse_episodes_from {self.reuse_episodes_from!r} is not a benchmark's "
                              "folder (no per_question/ in it); name the out_dir of this benchmark at another λ, "
                              "or leave it empty")
        d, t = parse_slice(self.dev, "dev"), parse_slice(self.test, "test")
        if _overlap(d, t):
            raise ConfigError(f"BenchConfig: dev {self.dev} and test {self.test} overlap")


def _overlap(a: range, b: range) -> bool:
    """Whether two slices share an index, without listing them (a slice may be huge before its bound is checked).

    >>> _overlap(range(0, 100), range(100, 400)), _overlap(range(0, 10, 2), range(1, 10, 2)), _overlap(range(0, 10**12), range(5, 6))
    (False, False, True)
    """
    lo, hi = max(a.start, b.start), min(a.stop, b.stop)
    if lo >= hi:
        return False
    small, big = (a, b) if len(a) <= len(b) else (b, a)
    first = small.start + max(0, -(-(lo - small.start) // small.step)) * small.step
    return any(x in big for x in range(first, hi, small.step)[:max(1, big.step)])


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


def bench_env_config(cfg: BenchConfig, method: MethodSpec | None = None) -> EnvConfig:
    """The env a benchmark runs: its ``env`` with the λ of retrieval calls set to ``lambda_retrieval`` — and, for a
    ``method``, that method's ``env`` overrides applied."""
    env = cfg.env.replace(costs={**cfg.env.costs, "retrieval_calls": cfg.lambda_retrieval})
    return env.with_overrides(method.env) if method is not None else env


def load_config(path: str, out: str | None = None, overrides: list[str] | None = None,
                plugins: list[str] | None = None, edit: Callable[[dict], None] | None = None) -> BenchConfig:
    """A :class:`BenchConfig` from a YAML, with ``--set KEY=VALUE`` overrides (``env.answer_closing=false`` sets a
    key of the env mapping), ``--out``, more ``plugins`` (a suite's) and ``edit``, called on the raw mapping before
    it is checked (``kairos quickstart`` points the env at the probe it trains)."""
    from envs.core.config import apply_sets, sets_error

    raw = read_yaml_mapping(path)
    if edit is not None:
        edit(raw)
    if plugins:
        raw["plugins"] = list(dict.fromkeys([*plugins, *(raw.get("plugins") or [])]))
    given = apply_sets(raw, overrides or [], str(path), verbatim=("dev", "test"))
    if out:
        raw["out_dir"] = out
    try:
        return BenchConfig.from_dict(raw, where=str(path))
    except ConfigError as e:  # a bad value the user set on the command line: name the --set
        raise sets_error(e, given) from None


#: the keys every method had (with these defaults) before each kind got its own class: a ``config.json`` written
#: then lists them all; reading it back drops those a kind does not have while they hold the old default
_LEGACY_DEFAULTS = {"trigger": None, "options": {}, "signal": None, "direction": "below", "thresholds": None,
                    "fixed_threshold": None, "match": None, "p": None, "seeds": 3, "path": None, "lam": None,
                    "group": None, "select_on_dev": False, "querygen": False, "query_modes": [], "curve": True,
                    "calibrate": False}


def load_record(data: dict, where: str) -> BenchConfig:
    """The :class:`BenchConfig` a benchmark recorded (its ``config.json``), also one written when every method
    listed every kind's keys."""
    import dataclasses

    from eval.bench.methods import METHOD_KINDS

    data = dict(data)
    methods = []
    for m in data.get("methods") or []:
        try:
            keys = {f.name for f in dataclasses.fields(METHOD_KINDS.get(m.get("kind", "threshold")))}
        except (ValueError, TypeError):
            keys = set(m)
        m = {k: v for k, v in m.items() if k in keys or k not in _LEGACY_DEFAULTS or v != _LEGACY_DEFAULTS[k]}
        if m.get("kind") == "single" and m.get("k") is None:  # recorded before 'single' took k: it injected one
            m["k"] = 1
        methods.append(m)
    data["methods"] = methods
    return BenchConfig.from_dict(data, where=where)
