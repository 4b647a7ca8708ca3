"""``kairos bench serve``: ``kairos serve`` under load from the real ``openai`` client, with 1 and 2 Serve replicas.

For each replica count it starts the application (Ray Serve, the pipeline of the flags: by default the
FLARE-style trigger ``minprob<0.5`` on the micro-world), warms every replica up on other questions, then fires
``--requests`` chat completions at once (``AsyncOpenAI``), ``--bursts`` times, each burst on fresh questions (the
micro-world's test questions, never asked before: every step is generated, nothing replays from a trajectory
cache). Per configuration: latency p50/p95/max (client side, request sent → answer received), requests/s (requests
over the bursts' wall time), errors, and the batching the answers report — requests per Serve batch (the mean batch
size) and states per generation call (how many questions one generation call served). The same questions go to
every configuration; the first (1 replica) is the baseline. Prints a table, writes JSON and markdown.

    kairos bench serve --requests 64 --replicas 1 2
    kairos bench serve --policy runs/quickstart/train/policy_trigger --max-batch-size 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    from kairos.cli import add_pipeline_args

    p = sub.add_parser("serve", help="kairos serve under load (openai client): latency, requests/s, batch, 1 vs 2 "
                                     "replicas", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=64, help="concurrent requests per burst")
    p.add_argument("--bursts", type=int, default=3, help="bursts per configuration (fresh questions each)")
    p.add_argument("--replicas", dest="replica_counts", type=int, nargs="+", default=[1, 2], help="Serve replica counts (the first is the "
                                                                          "baseline)")
    p.add_argument("--max-batch-size", type=int, default=32, help="requests per Serve batch (ServeConfig)")
    p.add_argument("--batch-wait-timeout-s", type=float, default=0.05, help="a batch's longest wait to fill")
    p.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs a replica reserves (its torch threads)")
    p.add_argument("--stream", action="store_true", help="streamed requests (SSE) instead of plain ones")
    p.add_argument("--warmup", type=int, default=8, help="warm-up requests per replica (other questions)")
    p.add_argument("--split", default="test", help="the micro-world split the questions come from")
    p.add_argument("--out", default="runs/bench/serve", help="output directory (serve_bench.json, .md)")
    add_pipeline_args(p)
    p.set_defaults(func=_main)


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation, as numpy's default).

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 50), round(percentile([1.0, 2.0, 3.0, 4.0], 95), 6)
        (2.5, 3.85)
    """
    import numpy as np

    return float(np.percentile(np.asarray(xs, dtype=float), q)) if xs else float("nan")


async def _one(client, model: str, question: str, stream: bool) -> dict[str, Any]:
    """One request: its latency, answer, batch (or the error)."""
    t0 = time.perf_counter()
    try:
        if stream:
            text, k = "", None
            async for ch in await client.chat.completions.create(model=model, stream=True,
                                                                 messages=[{"role": "user", "content": question}]):
                if ch.choices:
                    text += ch.choices[0].delta.content or ""
                k = (ch.model_extra or {}).get("kairos") or k
        else:
            r = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}])
            text, k = r.choices[0].message.content, r.model_extra["kairos"]
        return {"latency_s": time.perf_counter() - t0, "answer": text, "batch": k["batch"],
                "steps": len(k["answer"]["steps"]), "calls": k["answer"]["calls"], "error": None}
    except Exception as e:  # noqa: BLE001 - every failure counts as an error of the run
        return {"latency_s": time.perf_counter() - t0, "error": f"{type(e).__name__}: {e}"[:300]}


async def _burst(url: str, model: str, questions: list[str], stream: bool) -> tuple[list[dict], float]:
    import openai

    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600) as client:
        t0 = time.perf_counter()
        res = await asyncio.gather(*[_one(client, model, q, stream) for q in questions])
        return list(res), time.perf_counter() - t0


def batching(results: list[dict]) -> dict[str, float]:
    """Requests per Serve batch and states per generation call, from the batches the answers name (each batch's
    generation counts as its last-answered request saw them: all of them).

    Example:
        >>> rs = [{"batch": {"id": "a:1", "size": 2, "generation_calls": 3, "generation_states": 5}},
        ...       {"batch": {"id": "a:1", "size": 2, "generation_calls": 5, "generation_states": 9}},
        ...       {"batch": {"id": "b:1", "size": 1, "generation_calls": 4, "generation_states": 4}}]
        >>> batching(rs)
        {'batches': 2, 'mean_batch_size': 1.5, 'max_batch_size': 2, 'states_per_generation_call': 1.4444444444444444}
    """
    last: dict[str, dict] = {}
    for r in results:
        b = r.get("batch")
        if b and (b["id"] not in last or b["generation_calls"] > last[b["id"]]["generation_calls"]):
            last[b["id"]] = b
    if not last:
        return {"batches": 0, "mean_batch_size": float("nan"), "max_batch_size": 0,
                "states_per_generation_call": float("nan")}
    calls = sum(b["generation_calls"] for b in last.values())
    return {"batches": len(last), "mean_batch_size": sum(b["size"] for b in last.values()) / len(last),
            "max_batch_size": max(b["size"] for b in last.values()),
            "states_per_generation_call": sum(b["generation_states"] for b in last.values()) / calls if calls
            else float("nan")}


def run_config(base, replicas: int, args, warm: list[str], bursts: list[list[str]]) -> dict[str, Any]:
    """One replica count: start the app, warm it up, the bursts, delete the app."""
    from ray import serve

    from kairos import server as srv

    cfg = base.replace(replicas=replicas)
    t0 = time.perf_counter()
    url, cfg = srv.start_on_a_free_port(cfg, log_to_driver=False)
    base.port = cfg.port  # the next replica count reuses the running proxy
    startup = time.perf_counter() - t0
    model = cfg.models[0]
    try:
        for _ in range(2):  # every replica sees requests (Serve routes by queue length)
            asyncio.run(_burst(url, model, warm[:args.warmup * replicas], args.stream))
        results, walls = [], []
        for qs in bursts:
            res, wall = asyncio.run(_burst(url, model, qs, args.stream))
            results += res
            walls.append(wall)
            log.info("  %d replica(s): %d requests in %.2f s (%d errors)", replicas, len(qs), wall,
                     sum(r["error"] is not None for r in res))
    finally:
        serve.delete(cfg.app_name)
    ok = [r for r in results if r["error"] is None]
    lat = [r["latency_s"] for r in ok]
    return {"replicas": replicas, "requests": len(results), "errors": len(results) - len(ok),
            "error_examples": sorted({r["error"] for r in results if r["error"]})[:3],
            "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95), "max_s": max(lat) if lat else float("nan"),
            "requests_per_s": len(ok) / sum(walls), "burst_seconds": walls, "startup_s": startup,
            "replicas_seen": len({r["batch"]["replica"] for r in ok}), **batching(ok),
            "steps_per_question": sum(r["steps"] for r in ok) / max(1, len(ok)),
            "calls_per_question": sum(r["calls"] for r in ok) / max(1, len(ok)),
            "answers": [r.get("answer") for r in results]}


def machine() -> dict[str, Any]:
    """The CPU model (``lscpu``'s Model name), core count, and the source commit."""
    model = platform.processor()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), model)
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"cpu": model, "cores": os.cpu_count(), "commit": commit, "python": platform.python_version()}


def markdown(result: dict) -> str:
    base = result["configs"][0]
    lines = [f"| replicas | requests | errors | p50 (s) | p95 (s) | max (s) | requests/s | × {base['replicas']} "
             "replica | mean batch size | states per generation call |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["configs"]:
        lines.append(f"| {c['replicas']} | {c['requests']} | {c['errors']} | {c['p50_s']:.2f} | {c['p95_s']:.2f} | "
                     f"{c['max_s']:.2f} | {c['requests_per_s']:.1f} | "
                     f"{c['requests_per_s'] / base['requests_per_s']:.2f} | {c['mean_batch_size']:.1f} | "
                     f"{c['states_per_generation_call']:.1f} |")
    return "\n".join(lines) + "\n"


def _main(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from envs.core.io import write_json
    from envs.core.microworld.artifact import load_artifact
    from kairos import server as srv
    from kairos.config import ServeConfig

    for name in ("httpx", "httpx2", "openai"):  # one line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.requests < 1 or args.bursts < 1 or not args.replica_counts or min(args.replica_counts) < 1:
        raise ValueError("--requests, --bursts and every --replicas value must be >= 1")
    if not (args.policy or args.bench):  # the default: a FLARE-style trigger on the micro-world (RSUS's entropy part)
        args.policy = "minprob<0.5"
        if args.env_config is None:
            args.env_config = {"rsus_components": ["ent"]}
    from kairos.server import config_from_args

    args.config, args.model = None, None
    args.num_cpus = max(os.cpu_count() or 1, int(max(args.replica_counts) * args.replica_cpus + 0.999))
    args.port = srv.free_port()
    base: ServeConfig = config_from_args(args)
    base.check_paths()
    base = base.resolved()
    questions = [q.text for q in load_artifact(None, with_model=False).questions[args.split]]
    need = args.requests * args.bursts
    if need + args.warmup * max(args.replica_counts) > len(questions):
        raise ValueError(f"{need} measured + warm-up questions > the {len(questions)} of split '{args.split}'")
    bursts = [questions[i * args.requests:(i + 1) * args.requests] for i in range(args.bursts)]
    warm = questions[need:need + args.warmup * max(args.replica_counts)]
    srv.init_ray(base, temp_dir=tempfile.mkdtemp(prefix="/tmp/kbench-"), log_to_driver=False)
    try:
        configs = []
        for r in args.replica_counts:
            log.info("serve bench: %d replica(s), %d × %d requests", r, args.bursts, args.requests)
            configs.append(run_config(base, r, args, warm, bursts))
    finally:
        srv.stop(base)
    same = all(c["answers"] == configs[0]["answers"] for c in configs)
    for c in configs:
        c.pop("answers")
    result = {"command": "kairos " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
              "machine": machine(), "pipeline": base.pipeline.to_dict(), "requests_per_burst": args.requests,
              "bursts": args.bursts, "stream": args.stream, "max_batch_size": base.max_batch_size,
              "batch_wait_timeout_s": base.batch_wait_timeout_s, "replica_cpus": base.replica_cpus,
              "answers_equal_across_configs": same, "configs": configs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "serve_bench.json", result)
    (out / "serve_bench.md").write_text(markdown(result))
    t = Table(title=f"kairos serve under load: {args.bursts} × {args.requests} concurrent requests "
                    f"({'streamed' if args.stream else 'plain'}), {result['machine']['cpu']}")
    for col in ("replicas", "errors", "p50 s", "p95 s", "req/s", "× base", "mean batch", "states/gen call"):
        t.add_column(col, justify="right")
    for c in configs:
        t.add_row(str(c["replicas"]), str(c["errors"]), f"{c['p50_s']:.2f}", f"{c['p95_s']:.2f}",
                  f"{c['requests_per_s']:.1f}", f"{c['requests_per_s'] / configs[0]['requests_per_s']:.2f}",
                  f"{c['mean_batch_size']:.1f}", f"{c['states_per_generation_call']:.1f}")
    Console().print(t)
    print(json.dumps({"answers_equal_across_configs": same, "out": str(out / "serve_bench.json")}))
    return 0 if all(c["errors"] == 0 for c in configs) and same else 1
