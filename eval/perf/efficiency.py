"""``kairos bench efficiency``: the efficiency table — what each component of the efficiency stack saves.

Two parts (``--parts``, both by default):

**ttft** — KV-cache reuse after an injection. When the env retrieves for a step it regenerates that step with the
evidence appended after the accepted steps (``injection: step``). A live reasoner state keeps the KV cache of its
prefix, so only the evidence tokens are prefilled before the first new token (**KV reuse**); a state rebuilt from
its snapshot — a trajectory-cache replay, a restarted replica, an integration that re-prompts the model — prefills
the whole prefix again (**no reuse**). Measured on the model's own steps: greedy closed-book chains of the env's
questions; for every step ``j >= 2`` the top-1 passage for the step's query (the env's default query mode) is
injected into the live state before it, and the **TTFT** (prefill plus the first generated token, batch 1, the
env's hidden-state capture on) and the whole regenerated **step** are timed with the cache and without it,
``--repeats`` times each in alternating order, median per state. The first token and the whole step must be
identical both ways (checked: the cache changes the cost, never the output).

**table** — the ReaLM efficiency table. CoT, ``SingleRAG[1 passage]`` (the question as its query),
``IRCoT[step query, 1 passage, ≤4]`` (retrieval at every step), ``FLARE[unmasked]`` (``minprob`` below θ; θ
calibrated on the ``--calib`` questions unless ``--flare-threshold`` is given) — the variants of the benchmark's
rows, in the env as configured — and, with ``--policy``, a learned policy run whole
episodes of the env (its trajectory cache off: every step is generated) on the ``--questions`` slice, batch
``--batch`` (1: one question at a time, as a served request), under five settings:

* **naive** — ``kv_reuse: false`` (a regenerated step re-encodes its whole prompt), every query searched;
* **KV reuse**, **prefetch** (``prefetch: true``: after each retrieval the next step's likely queries are searched
  on a background thread), **compression** (``compress_evidence: true``, τ_rel = ``tau_rel``) — each alone on top
  of naive;
* **all on**.

Per (setting, method): calls per question, end-to-end seconds per question (wall time of the run / questions),
**seconds per retrieval call** — the wall time of the env's retrieve phase (query, search, compression, injection,
the regenerated step and its signals; ``Components.phase_seconds``) per call —, tokens per question (generated +
injected), accuracy and the **accuracy gain per call** over CoT ((accuracy − CoT's) / calls/q). Prefetch: the share of lookups answered by a
prefetched entry on the model's own steps (``prefetch_hit_rate``) and the share of prefetched entries used.
Compression: the injected tokens kept and the accuracy gain kept against naive. Targets: per-call time
with every component on <= 0.5x naive; TTFT with KV reuse <= 0.6x without; compression keeps >= 90 % of the
accuracy gain with <= 50 % of the injected tokens. Prints the tables, writes ``efficiency.json`` and
``efficiency.md``.

Example (shell)::

    kairos bench efficiency --policy runs/quickstart/train/policy_trigger --out runs/bench/efficiency
    kairos bench efficiency --train-config configs/train_hotpotqa.yaml --questions 0:8 --flare-threshold 0.3 \
        --out runs/bench/efficiency_smollm2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("efficiency", help="the efficiency stack: TTFT after an injection with vs without "
                                                 "KV reuse; per-call latency of CoT / SingleRAG[1 passage] / "
                                                 "IRCoT[step query, 1 passage, ≤4] / FLARE[unmasked] / learned, "
                                                 "naive vs each of KV reuse, prefetch, compression vs all on")
    p.add_argument("--train-config", default="configs/experiments/microworld/train_microworld.yaml",
                   help="a training config whose env (reasoner, task, corpus) is measured")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an env field")
    p.add_argument("--parts", nargs="+", choices=("ttft", "table"), default=["ttft", "table"],
                   help="ttft: KV reuse after an injection; table: the per-call latency table")
    p.add_argument("--split", default=None, help="the env's question split (default: the training config's)")
    p.add_argument("--questions", default="0:64", help="questions of the split, START:STOP (ttft: chains of them; "
                                                       "table: the episodes)")
    p.add_argument("--max-steps", type=int, default=4, help="ttft: closed-book steps per chain")
    p.add_argument("--repeats", type=int, default=5, help="ttft: timings per state and variant (median)")
    p.add_argument("--policy", default=None, help="table: an exported policy directory (a learned row; trained "
                                                  "on this env's observation)")
    p.add_argument("--flare-threshold", type=float, default=None,
                   help="table: FLARE's θ on minprob (default: calibrated on --calib, best reward)")
    p.add_argument("--calib", default="0:32", help="table: questions FLARE's θ is calibrated on, START:STOP")
    p.add_argument("--batch", type=int, default=1, help="table: questions in flight (1: one request at a time)")
    p.add_argument("--out", default="runs/bench/efficiency", help="output folder")
    p.set_defaults(func=run)


def _pad_id(reasoner) -> int:
    pad = getattr(reasoner, "pad_id", None)
    return int(pad if pad is not None else reasoner.tok.pad_id)


def _setting(reasoner, name: str):
    """A generation setting of the micro-world reasoner (attribute) or the HF one (its config)."""
    return getattr(reasoner, name) if hasattr(reasoner, name) else getattr(reasoner.cfg, name)


def _generate(reasoner, gen, max_new_tokens: int):
    from agents.reasoners.stepgen import generate_steps

    t0 = time.perf_counter()
    out = generate_steps(reasoner.model, [gen], stop_ids=reasoner.stop_ids, header_end_id=None,
                         pad_id=_pad_id(reasoner), max_new_tokens=max_new_tokens,
                         capture_hidden=_setting(reasoner, "capture_hidden"))[0]
    return time.perf_counter() - t0, out.ids


def injection_states(comps, questions: range, max_steps: int) -> list[dict[str, Any]]:
    """Live states before each closed-book step ``j >= 2`` with the step's top-1 passage: ``[{before, evidence,
    prefix_tokens}]`` (the env's reasoner, query mode and retriever)."""
    r = comps.reasoner
    qs = [comps.questions[i] for i in questions]
    states = [r.start(comps.question_text(q)) for q in qs]
    texts = [comps.question_text(q) for q in qs]
    pairs = []
    for j in range(1, max_steps + 1):
        live = [i for i, s in enumerate(states) if not s.done]
        if not live:
            break
        res = r.next_step([states[i] for i in live])
        for i, (step, after) in zip(live, res):
            if j >= 2 and not step.is_answer and states[i].gen is not None and states[i].gen.cache is not None:
                query = comps.querygen(step.text, {"question": texts[i]}, 0)
                hits = comps.retriever.search([query], k=1)[0]
                if hits:
                    pairs.append({"before": states[i], "evidence": hits[0].text,
                                  "prefix_tokens": len(states[i].gen.ids)})
            states[i] = after
    return pairs


def measure(comps, pairs: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """TTFT and step time with and without the prefix's KV cache (see the module docstring)."""
    from agents.reasoners.stepgen import GenState

    r = comps.reasoner
    rows = []
    for p in pairs:
        reuse = r.with_evidence(p["before"], [p["evidence"]], "step").gen
        fresh = GenState(list(reuse.ids))  # what a replay or a restarted replica holds: the ids, no cache
        t: dict[str, list[float]] = {"ttft_reuse": [], "ttft_fresh": [], "step_reuse": [], "step_fresh": []}
        outs = {}
        for k in range(repeats):
            order = (("reuse", reuse), ("fresh", fresh)) if k % 2 == 0 else (("fresh", fresh), ("reuse", reuse))
            for name, gen in order:
                dt, first = _generate(r, gen, 1)
                t[f"ttft_{name}"].append(dt)
                dt, ids = _generate(r, gen, _setting(r, "max_step_tokens"))
                t[f"step_{name}"].append(dt)
                outs.setdefault(name, (first, ids))
        rows.append({"prefix_tokens": p["prefix_tokens"], "evidence_tokens": len(reuse.ids) - p["prefix_tokens"],
                     "cached_tokens": reuse.n_cached, "same_output": outs["reuse"] == outs["fresh"],
                     **{k: statistics.median(v) for k, v in t.items()}})
    n = len(rows)
    if not n:
        raise ValueError("no step >= 2 with a cached prefix and a retrieved passage: raise --questions / --max-steps")

    def mean(k):
        return sum(row[k] for row in rows) / n

    return {"states": n, "prefix_tokens_mean": mean("prefix_tokens"), "evidence_tokens_mean": mean("evidence_tokens"),
            "same_output": sum(row["same_output"] for row in rows),
            "ttft_reuse_ms": 1000 * mean("ttft_reuse"), "ttft_fresh_ms": 1000 * mean("ttft_fresh"),
            "ttft_ratio": mean("ttft_reuse") / mean("ttft_fresh"),
            "step_reuse_ms": 1000 * mean("step_reuse"), "step_fresh_ms": 1000 * mean("step_fresh"),
            "step_ratio": mean("step_reuse") / mean("step_fresh"), "rows": rows}


#: the table's settings: (name, env overrides) — naive, each component alone on top of it, all on
SETTINGS: tuple[tuple[str, dict[str, bool]], ...] = (
    ("naive", {"kv_reuse": False, "prefetch": False, "compress_evidence": False}),
    ("KV reuse", {"kv_reuse": True, "prefetch": False, "compress_evidence": False}),
    ("prefetch", {"kv_reuse": False, "prefetch": True, "compress_evidence": False}),
    ("compression", {"kv_reuse": False, "prefetch": False, "compress_evidence": True}),
    ("all on", {"kv_reuse": True, "prefetch": True, "compress_evidence": True}),
)


def table_methods(policy: str | None, flare_threshold: float) -> list[tuple[str, Any, str | None]]:
    """``[(name, trigger, query mode)]`` of the table: CoT, SingleRAG[1 passage] (the question as its query),
    IRCoT[step query, 1 passage, ≤4], FLARE[unmasked] (θ given) and the learned policy — the variants, in the env as
    configured (one passage per retrieval, its caps); mode ``None``: the env's default query mode."""
    from policies.triggers import TRIGGERS

    flare = "FLARE[unmasked]"
    methods = [("CoT", TRIGGERS.make("never"), None), ("SingleRAG[1 passage]", TRIGGERS.make("single"), "question"),
               ("IRCoT[step query, 1 passage, ≤4]", TRIGGERS.make("always"), None),
               (flare, TRIGGERS.make("threshold", "minprob", float(flare_threshold), "below", name=flare), None)]
    if policy:
        from policies.rl.export import LearnedTrigger

        methods.append(("learned", LearnedTrigger.load(policy, name="learned"), None))
    return methods


def calibrate_flare(env_config, questions: range, batch: int) -> dict[str, Any]:
    """FLARE's θ on ``questions`` of ``env_config`` (an :class:`~envs.env_config.EnvConfig`): the auto grid of
    minprob over the CoT steps, best reward (ties: fewer calls)."""
    from envs.components import build_components
    from eval.bench.policies import auto_grid
    from policies.triggers import TRIGGERS
    from train.evaluate import evaluate_policy

    comps = build_components(env_config)
    qs = list(questions)
    cot = evaluate_policy(TRIGGERS.make("never"), comps.config, qs, batch_size=batch, components=comps,
                          return_episodes=True)
    sweep = []
    for t in auto_grid(cot["episodes"], "minprob", "below"):
        r = evaluate_policy(TRIGGERS.make("threshold", "minprob", t, "below"), comps.config, qs, batch_size=batch,
                            components=comps)
        sweep.append({"threshold": t, "reward": r["reward"], "calls": r["calls_per_question"]})
    if not sweep:
        raise ValueError("FLARE calibration: no minprob values on the CoT steps of --calib")
    best = max(sweep, key=lambda s: (s["reward"], -s["calls"]))
    log.info("FLARE θ = %.6g (calibrated on %d questions: reward %.3f at %.2f calls)", best["threshold"], len(qs),
             best["reward"], best["calls"])
    return {"questions": f"{questions.start}:{questions.stop}", "sweep": sweep,
            **max(sweep, key=lambda s: (s["reward"], -s["calls"]))}


def _compression(episodes: list[dict]) -> dict[str, int]:
    """Injected tokens before / after compression, summed over the retrievals of ``episodes``."""
    before = after = 0
    for e in episodes:
        for d in e["decisions"]:
            c = d.get("compression")
            if c:
                before += int(c["tokens_before"])
                after += int(c["tokens_after"])
    return {"tokens_before": before, "tokens_after": after}


def measure_table(env_config, methods: list[tuple[str, Any, str | None]], questions: range, batch: int,
                  settings=SETTINGS) -> list[dict[str, Any]]:
    """One row per (setting, method) of ``env_config`` (an :class:`~envs.env_config.EnvConfig`): see the module
    docstring."""
    from agents.retrievers.cache import QueryCache
    from envs.components import build_components
    from policies.triggers import TRIGGERS, FixedModeTrigger
    from train.evaluate import evaluate_policy

    qs = list(questions)
    modes = list(env_config.query_modes)
    extra = [m for _, _, m in methods if m is not None and m not in modes]
    rows = []
    for sname, over in settings:
        comps = build_components(env_config.with_overrides({"query_modes": modes + extra, **over}))
        evaluate_policy(TRIGGERS.make("always"), comps.config, qs[:2], batch_size=batch, components=comps)  # warm
        for mname, trigger, mode in methods:
            run_cfg = comps.config
            if mode is not None:  # a fixed query formulation: QueryGen actions, the trigger's mode fixed
                trigger = FixedModeTrigger(trigger, list(run_cfg.query_modes).index(mode), mode)
                run_cfg = run_cfg.replace(querygen=True)
            if comps.prefetcher is not None:  # each run starts with an empty query cache
                comps.prefetcher.wait()
                comps.retriever.cache = QueryCache()
            comps.phase_seconds.clear()
            t0 = time.perf_counter()
            r = evaluate_policy(trigger, run_cfg, qs, batch_size=batch, components=comps, return_episodes=True)
            wall = time.perf_counter() - t0
            spent, n_calls = comps.phase_seconds.get("retrieve", [0.0, 0])
            row = {"setting": sname, "method": mname, "query_mode": mode or modes[0], "n": r["n"],
                   "accuracy": r["accuracy"],
                   "calls": r["calls_per_question"], "seconds": wall / max(1, r["n"]),
                   "tokens": r["tokens_per_question"], **_compression(r["episodes"])}
            if n_calls:  # the retrieve phase's wall time per call: search, injection, regeneration, signals
                row["seconds_per_call"] = spent / n_calls
            if comps.prefetcher is not None:
                comps.prefetcher.wait()
                st = comps.retriever.stats
                row.update(lookups=st.lookups, prefetch_hit_rate=st.prefetch_hit_rate,
                           prefetch_precision=st.prefetch_precision, prefetched=st.prefetched)
            rows.append(row)
            log.info("efficiency %s / %s: acc %.3f, %.2f calls, %.3f s/q, %s s/call", sname, mname, row["accuracy"],
                     row["calls"], row["seconds"], _f(row.get("seconds_per_call")))
        if comps.prefetcher is not None:
            comps.prefetcher.close()
    cot = {r["setting"]: r for r in rows if r["method"] == "CoT"}
    for r in rows:
        base = cot.get(r["setting"])
        if base is not None and r["calls"] > 0:
            r["gain_per_call"] = (r["accuracy"] - base["accuracy"]) / r["calls"]
    return rows


def table_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: per-call time of each setting / naive's, prefetch hit rates, compression's tokens and gain kept."""
    by = {(r["setting"], r["method"]): r for r in rows}
    cot = {r["setting"]: r for r in rows if r["method"] == "CoT"}
    out: dict[str, Any] = {}
    for (sname, mname), r in by.items():
        naive = by.get(("naive", mname))
        if sname == "naive" or naive is None or "seconds_per_call" not in r or "seconds_per_call" not in naive:
            continue
        m = out.setdefault(mname, {})
        m[f"per_call_ratio[{sname}]"] = (r["seconds_per_call"] / naive["seconds_per_call"]
                                         if naive["seconds_per_call"] > 0 else float("nan"))
        if "prefetch_hit_rate" in r:
            m[f"prefetch_hit_rate[{sname}]"] = r["prefetch_hit_rate"]
        if sname == "compression" and r["tokens_before"]:
            gain_naive = naive["accuracy"] - cot["naive"]["accuracy"]
            m["compression_tokens_kept"] = r["tokens_after"] / r["tokens_before"]
            m["compression_gain_kept"] = ((r["accuracy"] - cot["compression"]["accuracy"]) / gain_naive
                                          if gain_naive > 0 else float("nan"))
    return out


def _f(x: Any, fmt: str = ".3f") -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else format(x, fmt)


def table_markdown(result: dict[str, Any]) -> str:
    t = result["table"]
    lines = [f"Efficiency table ({result['reasoner']}, questions {t['questions']} of split '{t['split']}', batch "
             f"{t['batch']}, FLARE θ = {t['flare_threshold']:.4g}; seconds are wall time per question):", "",
             "| setting | method | query | accuracy | calls / q | s / q | s / call | tokens / q | gain / call | "
             "prefetch hit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
        lines.append(f"| {r['setting']} | {r['method']} | {r['query_mode']} | {r['accuracy']:.3f} | {r['calls']:.2f} | {r['seconds']:.3f} | "
                     f"{_f(r.get('seconds_per_call'))} | {r['tokens']:.0f} | {_f(r.get('gain_per_call'))} | "
                     f"{_f(r.get('prefetch_hit_rate'), '.2f')} |")
    lines += ["", "| method | s/call all on ÷ naive | KV reuse ÷ naive | prefetch ÷ naive | compression ÷ naive | "
                  "prefetch hit (all on) | compression: tokens kept | compression: gain kept |",
              "|---|---|---|---|---|---|---|---|"]
    for mname, m in t["summary"].items():
        lines.append(f"| {mname} | **{_f(m.get('per_call_ratio[all on]'), '.2f')}** | "
                     f"{_f(m.get('per_call_ratio[KV reuse]'), '.2f')} | {_f(m.get('per_call_ratio[prefetch]'), '.2f')} | "
                     f"{_f(m.get('per_call_ratio[compression]'), '.2f')} | {_f(m.get('prefetch_hit_rate[all on]'), '.2f')} | "
                     f"{_f(m.get('compression_tokens_kept'), '.2f')} | {_f(m.get('compression_gain_kept'), '.2f')} |")
    lines += ["", "Targets: s/call all on <= 0.5x naive; compression keeps >= 90 % of the gain with <= 50 % "
                  "of the injected tokens; the prefetch hit rate as measured (the paper's: 37 %)."]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    parts = []
    if "kv_reuse" in result:
        parts.append(ttft_markdown(result))
    if "table" in result:
        parts.append(table_markdown(result))
    return "\n\n".join(parts)


def ttft_markdown(result: dict[str, Any]) -> str:
    m = result["kv_reuse"]
    return "\n".join([
        f"KV-cache reuse after an injection ({result['reasoner']}, {m['states']} states of steps >= 2, batch 1, "
        f"median of {result['repeats']}):", "",
        "| prefix tokens | evidence tokens | TTFT reuse (ms) | TTFT no reuse (ms) | TTFT ratio | step reuse (ms) | "
        "step no reuse (ms) | step ratio | same output |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {m['prefix_tokens_mean']:.0f} | {m['evidence_tokens_mean']:.0f} | {m['ttft_reuse_ms']:.2f} | "
        f"{m['ttft_fresh_ms']:.2f} | **{m['ttft_ratio']:.2f}** | {m['step_reuse_ms']:.2f} | {m['step_fresh_ms']:.2f} | "
        f"{m['step_ratio']:.2f} | {m['same_output']}/{m['states']} |",
        "", "Target: TTFT after injection with KV reuse <= 0.6x without."])


def run(args: argparse.Namespace) -> int:
    import json

    import torch

    from envs.components import build_components
    from envs.core.io import write_json, write_text
    from eval.bench.policies import parse_slice
    from eval.perf.service import train_env_config

    torch.set_num_threads(1)
    env_config = train_env_config(args)
    if args.split:
        env_config = env_config.replace(split=args.split)
    questions, calib = parse_slice(args.questions, "--questions"), parse_slice(args.calib, "--calib")
    if args.policy and not (Path(args.policy) / "spec.json").is_file():
        raise FileNotFoundError(f"--policy {args.policy}: no exported policy there (spec.json)")
    result: dict[str, Any] = {"train_config": args.train_config, "overrides": args.set, "split": env_config.split,
                              "questions": args.questions, "threads": torch.get_num_threads()}
    if "ttft" in args.parts:
        comps = build_components(env_config)
        log.info("efficiency bench (ttft): %s, questions %s", comps.config.reasoner, args.questions)
        pairs = injection_states(comps, questions, args.max_steps)
        if pairs:  # warm-up outside the timing (lazy inits, allocator)
            measure(comps, pairs[:1], 1)
        result.update(reasoner=comps.config.reasoner, repeats=args.repeats, kv_reuse=measure(comps, pairs, args.repeats))
        del comps
    if "table" in args.parts:
        result.setdefault("reasoner", env_config.reasoner)
        flare = ({"threshold": args.flare_threshold, "given": True} if args.flare_threshold is not None
                 else calibrate_flare(env_config, calib, max(args.batch, 16)))
        rows = measure_table(env_config, table_methods(args.policy, flare["threshold"]), questions, args.batch)
        result["table"] = {"questions": args.questions, "split": env_config.split, "batch": args.batch,
                           "policy": args.policy, "flare_threshold": flare["threshold"], "flare_calibration": flare,
                           "tau_rel": env_config.tau_rel, "rows": rows, "summary": table_summary(rows)}
    out = Path(args.out)
    write_json(out / "efficiency.json", result)
    md = markdown(result)
    write_text(out / "efficiency.md", md)
    print(md)
    if "kv_reuse" in result:
        print(json.dumps({k: v for k, v in result["kv_reuse"].items() if k != "rows"}, indent=1))
    return 0
