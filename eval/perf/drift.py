"""``kairos bench drift``: where float drift enters a training run — one run under two CPU instruction sets.

Two CPU kinds trained the same seed of an earlier main recipe into policies 0.02–0.06 reward apart (docs/results.md,
"One seed twice; two CPU kinds"), while every fixed trigger and oracle row agreed to the digit. Their float results differ because
torch, oneDNN and MKL pick kernels by instruction set (AVX-512 on one machine, AVX2 on another): another reduction
order, other last bits. This benchmark reproduces that on **one** machine — each run in a process whose kernels are
pinned to an instruction set (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``) — and finds
where the bits that differ start to change decisions:

1. **env** — the observations of the same decisions, recorded cold (no trajectory cache) under each instruction set on
   the first ``--env-questions`` training questions (the closed-book path and the branch that retrieves at step 1):
   the largest difference per observation field, the share of step texts that differ, and how many decisions of the
   first run's trained policy flip between the two observation sets;
2. **four training runs**, one at a time, each on its own copy of a trajectory cache: the reference (the first
   instruction set) and the second instruction set on a copy of the config's cache — two machines, each generating
   the records its cache lacks —; the second on the reference's records (its cache as the reference run left it:
   the same observations wherever the reference went, so the warm start's labels *and* observations are the
   reference's — what differs is the fit's and REINFORCE's float arithmetic); and that run from the reference's
   warm-start classifier too — what differs there is REINFORCE's alone;
3. per stage: the warm-start classifiers' largest weight difference from the reference's; per snapshot the largest
   weight difference; per run the first iteration whose sampled batch differs (mean return, quality, calls or
   length: where drift first changed a sampled action);
4. **the benchmark rows** — every run's warm-start classifier and learned policy (snapshot chosen on dev) in one
   ``kairos bench policies`` run (``--bench``'s env, its fixed and oracle rows kept for the gap), evaluated in this
   process: reward, calls, oracle-gap fraction, and the share of test questions whose decisions are identical between
   runs.

Output: a table, ``drift.json`` and ``drift.md`` under ``--out``; each stage's files stay there, so a rerun resumes
(a finished training run or record file is read back, not redone).

Example (the main job's recipe: 18.7 min on 2 CPUs, its first two runs labelling cold; one heavy job at a time)::

    kairos bench drift --config configs/train_microworld_conditioned.yaml --bench configs/bench_microworld.yaml \\
        --isa avx512 avx2 --out runs/bench/float_drift

Measured (docs/results.md, "Where float drift enters"): the drift enters at the warm-start fit; the env's flips no
decision, REINFORCE's own none in 50 iterations.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: instruction set -> the variables that pin torch's own kernels, oneDNN's and MKL's to it
ISA_VARS: dict[str, dict[str, str]] = {
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
#: the rows kept from ``--bench``'s methods besides the learned ones (the reference, the best fixed, the gap's ceiling)
KEEP_DEFAULT = ("CoT", "Entropy[q: dev]", "CacheOracle[q: info_need, step]")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("drift", help="where float drift enters a training run: the same run under two CPU "
                                     "instruction sets on one machine (env, warm start, REINFORCE, benchmark rows)")
    p.add_argument("--config", default="configs/train_microworld_conditioned.yaml", help="the training config")
    p.add_argument("--bench", default="configs/bench_microworld.yaml",
                   help="the policy benchmark whose env, splits and rows evaluate the runs (its learned rows whose "
                        "path lies in --policy-root are repeated for every run)")
    p.add_argument("--isa", nargs=2, default=["avx512", "avx2"], choices=sorted(ISA_VARS), metavar="ISA",
                   help=f"the two instruction sets ({', '.join(sorted(ISA_VARS))}); the first is the reference")
    p.add_argument("--policy-root", default=None,
                   help="the run folder whose policies --bench's learned rows read (default: the training config's "
                        "out_dir): those rows are repeated for every run")
    p.add_argument("--keep", nargs="*", default=list(KEEP_DEFAULT), help="the --bench rows kept beside the runs'")
    p.add_argument("--env-questions", type=int, default=100, help="training questions of the env stage (0: skip)")
    p.add_argument("--out", default="runs/bench/float_drift", help="output folder")
    p.set_defaults(func=_main)


# ---------------------------------------------------------------------------------------------- set-up
def isa_environ(isa: str) -> dict[str, str]:
    """This process's environment with the kernels pinned to ``isa`` and one thread per process."""
    if isa not in ISA_VARS:
        raise ValueError(f"--isa: unknown instruction set '{isa}' (known: {', '.join(sorted(ISA_VARS))})")
    return {**os.environ, **ISA_VARS[isa], "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def check_isa(isa: str) -> str:
    """torch's CPU capability in a process pinned to ``isa``; an error when this CPU cannot run it (torch falls
    back to a lower one silently)."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=isa_environ(isa), capture_output=True, text=True, timeout=300)
    got = out.stdout.strip()
    if out.returncode != 0 or got.lower() != isa.lower():
        raise ValueError(f"--isa {isa}: a process pinned to it runs torch's '{got or out.stderr.strip()[-200:]}' "
                         "kernels: this CPU does not support it (choose among the instruction sets it has)")
    return got


def copy_sqlite(src: Path, dst: Path) -> bool:
    """A consistent copy of the SQLite file ``src`` (its WAL included) at ``dst``, written atomically; ``False``
    (nothing written) when ``src`` does not exist, or ``dst`` exists already (a resumed run keeps its copy)."""
    if dst.exists() or not src.is_file():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as a, closing(sqlite3.connect(tmp)) as b:
        a.backup(b)
    os.replace(tmp, dst)
    return True


def cache_rows(path: Path) -> int | None:
    """Records in a trajectory cache file (None: no file)."""
    if not path.is_file():
        return None
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return int(c.execute("SELECT COUNT(*) FROM steps").fetchone()[0])


@dataclass(frozen=True)
class Run:
    """One training run of the benchmark: its instruction set, and what it takes from the reference run (the
    first instruction set's): its trajectory cache as that run left it (``records``), its warm start."""
    name: str
    isa: str
    records_from_reference: bool = False
    warmstart_from_reference: bool = False


def plan_runs(isa: list[str]) -> list[Run]:
    """The four runs: the reference; the second instruction set on its own records (another machine); on the
    reference's records (the fit's and REINFORCE's drift without the env's); from the reference's warm start too
    (REINFORCE's alone)."""
    a, b = isa
    return [Run(a, a), Run(b, b), Run(f"{b}[records: {a}]", b, True),
            Run(f"{b}[warm start, records: {a}]", b, True, True)]


def run_names(isa: list[str]) -> list[str]:
    return [r.name for r in plan_runs(isa)]


def run_dir(out: Path, name: str) -> Path:
    return out / "runs" / re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


# ---------------------------------------------------------------------------------------------- stage 1: env
class _Recorder:
    """A fixed policy (never retrieve, or retrieve at step index ``at`` with mode 0) that records every
    observation it is shown, keyed by (question, decision); shallow copies share the log."""

    def __init__(self, log_: dict, at: int | None, querygen: bool):
        self.log, self.at, self.querygen = log_, at, querygen
        self.name = "never" if at is None else f"retrieve@{at}"

    def reset(self, seed: int | None = None) -> None:
        return None

    def decide(self, observation, info):
        from train.warmstart import decision_key

        key = decision_key(info)
        self.log[(self.name, info["question_id"], key)] = {
            k: np.asarray(v, dtype=np.float32).copy() for k, v in observation.items()}
        r = int(self.at is not None and key == (self.at, 0))
        return (r, 0) if self.querygen else r


def record_env(config: str, out_npz: str, questions: int) -> None:
    """The observations and step texts of :class:`_Recorder`'s two policies on the first ``questions`` training
    questions of ``config``'s env, generated cold (no trajectory cache), saved to ``out_npz`` (atomically)."""
    from envs.core.io import atomic_open
    from train.config import TrainConfig
    from train.evaluate import evaluate_policy

    cfg = TrainConfig.from_yaml(config)
    env = cfg.kairos_env.replace(cache_path=None, cache_service=None, max_questions=None)
    obs: dict = {}
    texts: dict[str, str] = {}
    for at in (None, 0):
        rec = _Recorder(obs, at, bool(env.querygen))
        res = evaluate_policy(rec, env, list(range(questions)), batch_size=min(100, questions), return_episodes=True)
        for row in res["episodes"]:
            for i, d in enumerate(row["decisions"]):
                texts[f"{rec.name}|{row['question_id']}|{i}"] = str(d.get("step"))
    keys = sorted(obs)
    fields = sorted(obs[keys[0]]) if keys else []
    arrays = {f"obs/{f}": np.stack([obs[k][f].ravel() for k in keys]) for f in fields}
    arrays["keys"] = np.array([f"{k[0]}|{k[1]}|{k[2][0]}|{k[2][1]}" for k in keys])
    arrays["text_keys"] = np.array(sorted(texts))
    arrays["texts"] = np.array([texts[k] for k in sorted(texts)])
    with atomic_open(out_npz, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def compare_env(a_npz: Path, b_npz: Path, policy_dir: Path | None) -> dict[str, Any]:
    """Stage 1's comparison of two record files: per field the largest |Δ| and the share of decisions where it
    differs at all; the share of step texts that differ; with ``policy_dir``, that policy's decisions flipped."""
    a, b = np.load(a_npz), np.load(b_npz)
    ka, kb = {k: i for i, k in enumerate(a["keys"])}, {k: i for i, k in enumerate(b["keys"])}
    common = sorted(set(ka) & set(kb))
    ia, ib = [ka[k] for k in common], [kb[k] for k in common]
    fields = sorted(k[4:] for k in a.files if k.startswith("obs/") and k in b.files)
    per_field = {}
    any_diff = np.zeros(len(common), dtype=bool)
    for f in fields:
        xa, xb = a[f"obs/{f}"][ia], b[f"obs/{f}"][ib]
        d = np.abs(xa.astype(np.float64) - xb.astype(np.float64))
        differs = (d > 0).any(axis=1)
        any_diff |= differs
        per_field[f] = {"max_abs": float(d.max()) if d.size else 0.0, "share_differs": float(differs.mean())}
    ta = dict(zip(a["text_keys"], a["texts"]))
    tb = dict(zip(b["text_keys"], b["texts"]))
    tcommon = sorted(set(ta) & set(tb))
    out: dict[str, Any] = {
        "decisions": len(common), "only_in_one": len(set(ka) ^ set(kb)), "fields": per_field,
        "share_decisions_differ": float(any_diff.mean()) if common else 0.0,
        "steps": len(tcommon), "share_step_texts_differ": float(np.mean([ta[k] != tb[k] for k in tcommon]))
        if tcommon else 0.0}
    if policy_dir is not None and common:
        from policies.rl.export import LearnedTrigger

        pol = LearnedTrigger.load(policy_dir)
        pa = np.array([pol.probs({f: a[f"obs/{f}"][i] for f in fields})[0] for i in ia])
        pb = np.array([pol.probs({f: b[f"obs/{f}"][i] for f in fields})[0] for i in ib])
        out["policy"] = str(policy_dir)
        out["policy_max_abs_dp"] = float(np.abs(pa - pb).max())
        out["policy_decisions_flipped"] = int(((pa > pol.threshold) != (pb > pol.threshold)).sum())
    return out


# ---------------------------------------------------------------------------------------------- stages 2-3: training
def write_run_config(cfg_path: str, out: Path, name: str, cache_src: Path | None) -> Path:
    """The training config of run ``name``: the recipe with its own out_dir and its own copy of the warm cache."""
    import yaml

    from envs.core.config import read_yaml_mapping

    raw = read_yaml_mapping(cfg_path)  # its base chain merged: the written config stands alone
    d = run_dir(out, name)
    raw["out_dir"] = str(d / "train")
    raw.setdefault("env_config", {})["cache_path"] = str(d / "cache.sqlite")
    if cache_src is not None:
        copy_sqlite(cache_src, d / "cache.sqlite")
    d.mkdir(parents=True, exist_ok=True)
    path = d / "train_config.yaml"
    from envs.core.io import write_text

    write_text(path, f"# written by kairos bench drift from {cfg_path} (out_dir, cache_path changed)\n"
               + yaml.safe_dump(raw, sort_keys=False))
    return path


def train_run(config: Path, isa: str, log_path: Path) -> float:
    """``python -m train --config config`` pinned to ``isa`` (resumes a run that stopped); its seconds. A run that
    finished already is read back."""
    from envs.core.config import read_yaml_mapping

    raw = read_yaml_mapping(config)
    out_dir = Path(raw["out_dir"])
    done = json.loads((out_dir / "summary.json").read_text()) if (out_dir / "summary.json").is_file() else {}
    if done.get("iteration") == int(raw.get("iterations", 0)):
        log.info("drift: %s finished already: read back", out_dir)
        return float(done.get("wall_seconds", 0.0))
    cmd = [sys.executable, "-m", "train", "--config", str(config), "--no-progress"]
    if (out_dir / "checkpoints").is_dir():
        cmd.append("--resume")
    t0 = time.perf_counter()
    with open(log_path, "a") as fh:
        rc = subprocess.run(cmd, env=isa_environ(isa), stdout=fh, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"drift: training under {isa} failed (exit {rc}); its log: {log_path}")
    return time.perf_counter() - t0


def max_weight_diff(a_dir: Path, b_dir: Path) -> float | None:
    """The largest |Δw| between two exported policies, over every tensor they save (parameters and the input
    statistics REINFORCE keeps updating); None: either is missing."""
    import torch

    if not ((a_dir / "weights.pt").is_file() and (b_dir / "weights.pt").is_file()):
        return None
    wa = torch.load(a_dir / "weights.pt", map_location="cpu", weights_only=True)
    wb = torch.load(b_dir / "weights.pt", map_location="cpu", weights_only=True)
    return max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa if k in wb and wa[k].numel())


def first_differing_iteration(a_metrics: Path, b_metrics: Path,
                              keys: tuple[str, ...] = ("episode_return", "quality", "retrievals_per_episode",
                                                       "episode_len")) -> int | None:
    """The first iteration whose sampled batch differs between two runs' ``metrics.jsonl``: its episodes' mean
    return, quality, calls or length (``keys``: what the sampled actions decide; the losses carry float drift from
    the first update on). None: the batches agree throughout."""
    def rows(p: Path) -> dict[int, dict]:
        return {r["iteration"]: r for r in map(json.loads, p.read_text().splitlines()) if "iteration" in r}

    ra, rb = rows(a_metrics), rows(b_metrics)
    for it in sorted(set(ra) & set(rb)):
        if any(ra[it].get(k) != rb[it].get(k) for k in keys):
            return it
    return None


# ---------------------------------------------------------------------------------------------- stage 4: benchmark
def bench_config(bench_yaml: str, train_out_dir: str, out: Path, names: list[str], keep: list[str]):
    """The policy benchmark of the runs: ``bench_yaml``'s env and splits, its ``keep`` rows, and each learned row
    whose path lies in ``train_out_dir`` repeated per run (named ``<row> [<run>]``, path moved to the run's)."""
    from envs.core.config import ConfigError, read_yaml_mapping
    from eval.bench.config import BenchConfig

    raw = read_yaml_mapping(bench_yaml)
    methods = raw.get("methods") or []
    missing = [k for k in keep if k not in {m.get("name") for m in methods}]
    if missing:
        raise ConfigError(f"{bench_yaml}: --keep names rows it lacks: {missing}")
    root = Path(train_out_dir)
    learned = [m for m in methods if m.get("kind") == "learned" and Path(str(m.get("path", ""))).is_relative_to(root)]
    if not learned:
        raise ConfigError(f"{bench_yaml}: no learned row reads a policy under {root} (the training config's "
                          "out_dir, or --policy-root): nothing of the runs to evaluate")
    rows = [m for m in methods if m.get("name") in keep]
    for m in learned:
        for n in names:
            rel = Path(str(m["path"])).relative_to(root)
            rows.append({**m, "name": f"{m['name']} [{n}]", "path": str(run_dir(out, n) / "train" / rel),
                         "group": None})
    raw.update(name="float_drift", out_dir=str(out / "bench"), methods=rows, lambdas=[])  # at the headline λ only
    return BenchConfig.from_dict(raw, where=bench_yaml), learned


def decisions_agree(a_jsonl: str, b_jsonl: str) -> float:
    """The share of questions whose every decision (action and query mode) is the same in two per-question files."""
    def acts(p: str) -> dict[int, list]:
        return {r["question_index"]: [d.get("action") for d in r["decisions"]]
                for r in map(json.loads, Path(p).read_text().splitlines())}

    a, b = acts(a_jsonl), acts(b_jsonl)
    common = sorted(set(a) & set(b))
    return float(np.mean([a[q] == b[q] for q in common])) if common else float("nan")


# ---------------------------------------------------------------------------------------------- the whole run
def run(args: argparse.Namespace) -> dict[str, Any]:
    from envs.core.io import write_json, write_text
    from eval.bench.policies import run_bench
    from eval.perf.engine import _cpu_model
    from train.config import TrainConfig

    out = Path(args.out)
    if len(set(args.isa)) != 2:
        raise ValueError(f"--isa: two different instruction sets are compared, got {' '.join(args.isa)}")
    cfg = TrainConfig.from_yaml(args.config)  # errors name the file and key, before anything runs
    names = run_names(list(args.isa))
    bcfg, learned = bench_config(args.bench, getattr(args, "policy_root", None) or cfg.out_dir, out, names,
                                 list(args.keep))
    capability = {isa: check_isa(isa) for isa in args.isa}
    cache_src = Path(cfg.kairos_env.cache_path) if cfg.kairos_env.cache_path else None
    if cache_src is None or not cache_src.is_file():
        log.warning("drift: %s has no trajectory cache at %s: every run generates its own records (the warm-start "
                    "labels then carry the env's drift too)", args.config, cache_src)
        cache_src = None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result: dict[str, Any] = {"config": args.config, "bench": args.bench, "isa": list(args.isa),
                              "capability": capability, "runs": names,
                              "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "commit": commit or None},
                              "warm_cache": str(cache_src) if cache_src else None, "seconds": {}}
    a, b = args.isa
    # 1. env: the same decisions' observations, cold, under each instruction set
    if args.env_questions > 0:
        for isa in args.isa:
            npz = out / "env" / f"{isa}.npz"
            if not npz.is_file():
                t0 = time.perf_counter()
                npz.parent.mkdir(parents=True, exist_ok=True)
                cmd = [sys.executable, "-m", "eval.perf.drift", "--record-env", str(npz), "--config", args.config,
                       "--questions", str(args.env_questions)]
                rc = subprocess.run(cmd, env=isa_environ(isa)).returncode
                if rc != 0:
                    raise RuntimeError(f"drift: recording the env under {isa} failed (exit {rc})")
                result["seconds"][f"env {isa}"] = round(time.perf_counter() - t0, 1)
    # 2-3. the training runs, one at a time, each on its own copy of a trajectory cache
    ref = run_dir(out, a)
    for r in plan_runs(list(args.isa)):
        d = run_dir(out, r.name)
        config = write_run_config(args.config, out, r.name, ref / "cache.sqlite" if r.records_from_reference
                                  else cache_src)
        if r.warmstart_from_reference and not (d / "train" / "warmstart" / "summary.json").is_file():
            shutil.copytree(ref / "train" / "warmstart", d / "train" / "warmstart", dirs_exist_ok=True)
        result["seconds"][f"train {r.name}"] = round(train_run(config, r.isa, d / "train.log"), 1)
    result["cache_records"] = {n: cache_rows(run_dir(out, n) / "cache.sqlite") for n in names}
    result["cache_records"]["(copied from)"] = cache_rows(cache_src) if cache_src else 0
    if args.env_questions > 0:
        result["env"] = compare_env(out / "env" / f"{a}.npz", out / "env" / f"{b}.npz", ref / "train" / "policy")
    ta = {n: run_dir(out, n) / "train" for n in names}
    result["warmstart"] = {f"{a} vs {n}": max_weight_diff(ta[a] / "warmstart" / "policy", ta[n] / "warmstart" / "policy")
                           for n in names[1:]}
    snaps = sorted(p.name for p in (ta[a] / "snapshots").iterdir()) if (ta[a] / "snapshots").is_dir() else []
    result["reinforce"] = {
        "first_differing_iteration": {f"{a} vs {n}": first_differing_iteration(ta[a] / "metrics.jsonl",
                                                                               ta[n] / "metrics.jsonl")
                                      for n in names[1:]},
        "snapshots": [{"snapshot": s, **{f"{a} vs {n}": max_weight_diff(ta[a] / "snapshots" / s,
                                                                        ta[n] / "snapshots" / s) for n in names[1:]}}
                      for s in snaps]}
    # 4. the benchmark rows, in this process (the machine's own kernels: only the policies differ)
    t0 = time.perf_counter()
    summary = run_bench(bcfg)
    result["seconds"]["bench"] = round(time.perf_counter() - t0, 1)
    ms = summary["methods"]
    result["rows"] = {m: {k: ms[m].get(k) for k in ("reward", "accuracy", "calls", "dev_reward")}
                      | {"oracle_gap": (ms[m].get("oracle_gap_fraction") or {}).get("fraction")} for m in ms}
    calib = summary.get("calibration") or {}
    result["dev_reward_by_snapshot"] = {m: {Path(c["path"]).name: round(c["reward"], 4) for c in v["candidates"]}
                                        | {"chosen": Path(v["chosen"]).name}
                                        for m, v in calib.items() if isinstance(v, dict) and "candidates" in v}
    result["agreement"] = {}
    for m in learned:
        rows = {n: f"{m['name']} [{n}]" for n in names}
        for n in names[1:]:
            pa, pb = ms.get(rows[a], {}).get("per_question"), ms.get(rows[n], {}).get("per_question")
            if pa and pb:
                result["agreement"][f"{m['name']}: {a} vs {n}"] = decisions_agree(pa, pb)
    write_json(out / "drift.json", result)
    write_text(out / "drift.md", markdown(result))
    return result


def _f(x: Any, fmt: str = "{:.3g}") -> str:
    return "—" if x is None else fmt.format(x)


def markdown(r: dict[str, Any]) -> str:
    a, b = r["isa"]
    n = r["runs"]
    lines = [f"Float drift on {r['machine']['cpu']} ({r['machine']['cores']} cores), commit {r['machine']['commit']}: "
             f"{r['config']} under {a} ({r['capability'][a]}) and {b} ({r['capability'][b]}).", ""]
    if r.get("env"):
        e = r["env"]
        lines += ["| stage | what differs |", "|---|---|",
                  f"| env (cold, {e['decisions']} decisions) | step texts {e['share_step_texts_differ']:.1%}; "
                  f"decisions with any observation field different {e['share_decisions_differ']:.1%}; largest abs Δ "
                  + ", ".join(f"{f} {v['max_abs']:.2g}" for f, v in e["fields"].items())
                  + (f"; {n[0]}'s policy: max abs Δπ {e['policy_max_abs_dp']:.2g}, decisions flipped "
                     f"{e['policy_decisions_flipped']}" if "policy" in e else "") + " |"]
    else:
        lines += ["| stage | what differs |", "|---|---|"]
    lines.append("| warm start | classifier max abs Δw: " + "; ".join(f"{k} {_f(v)}" for k, v in r["warmstart"].items())
                 + " |")
    fd = r["reinforce"]["first_differing_iteration"]
    lines.append("| REINFORCE | first iteration whose sampled batch differs: "
                 + "; ".join(f"{k} {'none' if v is None else v}" for k, v in fd.items()) + " |")
    for s in r["reinforce"]["snapshots"]:
        lines.append(f"| snapshot {s['snapshot']} | max abs Δw: " + "; ".join(
            f"{k} {_f(v)}" for k, v in s.items() if k != "snapshot") + " |")
    lines += ["", "| row | reward | accuracy | calls / q | oracle-gap fraction |", "|---|---|---|---|---|"]
    for m, v in r["rows"].items():
        lines.append(f"| {m} | {_f(v['reward'], '{:.3f}')} | {_f(v['accuracy'], '{:.3f}')} | "
                     f"{_f(v['calls'], '{:.2f}')} | {_f(v['oracle_gap'], '{:.2f}')} |")
    if r.get("agreement"):
        lines += ["", "| pair | test questions with identical decisions |", "|---|---|"]
        lines += [f"| {k} | {v:.1%} |" for k, v in r["agreement"].items()]
    lines += ["", "Seconds: " + ", ".join(f"{k} {v}" for k, v in r["seconds"].items())]
    return "\n".join(lines) + "\n"


def _main(args: argparse.Namespace) -> int:
    r = run(args)
    print(markdown(r))
    print(f"written: {Path(args.out) / 'drift.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m eval.perf.drift --record-env OUT.npz --config C --questions N`` (stage 1's worker process)."""
    p = argparse.ArgumentParser(prog="python -m eval.perf.drift")
    p.add_argument("--record-env", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--questions", type=int, default=100)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    record_env(a.config, a.record_env, a.questions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
