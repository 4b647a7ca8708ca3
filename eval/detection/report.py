"""The report of ``kairos bench detection`` (:mod:`eval.detection.bench`): the ROC figure and the Markdown tables
of a benchmark result dict (``detection_bench.json``'s content)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from eval.bench.report import markdown_table
from eval.detection.data import BENEFIT_SPLITS, DETECTORS, SPLIT_LABELS

# ------------------------------------------------------------------------------------------------ ROC figure


def plot_roc(result: dict[str, Any], path: Path) -> None:
    """One ROC panel per split, one curve per detector (AUROC in the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = result["splits"]
    fig, axes = plt.subplots(1, len(splits), figsize=(6.2 * len(splits), 5.6), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, (name, sp) in zip(axes[0], splits.items()):
        for i, (det, (label, learned, _)) in enumerate(DETECTORS.items()):
            if det not in sp["roc"]:  # not computed on this split (RSUS on the benefit splits)
                continue
            fpr, tpr = sp["roc"][det]
            ax.plot(fpr, tpr, color=colors[i % 10], lw=1.6 if learned else 1.2,
                    ls=("-" if learned else "--") if i < 10 else ":", label=f"{label} ({sp['detectors'][det]['auroc']:.3f})")
        ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls=":")
        info = sp["info"]
        ax.set_title(f"{SPLIT_LABELS[name]} — {info['test_steps']} test steps, "
                     f"{100 * info['test_error_rate']:.1f}% {'helped' if name in BENEFIT_SPLITS else 'errors'}",
                     fontsize=10)
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.legend(fontsize=7.5, loc="lower right")
        ax.set_aspect("equal")
    models = [result["model_id"]] if "model_id" in result else []
    if "benefit" in result["data"]:
        models.append(result["data"]["benefit"]["model_id"])
    fig.suptitle(f"Step-error / retrieval-benefit detection ({', '.join(models)})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    tmp.replace(path)

# ------------------------------------------------------------------------------------------------ tables


def _f(x: float, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _g(x: float | None, spec: str = ".4g") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _ci_txt(ci: list[float], nd: int = 3) -> str:
    return f"[{_f(ci[0], nd)}, {_f(ci[1], nd)}]"


def main_table(result: dict[str, Any]) -> str:
    """Table 1: rows detectors, columns AUROC (95% CI) / PR-AUC / F1 / P / R per split."""
    headers, rows = ["detector"], []
    for name in result["splits"]:
        tag = SPLIT_LABELS[name].split(" ")[0]
        headers += [f"{tag} AUROC [95% CI]", f"{tag} PR-AUC", f"{tag} F1", f"{tag} P", f"{tag} R"]
    for det, (label, _, _) in DETECTORS.items():
        row = [label]
        for sp in result["splits"].values():
            d = sp["detectors"].get(det)
            row += ["not computed", "–", "–", "–", "–"] if d is None else [
                f"{_f(d['auroc'])} {_ci_txt(d['auroc_ci95'])}", _f(d["pr_auc"]), _f(d["f1"]), _f(d["precision"]),
                _f(d["recall"])]
        if any(det in sp["detectors"] for sp in result["splits"].values()):
            rows.append(row)
    return markdown_table(headers, rows)


def _rule(d: dict[str, Any]) -> str:
    """A detector's threshold rule in a few words (its value per split is in the report)."""
    rule = d.get("threshold_rule", "")
    if rule == "fixed p(error) threshold":
        return f"p(error) ≥ {_g(d['threshold'])}"
    return rule.replace("Youden's J on the train part", "Youden's J on train").replace(
        "Youden's J on validation (the U_verb proxy's held-out part)", "Youden's J on validation")


def table1(result: dict[str, Any], splits: tuple[str, ...] = ()) -> str:
    """PUlSE's Table 1 layout: rows detectors, per split AUROC [95% CI] / PR-AUC / F1 / precision / recall on the
    test part, and each detector's threshold rule (fitted on train or validation, never on test). ``splits``: these
    splits only, in this order (empty = every split of the result)."""
    names = list(splits) or list(result["splits"])
    missing = [n for n in names if n not in result["splits"]]
    if missing:
        raise ValueError(f"no split {missing[0]!r} in the result (splits: {', '.join(result['splits'])})")
    headers = ["detector", "threshold rule"]
    for n in names:
        tag = SPLIT_LABELS[n].split(" ")[0]
        headers += [f"{tag} AUROC [95% CI]", f"{tag} PR-AUC", f"{tag} F1", f"{tag} precision", f"{tag} recall"]
    rows = []
    for det, (label, _, _) in DETECTORS.items():
        ds = [result["splits"][n]["detectors"].get(det) for n in names]
        if all(d is None for d in ds):
            continue
        rules = list(dict.fromkeys(_rule(d) for d in ds if d is not None))
        row = [label, " / ".join(rules)]
        for d in ds:
            row += ["not computed", "–", "–", "–", "–"] if d is None else [
                f"{_f(d['auroc'])} {_ci_txt(d['auroc_ci95'])}", _f(d["pr_auc"]), _f(d["f1"]), _f(d["precision"]),
                _f(d["recall"])]
        rows.append(row)
    return markdown_table(headers, rows)


def split_lines(result: dict[str, Any], splits: tuple[str, ...] = ()) -> list[str]:
    """One short line per split: its test part, error rate (= a random detector's PR-AUC) and PUlSE's interval."""
    out = []
    for n in list(splits) or list(result["splits"]):
        sp = result["splits"][n]
        i, s = sp["info"], sp["interval_search"]
        out.append(f"- {SPLIT_LABELS[n]}: {i['test_steps']} test steps of {i['test_questions']} questions, "
                   f"{100 * i['test_error_rate']:.1f}% {'helped' if n in BENEFIT_SPLITS else 'errors'} (a random "
                   f"detector's PR-AUC); train {i['train_steps']} "
                   f"steps; PUlSE interval {s['used']} ({s['rule']}), pooling {sp.get('pulse_pooling', 'mean')}.")
    return out


def hedging_table(result: dict[str, Any], detectors: tuple[str, ...] = ("pulse", "reprobe")) -> str:
    """The non-hedging check as a table (PUlSE's Table 7 layout): per split the test steps, how many hedge, the
    error ratio before and after dropping them, and each detector's AUROC on all steps → on non-hedging steps."""
    headers = ["split", "test steps", "hedging steps", "error ratio all → non-hedging"]
    headers += [f"{DETECTORS[d][0]} AUROC all → non-hedging" for d in detectors]
    rows = []
    for n, sp in result["splits"].items():
        h = sp["hedging"]
        ratio_nh = h.get("error_ratio_non_hedging")
        row = [SPLIT_LABELS[n], str(h["n_steps"]), str(h["n_hedging_steps"]),
               f"{_f(sp['info']['test_error_rate'])} → {_f(ratio_nh)}"]
        for d in detectors:
            full = sp["detectors"].get(d)
            row.append("not computed" if full is None else
                       f"{_f(full['auroc'])} → {_f(h['auroc_non_hedging'].get(d))}")
        rows.append(row)
    return markdown_table(headers, rows)


def format_markdown(result: dict[str, Any]) -> str:
    """Every table of the benchmark as Markdown."""
    parts = ["# Step-error detection", ""] + _md_setup(result)
    parts += ["## Main table (test steps)", ""] + _md_splits(result) + ["", main_table(result), ""]
    parts += _md_metrics(result) + _md_by_kind(result) + _md_calibration(result) + _md_ablations(result)
    parts += _md_hedging(result)
    parts += ["", "Wall time: " + ", ".join(f"{k} {v} s" for k, v in result["seconds"].items()) + "."]
    return "\n".join(parts) + "\n"


def _md_setup(result: dict[str, Any]) -> list[str]:
    """The data (micro-world parts; real data) and how thresholds and CIs are made."""
    cfg, data = result["config"], result["data"]
    parts = []
    if "train" in data:
        parts += [f"Micro-world artifact `{result['artifact']}` ({result['model_id']}, {data['n_layers']} layers, "
                  f"width {data['hidden_size']}). Train part: {data['train']['questions']} '{data['train']['split']}' "
                  f"questions → {data['train']['steps']} steps ({100 * data['train']['error_rate']:.1f}% errors); "
                  f"test part: {data['test']['questions']} '{data['test']['split']}' questions → "
                  f"{data['test']['steps']} steps ({100 * data['test']['error_rate']:.1f}% errors). Error = the "
                  "step's fact is not the KB's (exact labels).", ""]
    def labelled(h: dict[str, Any]) -> str:  # a benefit label set: where it is from and what it holds
        return (f"'{h['env_split']}' of `{h['config']}`: {h['questions']} labelled questions → {h['steps']} closed-book "
                f"steps ({h['label_names']}; labels `{h['labels']}`)")

    if "benefit" in data:
        h = data["benefit"]
        parts += [f"Real data: {h['model_id']} ({h['n_layers']} layers, width {h['hidden_size']}) on {labelled(h)}; "
                  "positive = retrieving at the step raises the answer's quality (retrieval benefit, docs/design.md "
                  "§6). In the benefit columns 'error' reads 'retrieval helps'.", ""]
    if "benefit_ood" in data:
        parts += [f"(d) out of distribution: the detectors fitted on every question above, tested on "
                  f"{labelled(data['benefit_ood'])}.", ""]
    parts += [f"Thresholds: training-free detectors by Youden's J on each split's train part; learned probes "
             f"{'by Youden on validation' if cfg['probe_threshold'] == 'val' else 'at p(error) ≥ ' + cfg['probe_threshold']}"
             f" — never on test. 95% CIs: question-level bootstrap, {cfg['n_boot']} resamples, seed {cfg['seed']} "
             "(the same resamples for every detector).", ""]
    if "rsus" in data:
        r = data["rsus"]
        parts += [f"RSUS rows (micro-world splits; eval.detection.rsus): U_ent = BM25 score entropy of the step's "
                  f"entities over the world's fact corpus (top 100), U_cons = disagreement of {r['n_samples']} "
                  "alternatives sampled from the state before the step, at every step; RSUS = the paper weights "
                  "0.40 / 0.35 / 0.25 (verb / ent / cons) renormalised over the row's components; U_verb = a proxy "
                  "fitted on the fit part, on surface features with or without the step's MiniLM embedding (the "
                  "micro-world LM states no confidence). Thresholds: Youden's J on the train part, with a proxy on "
                  "validation. Cost (CPU, generation not included): "
                  + "; ".join(f"{k} {v['steps']} steps {v['cpu_seconds']} s ({v['ms_per_step']} ms per step)"
                              for k, v in r.items() if isinstance(v, dict) and v) + ". Not computed on the benefit splits.", ""]
    return parts


def _md_splits(result: dict[str, Any]) -> list[str]:
    """One line per split: its parts, error rate and PUlSE interval."""
    parts = []
    for name, sp in result["splits"].items():
        i = sp["info"]
        extra = (f"; {len(i['held_out_subjects'])} held-out subjects, {i['n_subjects_train']} train subjects"
                 if name == "entity" else "")
        parts.append(f"- **{SPLIT_LABELS[name]}**: {i['description']}. Train {i['train_steps']} steps "
                     f"(fit {i['fit_steps']}, validation {i['val_steps']}, {i['val_split']}), test "
                     f"{i['test_steps']} steps of {i['test_questions']} questions "
                     f"({100 * i['test_error_rate']:.1f}% errors: {i['test_kinds']}){extra}. PUlSE interval "
                     f"{sp['interval_search']['used']} ({sp['interval_search']['rule']}), pooling "
                     f"{sp.get('pulse_pooling', 'mean')}.")
    return parts


def _md_metrics(result: dict[str, Any]) -> list[str]:
    """Per split: every metric with its CI, the thresholds and ΔAUROC vs PUlSE."""
    parts = []
    for name, sp in result["splits"].items():
        parts += [f"### {SPLIT_LABELS[name]}: every metric with its 95% CI, thresholds, ΔAUROC vs PUlSE (paired)", ""]
        rows = []
        for det, (label, _, _) in DETECTORS.items():
            d = sp["detectors"].get(det)
            if d is None:
                continue
            rows.append([label, f"{_f(d['auroc'])} {_ci_txt(d['auroc_ci95'])}",
                         f"{_f(d['pr_auc'])} {_ci_txt(d['pr_auc_ci95'])}", f"{_f(d['f1'])} {_ci_txt(d['f1_ci95'])}",
                         f"{_f(d['precision'])} {_ci_txt(d['precision_ci95'])}",
                         f"{_f(d['recall'])} {_ci_txt(d['recall_ci95'])}", _g(d["threshold"]), _f(d["fire_rate"]),
                         "–" if det == "pulse" else
                         f"{_g(d['delta_auroc_vs_pulse'], '+.3f')} {_ci_txt(d['delta_auroc_vs_pulse_ci95'])}"])
        parts += [markdown_table(["detector", "AUROC", "PR-AUC", "F1", "precision", "recall", "threshold", "fire rate",
                          "ΔAUROC vs PUlSE"], rows), ""]
    return parts


def _md_by_kind(result: dict[str, Any]) -> list[str]:
    """Per split: each error kind's errors vs all correct test steps."""
    parts = ["## Per error kind (that kind's errors vs all correct test steps)", "",
             "AUROC [95% CI] / PR-AUC. The PR-AUC of a random detector equals the set's error ratio.", ""]
    for name, sp in result["splits"].items():
        bk = sp["by_error_kind"]
        if not bk:
            continue
        headers = ["detector"] + [f"{k} (n={r['n_errors']}, ratio {r['error_ratio']:.3f})" for k, r in bk.items()]
        rows = []
        for det, (label, _, _) in DETECTORS.items():
            if det not in sp["detectors"]:
                continue
            rows.append([label] + [f"{_f(r['detectors'][det]['auroc'])} {_ci_txt(r['detectors'][det]['auroc_ci95'], 2)}"
                                   f" / {_f(r['detectors'][det]['pr_auc'])}" for r in bk.values()])
        parts += [f"### {SPLIT_LABELS[name]}", "", markdown_table(headers, rows), ""]
    return parts


def _md_calibration(result: dict[str, Any]) -> list[str]:
    """Output confidence per step kind (micro-world), and the verdict on MISLEARNED steps."""
    cal = result.get("calibration", {"rows": {}, "verdict": "", "steps": "", "minprob_threshold": None})
    parts = [] if not cal["rows"] else [f"## Calibration ({cal['steps']})", "",
             f"Output confidence per step kind. MinProb flag rate = share of steps MinProb fires on at its "
             f"train-part Youden threshold ({_g(cal['minprob_threshold'])}).", ""]
    rows = [[k, str(r["n"]), f"{r['mean_maxprob']:.3f} ± {r['sd_maxprob']:.3f}",
             f"{r['mean_minprob']:.3f} ± {r['sd_minprob']:.3f}", f"{r['median_minprob']:.3f}",
             f"{r['share_minprob_ge_0.9']:.3f}", f"{r['mean_ppl']:.3f}", _f(r.get("minprob_flag_rate", math.nan))]
            for k, r in cal["rows"].items()]
    cal_headers = ["steps", "n", "mean MaxProb", "mean MinProb", "median MinProb", "share MinProb ≥ 0.9", "mean PPL",
                   "MinProb flag rate"]
    parts += [] if not rows else [markdown_table(cal_headers, rows), ""]
    if cal["verdict"]:
        parts += [cal["verdict"] + ".", ""]
    return parts


def _variant(label: str) -> str:
    """An ablation's label without the split's own interval (``parts …``, ``pooling …`` and ``interval chosen …``
    rows are fitted at the interval each split uses), so one row lines the splits up; named intervals keep theirs."""
    if label.startswith("interval ") and not label.startswith("interval chosen"):
        return label
    return re.sub(r" (\[\d+,\d+\]|\(per fold\))$", "", label)


def ablation_table(result: dict[str, Any], rows: tuple[str, ...] = ()) -> str:
    """PUlSE's ablations as one table, every split side by side: per variant validation AUROC, test AUROC [95% CI]
    and test PR-AUC ("" when no split has ablations). ``parts``, ``pooling`` and ``interval chosen`` rows are at each
    split's interval in use (``interval_search.used``). ``rows``: keep only the variants whose label starts with one
    of these words (``parts``: magnitude / angle / both, PUlSE's Table 3; ``interval``: layer intervals, its
    Figure 4; ``pooling``); empty = every variant."""
    if not any(sp["ablations"] for sp in result["splits"].values()):
        return ""
    names = list(result["splits"])
    per_split = {n: {_variant(k): v for k, v in result["splits"][n]["ablations"].items()} for n in names}
    labels = [k for k in dict.fromkeys(k for n in names for k in per_split[n])
              if not rows or k.split(" ")[0] in rows]
    headers = ["variant"]
    for n in names:
        tag = SPLIT_LABELS[n].split(" ")[0]
        headers += [f"{tag} val AUROC", f"{tag} test AUROC [95% CI]", f"{tag} test PR-AUC"]
    table = []
    for lab in labels:
        row = [lab]
        for n in names:
            a = per_split[n].get(lab)
            row += (["–"] * 3 if a is None else
                    [_f(a["val_auroc"]), f"{_f(a['test_auroc'])} {_ci_txt(a['test_auroc_ci95'])}",
                     _f(a["test_pr_auc"])])
        table.append(row)
    return markdown_table(headers, table)


def interval_note(result: dict[str, Any]) -> str:
    """Which interval the 'parts', 'pooling' and 'interval chosen' ablation rows were fitted at, per split."""
    return ("'parts', 'pooling' and 'interval chosen' rows use the interval in use for each split (" + ", ".join(
        f"{SPLIT_LABELS[n].split(' ')[0]} {sp['interval_search']['used']}" for n, sp in result["splits"].items()) + ")")


def _md_ablations(result: dict[str, Any]) -> list[str]:
    """PUlSE's ablations, every split side by side (none: no section)."""
    table = ablation_table(result)
    if not table:
        return []
    return ["## PUlSE ablations (chosen on validation, reported on test)", "", table, "",
            interval_note(result) + " ('pooling' over the step's tokens: mean / last = PUlSE of the mean-pooled / last-token "
            "states; max / token_mean = each token's PUlSE features pooled; arXiv 2605.18549 finds max decisive). "
            "Every candidate interval's validation and test AUROC is in the JSON (`interval_search`).", ""]


def _md_hedging(result: dict[str, Any]) -> list[str]:
    """Per split: how many test steps hedge, and the AUROCs without them."""
    parts = ["## Non-hedging steps", ""]
    for name, sp in result["splits"].items():
        h = sp["hedging"]
        ratios = ("" if not h["n_hedging_steps"] else
                  f" Error ratio: hedging {_f(h.get('error_ratio_hedging'))}, non-hedging "
                  f"{_f(h.get('error_ratio_non_hedging'))}.")
        parts.append(f"- {SPLIT_LABELS[name]}: {h['n_hedging_steps']} of {h['n_steps']} test steps hedge; "
                     f"{h['note']}.{ratios}")
        if h["n_hedging_steps"]:
            parts.append("  AUROC on non-hedging steps: " + ", ".join(
                f"{DETECTORS[d][0]} {_f(v)}" for d, v in h["auroc_non_hedging"].items()))
    return parts
