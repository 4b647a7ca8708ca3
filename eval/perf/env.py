"""``kairos bench env``: env throughput, cache effectiveness and the oracle on the micro-world.

Measured (printed as a table, written as JSON):
* env steps/s with a cold cache at batch 1 and batch 8 (one batched generation call per round for the 8
  copies; target: batch 8 >= 3x batch 1) — measured ``--repeats`` times interleaved, as wall-clock and as
  CPU-time (this process) steps/s, medians reported, since a busy neighbour on a shared machine moves wall
  figures by ±20 % — and with a warm cache (target >= 5,000 steps/s);
* the trajectory-cache hit rate during a training-like random-policy run (random questions of the train
  split, Bernoulli(0.3) retrieval);
* the oracle (best action sequence per question, from the cache) vs never / always retrieving: accuracy
  and retrieval calls per question at λ_retrieval = 0.1.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="env steps/s (cold/warm cache, batch 1/8), cache hit rate, oracle")
    p.add_argument("--artifact", default=None, help="micro-world artifact (default: the shipped one)")
    p.add_argument("--steps", type=int, default=400, help="env steps per throughput measurement")
    p.add_argument("--episodes", type=int, default=600, help="episodes of the training-like run")
    p.add_argument("--pool", type=int, default=128, help="training question pool of the training-like run")
    p.add_argument("--oracle-questions", type=int, default=100, help="dev questions for the oracle")
    p.add_argument("--hotpotqa-steps", type=int, default=32,
                   help="env steps per cold measurement on the HotpotQA preset (SmolLM2-135M; 0 = skip)")
    p.add_argument("--repeats", type=int, default=3,
                   help="cold-cache measurements per batch size, interleaved b1/b8 (medians are reported)")
    p.add_argument("--content-repeats", type=int, default=3,
                   help="interleaved repeats of the content-overhead measurement (signals with vs without 'content', "
                        "batch 8, cold SQLite cache; 0: skip)")
    p.add_argument("--profile", action="store_true",
                   help="also profile a cold run at batch 1 and 8: forward passes per round, rows per forward, "
                        "active row slots, generation's share of the time")
    p.add_argument("--out", default="runs/bench/env_bench.json", help="JSON output")
    p.set_defaults(func=_main)


def _policy(rng: np.random.Generator, n: int, p: float = 0.3) -> np.ndarray:
    return (rng.random(n) < p).astype(np.int64)


def steps_per_second(make, batch: int, steps: int, seed: int = 0, cpu: bool = False):
    """Run ``steps`` env steps (random policy) on a fresh batched env; returns (steps/s, steps done), or
    with ``cpu=True`` (wall steps/s, steps per CPU-second of this process, steps done)."""
    env = make(batch)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    done = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while done < steps:
        env.step(_policy(rng, batch))
        done += batch
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return (done / dt, done / max(dc, 1e-9), done) if cpu else (done / dt, done)


def interleaved_throughput(make, steps: int, repeats: int, batches: tuple[int, ...] = (1, 8),
                           seed: int = 11) -> dict[str, Any]:
    """Cold-cache steps/s at each batch size, measured ``repeats`` times in turn (b1, b8, b1, b8, …) so a
    busy neighbour slows both alike; per-repeat wall and CPU-time figures, their medians and the median of
    the per-repeat ratios (last batch over first)."""
    runs: dict[int, list[dict[str, float]]] = {b: [] for b in batches}
    for r in range(repeats):
        for b in batches:
            wall, cpu, _ = steps_per_second(make, b, steps, seed=seed + r, cpu=True)
            runs[b].append({"wall": wall, "cpu": cpu})
    lo, hi = batches[0], batches[-1]
    out: dict[str, Any] = {"repeats": repeats, "runs": {str(b): v for b, v in runs.items()}}
    for kind in ("wall", "cpu"):
        for b in batches:
            out[f"batch{b}_{kind}_steps_s"] = round(float(np.median([x[kind] for x in runs[b]])), 2)
        ratios = [h[kind] / x[kind] for x, h in zip(runs[lo], runs[hi])]
        out[f"ratio_{kind}"] = round(float(np.median(ratios)), 2)
        out[f"ratio_{kind}_range"] = [round(min(ratios), 2), round(max(ratios), 2)]
    return out


def profile_batched(make, model, batch: int, steps: int, seed: int = 11) -> dict[str, Any]:
    """Where a cold batched run spends its time: cProfile's share of ``generate_steps`` (the LM's forward
    passes and decoding), forward passes per round, rows per forward and the share of row slots still
    generating (rows that ended their line ride along as padding). ``model`` is the reasoner's LM (its
    ``forward`` is wrapped to count; restored afterwards)."""
    import cProfile
    import pstats

    counts: list[tuple[int, int]] = []  # (rows, rows still generating) per forward
    orig = model.forward

    def counting(*a, **kw):
        ids, mask = kw.get("input_ids"), kw.get("attention_mask")
        active = int(mask[:, -1].sum()) if ids is not None and mask is not None and ids.shape[1] == 1 else ids.shape[0]
        counts.append((int(ids.shape[0]), active))
        return orig(*a, **kw)

    model.forward = counting
    prof = cProfile.Profile()
    try:
        prof.enable()
        _, done = steps_per_second(make, batch, steps, seed=seed)
        prof.disable()
    finally:
        model.forward = orig
    stats = pstats.Stats(prof).stats
    total = max(v[3] for v in stats.values())  # cumulative time of the outermost call
    gen = sum(v[3] for (f, _, name), v in stats.items() if name == "generate_steps" and f.endswith("stepgen.py"))
    rows = np.array(counts) if counts else np.zeros((0, 2))
    rounds = done / batch
    return {"batch": batch, "steps": done, "forwards": len(counts),
            "forwards_per_round": round(len(counts) / max(rounds, 1), 2),
            "mean_rows_per_forward": round(float(rows[:, 0].mean()), 2) if len(rows) else 0.0,
            "active_slot_share": round(float(rows[:, 1].sum() / max(rows[:, 0].sum(), 1)), 3),
            "generate_steps_time_share": round(gen / total, 3) if total else 0.0}


def content_overhead(base, steps: int, repeats: int, batch: int = 8, seed: int = 31) -> dict[str, Any]:
    """What the content fields cost: CPU-time env steps/s with ``signals + [content]`` vs without, each on a fresh
    SQLite trajectory cache (so the larger records' writes count), measured in turn ``repeats`` times. The
    overhead is ``median(steps/s without ÷ steps/s with) − 1`` (a share of the env step's CPU time)."""
    import tempfile

    from envs.components import build_components
    from envs.vector import make_batched

    cfgs = {"without": base, "with": base.replace(signals=[*base.signals, "content"])}
    comps = {k: build_components(c) for k, c in cfgs.items()}
    runs: dict[str, list[float]] = {k: [] for k in cfgs}
    for r in range(repeats):
        for k, cfg in cfgs.items():
            with tempfile.TemporaryDirectory() as tmp:
                c = cfg.replace(cache_path=f"{tmp}/cache.sqlite")
                _, cpu, _ = steps_per_second(lambda b, c=c, k=k: make_batched(b, c, comps[k]), batch, steps,
                                             seed=seed + r, cpu=True)
            runs[k].append(cpu)
    ratios = [a / b for a, b in zip(runs["without"], runs["with"])]
    return {"batch": batch, "steps": steps, "repeats": repeats, "cpu_steps_s": runs,
            "overhead_share": round(float(np.median(ratios)) - 1.0, 4),
            "overhead_range": [round(min(ratios) - 1.0, 4), round(max(ratios) - 1.0, 4)]}


def run(artifact: str | None, steps: int, episodes: int, oracle_questions: int, out: str | None,
        pool: int = 128, hotpotqa_steps: int = 0, repeats: int = 3, profile: bool = False,
        content_repeats: int = 0) -> dict[str, Any]:
    import torch

    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.oracle import best_leaf, enumerate_leaves
    from envs.retrieval_env import RetrievalTimingEnv
    from envs.vector import make_batched

    torch.set_num_threads(1)
    base = EnvConfig(artifact=artifact, split="train", rsus_components=["ent"])
    comps = build_components(base)
    res: dict[str, Any] = {"config": base.to_dict(), "threads": torch.get_num_threads()}

    # 1. cold cache (in-memory cache, fresh per measurement) at batch 1 and 8
    def make_cold(b):
        return make_batched(b, base, comps)
    cold = interleaved_throughput(make_cold, steps, repeats)
    res["cold"] = cold
    res["cold_batch1_steps_s"], res["cold_batch8_steps_s"] = cold["batch1_wall_steps_s"], cold["batch8_wall_steps_s"]
    res["batch8_over_batch1"] = cold["ratio_wall"]
    res["batch8_over_batch1_cpu"] = cold["ratio_cpu"]
    if profile:
        res["profile"] = {f"batch{b}": profile_batched(make_cold, comps.reasoner.model, b, steps) for b in (1, 8)}
    # 2. warm cache: the same episodes again on the same cache
    warm_env = make_batched(8, base, comps)
    steps_per_second(lambda b: warm_env, 8, steps, seed=12)          # fill
    warm_env.envs[0].cache.hits = warm_env.envs[0].cache.misses = 0
    sps, _ = steps_per_second(lambda b: warm_env, 8, steps, seed=12)  # replay
    res["warm_steps_s"] = round(sps, 1)
    res["warm_hit_rate"] = round(warm_env.envs[0].cache.hit_rate, 4)
    # 3. training-like run: random questions of a training pool, random policy, one shared cache
    train_env = make_batched(8, base.replace(max_questions=pool), comps)
    cache = train_env.envs[0].cache
    cache.hits = cache.misses = 0
    rng = np.random.default_rng(3)
    train_env.reset(seed=3)
    finished = 0
    while finished < episodes:
        _, _, te, tr, _ = train_env.step(_policy(rng, 8))
        finished += int(np.sum(te | tr))
    res["training_run"] = {"episodes": finished, "pool": pool, "hit_rate": round(cache.hit_rate, 4),
                           "records": len(cache)}
    # 4. oracle vs never / always on dev questions
    dev = RetrievalTimingEnv(base.replace(split="dev"), components=None)
    lam = {"retrieval_calls": 0.1}
    rows = {"never": [], "always": [], "oracle": []}
    n = min(oracle_questions, len(dev.c.questions))
    for qi in range(n):
        leaves = enumerate_leaves(dev, qi)
        never = next(lf for lf in leaves if all(a == 0 for a in lf.actions))
        always = max(leaves, key=lambda lf: (lf.calls, lf.actions))
        rows["never"].append(never)
        rows["always"].append(always)
        rows["oracle"].append(best_leaf(leaves, lam))
    res["oracle"] = {k: {"accuracy": round(float(np.mean([lf.quality for lf in v])), 4),
                         "calls_per_question": round(float(np.mean([lf.calls for lf in v])), 3),
                         "reward_at_lambda_0.1": round(float(np.mean([lf.quality - 0.1 * lf.calls for lf in v])), 4)}
                     for k, v in rows.items()}
    res["oracle"]["n_questions"] = n
    # 5. what the content fields (question / step / context embeddings) cost per env step
    if content_repeats > 0:
        res["content_overhead"] = content_overhead(base, steps, content_repeats)
    # 6. the HotpotQA preset on SmolLM2-135M (cold cache, batch 1 and 8)
    if hotpotqa_steps > 0:
        hp = EnvConfig(task="hotpotqa", reasoner="hf", split="dev[0:64]", max_steps=4, max_step_tokens=32,
                       rsus_components=["ent"])
        hcomps = build_components(hp)
        for b in (1, 8):
            sps, _ = steps_per_second(lambda n: make_batched(n, hp, hcomps), b, hotpotqa_steps, seed=21)
            res[f"hotpotqa_cold_batch{b}_steps_s"] = round(sps, 2)
        res["hotpotqa_batch8_over_batch1"] = round(res["hotpotqa_cold_batch8_steps_s"]
                                                   / res["hotpotqa_cold_batch1_steps_s"], 2)
    if out:
        from envs.core.io import write_json

        write_json(out, res)
    return res


def format_table(res: dict[str, Any]) -> str:
    lines = ["| measure | value |", "|---|---|"]
    for k in ("cold_batch1_steps_s", "cold_batch8_steps_s", "batch8_over_batch1", "batch8_over_batch1_cpu",
              "warm_steps_s", "warm_hit_rate"):
        lines.append(f"| {k} | {res[k]} |")
    c = res["cold"]
    lines.append(f"| cold: repeats (interleaved b1/b8), ratio range wall / CPU | {c['repeats']}, "
                 f"{c['ratio_wall_range']} / {c['ratio_cpu_range']} |")
    for k in ("hotpotqa_cold_batch1_steps_s", "hotpotqa_cold_batch8_steps_s", "hotpotqa_batch8_over_batch1"):
        if k in res:
            lines.append(f"| {k} | {res[k]} |")
    for name, p in res.get("profile", {}).items():
        lines.append(f"| profile {name}: forwards/round, rows/forward, active slots, generation time share | "
                     f"{p['forwards_per_round']}, {p['mean_rows_per_forward']}, {p['active_slot_share']}, "
                     f"{p['generate_steps_time_share']} |")
    if "content_overhead" in res:
        co = res["content_overhead"]
        lines.append(f"| content fields' overhead (CPU time per env step, batch {co['batch']}, SQLite cache; median, "
                     f"range of {co['repeats']}) | {100 * co['overhead_share']:+.1f} % "
                     f"[{100 * co['overhead_range'][0]:+.1f}, {100 * co['overhead_range'][1]:+.1f}] |")
    tr = res["training_run"]
    lines.append(f"| training-like run hit rate ({tr['episodes']} episodes, pool {tr['pool']}) | {tr['hit_rate']} |")
    lines += ["", f"Oracle vs fixed policies ({res['oracle']['n_questions']} dev questions, λ_retrieval = 0.1)", "",
              "| policy | accuracy | calls/question | reward |", "|---|---|---|---|"]
    for k in ("never", "always", "oracle"):
        r = res["oracle"][k]
        lines.append(f"| {k} | {r['accuracy']} | {r['calls_per_question']} | {r['reward_at_lambda_0.1']} |")
    return "\n".join(lines)


def _main(args) -> int:
    res = run(args.artifact, args.steps, args.episodes, args.oracle_questions, args.out, args.pool,
              args.hotpotqa_steps, args.repeats, args.profile, args.content_repeats)
    print(format_table(res))
    log.info("wrote %s", Path(args.out).resolve() if args.out else "-")
    return 0
