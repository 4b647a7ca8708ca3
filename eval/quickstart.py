"""``kairos quickstart``: the README's main job on the embedded default (the micro-world).

1. load the shipped micro-world and measure its competence and throughput;
2. train the U_verb proxy the recipe's RSUS reads (``configs/probe_rsus_proxy.yaml``: a step-error classifier on the
   step's text, because the micro-world LM cannot state a confidence) and the ColBERT checkpoint and PLAID index it
   retrieves with (``configs/retriever_colbert_microworld.yaml``), then a retrieval policy for every budget:
   counterfactual warm start, then REINFORCE on Ray RLlib with λ of retrieval calls in the observation and a
   curriculum on it, with a QueryGen head that also picks the query (``configs/train_microworld_conditioned.yaml``;
   a rerun after a crash keeps the proxy and index it finished and resumes the training from its newest checkpoint);
3. benchmark it against the calibrated fixed triggers and baselines at every λ of the bench config
   (``configs/bench_microworld.yaml``: thresholds swept on dev at each λ, everything evaluated on held-out test
   questions, paired statistics, the frontier plot);
4. write one report (Markdown opening with the frontier and the λ = 0.1 headline, + the benchmark's self-contained
   HTML with plots) and print its path.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)
TRAIN_CONFIG = "configs/train_microworld_conditioned.yaml"  # the main job's recipe: one policy for every budget
PROXY_CONFIG = "configs/probe_rsus_proxy.yaml"  # the U_verb proxy it reads (trained first, into <out>/probes/)
RETRIEVER_CONFIG = "configs/retriever_colbert_microworld.yaml"  # its ColBERT checkpoint and PLAID index (<out>/colbert/)
MARKER = ".kairos-quickstart"  # in every --out folder quickstart created (or found empty): it may write there


def claim_out(out: Path) -> None:
    """Make ``out`` quickstart's own, or refuse: a new or empty folder is claimed (a marker file written — which
    also proves the folder writable before any work); a folder quickstart claimed before is reused (its training
    resumes); a non-empty folder without the marker holds someone else's files — an error naming a few of them,
    never overwritten."""
    import json

    from envs.core.io import make_dir, write_text
    from envs.core.runlock import LOCK_NAME

    if not (out / MARKER).is_file():
        theirs = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME) if out.is_dir() else []
        if theirs:
            shown = ", ".join(theirs[:5]) + (f" and {len(theirs) - 5} more" if len(theirs) > 5 else "")
            raise FileExistsError(f"--out {out}: the folder holds files kairos quickstart did not write ({shown}); "
                                  "choose a new or empty folder (quickstart writes report.md, timings.json, train/ "
                                  "and bench/ there)")
        make_dir(out)
        write_text(out / MARKER, json.dumps({"created": time.time()}) + "\n")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="the main job on the embedded micro-world: train, benchmark, report")
    p.add_argument("--out", default="runs/quickstart", help="output directory")
    p.add_argument("--train-config", default=TRAIN_CONFIG, help="TrainConfig YAML")
    p.add_argument("--bench-config", default="configs/bench_microworld.yaml", help="BenchConfig YAML")
    p.add_argument("--proxy-config", default=PROXY_CONFIG,
                   help="ProbeTrainConfig YAML of the U_verb proxy the train config's env reads (its out is the "
                        "path the train and bench configs name; quickstart trains it into <out>/probes/ and points "
                        "them there)")
    p.add_argument("--retriever-config", default=RETRIEVER_CONFIG,
                   help="the ColBERT checkpoint and PLAID index the recipe's env reads when it retrieves with colbert "
                        "(quickstart builds both into <out>/colbert/ and points the configs there)")
    p.add_argument("--n", type=int, default=400, help="test questions for the competence evaluation")
    p.add_argument("--iterations", type=int, default=None, help="override the training iterations")
    p.add_argument("--test", default=None, help="override the benchmark's test slice, e.g. 100:200")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from envs.core.runlock import FolderLock

    if args.n < 1:
        raise ValueError(f"--n must be >= 1 (test questions of the competence evaluation), got {args.n}")
    torch.set_num_threads(1)
    out = Path(args.out)
    with FolderLock(out, "kairos quickstart"):  # one quickstart per folder
        claim_out(out)
        return _run(args, out)


def _run(args, out: Path) -> int:
    from envs.core.config import read_yaml_mapping
    from envs.core.io import write_json, write_text
    from envs.core.microworld.artifact import load_artifact
    from envs.env_config import pending_probes
    from eval.bench.policies import load_config, run_bench
    from eval.microworld import evaluate_world, format_metrics
    from train.config import TrainConfig
    from train.report import plot_curves
    from train.run import train

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    # every config checked before any work (a bad value fails now, not after the world check and the training); the
    # proxy the recipe reads is trained first, into this job's folder, and both configs are pointed at it
    raw = read_yaml_mapping(args.train_config)
    proxy = _proxy_plan(raw, args.proxy_config, args.train_config, out)
    colbert = _retriever_plan(raw, args.retriever_config, args.train_config, out)
    moves = {**({proxy["src"]: proxy["out"]} if proxy else {}), **({colbert["src"]: colbert["out"]} if colbert else {})}
    with pending_probes(*([proxy["out"]] if proxy else [])):
        tcfg = TrainConfig.from_dict(_retarget(raw, moves), where=args.train_config)
        tcfg.out_dir = str(out / "train")
        if args.iterations is not None:
            tcfg = tcfg.replace(iterations=args.iterations)
        overrides = [f"test={args.test}"] if args.test else []
        try:
            bcfg = load_config(args.bench_config, out=str(out / "bench"), overrides=overrides,
                               edit=lambda r: _retarget(r, moves))
        except ValueError as e:  # the flag the user wrote is --test
            raise type(e)(str(e).replace(f"--set test={args.test}", f"--test {args.test}")) from None
        _check_observation(tcfg, bcfg, args.train_config, args.bench_config)
    kept = _kept_proxy(proxy) if proxy else None  # read once: the guard below and step [2/4] use it
    if proxy and kept is None:
        _refuse_stale_training(out / "train", proxy["out"], f"--proxy-config {args.proxy_config}", "the U_verb proxy")
    compiling = None
    if colbert and not _kept_retriever(colbert):
        _refuse_stale_training(out / "train", colbert["out"], f"--retriever-config {args.retriever_config}",
                               "the ColBERT index")
        # colbert's C++ extensions compile in a child on the idle core while steps 1–2 run on this one (the child
        # runs to its end whatever happens here: no half-built extension is left behind)
        from agents.retrievers.colbert_compat import compile_extensions_in_background

        compiling = compile_extensions_in_background()

    world = load_artifact(None)
    log.info("[1/4] micro-world %s: competence and throughput", world.path)
    metrics = evaluate_world(world, split="test", n=args.n, throughput=True)
    write_json(out / "microworld_eval.json", metrics)
    timings["world_eval_s"] = time.perf_counter() - t0

    psum = None
    if proxy:
        log.info("[2/4] the U_verb proxy the recipe's RSUS reads (%s → %s)", args.proxy_config, proxy["out"])
        t1 = time.perf_counter()
        psum = _train_proxy(proxy, kept)
        timings["proxy_s"] = time.perf_counter() - t1
    if colbert:
        log.info("[2/4] ColBERTv2/PLAID: the checkpoint and index the recipe retrieves with (%s → %s)",
                 args.retriever_config, colbert["out"])
        t1 = time.perf_counter()
        _build_retriever(colbert)
        if compiling is not None:
            from agents.retrievers.colbert_compat import background_compile_error

            err = background_compile_error(compiling)
            if err:  # the build above compiled what it needed itself; say why the child did not
                log.warning("compiling colbert's extensions in the background failed (%s)", err)
        timings["retriever_s"] = time.perf_counter() - t1
    log.info("[3/4] training a retrieval policy (%s)", args.train_config)
    t1 = time.perf_counter()
    tsum = train(tcfg, resume=True, show_progress=False)
    plot_curves(out / "train" / "metrics.jsonl", out / "train" / "curves.png")
    timings["train_s"] = time.perf_counter() - t1

    log.info("[4/4] benchmark against calibrated fixed triggers (%s)", args.bench_config)
    sched = tcfg.curriculum.get("retrieval_calls")
    lam = sched.end if sched is not None and sched.high is None else None  # a cost-conditioned policy: every λ
    config_out = Path(raw.get("out_dir") or TrainConfig().out_dir)
    for m in bcfg.methods:  # the benchmark's learned methods point into the run this job just trained
        if m.kind == "learned":
            rel = Path(m.path).relative_to(config_out) if Path(m.path).is_relative_to(config_out) else Path("policy_trigger")
            m.path, m.lam = str(out / "train" / rel), lam
    t2 = time.perf_counter()
    summary = run_bench(bcfg)
    timings["bench_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    write_json(out / "timings.json", timings)

    headline = Path("bench") / (f"lambda={bcfg.lambda_retrieval:g}" if bcfg.lambdas else "")  # its report's folder
    text = _report(metrics, tsum, summary, timings, format_metrics, psum, headline)
    write_text(out / "report.md", text)
    print(text)
    print(f"\nreport: {(out / 'report.md').resolve()}\nhtml:   {(out / headline / 'report.html').resolve()}")
    learned = [m.name for m in bcfg.methods if m.kind == "learned" and m.select_on_dev]
    if learned:  # the policy in an application: exactly what the benchmark evaluated (kairos.Pipeline.from_bench)
        bench = out / headline
        budget = " --lambda 0.3" if lam is None and bcfg.lambdas else ""  # a cost-conditioned policy: any budget
        print(f"use it: kairos answer --bench {bench} --method '{learned[-1]}'{budget} \"QUESTION\"")
    return 0


def _proxy_plan(raw: dict, proxy_config: str, train_config: str, out: Path) -> dict | None:
    """The U_verb proxy this job trains: None when the recipe's env reads none; else its ProbeTrainConfig (checked
    now), the path the configs name (``src``) and where this job keeps it (``out``). A proxy config that trains
    another probe than the one the recipe reads is an error naming both."""
    from envs.core.config import ConfigError
    from policies.probes.pipeline import ProbeTrainConfig

    env = raw.get("env_config") if isinstance(raw.get("env_config"), dict) else {}
    rsus = env.get("rsus_options") if isinstance(env.get("rsus_options"), dict) else {}
    src = rsus.get("verb_proxy")
    if not src:
        return None
    cfg = ProbeTrainConfig.from_yaml(proxy_config)
    if cfg.signal != "rsus_proxy" or Path(cfg.out) != Path(src):
        raise ConfigError(f"{train_config}: env_config.rsus_options.verb_proxy reads the probe at {src}, but "
                          f"--proxy-config {proxy_config} trains {cfg.signal!r} into {cfg.out or '(no out)'}; give a "
                          f"proxy config whose signal is rsus_proxy and whose out is {src}")
    dst = out / "probes" / Path(src).name
    return {"src": str(Path(src)), "out": str(dst), "config": cfg.replace(out=str(dst))}


#: the env keys that shape what a policy observes: a learned row must run with the values it was trained with
OBSERVATION_KEYS = ("reasoner", "artifact", "signals", "rsus_components", "rsus_options", "pulse_layers",
                    "pulse_layers_from", "content_layers", "observe_costs", "retriever")


def _check_observation(tcfg, bcfg, train_config: str, bench_config: str) -> None:
    """Every learned row of the benchmark runs in the env its policy is trained in (the quickstart's policies are
    trained by this job, so a mismatch would evaluate them on observations they never saw): an error naming the row,
    the key and both values."""
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig
    from eval.bench.policies import bench_env_config

    if not isinstance(tcfg.env_config, EnvConfig):  # a custom env factory: its settings are its own
        return
    trained = tcfg.env_config.to_dict()
    for m in bcfg.methods:
        if m.kind != "learned":
            continue
        ran = bench_env_config(bcfg, m).to_dict()
        for k in OBSERVATION_KEYS:
            if ran.get(k) != trained.get(k):
                raise ConfigError(f"{bench_config}: method '{m.name}' would run with env {k} = {ran.get(k)!r}, but "
                                  f"{train_config} trains its policy with {k} = {trained.get(k)!r}; give the bench "
                                  f"config's env (or the method's env) the training value")


def _retarget(raw: dict, moves: dict[str, str]) -> dict:
    """``raw`` (a config mapping, edited in place) with every ``verb_proxy`` / ``index_path`` that names a path of
    ``moves`` (this job's proxy, its ColBERT index) pointed at this job's copy."""
    if moves:
        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in ("verb_proxy", "index_path") and isinstance(v, str) and str(Path(v)) in moves:
                        node[k] = moves[str(Path(v))]
                    else:
                        walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(raw)
    return raw


def _retriever_plan(raw: dict, retriever_config: str, train_config: str, out: Path) -> dict | None:
    """The ColBERT checkpoint and PLAID index this job builds: None when the recipe's env retrieves with something
    else; else the retriever config (:class:`agents.retrievers.colbert_train.ColBERTBuildConfig`, checked now) moved
    into this job's folder, with where the configs name the index (``src``) and where this job keeps it (``out``). A
    recipe whose index_path is another index is an error naming both."""
    from agents.retrievers.colbert import ColBERTIndexConfig
    from agents.retrievers.colbert_train import ColBERTBuildConfig
    from envs.core.config import ConfigError

    env = raw.get("env_config") if isinstance(raw.get("env_config"), dict) else {}
    if env.get("retriever") != "colbert":
        return None
    spec = ColBERTBuildConfig.from_yaml(retriever_config)
    src = spec.index.out
    if Path(str(env.get("index_path"))) != Path(src):
        raise ConfigError(f"{train_config}: env_config.index_path is {env.get('index_path')!r}, but --retriever-config "
                          f"{retriever_config} builds the index {src!r}; name that index in the recipe")
    home = out / "colbert"
    ckpt = spec.checkpoint.replace(out=str(home / "checkpoint"))
    settings = ColBERTIndexConfig.from_dict({**spec.index.settings, "checkpoint": ckpt.out},
                                            where=f"{retriever_config}:index.settings")
    return {"src": str(Path(src)), "out": str(home / "index"), "checkpoint": ckpt, "settings": settings,
            "corpus": spec.index.corpus}


def _kept_retriever(plan: dict) -> bool:
    """Whether this job's folder holds the checkpoint (trained with the same settings) and its finished index."""
    import json

    ckpt, index = Path(plan["checkpoint"].out), Path(plan["out"])
    try:
        trained = json.loads((ckpt / "kairos_train.json").read_text()).get("config")
        built = json.loads((index / "kairos_index.json").read_text())
    except (OSError, ValueError):
        return False
    return (_without_out(trained) == _without_out(plan["checkpoint"].to_dict())
            and built.get("corpus", {}).get("spec") == plan["corpus"]
            and Path(built.get("config", {}).get("checkpoint", "")).resolve() == ckpt.resolve())


def _build_retriever(plan: dict) -> None:
    """Train the checkpoint and build the PLAID index (each kept when a previous run of this job finished it)."""
    import json

    from agents.retrievers import build_index, load_corpus
    from agents.retrievers.colbert_train import train_colbert

    if _kept_retriever(plan):
        log.info("ColBERT: kept the checkpoint and index this job built before (%s)", plan["out"])
        return
    ckpt = Path(plan["checkpoint"].out)
    done = ckpt / "kairos_train.json"
    if not (done.is_file() and _without_out(json.loads(done.read_text()).get("config"))
            == _without_out(plan["checkpoint"].to_dict())):
        train_colbert(plan["checkpoint"], progress=False)
    build_index("colbert", load_corpus(plan["corpus"]), plan["out"], plan["settings"], corpus_spec=plan["corpus"],
                overwrite=True)


def _train_proxy(proxy: dict, kept: dict | None) -> dict:
    """Train the proxy into ``proxy['out']`` — or keep the one a previous run of this job finished there with the
    same config (``kept``: its report, from :func:`_kept_proxy`) — and return its held-out AUROC and seconds."""
    from policies.probes.pipeline import train_probe

    cfg = proxy["config"]
    if kept is not None:
        log.info("U_verb proxy: kept the one this job trained before (%s)", proxy["out"])
        return {"kept": True, **_proxy_auroc(kept)}
    t = time.perf_counter()
    _, report = train_probe(cfg)
    return {"kept": False, "seconds": time.perf_counter() - t, **_proxy_auroc(report)}


def _kept_proxy(proxy: dict) -> dict | None:
    """The report of the proxy a previous run of this job finished in ``proxy['out']`` with the same config (its
    metrics.json is written last), or None when this job has to train it."""
    import json

    out = Path(proxy["out"])
    done, probe = out / "metrics.json", out / "probe.json"
    if not (done.is_file() and probe.is_file()):
        return None
    try:
        info = json.loads(probe.read_text()).get("info", {})
        # the config it was trained with, but for where it was written: that is the folder read here, however the
        # --out that named it was spelled (relative or absolute)
        same = _without_out(info.get("train_config")) == _without_out(proxy["config"].to_dict())
        report = json.loads(done.read_text()) if same else None
    except ValueError as e:  # a torn or hand-edited file: not this job's finished proxy, and said so
        log.warning("U_verb proxy in %s: unreadable (%s); training it again", out, e)
        return None
    return report


def _without_out(cfg) -> dict | None:
    """A probe's train config as a mapping without ``out`` (None when it is not a mapping)."""
    return {k: v for k, v in cfg.items() if k != "out"} if isinstance(cfg, dict) else None


def _refuse_stale_training(train_dir: Path, made: str, config: str, what: str) -> None:
    """A rerun that has to (re)make the proxy or the retriever must not resume a policy, reuse warm-start labels or
    benchmark rows computed with another one: an error naming the folders, before any work."""
    bench_dir = train_dir.parent / "bench"
    runs = [train_dir / "checkpoints", train_dir / "warmstart", train_dir / "metrics.jsonl",
            *(bench_dir.rglob("per_question") if bench_dir.is_dir() else [])]
    stale = [p for p in runs if (p.is_file() and p.stat().st_size > 0) or (p.is_dir() and any(p.iterdir()))]
    if stale:
        raise FileExistsError(
            f"{config}: {what} in {made} was made with another config (or not finished), but the folder holds a run "
            f"on the old one's observations ({', '.join(str(p.relative_to(train_dir.parent)) for p in stale)}); "
            f"remove {train_dir} and {bench_dir} (and {made}) to run everything again, or give another --out")


def _proxy_auroc(report: dict) -> dict:
    """The proxy's step-error AUROC on its validation steps and on the held-out questions, token entropy's beside."""
    return {f"{split}_{name}": report[split][name]["auroc"] for split in ("val", "eval") if split in report
            for name in ("probe", "entropy") if name in report[split]}


def _frontier_section(summary: dict) -> str:
    """With a benchmark at every budget: the frontier plot and, per λ, the policy against the best fixed trigger
    calibrated at that λ (the report opens with it)."""
    b = summary.get("budgets")
    if not b:
        return ""
    lines = ["## Every budget: one policy against the fixed triggers' curves", "",
             "![accuracy vs retrieval calls at every budget](bench/frontier.png)", "",
             "| λ | best fixed at λ (reward) | " + " | ".join(f"{g}: reward, calls, − best fixed [95% CI]"
                                                         for g, i in b["groups"].items() if i["conditioned"]) + " |",
             "|---|---|" + "---|" * sum(i["conditioned"] for i in b["groups"].values())]
    for lam, row in b["per_lambda"].items():
        cells = []
        for g, i in b["groups"].items():
            if i["conditioned"] and g in row["groups"]:
                c, d = row["groups"][g], row["groups"][g].get("vs_best_fixed") or {}
                cells.append(f"{c['reward']:.3f}, {c['calls']:.2f}, " + (f"{d['diff']:+.3f} [{d['lo']:+.3f}, "
                                                                         f"{d['hi']:+.3f}]" if d else "–"))
        lines.append(f"| {lam} | {row['best_fixed']} ({row['best_fixed_reward']:.3f}) | " + " | ".join(cells) + " |")
    for a in b.get("area", {}).values():
        if a.get("area") is not None:
            lines += ["", f"Area between its frontier and the best fixed frontier over {a['range'][0]:.2f}–"
                          f"{a['range'][1]:.2f} calls: {a['area']:+.4f} ({a['mean_advantage']:+.3f} accuracy on "
                          "average at equal calls). Details: [bench/budgets.md](bench/budgets.md)."]
    return "\n".join(lines) + "\n\n"


def _report(metrics, tsum, summary, timings, format_metrics, psum=None, bench=Path("bench")) -> str:
    rows = ["| method | kind | accuracy [95% CI] | calls / q | reward | harm rate | query mode |",
            "|---|---|---|---|---|---|---|"]
    for k, v in sorted(summary["methods"].items(), key=lambda kv: -kv[1]["reward"]):
        harm = "–" if v.get("harm_rate") is None else f"{v['harm_rate']:.3f}"
        rows.append(f"| {k} | {v['kind']} | {v['accuracy']:.3f} [{v['acc_lo']:.3f}, {v['acc_hi']:.3f}] | "
                    f"{v['calls']:.2f} | {v['reward']:.3f} | {harm} | {v.get('query_mode') or 'env default'} |")
    notes = "\n".join(f"- {n}" for n in summary.get("notes", []))
    headline = []
    for k, v in summary["methods"].items():
        d, g = v.get("vs_best_fixed"), v.get("oracle_gap_fraction")
        if d:
            line = (f"**{k} − best fixed ({d['method']}, chosen on dev): {d['diff']:+.3f} reward [95% CI "
                    f"{d['lo']:+.3f}, {d['hi']:+.3f}]**")
            if g:
                line += (f"; fraction of the oracle gap closed {g['fraction']:.2f} [95% CI {g['lo']:.2f}, "
                         f"{g['hi']:.2f}] (ceiling: {summary.get('oracle')})")
            headline.append(line + ".")
    gap_by = (summary.get("oracle_gap_by") or {}).get("by chain_kind") or {}
    if gap_by:  # where the learned policy falls short of the ceiling, and how its calls compare with the oracle's
        names = list(dict.fromkeys(n for g in gap_by.values() for n in g))
        lines = ["| chain kind | n | oracle calls | " + " | ".join(f"{n}: gap closed / calls" for n in names) + " |",
                 "|---|---|---|" + "---|" * len(names)]
        for g, cells in gap_by.items():
            first = next(iter(cells.values()))
            lines.append(f"| {g} | {first['n']} | {first['oracle_calls']:.2f} | " + " | ".join(
                f"{c['fraction']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}] / {c['calls']:.2f}" if c["fraction"] == c["fraction"]
                else f"– (gap {c['gap']:.3f}) / {c['calls']:.2f}" for c in (cells.get(n) for n in names)) + " |")
        headline.append("Oracle-gap fraction per chain kind (95% CI), retrieval calls beside the oracle's:\n\n"
                        + "\n".join(lines))
    proxy = ""
    if psum is not None:  # what the policy's U_verb reads, and what it is: a text classifier of the training steps
        a = {k: f"{v:.3f}" if isinstance(v, float) else "–" for k, v in psum.items() if k.endswith(("probe", "entropy"))}
        proxy = ("U_verb proxy (the step's text → p(error); the micro-world LM cannot state a confidence): "
                 + ("kept from the previous run; " if psum.get("kept") else f"trained in {psum['seconds']:.0f} s; ")
                 + f"step-error AUROC {a.get('val_probe', '–')} on validation steps, {a.get('eval_probe', '–')} on "
                 f"held-out dev questions (token entropy {a.get('eval_entropy', '–')}). On held-out questions of "
                 "the training facts it recognises their wrong statements; on facts it never saw it is not better "
                 "than entropy (docs/results.md).\n\n")
    top = ""
    if summary.get("budgets"):  # the frontier first, then the headline at its λ (section 3 keeps the table)
        top = (_frontier_section(summary) + f"## The headline: λ = {summary['budgets']['headline_lambda']:g}\n\n"
               + "\n\n".join(headline) + "\n\n")
        headline = [f"At λ = {summary['budgets']['headline_lambda']:g} (the headline above):"]
    return (
        "# Kairos quickstart: the micro-world\n\n" + top
        + f"Wall time {timings['total_s'] / 60:.1f} min (world evaluation {timings['world_eval_s']:.0f} s, "
        + (f"U_verb proxy {timings['proxy_s']:.0f} s, " if "proxy_s" in timings else "")
        + (f"ColBERT checkpoint and PLAID index {timings['retriever_s']:.0f} s, " if "retriever_s" in timings else "")
        + f"training {timings['train_s']:.0f} s, benchmark {timings['bench_s']:.0f} s).\n\n"
        "## 1. The shipped micro-world\n\n```\n" + format_metrics(metrics) + "```\n\n"
        "## 2. Training (REINFORCE on Ray RLlib)\n\n" + proxy
        + f"{tsum['iteration']} iterations, final metrics: "
        + ", ".join(f"{k} {v:.3f}" for k, v in sorted(tsum.get("final_metrics", {}).items())
                    if k in ("episode_return", "quality", "retrievals_per_episode", "retrieve_prob"))
        + ".\n\n![learning curves](train/curves.png)\n\n"
        "## 3. Benchmark (held-out test questions)\n\n" + "\n\n".join(headline) + ("\n\n" if headline else "")
        + "\n".join(rows) + "\n\n" + notes + "\n\n"
        f"Full report with statistics and plots: [{bench}/report.html]({bench}/report.html) "
        f"([Markdown]({bench}/report.md)).\n"
    )
