"""``kairos bench service``: per-runner reasoners vs one shared reasoner service, in one run.

For each EnvRunner count R (default 1, 2, 4) it starts R runner actors of ``--envs`` env copies each and plays
``--episodes`` episodes per runner under a seeded random policy (retrieve with probability 0.3), twice: (a) every
runner builds its own reasoner (today's default), (b) every runner is a client of ONE replica of
:mod:`envs.services`. Per configuration: episodes/s, generated tokens/s, the mean generation batch (the
states one model call serves: a runner's own calls in (a), the replica's in (b)), episodes per CPU-second (the
runners' and replicas' own CPU time), the model copies, and the peak resident memory of every process. Then one
replica alone, fed batches of 1 … 64 fresh questions: states/s and tokens/s at each batch size — what a user needs
to size a cluster. Each runner has its own in-memory trajectory cache and its own questions (seeded), so every step
is generated. Last, the cache experiment: ``--cache-runners`` runners on one 32-question pool, each with its own cache
(runners on different nodes without a service) vs one :mod:`envs.cache_service` server for all — the hit rate.
Prints a table, writes JSON and markdown.

    kairos bench service --train-config configs/experiments/microworld/train_microworld.yaml --runners 1 2 4 --envs 16 --episodes 48
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("service", help="per-runner reasoners vs a shared reasoner service (episodes/s, batch, RSS)")
    p.add_argument("--train-config", default="configs/experiments/microworld/train_microworld.yaml",
                   help="the training config whose env (preset + env_config) the runners play")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="env_config override (YAML value), e.g. --set max_steps=4; repeatable")
    p.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4], help="EnvRunner counts")
    p.add_argument("--envs", type=int, default=16, help="env copies per runner")
    p.add_argument("--episodes", type=int, default=48, help="episodes per runner")
    p.add_argument("--max-wait-ms", type=float, default=200.0, help="the replica's longest batching wait")
    p.add_argument("--sizing-batches", type=int, nargs="*", default=[1, 4, 16, 64],
                   help="batch sizes of the one-replica sizing sweep (empty: skip)")
    p.add_argument("--cache-runners", type=int, default=4,
                   help="runners of the cache-sharing experiment (same questions; 0: skip)")
    p.add_argument("--out", default="runs/bench/service", help="output directory (service_bench.json, .md)")
    p.set_defaults(func=_main)


class _Runner:
    """A stand-in EnvRunner (a Ray actor): a batched env and a seeded random policy; counts its model calls."""

    def __init__(self, env_config, n_envs: int, seed: int, cache_service: dict | None = None):
        import numpy as np
        import torch

        torch.set_num_threads(1)
        from envs.vector import make_batched

        self.vec = make_batched(n_envs, env_config)
        self.seed = seed
        self.calls = self.states = self.tokens = 0
        r = self.vec.reasoner
        inner = r.next_step

        def counted(states, _inner=inner):
            out = _inner(states)
            self.calls += 1
            self.states += len(states)
            self.tokens += sum(int(s.n_tokens) for s, _ in out)
            return out

        r.next_step = counted
        # warm up (lazy imports, first kernels) on other questions, then start from an empty cache and zero counts
        self.vec.reset(seed=10_000 + seed)
        self.vec.step(np.ones(n_envs, dtype=np.int64))
        from envs.trajectory_cache import TrajectoryCache

        ns = self.vec.envs[0].c.namespace
        if cache_service is not None:  # the cross-runner experiment: every runner reads and writes one server
            from envs.cache_service import SharedTrajectoryCache

            cache = SharedTrajectoryCache(cache_service, ns)
        else:
            cache = TrajectoryCache(None, ns)
        for e in self.vec.envs:
            e.cache = cache
        self.cache = cache
        self.calls = self.states = self.tokens = 0

    def ready(self) -> bool:
        return True

    def run(self, episodes: int) -> dict:
        import resource

        import numpy as np

        rng = np.random.default_rng(self.seed)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        self.vec.reset(seed=self.seed * 1000)
        done = 0
        while done < episodes:
            _, _, te, tr, _ = self.vec.step((rng.random(self.vec.num_envs) < 0.3).astype(np.int64))
            done += int((te | tr).sum())
        secs = time.perf_counter() - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"episodes": done, "seconds": secs, "calls": self.calls, "states": self.states, "tokens": self.tokens,
                "cache_hits": self.cache.hits, "cache_misses": self.cache.misses,
                "cpu_seconds": (ru.ru_utime + ru.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
                "peak_rss_mb": ru.ru_maxrss / 1024, "pid": os.getpid()}


def train_env_config(args):
    """The training config's env (its EnvConfig, the preset applied on load) with the ``--set`` overrides and an
    in-memory cache."""
    from envs.core.config import ConfigError, apply_sets, sets_error
    from train.config import TrainConfig

    tc = TrainConfig.from_yaml(args.train_config)
    over: dict = {}
    given = apply_sets(over, args.set, f"{args.train_config} (env_config)")
    try:
        return tc.kairos_env.with_overrides({**over, "cache_path": None}, where=f"{args.train_config} (env_config)")
    except ConfigError as e:
        raise sets_error(e, given) from None


def run_config(env_config, runners: int, n_envs: int, episodes: int, shared: bool,
               max_wait_ms: float) -> dict[str, Any]:
    """One configuration: R runners, per-runner reasoners (``shared=False``) or one shared replica."""
    import ray

    from envs.served import service_stats
    from envs.services import ReasonerServiceConfig, start_service, stop_service

    spec = None
    if shared:
        spec = start_service(env_config, ReasonerServiceConfig(replicas=1, max_batch=runners * n_envs,
                                                               max_wait_ms=max_wait_ms))
    try:
        actor = ray.remote(num_cpus=1)(_Runner)
        cfg = env_config.with_overrides({"reasoner_service": spec}) if spec else env_config
        rs = [actor.remote(cfg, n_envs, seed=i + 1) for i in range(runners)]
        ray.get([r.ready.remote() for r in rs])  # built and warmed up
        rep0 = service_stats(spec) if spec else []
        t0 = time.perf_counter()
        res = ray.get([r.run.remote(episodes) for r in rs])
        wall = time.perf_counter() - t0
        rep = [{**b, **{k: b[k] - a[k] for k in ("calls", "states", "tokens", "cpu_seconds")}}
               for a, b in zip(rep0, service_stats(spec))] if spec else []
        for r in rs:
            ray.kill(r)
    finally:
        if spec:
            stop_service(spec)
    eps = sum(r["episodes"] for r in res)
    tokens = sum(r["tokens"] for r in res)
    cpu = sum(r["cpu_seconds"] for r in res) + sum(r["cpu_seconds"] for r in rep)
    if shared:
        mean_batch = sum(r["states"] for r in rep) / max(1, sum(r["calls"] for r in rep))
    else:
        mean_batch = sum(r["states"] for r in res) / max(1, sum(r["calls"] for r in res))
    return {"runners": runners, "envs_per_runner": n_envs, "mode": "shared service" if shared else "per-runner",
            "episodes": eps, "wall_seconds": wall, "episodes_per_s": eps / wall, "tokens_per_s": tokens / wall,
            "mean_generation_batch": mean_batch, "episodes_per_cpu_second": eps / max(cpu, 1e-9),
            "model_copies": len(rep) if shared else runners,
            "peak_rss_mb": {"runners": [round(r["peak_rss_mb"], 1) for r in res],
                            "replicas": [round(r["peak_rss_mb"], 1) for r in rep]}}


def cache_sharing(env_config, runners: int, n_envs: int, episodes: int, cache_path: Path,
                  pool: int = 32) -> list[dict]:
    """R runners drawing episodes from one small question pool (``pool`` questions, as a training pool is revisited
    over iterations), each with its own cache (what runners on different nodes have without a service) vs one cache
    server for all: the trajectory-cache hit rate, episodes/s and the steps each setting had to generate."""
    import ray

    from envs.cache_service import start_cache_service, stop_cache_service

    for f in (cache_path, cache_path.with_name(cache_path.name + "-wal"), cache_path.with_name(cache_path.name + "-shm")):
        f.unlink(missing_ok=True)  # a cold cache
    out = []
    for shared in (False, True):
        spec = start_cache_service(str(cache_path)) if shared else None
        try:
            actor = ray.remote(num_cpus=1)(_Runner)
            rs = [actor.remote(env_config.replace(max_questions=pool), n_envs, i + 1, spec) for i in range(runners)]
            ray.get([r.ready.remote() for r in rs])
            t0 = time.perf_counter()
            res = ray.get([r.run.remote(episodes) for r in rs])
            wall = time.perf_counter() - t0
            for r in rs:
                ray.kill(r)
        finally:
            if spec:
                stop_cache_service(spec)
        hits, misses = sum(r["cache_hits"] for r in res), sum(r["cache_misses"] for r in res)
        out.append({"runners": runners, "cache": "one server for all" if shared else "one per runner (per node)",
                    "hit_rate": hits / max(1, hits + misses), "episodes_per_s": sum(r["episodes"] for r in res) / wall,
                    "generated_steps": sum(r["states"] for r in res)})
    return out


def sizing(env_config, batches: list[int]) -> list[dict]:
    """One replica alone: states/s and tokens/s of a first step for fresh questions at each batch size."""
    import ray

    from envs.components import build_components
    from envs.served import replica_handles
    from envs.services import ReasonerServiceConfig, start_service, stop_service

    comps = build_components(env_config)
    texts = [comps.question_text(q) for q in comps.questions[: max(batches) * 3]]
    spec = start_service(env_config, ReasonerServiceConfig(replicas=1, max_batch=max(batches), max_wait_ms=0.0))
    out = []
    try:
        (h,) = replica_handles(spec)
        for b in batches:
            n, tokens, t0 = 0, 0, time.perf_counter()
            for i in range(0, 3 * b, b):  # three calls of b states each
                res = ray.get(h.next_step.remote([(None, None, (("start", t, ()),)) for t in texts[i: i + b]]))
                n += len(res)
                tokens += sum(int(s.n_tokens) for s, *_ in res)
            secs = time.perf_counter() - t0
            out.append({"batch": b, "states_per_s": n / secs, "tokens_per_s": tokens / secs,
                        "seconds_per_call": secs / 3})
    finally:
        stop_service(spec)
    return out


def step_bytes(env_config, n: int = 16) -> dict[str, float]:
    """Mean pickled size of a served first step: with the model-side signals computed in the replica (the default)
    and with the per-layer hidden states travelling instead (``features_on_service: false``)."""
    import pickle

    import ray

    from envs.components import build_components
    from envs.served import replica_handles
    from envs.services import ReasonerServiceConfig, start_service, stop_service

    comps = build_components(env_config)
    reqs = [(None, None, (("start", comps.question_text(q), ()),)) for q in comps.questions[:n]]
    out = {}
    for features in (True, False):
        spec = start_service(env_config, ReasonerServiceConfig(features_on_service=features, max_wait_ms=0.0))
        try:
            (h,) = replica_handles(spec)
            res = ray.get(h.next_step.remote(reqs))
            out["features_on_service" if features else "hidden_states_travel"] = \
                sum(len(pickle.dumps(r[0])) for r in res) / len(res)
        finally:
            stop_service(spec)
    return out


def markdown(result: dict) -> str:
    lines = ["| runners × envs | mode | episodes/s | tokens/s | mean generation batch | episodes / CPU-s | "
             "model copies | peak RSS per process (MB) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["configs"]:
        rss = ", ".join(f"{x:.0f}" for x in r["peak_rss_mb"]["runners"])
        if r["peak_rss_mb"]["replicas"]:
            rss += " · replica " + ", ".join(f"{x:.0f}" for x in r["peak_rss_mb"]["replicas"])
        lines.append(f"| {r['runners']} × {r['envs_per_runner']} | {r['mode']} | {r['episodes_per_s']:.2f} | "
                     f"{r['tokens_per_s']:.0f} | {r['mean_generation_batch']:.1f} | "
                     f"{r['episodes_per_cpu_second']:.3f} | {r['model_copies']} | {rss} |")
    for k, v in result.get("ratios", {}).items():
        lines.append(f"\n{k}: {v:.2f}")
    if result.get("cache_sharing"):
        lines += ["", "| runners (one 32-question pool) | trajectory cache | hit rate | episodes/s | generated steps |",
                  "|---|---|---|---|---|"]
        for c in result["cache_sharing"]:
            lines.append(f"| {c['runners']} | {c['cache']} | {c['hit_rate']:.3f} | {c['episodes_per_s']:.2f} | "
                         f"{c['generated_steps']} |")
    if result.get("step_bytes"):
        b = result["step_bytes"]
        lines.append(f"\nbytes per served step (pickled): {b['features_on_service']:.0f} with the model-side signals "
                     f"computed in the replica, {b['hidden_states_travel']:.0f} with the hidden states travelling")
    if result.get("sizing"):
        lines += ["", "| batch (states per call) | states/s | tokens/s | seconds per call |", "|---|---|---|---|"]
        for s in result["sizing"]:
            lines.append(f"| {s['batch']} | {s['states_per_s']:.1f} | {s['tokens_per_s']:.0f} | "
                         f"{s['seconds_per_call']:.3f} |")
    return "\n".join(lines) + "\n"


def _main(args) -> int:
    import ray

    from envs.core.io import write_json

    env_config = train_env_config(args)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    repo = str(Path(__file__).resolve().parents[1])
    # logical CPUs: every runner and the replica get one slot (a real cluster sizes these to its cores)
    ray.init(address="local", num_cpus=max(args.runners) + 2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}})
    try:
        configs = []
        for r in args.runners:
            for shared in (False, True):
                log.info("service bench: %d runner(s) × %d envs, %s", r, args.envs, "shared" if shared else "own")
                configs.append(run_config(env_config, r, args.envs, args.episodes, shared, args.max_wait_ms))
                log.info("  %.2f episodes/s, mean batch %.1f", configs[-1]["episodes_per_s"],
                         configs[-1]["mean_generation_batch"])
        by = {(c["runners"], c["mode"]): c for c in configs}
        one = by.get((1, "per-runner"))
        ratios = {}
        for r in args.runners:
            s, own = by[(r, "shared service")], by[(r, "per-runner")]
            if one:
                ratios[f"{r} runners: shared mean batch / one runner's"] = \
                    s["mean_generation_batch"] / one["mean_generation_batch"]
            ratios[f"{r} runners: episodes per CPU-s, shared / per-runner"] = \
                s["episodes_per_cpu_second"] / own["episodes_per_cpu_second"]
        result = {"train_config": args.train_config, "overrides": args.set, "envs_per_runner": args.envs, "episodes_per_runner": args.episodes,
                  "max_wait_ms": args.max_wait_ms, "cpus": os.cpu_count(), "configs": configs, "ratios": ratios,
                  "cache_sharing": cache_sharing(env_config, args.cache_runners, args.envs, args.episodes,
                                                 Path(args.out) / "cache_sharing.sqlite") if args.cache_runners else [],
                  "sizing": sizing(env_config, args.sizing_batches) if args.sizing_batches else [],
                  "step_bytes": step_bytes(env_config)}
    finally:
        ray.shutdown()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "service_bench.json", result)
    md = markdown(result)
    from envs.core.io import write_text

    write_text(out / "service_bench.md", md)
    print(md)
    print(json.dumps(result["ratios"], indent=1))
    return 0
