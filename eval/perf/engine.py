"""``kairos bench engine``: the same env on the ``hf`` and the ``vllm`` backends, side by side, in one run.

For each batch size, the same HotpotQA questions run through the env's own loop (greedy chains, never retrieving: the
CoT policy, so every decision is a generated step) on each backend, each in a process of its own (its own peak
memory, its own engine):

* **chain agreement** — the share of questions whose step texts are identical on both backends, and for every
  difference its cause: the first token where the chains part, with the ``hf`` model's top-2 log-probability margin
  there (a near tie that float rounding decides) — ``--explain`` computes it;
* **decisions/s, episodes/s, generated tokens/s** of the env loop, and the **peak RSS** of the process;
* the **engine alone** — vLLM's offline ``LLM.generate`` on exactly the prompts Kairos sent, round by round (the rounds
  depend on each other as the episodes do), same sampling parameters: how close Kairos-on-vLLM runs to the engine;
* the **hidden-state overhead** — the engine alone with the per-layer capture Kairos uses (``extract_hidden_states``,
  every row) against without it, as a share of generation time; plus the env's own feature time (PUlSE, content,
  output signals computed from the step) as a share of its wall time.

Measured ratios come from one run (docs/design.md §9): the baseline (``hf``) runs beside vLLM on the same machine, same
questions, same settings. Output: a table, ``engine_bench.json`` and ``engine_bench.md`` under ``--out``.

Example:
    kairos bench engine --questions "dev[0:64]" --batch-sizes 16 64 --out runs/bench/engine
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engine", help="the env on hf vs vllm: chain agreement, decisions/s, tokens/s, memory; vLLM "
                                      "alone on the same prompts; hidden-state overhead")
    p.add_argument("--questions", default="dev[0:64]", help="HotpotQA questions (a dev slice)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64], help="episodes in flight")
    p.add_argument("--max-steps", type=int, default=4, help="steps per chain")
    p.add_argument("--max-step-tokens", type=int, default=32, help="tokens per step at most")
    p.add_argument("--dtype", default="float32", help="both backends' weights dtype (the env's)")
    p.add_argument("--signals", nargs="+", default=["pulse", "output", "rsus", "content"], help="env signal groups")
    p.add_argument("--backends", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    p.add_argument("--no-raw", action="store_true", help="skip vLLM alone and the capture overhead")
    p.add_argument("--explain", action="store_true", help="the hf model's top-2 margin where differing chains part")
    p.add_argument("--out", default="runs/bench/engine", help="output folder")
    p.set_defaults(func=_main)


# ---------------------------------------------------------------------------------------------- the workers
def _env_config(args: dict, backend: str):
    from envs.env_config import EnvConfig

    opts: dict[str, Any] = {"dtype": args["dtype"]}
    if backend == "vllm":
        opts["kv_cache_gib"] = 2
    return EnvConfig.from_preset("hotpotqa", {
        "reasoner": backend, "reasoner_options": opts, "split": args["questions"], "max_steps": args["max_steps"],
        "max_step_tokens": args["max_step_tokens"], "signals": list(args["signals"]), "rsus_components": ["ent"],
        "cache_path": None})


def _worker_env(args: dict) -> dict:
    """The env loop on one backend: timings, chains, peak memory; for vllm the rounds of prompts it sent."""
    from envs.components import build_components
    from policies.triggers import NeverTrigger
    from train.evaluate import evaluate_policy

    backend, batch = args["backend"], args["batch"]
    cfg = _env_config(args, backend)
    t0 = time.perf_counter()
    comps = build_components(cfg)
    load_s = time.perf_counter() - t0
    n = len(comps.questions)
    rounds: list[list[list]] = []  # per round: [prompt ids, no_stop_first] of each request
    feat_s = [0.0]
    features = comps.features

    def timed_features(step, state):
        t = time.perf_counter()
        try:
            return features(step, state)
        finally:
            feat_s[0] += time.perf_counter() - t

    comps.features = timed_features
    engine = getattr(comps.reasoner, "engine", None)
    if engine is not None:  # record the prompts of every generation round (the engine-alone replay sends them)
        gen = engine.generate

        def recording(reqs):
            rounds.append([[list(r.prompt_ids), int(r.no_stop_first)] for r in reqs])
            return gen(reqs)

        engine.generate = recording
    # warm-up on questions outside the measured set is not possible on a fixed slice: one short chain instead
    comps.reasoner.run_chains(["Warm-up: what is two plus two?"], max_steps=1)
    rounds.clear()
    gen0 = engine.stats["generated_tokens"] if engine is not None else 0
    t0 = time.perf_counter()
    res = evaluate_policy(NeverTrigger(), cfg, list(range(n)), batch_size=batch, components=comps,
                          return_episodes=True)
    wall = time.perf_counter() - t0
    rows = sorted(res["episodes"], key=lambda r: r["question_index"])
    decisions = sum(len(r["decisions"]) for r in rows)
    tokens = sum(int(r["tokens"]) for r in rows)
    out = {"backend": backend, "batch": batch, "questions": n, "load_s": round(load_s, 2), "wall_s": round(wall, 3),
           "decisions": decisions, "tokens": tokens, "decisions_per_s": decisions / wall, "episodes_per_s": n / wall,
           "tokens_per_s": tokens / wall, "feature_s": round(feat_s[0], 3), "feature_share": feat_s[0] / wall,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "chains": {str(r["question_index"]): [d["step"] for d in r["decisions"]] for r in rows},
           "stop_ids": sorted(getattr(comps.reasoner, "stop_ids", [])),
           "model_dir": str(getattr(getattr(engine, "options", None), "model_dir", "")) if engine else ""}
    if engine is not None:
        out["rounds"] = rounds
        out["engine_mean_batch"] = engine.mean_running()
        out["engine_generated_tokens"] = engine.stats["generated_tokens"] - gen0
    return out


def _worker_raw(args: dict) -> dict:
    """vLLM's offline ``LLM`` alone on the recorded rounds (same sampling parameters), with or without capture."""
    from agents.reasoners.vllm_engine import ENGINE_ENV, _guard_kernel_scan

    for k, v in ENGINE_ENV.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from transformers import AutoConfig
    from vllm import LLM, SamplingParams, TokensPrompt

    _guard_kernel_scan()
    rounds = json.loads(Path(args["rounds"]).read_text())
    kw: dict[str, Any] = dict(model=args["model_dir"], dtype=args["dtype"], enforce_eager=True, max_num_seqs=64,
                              max_model_len=4096, enable_prefix_caching=True, block_size=32, seed=0, max_logprobs=1)
    if args["capture"]:
        n_layers = AutoConfig.from_pretrained(args["model_dir"], local_files_only=True).num_hidden_layers
        kw["speculative_config"] = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                    "draft_model_config": {"hf_config": {
                                        "eagle_aux_hidden_state_layer_ids": list(range(n_layers + 1))}}}
        kw["kv_transfer_config"] = {"kv_connector": "HiddenStatesCapture",
                                    "kv_connector_module_path": "agents.reasoners.vllm_engine",
                                    "kv_role": "kv_producer"}
    t0 = time.perf_counter()
    llm = LLM(**kw)
    load_s = time.perf_counter() - t0
    if args["capture"]:  # as StepEngine does: no fake drafts
        core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
        if core is not None and hasattr(core, "check_for_draft_tokens"):
            core.check_for_draft_tokens = False
    # the env's own sampling parameters, request by request (a closing line's first token may not end it)
    params = [SamplingParams(temperature=0.0, max_tokens=args["max_step_tokens"], stop_token_ids=args["stop_ids"],
                             min_tokens=m, detokenize=False, logprobs=1) for m in (0, 1)]
    llm.generate([TokensPrompt(prompt_token_ids=rounds[0][0][0])], params[0], use_tqdm=False)  # warm-up
    from agents.reasoners import vllm_engine

    tokens = 0
    t0 = time.perf_counter()
    for prompts in rounds:
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p, _ in prompts], [params[m] for _, m in prompts],
                            use_tqdm=False)
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
        vllm_engine._CAPTURED.clear()
    wall = time.perf_counter() - t0
    return {"capture": args["capture"], "load_s": round(load_s, 2), "wall_s": round(wall, 3), "tokens": tokens,
            "tokens_per_s": tokens / wall, "rounds": len(rounds),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


class WorkerError(ValueError):
    """A measurement process failed: the message is the worker's own error line (a ValueError, so the CLI prints
    it as its one error line)."""


#: the worker's program name in its error line (``<WORKER>: error: …``)
WORKER = "kairos bench engine worker"


def _run_worker(kind: str, args: dict, out: Path) -> dict:
    """One measurement in a fresh process (its own engine and peak memory). Its spec and result travel through a
    temporary folder, removed whatever happens: nothing of a failed worker is left in ``out``."""
    name = f"{kind}_{args.get('backend', 'vllm')}_b{args.get('batch', 0)}_{int(args.get('capture', 0))}"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    log.info("engine bench: %s %s batch %s", kind, args.get("backend", "vllm"), args.get("batch", ""))
    with tempfile.TemporaryDirectory(prefix="kairos-engine-") as tmp:
        spec, res_path = Path(tmp) / f"{name}.json", Path(tmp) / f"{name}.result.json"
        spec.write_text(json.dumps({"kind": kind, **args, "result": str(res_path)}))
        proc = subprocess.run([sys.executable, "-m", "eval.perf.engine", str(spec)], env=env, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise WorkerError(f"the {name} worker failed (exit {proc.returncode}): {_worker_error(proc.stderr)}")
        return json.loads(res_path.read_text())


def _worker_error(stderr: str) -> str:
    """The worker's own error line (its handler's ``…: error: …``, else the last line it wrote)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    own = [ln.split(": error: ", 1)[1] for ln in lines if ln.startswith(f"{WORKER}: error: ")]
    return own[-1] if own else lines[-1] if lines else "no error message"


def _worker_main(spec_path: str) -> None:
    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(Path(spec_path).read_text())
    res = _worker_env(spec) if spec["kind"] == "env" else _worker_raw(spec)
    Path(spec["result"]).write_text(json.dumps(res))


# ---------------------------------------------------------------------------------------------- the comparison
def agreement(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, Any]:
    """Share of questions whose step texts are identical, and the differing ones (question, first differing step).

    Example:
        >>> agreement({"0": ["x", "y"], "1": ["x"]}, {"0": ["x", "y"], "1": ["z"]})
        {'identical': 1, 'n': 2, 'share': 0.5, 'differ': [{'question': '1', 'step': 1}]}
    """
    differ = []
    for q in sorted(a, key=int):
        if a[q] != b.get(q):
            k = next((i for i, (x, y) in enumerate(zip(a[q], b.get(q, []))) if x != y), min(len(a[q]), len(b[q])))
            differ.append({"question": q, "step": k + 1})
    n = len(a)
    return {"identical": n - len(differ), "n": n, "share": (n - len(differ)) / max(1, n), "differ": differ}


def explain(differ: list[dict], hf_chains: dict, vllm_chains: dict, args: dict) -> list[dict]:
    """For each differing chain: the first token where the two parts, with the ``hf`` model's log-probabilities of the
    two tokens there (their margin: a near tie float rounding decides)."""
    import torch

    from agents.reasoners.registry import make_reasoner
    from envs.components import build_components

    cfg = _env_config(args, "hf")
    comps = build_components(cfg)
    r = make_reasoner("hf", dtype=args["dtype"], max_step_tokens=args["max_step_tokens"])
    out = []
    for d in differ:
        q, k = d["question"], d["step"]
        state = r.start(comps.question_text(comps.questions[int(q)]))
        prefix = "".join(s + "\n" for s in hf_chains[q][: k - 1])
        ids = list(state.gen.ids) + r._encode(prefix)
        a, b = r._encode(hf_chains[q][k - 1]), r._encode(vllm_chains[q][k - 1] if k <= len(vllm_chains[q]) else "")
        j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        with torch.no_grad():
            logits = r.model(torch.tensor([ids + a[:j]])).logits[0, -1].float()
        lp = torch.log_softmax(logits, -1)
        ta = a[j] if j < len(a) else None
        tb = b[j] if j < len(b) else None
        top2 = torch.topk(lp, 2)
        out.append({**d, "token": j, "hf_token": r.tok.decode([ta]) if ta is not None else None,
                    "vllm_token": r.tok.decode([tb]) if tb is not None else None,
                    "hf_logprob": float(lp[ta]) if ta is not None else None,
                    "vllm_logprob": float(lp[tb]) if tb is not None else None,
                    "top2_margin": float(top2.values[0] - top2.values[1])})
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run(args: argparse.Namespace) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = {"questions": args.questions, "max_steps": args.max_steps, "max_step_tokens": args.max_step_tokens,
            "dtype": args.dtype, "signals": args.signals}
    report: dict[str, Any] = {"config": vars(args) | {"func": None}, "machine": {"cpu": _cpu_model(),
                                                                              "cores": os.cpu_count()},
                              "runs": [], "raw": [], "agreement": {}}
    for batch in args.batch_sizes:
        env_runs = {b: _run_worker("env", {**base, "backend": b, "batch": batch}, out) for b in args.backends}
        for b, r in env_runs.items():
            report["runs"].append({k: v for k, v in r.items() if k not in ("chains", "rounds", "stop_ids")})
            (out / f"chains_{b}_b{batch}.json").write_text(json.dumps(r["chains"], indent=1))
        if {"hf", "vllm"} <= set(env_runs):
            ag = agreement(env_runs["hf"]["chains"], env_runs["vllm"]["chains"])
            if args.explain and ag["differ"]:
                ag["differ"] = explain(ag["differ"], env_runs["hf"]["chains"], env_runs["vllm"]["chains"], base)
            report["agreement"][str(batch)] = ag
        if "vllm" in env_runs and not args.no_raw:
            v = env_runs["vllm"]
            rounds = out / f"rounds_b{batch}.json"
            rounds.write_text(json.dumps(v["rounds"]))
            for capture in (False, True):
                r = _run_worker("raw", {**base, "batch": batch, "rounds": str(rounds), "capture": capture,
                                        "model_dir": v["model_dir"], "stop_ids": v["stop_ids"]}, out)
                report["raw"].append({"batch": batch, **r})
    report["summary"] = _summary(report)
    (out / "engine_bench.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "engine_bench.md").write_text(_markdown(report))
    return report


def _summary(rep: dict) -> dict:
    s: dict[str, Any] = {}
    for batch in {r["batch"] for r in rep["runs"]}:
        by = {r["backend"]: r for r in rep["runs"] if r["batch"] == batch}
        raw = {r["capture"]: r for r in rep["raw"] if r["batch"] == batch}
        row: dict[str, Any] = {}
        if "hf" in by and "vllm" in by:
            row["episodes_speedup"] = by["vllm"]["episodes_per_s"] / by["hf"]["episodes_per_s"]
        if "vllm" in by and False in raw:  # the same rounds of the same prompts: the wall times compare the same work
            row["kairos_vs_engine"] = raw[False]["wall_s"] / by["vllm"]["wall_s"]
        if True in raw and False in raw:
            row["capture_overhead"] = raw[True]["wall_s"] / raw[False]["wall_s"] - 1
        if str(batch) in rep["agreement"]:
            row["chain_agreement"] = rep["agreement"][str(batch)]["share"]
        s[str(batch)] = row
    return s


def _markdown(rep: dict) -> str:
    lines = [f"# kairos bench engine — {rep['machine']['cpu']}, {rep['machine']['cores']} cores", "",
             "| batch | backend | episodes/s | decisions/s | tokens/s | feature share | peak RSS (MB) | load (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rep["runs"], key=lambda r: (r["batch"], r["backend"])):
        lines.append(f"| {r['batch']} | {r['backend']} | {r['episodes_per_s']:.3f} | {r['decisions_per_s']:.2f} | "
                     f"{r['tokens_per_s']:.1f} | {r['feature_share']:.1%} | {r['peak_rss_mb']:.0f} | {r['load_s']} |")
    for r in sorted(rep["raw"], key=lambda r: (r["batch"], r["capture"])):
        what = "vLLM alone + capture" if r["capture"] else "vLLM alone"
        lines.append(f"| {r['batch']} | {what} | – | – | {r['tokens_per_s']:.1f} | – | {r['peak_rss_mb']:.0f} | "
                     f"{r['load_s']} |")
    lines += ["", "| batch | vllm / hf episodes/s | Kairos-on-vLLM / vLLM alone (speed on the same rounds) | capture overhead | "
              "identical chains |", "|---|---|---|---|---|"]
    def fmt(s: dict, k: str, spec: str) -> str:
        return format(s[k], spec) if k in s else "–"

    for b, s in sorted(rep["summary"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {b} | {fmt(s, 'episodes_speedup', '.2f')}× | {fmt(s, 'kairos_vs_engine', '.2f')} | "
                     f"{fmt(s, 'capture_overhead', '+.1%')} | {fmt(s, 'chain_agreement', '.1%')} |")
    for b, ag in rep["agreement"].items():
        for d in ag["differ"]:
            lines.append(f"- batch {b}, question {d['question']}: chains part at step {d['step']}"
                         + (f", token {d['token']} (hf {d['hf_token']!r} {d['hf_logprob']:.4f} vs vllm "
                            f"{d['vllm_token']!r} {d['vllm_logprob']:.4f}; hf top-2 margin {d['top2_margin']:.4f})"
                            if "token" in d and d.get("hf_logprob") is not None and d.get("vllm_logprob") is not None
                            else ""))
    return "\n".join(lines) + "\n"


def _main(args: argparse.Namespace) -> int:
    from rich.console import Console

    run(args)
    Console().print((Path(args.out) / "engine_bench.md").read_text())
    print(f"wrote {Path(args.out) / 'engine_bench.json'}")
    return 0


if __name__ == "__main__":
    from envs.core.cli_errors import run_handled

    sys.exit(run_handled(WORKER, lambda: _worker_main(sys.argv[1])))
