"""Typed configs of the application layer: :class:`PipelineSpec` (which policy answers, over which knowledge, on
which reasoner — what ``kairos answer`` and ``kairos serve`` build a :class:`kairos.Pipeline` from) and
:class:`ServeConfig` (``kairos serve``: the HTTP endpoint, its Ray Serve replicas and request batching).

Both load from YAML (``ServeConfig.from_yaml``: the serve keys at the top level, the pipeline under
``pipeline:``) and double as CLI flags; both are validated on the driver, before Ray starts — a bad value names
the key and the fix.

Example:
    >>> cfg = ServeConfig.from_dict({"port": 8100, "replicas": 2, "pipeline": {"policy": "minprob<0.3"}})
    >>> cfg.port, cfg.replicas, cfg.pipeline.policy, cfg.ongoing_requests()
    (8100, 2, 'minprob<0.3', 32)
    >>> ServeConfig.from_dict({"replicas": 0, "pipeline": {"policy": "never"}})
    Traceback (most recent call last):
    ...
    envs.core.config_files.ConfigError: ServeConfig: key 'replicas' = 0: need at least one Serve replica (--replicas 1)
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

#: a model name a client sends (``model`` of a chat request): letters, digits and ``-_.:/@``
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$")


def parse_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` flags (``--reasoner-option``) as a mapping, values read as YAML.

    Example:
        >>> parse_options(["model=HuggingFaceTB/SmolLM2-135M-Instruct", "max_step_tokens=48"])
        {'model': 'HuggingFaceTB/SmolLM2-135M-Instruct', 'max_step_tokens': 48}
    """
    import yaml

    options: dict[str, Any] = {}
    for kv in items:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise ValueError(f"--reasoner-option '{kv}': write KEY=VALUE")
        options[key] = yaml.safe_load(value)
    return options


@dataclass
class PipelineSpec(ConfigBase):
    """What a :class:`kairos.Pipeline` is built from (``kairos answer`` / ``kairos serve`` flags; the
    ``pipeline:`` section of a serve YAML). Give ``policy``, or ``bench`` with ``method``."""

    policy: str | None = helpf(None, "an exported policy directory (spec.json + weights.pt), a trigger (never, always, "
                                     "single) or a threshold trigger 'SIGNAL<τ' / 'SIGNAL>τ' (e.g. 'minprob<0.3')")
    bench: str | None = helpf(None, "a benchmark's output directory: run what it evaluated for `method`")
    method: str | None = helpf(None, "with bench: the method's name (e.g. 'learned[QueryGen](λ=0.1)')")
    bench_config: str | None = helpf(None, "with bench: its YAML, for an output directory without config.json")
    index: str | None = helpf(None, "a prebuilt index directory (`kairos index build`)")
    corpus: str | None = helpf(None, "a corpus: FlashRAG .jsonl, .txt (one passage per line) or a corpus spec; "
                                     "indexed in memory (with index: the corpus it is checked against)")
    env_config: str | dict[str, Any] | None = helpf(
        None, "env settings: a YAML file (training, benchmark or env config) or a mapping of EnvConfig fields "
              "(default: the policy's own; a trigger: the env defaults)")
    reasoner: str | None = helpf(None, "another reasoner backend (micro, hf, openai, …)")
    reasoner_options: dict[str, Any] = helpf({}, "the backend's options, e.g. {model: …, base_url: …}")
    query_mode: str | None = helpf(None, "a trigger's query formulation (one of the env's query_modes)")
    threshold: float | None = helpf(None, "a learned policy's retrieve-probability threshold (0..1)")
    cache: str | None = helpf(None, "a trajectory-cache SQLite file (default: in memory)")
    lam: float | None = helpf(None, "the budget — λ of retrieval calls — a cost-conditioned policy decides for (the "
                                    "default of every question; a request's kairos.lambda overrides it); a policy "
                                    "trained for one λ refuses it")

    def validate(self) -> None:
        where = "PipelineSpec"
        if self.lam is not None:
            from kairos.pipeline import check_budget

            try:
                check_budget(self.lam, f"{where}: key 'lam'")
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if self.bench:
            if self.policy or not self.method:
                raise ConfigError(f"{where}: --bench needs --method (the benchmark's method name) and no --policy")
        elif not self.policy:
            raise ConfigError(f"{where}: give --policy (an exported policy directory or a trigger) or --bench "
                              "OUT_DIR --method NAME")
        if self.threshold is not None:
            from kairos.pipeline import check_threshold

            try:
                check_threshold(self.threshold, f"{where}: key 'threshold'")
            except ValueError as e:
                raise ConfigError(str(e)) from None

    @classmethod
    def from_args(cls, args: Any) -> PipelineSpec:
        """The spec of the flags :func:`kairos.cli.add_pipeline_args` adds (``--reasoner-option KEY=VALUE``:
        values read as YAML)."""
        options = parse_options(getattr(args, "reasoner_option", None) or [])
        return cls.from_dict({
            "policy": args.policy, "bench": args.bench, "method": args.method, "bench_config": args.bench_config,
            "index": args.index, "corpus": args.corpus, "env_config": args.env_config, "reasoner": args.reasoner,
            "reasoner_options": options, "query_mode": args.query_mode, "threshold": args.threshold,
            "cache": args.cache, "lam": getattr(args, "lam", None)}, where="the command line")

    def check_paths(self) -> None:
        """Cheap checks of what names a file or directory (before a server starts its replicas): a policy that is
        no trigger must be an export directory, a benchmark directory must hold ``summary.json``, the YAML files and
        the index must exist.

        Raises:
            FileNotFoundError: naming the key, the path and what to pass.
        """
        from kairos.pipeline import POLICY_HELP, THRESHOLD_SPEC
        from policies.triggers import TRIGGERS

        p = self.policy
        if p and not THRESHOLD_SPEC.match(p) and p not in TRIGGERS.names() and \
                not (Path(p).expanduser() / "spec.json").is_file():
            raise FileNotFoundError(f"pipeline.policy: no exported policy at {p}; give {POLICY_HELP}")
        if self.bench and not (Path(self.bench) / "summary.json").is_file():
            raise FileNotFoundError(f"pipeline.bench: no finished benchmark at {self.bench} (summary.json missing); "
                                    "run `kairos bench policies --config …` (or `kairos quickstart`)")
        for key in ("bench_config", "index") + (("env_config",) if isinstance(self.env_config, str) else ()):
            value = getattr(self, key)
            if value and not Path(value).expanduser().exists():
                raise FileNotFoundError(f"pipeline.{key}: {value} not found")

    def check_loaded(self) -> None:
        """A learned policy (``policy``, or what ``bench`` evaluated for ``method``) against the env it will run in,
        on the driver, before any replica or server starts: the pipeline is built once and closed, so a policy whose
        observation fields or query modes do not fit (:func:`policies.rl.compat.check_policy_env`), a damaged probe
        or artifact, is one error line here — not a replica's traceback after the deployment started."""
        if not self.bench and not (self.policy and (Path(self.policy).expanduser() / "spec.json").is_file()):
            return  # a trigger reads no saved object of its own
        self.build(batch_size=1).close()

    def resolved(self) -> PipelineSpec:
        """A copy whose local paths are absolute (a Ray worker may run in another directory)."""
        out = {}
        for key in ("policy", "bench", "bench_config", "index", "corpus", "env_config", "cache"):
            value = getattr(self, key)
            if isinstance(value, str) and Path(value).expanduser().exists():
                out[key] = str(Path(value).expanduser().resolve())
        if self.cache and "cache" not in out:  # a cache file that does not exist yet
            out["cache"] = str(Path(self.cache).expanduser().resolve())
        return self.replace(**out) if out else self

    def build(self, batch_size: int | None = None):
        """The :class:`kairos.Pipeline` (``batch_size``: questions in flight at once; default 16, with ``bench``:
        the benchmark's)."""
        from kairos.pipeline import Pipeline, read_env_config

        kw: dict[str, Any] = {"knowledge": self.corpus, "index": self.index, "reasoner": self.reasoner,
                              "reasoner_options": dict(self.reasoner_options) or None, "query_mode": self.query_mode,
                              "threshold": self.threshold, "cache_path": self.cache, "lam": self.lam}
        if batch_size is not None:
            kw["batch_size"] = batch_size
        env = self.env_config
        if isinstance(env, str):
            env = read_env_config(env)
        if self.bench:
            return Pipeline.from_bench(self.bench, self.method, config=self.bench_config, **kw)
        if Path(self.policy).is_dir() or "/" in self.policy:
            return Pipeline.from_policy(self.policy, env_config=env, **kw)
        return Pipeline(self.policy, env, **kw)


@dataclass
class ServeConfig(ConfigBase):
    """``kairos serve``: an OpenAI-compatible endpoint on Ray Serve (``configs/serve_microworld.yaml``)."""

    host: str = helpf("127.0.0.1", "the address the HTTP proxy listens on (0.0.0.0: every interface)")
    port: int = helpf(8000, "the HTTP port")
    replicas: int = helpf(1, "Serve replicas, each with its own pipeline (reasoner, retriever, trajectory cache)")
    replica_cpus: float = helpf(1.0, "CPUs a replica reserves (its torch threads: at least 1)")
    replica_gpus: float = helpf(0.0, "GPUs a replica reserves (> 0: a GPU reasoner, e.g. --reasoner hf)")
    max_batch_size: int = helpf(16, "requests a replica answers in one batched loop (one generation call per round)")
    batch_wait_timeout_s: float = helpf(0.05, "how long a replica waits for a batch to fill before it starts")
    max_ongoing_requests: int = helpf(0, "requests a replica accepts at once (0: 2 × max_batch_size); more queue")
    max_question_chars: int = helpf(2000, "longest question accepted (characters; longer: HTTP 400)")
    models: list[str] = helpf(["kairos"], "model names the endpoint serves (a chat request's `model`; /v1/models)")
    traces: str | None = helpf(None, "a directory of benchmark outputs whose per-question trace files the "
                                     "inspector page lists (<out_dir>/per_question/<split>/<method>.jsonl)")
    health_check_period_s: float = helpf(10.0, "how often Serve checks a replica (a dead one is replaced)")
    health_check_timeout_s: float = helpf(30.0, "a replica that does not answer its check in this time is replaced")
    app_name: str = helpf("kairos", "the Serve application's name")
    ray_address: str | None = helpf(None, "a running Ray cluster to serve on (default: RAY_ADDRESS when set, else "
                                           "start a local one)")
    num_cpus: int | None = helpf(None, "CPUs of the local Ray cluster (default: the machine's)")
    pipeline: PipelineSpec = field(default_factory=PipelineSpec, metadata={"help": "the pipeline every replica runs"})

    def validate(self) -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"ServeConfig: key '{key}' = {getattr(self, key)!r}: {why}")

        self.pipeline.validate()
        if not 1 <= self.port <= 65535:
            raise bad("port", "an HTTP port is in 1..65535 (--port 8000)")
        if not self.host.strip():
            raise bad("host", "give an address to listen on (--host 127.0.0.1, or 0.0.0.0 for every interface)")
        if self.replicas < 1:
            raise bad("replicas", "need at least one Serve replica (--replicas 1)")
        if self.replica_cpus < 0 or self.replica_gpus < 0:
            raise bad("replica_cpus" if self.replica_cpus < 0 else "replica_gpus", "resources are >= 0")
        if self.max_batch_size < 1:
            raise bad("max_batch_size", "a batch holds at least one request (--max-batch-size 16)")
        if self.batch_wait_timeout_s < 0:
            raise bad("batch_wait_timeout_s", "a wait is >= 0 seconds (0: start a batch at once)")
        if self.max_ongoing_requests and self.max_ongoing_requests < self.max_batch_size:
            raise bad("max_ongoing_requests", f"a replica must accept a full batch: >= max_batch_size "
                                              f"({self.max_batch_size}), or 0 for 2 × max_batch_size")
        if self.max_ongoing_requests < 0:
            raise bad("max_ongoing_requests", "give 0 (2 × max_batch_size) or a positive number")
        if self.max_question_chars < 1:
            raise bad("max_question_chars", "accept at least one character (--max-question-chars 2000)")
        if not self.models:
            raise bad("models", "serve at least one model name (--model kairos)")
        for m in self.models:
            if not MODEL_NAME.match(m):
                raise bad("models", f"model name {m!r}: letters, digits and -_.:/@, starting with a letter or digit")
        if len(set(self.models)) != len(self.models):
            raise bad("models", "model names are unique")
        if self.health_check_period_s <= 0 or self.health_check_timeout_s <= 0:
            raise bad("health_check_period_s" if self.health_check_period_s <= 0 else "health_check_timeout_s",
                      "a period / timeout is > 0 seconds")
        if not self.app_name.strip():
            raise bad("app_name", "name the Serve application (--app-name kairos)")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise bad("num_cpus", "a local cluster needs at least one CPU")

    def ongoing_requests(self) -> int:
        """Requests a replica accepts at once (``max_ongoing_requests``, 0: twice a batch)."""
        return self.max_ongoing_requests or 2 * self.max_batch_size

    def check_paths(self) -> None:
        """The pipeline's paths (:meth:`PipelineSpec.check_paths`) and the traces directory.

        Raises:
            FileNotFoundError: naming the key and the path.
        """
        self.pipeline.check_paths()
        if self.traces and not Path(self.traces).expanduser().is_dir():
            raise FileNotFoundError(f"traces: {self.traces} is not a directory (give a benchmark's output directory, "
                                    "e.g. runs/quickstart/bench, or a folder above several)")

    def resolved(self) -> ServeConfig:
        """A copy with absolute local paths (replicas may run in another directory)."""
        traces = str(Path(self.traces).expanduser().resolve()) if self.traces else None
        return self.replace(traces=traces, pipeline=self.pipeline.resolved().to_dict())


__all__ = ["MODEL_NAME", "PipelineSpec", "ServeConfig", "parse_options"]
