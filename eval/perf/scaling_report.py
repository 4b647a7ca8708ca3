"""The report of ``kairos bench scaling`` (:mod:`eval.perf.scaling`): power-law fits, the Markdown tables and the
log-log plots.

Each cost's measure ``y`` against an axis' size ``x`` is fitted as ``y = a·x^b`` by least squares on ``log y`` vs
``log x`` over the sizes measured (:func:`fit_power_law`: the exponent ``b``, the coefficient ``a`` and the R² of the
log-log fit); the smallest size measured is the baseline every ratio is relative to.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

#: measure -> how the tables and plots name it
MEASURES = {"wall_s": "wall s", "cpu_s": "CPU s", "tokens": "generated tokens", "forwards": "LM forward passes",
            "peak_rss_mb": "peak RSS MB", "cache_bytes": "cache bytes", "tokens_per_decision": "tokens / decision",
            "total_wall_s": "total wall s", "total_tokens": "total generated tokens",
            "total_cache_bytes": "total cache bytes", "index_bytes": "index bytes",
            "prefix_hit_rate": "prefix-cache hit rate"}


def fit_power_law(x: list[float], y: list[float]) -> dict[str, Any]:
    """``y ≈ a·x^b`` by least squares in log-log space over the points with ``x, y > 0`` (finite): ``{"exponent": b,
    "coefficient": a, "r2": R² of the log-log fit, "n": points used}``; exponent and R² are None with < 2 points
    (R² is 1 with exactly 2, and None when every log y is the same).

    >>> f = fit_power_law([4, 8, 16, 32], [3 * x ** 2 for x in (4, 8, 16, 32)])
    >>> round(f["exponent"], 6), round(f["coefficient"], 6), round(f["r2"], 6), f["n"]
    (2.0, 3.0, 1.0, 4)
    """
    pts = [(float(a), float(b)) for a, b in zip(x, y)
           if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0]
    if len(pts) < 2 or len({a for a, _ in pts}) < 2:
        return {"exponent": None, "coefficient": None, "r2": None, "n": len(pts)}
    lx, ly = np.log([a for a, _ in pts]), np.log([b for _, b in pts])
    b, log_a = np.polyfit(lx, ly, 1)
    resid = ly - (b * lx + log_a)
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else None
    return {"exponent": float(b), "coefficient": float(math.exp(log_a)), "r2": r2, "n": len(pts)}


#: peak-RSS growth below this many MB is not resolved (the allocator's pools and the 5 ms sampling): shown as such
#: and left out of the fits
RSS_RESOLUTION_MB = 1.0


def resolved(m: str, v: Any) -> bool:
    """Whether value ``v`` of measure ``m`` is a measurement to fit (a peak RSS under the resolution is not)."""
    return v is not None and not (m == "peak_rss_mb" and v < RSS_RESOLUTION_MB)


def fit_axis(sizes: list[float], points: dict[str, list[dict]], measures: list[str]) -> dict[str, dict[str, Any]]:
    """Every cost's fit per measure along one axis (points that were skipped, lack the measure or are under its
    resolution are left out)."""
    fits: dict[str, dict[str, Any]] = {}
    for cost, rows in points.items():
        for m in measures:
            ok = [(s, r[m]) for s, r in zip(sizes, rows) if r and "skipped" not in r and r.get(m) is not None]
            if not ok:
                continue
            kept = [(s, v) for s, v in ok if resolved(m, v)]
            xs, ys = [s for s, _ in kept], [v for _, v in kept]
            if not kept:
                fits.setdefault(cost, {})[m] = {"exponent": None, "coefficient": None, "r2": None, "n": 0,
                                                "baseline_size": None, "ratio_to_baseline": []}
                continue
            if xs:
                fits.setdefault(cost, {})[m] = {**fit_power_law(xs, ys), "baseline_size": xs[0],
                                                "ratio_to_baseline": [y / ys[0] if ys[0] else None for y in ys]}
    return fits


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def axis_table(axis: dict[str, Any]) -> str:
    """One axis as a Markdown table: a row per (cost, measure), its value at each size, exponent and R²."""
    sizes = axis["sizes"]
    head = ["cost", "measure", *[f"{axis['size_label']} {s:g}" for s in sizes], "exponent", "R²"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cost, rows in axis["points"].items():
        unit = next((r["unit"] for r in rows if r and "unit" in r), None)
        name = f"{cost} (per {unit})" if unit else cost
        for m, fit in axis["fits"].get(cost, {}).items():
            cells = [r.get("skipped_short", "skipped") if r and "skipped" in r
                     else _num((r or {}).get(m)) if resolved(m, (r or {}).get(m)) or (r or {}).get(m) is None
                     else f"< {RSS_RESOLUTION_MB:g}" for r in rows]
            label = f"{cost} (all {unit}s)" if unit and m.startswith("total_") else name
            lines.append("| " + " | ".join([label, MEASURES.get(m, m), *cells, _num(fit["exponent"]),
                                            _num(fit["r2"])]) + " |")
    return "\n".join(lines)


def format_markdown(result: dict[str, Any]) -> str:
    """The whole report: the environment, each axis' table and what was skipped or masked."""
    env, cfg = result["environment"], result["config"]
    real = cfg.get("env_from")
    chains = (f"The env of `{real}` (its env_config), every chain forced to the length by budget forcing (an answer "
              "before it is replaced by \"Wait,\" and the model goes on); prefix-cache hit rate: the share of the "
              "prompt tokens sent to vLLM that its prefix cache served" if real else
              f"Task microworld_chain: chains of {cfg['hops']}-hop sub-questions of the '{cfg['split']}' split "
              f"(a sub-question is {cfg['hops']} steps and its answer line)")
    parts = [f"# Scaling benchmark ({'a real model' if real else 'micro-world'})", "",
             f"{env['cpu_model']}, {env['cpus']} CPUs, torch threads {result['config']['threads']}; Python "
             f"{env['python']}, torch {env['torch']}. Command: `{result['command']}`. Total {result['seconds']:.0f} s.",
             "", f"{chains}, λ of retrieval calls 0.1, at most "
             f"{cfg['max_retrievals']} retrievals per episode, {cfg['batch']} questions in flight; episodes: a "
             "Bernoulli(0.3) retrieval policy (the corpus axis: always retrieve); labels: the counterfactual warm start "
             "(π₀ = never), every branch continued to the answer; labels_horizon: the same labels with every branch "
             "cut H steps past its decision (its agreement with the exact labels below the table, where both ran); "
             "oracle: the cache oracle at λ; oracle_labels: the exact oracle's action values at every "
             "decision of π₀'s path; reinforce: one iteration (sampled episodes + one update) in-process, without Ray "
             "actors; benchmark: CoT, always, Bernoulli(0.3) and MinProb < 0.5 on one shared cache.",
             "", "Each cost is measured from a cold trajectory cache of its own. Exponents: least-squares fits of "
             "log(measure) on log(size) over the sizes measured (the smallest is the baseline); per question / "
             "episode / iteration / query / index as the cost's unit says. Peak RSS: above the measurement's start, "
             f"sampled every 5 ms; growth under {RSS_RESOLUTION_MB:g} MB is not resolved (shown as such, not fitted)."]
    for axis in result["axes"].values():
        parts += ["", f"## {axis['title']}", "", axis["description"], "", axis_table(axis)]
        notes = [f"- {cost} at {axis['size_label']} {s:g}: {r['skipped']}" for cost, rows in axis["points"].items()
                 for s, r in zip(axis["sizes"], rows) if r and "skipped" in r]
        notes += [f"- {m}" for m in axis.get("masked", [])]
        notes += agreement_notes(axis)
        if notes:
            parts += ["", *notes]
    return "\n".join(parts) + "\n"


def axes_markdown(result: dict[str, Any], measures: tuple[str, ...] = ()) -> str:
    """Each axis' table and notes without the run's header (a results page's ``<!-- table: scaling … -->`` block);
    ``measures``: keep only these rows (every measure when empty)."""
    parts = []
    for axis in result["axes"].values():
        if measures:
            axis = {**axis, "fits": {c: {m: f for m, f in fits.items() if m in measures}
                                     for c, fits in axis["fits"].items()}}
        notes = [f"- {cost} at {axis['size_label']} {s:g}: {r['skipped']}" for cost, rows in axis["points"].items()
                 for s, r in zip(axis["sizes"], rows) if r and "skipped" in r]
        notes += [f"- {m}" for m in axis.get("masked", [])] + agreement_notes(axis)
        parts += [f"*{axis['title']}.* {axis['description']}", "", axis_table(axis)]
        parts += (["", *notes, ""] if notes else [""])
    env = result["environment"]
    parts.append(f"{env['cpu_model']}, {env['cpus']} CPUs, torch threads {result['config']['threads']}; "
                 f"`{result['command']}`, {result['seconds'] / 60:.1f} min.")
    return "\n".join(parts).strip()


def agreement_notes(axis: dict[str, Any]) -> list[str]:
    """One line per size where the horizon labels ran beside the exact ones: how far they agree.

    >>> print(*agreement_notes({"size_label": "steps", "sizes": [4], "points": {"labels_horizon": [
    ...     {"horizon": 4, "agreement_y": 1.0, "delta_corr": 0.9, "delta_equal_share": 0.95}]}}))
    - labels_horizon (H = 4) at steps 4: y agrees with the exact labels on 100.0% of decisions, ΔR equal on 95.0%, \
correlation 0.900
    """
    out = []
    for s, r in zip(axis["sizes"], axis["points"].get("labels_horizon", [])):
        if r and "agreement_y" in r:
            corr = "–" if r.get("delta_corr") is None else f"{r['delta_corr']:.3f}"
            out.append(f"- labels_horizon (H = {r.get('horizon', '?')}) at {axis['size_label']} {s:g}: y agrees with "
                       f"the exact labels on {100 * r['agreement_y']:.1f}% of decisions, ΔR equal on "
                       f"{100 * r['delta_equal_share']:.1f}%, correlation {corr}")
    return out


def plot_axis(axis: dict[str, Any], out_png: str | Path) -> Path:
    """Log-log plots of one axis: a panel per measure, a line per cost, its fitted exponent in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.bench.plots import _save

    measures = list(dict.fromkeys(m for fits in axis["fits"].values() for m in fits))
    cols = min(3, max(1, len(measures)))
    rows_n = max(1, math.ceil(len(measures) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.6 * cols, 3.6 * rows_n), squeeze=False)
    for ax, m in zip(axes.flat, measures):
        for cost, rows in axis["points"].items():
            fit = axis["fits"].get(cost, {}).get(m)
            pts = [(s, r[m]) for s, r in zip(axis["sizes"], rows)
                   if r and "skipped" not in r and resolved(m, r.get(m)) and r[m] > 0]
            if not pts or fit is None:
                continue
            label = cost + (f" (b = {fit['exponent']:.2f})" if fit["exponent"] is not None else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(axis["size_label"])
        ax.set_title(MEASURES.get(m, m), fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(measures):]:
        ax.set_visible(False)
    fig.suptitle(axis["title"], fontsize=11)
    return _save(fig, Path(out_png))


def render(result: dict[str, Any], out: str | Path) -> None:
    """Fit every axis again from its points and write ``scaling_bench.json``, ``scaling_bench.md`` and one plot per
    axis under ``out`` (what a run writes; ``kairos bench scaling --render-only`` re-renders a run's JSON)."""
    from envs.core.io import write_json, write_text

    out = Path(out)
    for axis, data in result["axes"].items():
        data["fits"] = fit_axis(data["sizes"], data["points"], data["measures"])
        data["plot"] = str(plot_axis(data, out / f"scaling_{axis}.png"))
    write_json(out / "scaling_bench.json", result)
    write_text(out / "scaling_bench.md", format_markdown(result))
