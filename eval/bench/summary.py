"""The benchmark's statistics and summary: bootstrap CIs, paired tests against the reference, accuracy at matched
budgets, frontier dominance, the best fixed trigger (chosen on dev), oracle-gap fractions, seed-pooled learned
groups and per-attribute breakdowns — the dict :mod:`eval.bench.report` renders (``summary.json``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.core.config import ConfigError
from eval import stats
from eval.bench.calibration import is_never
from eval.bench.config import BenchConfig, parse_slice
from eval.bench.runner import Runner

__all__ = ["summarize"]


def summarize(cfg: BenchConfig, runner: Runner, results: dict[str, dict], calib: dict, skipped: dict) -> dict:
    """The report's summary dict (see :mod:`eval.bench.report` for its schema)."""
    kinds = {m.name: m for m in cfg.methods}
    ref = cfg.reference if cfg.reference in results else next(iter(results), None)
    qual = {k: np.array([e["quality"] for e in r["episodes"]], dtype=float) for k, r in results.items()}
    methods: dict[str, dict[str, Any]] = {}
    ref_acc = results[ref]["accuracy"] if ref else float("nan")
    for name, r in results.items():
        m = kinds[name]
        ci = stats.bootstrap_mean_ci(qual[name], n_resamples=cfg.n_resamples, seed=cfg.seed)
        calls = r["calls_per_question"]
        methods[name] = {
            "kind": m.report_kind, "accuracy": r["accuracy"], "acc_lo": ci["lo"], "acc_hi": ci["hi"],
            "calls": calls, "tokens": r["tokens_per_question"], "seconds": r["seconds_per_question"],
            "reward": r["reward"], "n": r["n"],
            # accuracy gained over the reference per retrieval call; the share of gold passages that were injected
            # (not Recall@k of the ranked lists, which the retrieval benchmark measures)
            "gain_per_call": (r["accuracy"] - ref_acc) / calls if calls > 0 and name != ref else None,
            "gold_injected_share": _evidence_recall(runner, r["episodes"]),
            "recall_at_k": _recall_at_k(runner, r["episodes"]),
            "threshold": r.get("threshold"), "curve": r.get("curve"),
            "lambda": getattr(m, "lam", None) if m.report_kind == "learned" else None,
            "harm_rate": (float(np.mean(qual[name] < qual[ref] - 1e-9)) if ref and name != ref else None),
            # the never-fire point retrieves nothing: no query mode
            "query_mode": None if is_never(r.get("threshold")) else (r.get("query_mode") or m.query_mode or (
                "policy's QueryGen head" if m.uses_querygen() else None)),
            "dev_reward": calib.get(name, {}).get("dev_reward"),
            # the task's answer metrics (F1 and EM; lenient and strict accuracy) and how the episodes ended
            "metrics": r.get("metrics"), "no_answer_share": r.get("no_answer_share"),
            "closed_share": r.get("closed_share"), "per_question": r.get("per_question"),
        }
        methods[name].update(m.report_extras(r))
    comparisons = stats.compare_methods(qual, ref, n_resamples=cfg.n_resamples, seed=cfg.seed) if ref else []
    points = [(v["calls"], v["accuracy"]) for v in methods.values()]
    names = list(methods)
    frontier = [names[i] for i in stats.pareto_frontier(points)] if points else []
    curves = {k: [(c["calls"], c["accuracy"]) for c in (v["curve"] or [])] or [(v["calls"], v["accuracy"])]
              for k, v in methods.items()}
    learned = [k for k, v in methods.items() if v["kind"] == "learned"]
    fixed = [k for k, v in methods.items() if v["kind"] == "fixed"]
    budgets = sorted({round(methods[k]["calls"], 4) for k in learned + fixed})
    matched = [{"budget": b, "method": k, "accuracy": stats.accuracy_at_budget(curves[k], b)}
               for b in budgets for k in methods]
    dominance = _dominance(methods, curves, _learned_groups(kinds, learned), fixed)
    best_fixed, notes = _best_fixed(cfg, methods, fixed, calib, ref)
    oracles = [k for k in results if kinds[k].ceiling]
    oracle = max(oracles, key=lambda k: methods[k]["reward"]) if oracles else None  # the highest ceiling
    gap = {}
    for k in learned:
        if best_fixed:
            d = stats.paired_bootstrap(np.array([e["reward"] for e in results[k]["episodes"]]),
                                       np.array([e["reward"] for e in results[best_fixed]["episodes"]]),
                                       n_resamples=cfg.n_resamples, seed=cfg.seed)
            methods[k]["vs_best_fixed"] = {"method": best_fixed, **d}
            line = (f"{k} − {best_fixed} on reward: {d['diff']:+.3f} [95% CI {d['lo']:+.3f}, {d['hi']:+.3f}]"
                    f", p = {d['p_value']:.4f} (paired bootstrap)")
            if oracle:
                g = stats.gap_fraction([e["reward"] for e in results[k]["episodes"]],
                                       [e["reward"] for e in results[best_fixed]["episodes"]],
                                       [e["reward"] for e in results[oracle]["episodes"]],
                                       n_resamples=cfg.n_resamples, seed=cfg.seed)
                gap[k] = g
                methods[k]["oracle_gap_fraction"] = g
                line += (f"; oracle-gap fraction (learned − best fixed) / ({oracle} − best fixed) = "
                         f"{g['fraction']:.2f} [95% CI {g['lo']:.2f}, {g['hi']:.2f}]")
            notes.append(line + ".")
    notes += _seed_pooled_notes(cfg, kinds, results, learned, best_fixed, oracle)
    group_comparisons = _compare_groups(cfg, kinds, results, learned)
    notes += [c["note"] for c in group_comparisons]
    for name, r in results.items():
        notes += kinds[name].report_notes(r)
    for k, why in skipped.items():
        notes.append(f"Skipped {k}: {why}.")
    breakdowns = _breakdowns(cfg, runner, results)
    gap_by = _gap_breakdowns(cfg, runner, results, list(gap), best_fixed, oracle)
    return {
        "title": f"Kairos benchmark: {cfg.name}",
        "setup": {"task": runner.env_config.task, "split": runner.env_config.split, "dev": cfg.dev,
                  "test": cfg.test, "n_test": len(parse_slice(cfg.test, "test")),
                  "reasoner": runner.env_config.reasoner, "retriever": runner.env_config.retriever,
                  "lambda_retrieval": cfg.lambda_retrieval, "bootstrap_resamples": cfg.n_resamples,
                  "seed": cfg.seed, "quality_metric": runner.components.quality_metric,
                  "metrics": list(getattr(runner.components.task, "metric_names", ()))
                  or [runner.components.quality_metric],
                  "answer_closing": bool(runner.env_config.answer_closing and runner.components.can_close)},
        "reference": ref, "methods": methods, "comparisons": comparisons, "matched_budget": matched,
        "dominance": dominance, "frontier": frontier, "breakdowns": breakdowns, "notes": notes,
        "calibration": calib, "skipped": skipped, "best_fixed": best_fixed, "oracle": oracle,
        "oracle_gap": gap, "oracle_gap_by": gap_by, "group_comparisons": group_comparisons,
        # per-question test rewards of the rows a comparison across benchmarks pairs (eval.bench.budgets)
        "rewards": {k: [float(e["reward"]) for e in results[k]["episodes"]]
                    for k in dict.fromkeys([*learned, *([best_fixed] if best_fixed else []),
                                            *([oracle] if oracle else []), *([ref] if ref else [])])},
    }


def _best_fixed(cfg: BenchConfig, methods: dict[str, dict], fixed: list[str], calib: dict, ref: str | None
                ) -> tuple[str | None, list[str]]:
    """``(the best fixed trigger, the notes on calibration)``. The best fixed trigger is chosen on DEV (its
    calibrated dev reward; ties: fewer dev calls), then reported on test: choosing it on test would hand the fixed
    side a selection bias the learned side does not get. A threshold trigger's sweep holds the never-fire point, so
    the best fixed trigger is CoT's row where retrieval does not pay on dev — the notes say so."""
    best_fixed = max(fixed, key=lambda k: (calib.get(k, {}).get("dev_reward", -np.inf),
                                           -calib.get(k, {}).get("dev_calls", methods[k]["calls"]))) if fixed else None
    notes = [f"Reward = quality − {cfg.lambda_retrieval:g} · retrieval calls. Thresholds (and query modes where "
             f"listed) calibrated on dev {cfg.dev} (best reward; ties: fewer calls; every calibrated threshold "
             f"trigger's sweep includes the never-fire point, i.e. never retrieve), evaluated on test {cfg.test}. "
             f"Harm rate: share of test questions whose quality is below {ref}'s."]
    never = [k for k in methods if is_never(methods[k].get("threshold"))]
    if never:
        notes.append(f"Calibrated to never fire on dev (threshold 'never': retrieval did not pay at λ = "
                     f"{cfg.lambda_retrieval:g}; each row is CoT in its env, 0 calls): {', '.join(never)}.")
    if best_fixed:
        mode = methods[best_fixed].get("query_mode")
        point = (" at its never-fire point (never retrieves: the row is CoT's)" if best_fixed in never
                 else f" with {mode} queries" if mode else "")
        dev = calib.get(best_fixed, {}).get("dev_reward")
        how = f"chosen on dev reward {dev:.3f}" if dev is not None else "no fixed trigger was calibrated on dev"
        notes.append(f"Best fixed trigger ({how}): {best_fixed}{point} — test reward "
                     f"{methods[best_fixed]['reward']:.3f}.")
    return best_fixed, notes


def _seed_pooled_notes(cfg: BenchConfig, kinds: dict, results: dict, learned: list[str], best_fixed: str | None,
                       oracle: str | None = None) -> list[str]:
    """Learned methods of one ``group`` (seeds of one configuration): per-question rewards averaged over the
    seeds, then a paired bootstrap against the best fixed trigger — the 'over N seeds' comparison."""
    if best_fixed is None:
        return []
    out = []
    ref = np.array([e["reward"] for e in results[best_fixed]["episodes"]])
    for group, names in _learned_groups(kinds, learned).items():
        if len(names) < 2:
            continue
        pooled = np.mean([[e["reward"] for e in results[k]["episodes"]] for k in names], axis=0)
        d = stats.paired_bootstrap(pooled, ref, n_resamples=cfg.n_resamples, seed=cfg.seed)
        per_seed = ", ".join(f"{results[k]['reward']:.3f}" for k in names)
        wins = sum(results[k]["reward"] > results[best_fixed]["reward"] for k in names)
        line = (f"Learned '{group}' over {len(names)} seeds (rewards {per_seed}; {wins}/{len(names)} above "
                f"{best_fixed}): mean reward {pooled.mean():.3f} vs {best_fixed} {ref.mean():.3f}, difference "
                f"{d['diff']:+.3f} [95% CI {d['lo']:+.3f}, {d['hi']:+.3f}], p = {d['p_value']:.4f} (paired "
                "bootstrap over questions, seeds averaged per question)")
        if oracle:
            g = stats.gap_fraction(pooled, ref, [e["reward"] for e in results[oracle]["episodes"]],
                                   n_resamples=cfg.n_resamples, seed=cfg.seed)
            line += f"; oracle-gap fraction {g['fraction']:.2f} [95% CI {g['lo']:.2f}, {g['hi']:.2f}]"
        out.append(line + ".")
    return out


def _compare_groups(cfg: BenchConfig, kinds: dict, results: dict, learned: list[str]) -> list[dict[str, Any]]:
    """``cfg.compare``'s pairs of learned groups: A − B on reward and on calls, each group's seeds averaged per
    question, paired bootstrap over questions."""
    groups = {g: names for g, names in _learned_groups(kinds, learned).items()}
    groups.update({k: [k] for k in learned if not getattr(kinds[k], "group", None)})
    out = []
    for a, b in cfg.compare:
        if a not in groups or b not in groups:
            continue  # a group whose rows were skipped
        pooled = {g: {key: np.mean([[e[key] for e in results[k]["episodes"]] for k in groups[g]], axis=0)
                      for key in ("reward", "calls", "quality")} for g in (a, b)}
        d = {key: stats.paired_bootstrap(pooled[a][key], pooled[b][key], n_resamples=cfg.n_resamples, seed=cfg.seed)
             for key in ("reward", "quality", "calls")}
        note = (f"{a} − {b} ({len(groups[a])} vs {len(groups[b])} seeds, pooled per question): reward "
                f"{d['reward']['diff']:+.3f} [95% CI {d['reward']['lo']:+.3f}, {d['reward']['hi']:+.3f}], accuracy "
                f"{d['quality']['diff']:+.3f} [{d['quality']['lo']:+.3f}, {d['quality']['hi']:+.3f}], calls "
                f"{d['calls']['diff']:+.2f} [{d['calls']['lo']:+.2f}, {d['calls']['hi']:+.2f}] (paired bootstrap).")
        out.append({"a": a, "b": b, **{k: v for k, v in d.items()}, "note": note})
    return out


def _learned_groups(kinds: dict, learned: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for k in learned:
        if getattr(kinds[k], "group", None):
            groups.setdefault(kinds[k].group, []).append(k)
    return groups


def _evidence_recall(runner: Runner, rows: list[dict]) -> float | None:
    """Mean share of each question's supporting passages that were injected during its episode (questions
    with supporting passages only; None when the task has none)."""
    qs = runner.components.questions
    if not any("passage_ids" in d for r in rows for d in r["decisions"]):
        return None  # no passage log (the cache oracle)
    vals = []
    for r in rows:
        gold = set(runner.components.gold_passages(qs[r["question_index"]]))
        if not gold:
            continue
        got = {pid for d in r["decisions"] for pid in (d.get("passage_ids") or [])}
        vals.append(len(gold & got) / len(gold))
    return float(np.mean(vals)) if vals else None


def _recall_at_k(runner: Runner, rows: list[dict]) -> float | None:
    """Recall@k of the retrieved lists: per retrieval call, the share of the question's supporting passages in
    the retriever's top-k (k = the env's ``top_k``), averaged over calls (questions with supporting passages only).
    None when nothing was retrieved, the task has no supporting passages, or a call's list was not recorded
    (records cached before ranked lists were kept)."""
    qs = runner.components.questions
    vals = []
    for r in rows:
        gold = set(runner.components.gold_passages(qs[r["question_index"]]))
        for d in r["decisions"]:
            if not gold or not d.get("action", [0])[0]:
                continue
            if "ranked_ids" not in d:
                return None
            vals.append(len(gold & set(d["ranked_ids"])) / len(gold))
    return float(np.mean(vals)) if vals else None


def _dominance(methods: dict, curves: dict, groups: dict[str, list[str]], fixed: list[str]) -> list[str]:
    """Frontier-dominance sentences: the learned curve (one seed-averaged point per group, e.g. per λ) against
    each fixed trigger's threshold curve; with one group its point is compared at its own budget instead."""
    if not groups or not fixed:
        return []
    points = {g: (float(np.mean([methods[k]["calls"] for k in ks])), float(np.mean([methods[k]["accuracy"]
                                                                                  for k in ks])))
              for g, ks in groups.items()}
    if len(points) >= 2:
        curve = sorted(points.values())
        return [stats.dominance(curve, curves[b], name_a="learned (λ curve)", name_b=b)["summary"] for b in fixed]
    (g, (calls, acc)), = points.items()
    out = []
    for b in fixed:
        acc_b = stats.accuracy_at_budget(curves[b], calls)
        if acc_b is None:
            out.append(f"{b} has no operating point at or below the budget of learned '{g}' ({calls:.2f} calls/question)")
            continue
        verdict = "above" if acc > acc_b + 1e-9 else "below" if acc < acc_b - 1e-9 else "level with"
        out.append(f"At the budget of learned '{g}' ({calls:.2f} calls/question, seeds averaged) it is {verdict} {b}'s "
                   f"threshold curve: {acc:.3f} vs {acc_b:.3f}")
    return out


def _attr(q: Any, name: str, task: Any = None) -> Any:
    fn = getattr(task, "question_attr", None)
    if callable(fn):
        v = fn(q, name)
        if v is not None:
            return v
    v = getattr(q, name, None)
    if v is None:
        meta = getattr(q, "meta", None) or getattr(q, "metadata", None) or {}
        v = meta.get(name) if isinstance(meta, dict) else None
    return v() if callable(v) else v


def _breakdowns(cfg: BenchConfig, runner: Runner, results: dict[str, dict]) -> dict:
    out: dict[str, dict] = {}
    qs = runner.components.questions
    for attr in cfg.group_by:
        table: dict[str, dict] = {}
        for name, r in results.items():
            groups: dict[str, list[dict]] = {}
            for e in r["episodes"]:
                g = _attr(qs[e["question_index"]], attr, runner.components.task)
                if g is None:
                    raise ConfigError(f"BenchConfig.group_by: questions have no attribute '{attr}'")
                groups.setdefault(str(g), []).append(e)
            for g, es in groups.items():
                table.setdefault(g, {})[name] = {"accuracy": float(np.mean([e["quality"] for e in es])),
                                                 "calls": float(np.mean([e["calls"] for e in es])), "n": len(es)}
        out[f"by {attr}"] = dict(sorted(table.items()))
    return out


#: a group's oracle gap (ceiling − best fixed, mean reward) below which its gap fraction is not reported
MIN_GROUP_GAP = 0.02


def _gap_breakdowns(cfg: BenchConfig, runner: Runner, results: dict[str, dict], learned: list[str],
                    best_fixed: str | None, oracle: str | None) -> dict:
    """Each learned row's oracle-gap fraction per group of every ``group_by`` attribute (e.g. per chain kind:
    where the policy falls short of the ceiling), with its calls beside the oracle's and the best fixed trigger's:
    ``{"by chain_kind": {group: {method: {fraction, lo, hi, gap, n, calls, oracle_calls, fixed_calls}}}}``. The
    same paired bootstrap as the overall fraction, over the group's questions. A group where the oracle is less
    than :data:`MIN_GROUP_GAP` reward better than the best fixed trigger has no fraction (NaN; its ``gap`` says how
    small): there the ratio divides by almost nothing (e.g. questions whose facts the LM knows)."""
    if not (learned and best_fixed and oracle):
        return {}
    qs, task = runner.components.questions, runner.components.task
    out: dict[str, dict] = {}
    for attr in cfg.group_by:
        groups: dict[str, list[int]] = {}
        for i, e in enumerate(results[oracle]["episodes"]):
            groups.setdefault(str(_attr(qs[e["question_index"]], attr, task)), []).append(i)
        table: dict[str, dict] = {}
        for g, idx in sorted(groups.items()):
            o, f = [results[oracle]["episodes"][i] for i in idx], [results[best_fixed]["episodes"][i] for i in idx]
            for k in learned:
                es = [results[k]["episodes"][i] for i in idx]
                assert [e["question_index"] for e in es] == [e["question_index"] for e in o], "episodes out of order"
                fr = stats.gap_fraction([e["reward"] for e in es], [e["reward"] for e in f], [e["reward"] for e in o],
                                        n_resamples=cfg.n_resamples, seed=cfg.seed)
                if not abs(fr["gap"]) >= MIN_GROUP_GAP:
                    fr.update(fraction=float("nan"), lo=float("nan"), hi=float("nan"))
                table.setdefault(g, {})[k] = {**fr, "calls": float(np.mean([e["calls"] for e in es])),
                                              "oracle_calls": float(np.mean([e["calls"] for e in o])),
                                              "fixed_calls": float(np.mean([e["calls"] for e in f]))}
        out[f"by {attr}"] = table
    return out
