"""``kairos results update``: the marked tables of a page regenerated from a benchmark's JSON; a missing run keeps
its block; --check reports a stale page."""

import json

import pytest

from eval.results_cli import update_page


def _summary():
    def m(kind, acc, calls, reward):
        return {"kind": kind, "accuracy": acc, "acc_lo": acc - 0.05, "acc_hi": acc + 0.05, "calls": calls,
                "reward": reward, "harm_rate": None, "query_mode": None}

    return {"setup": {"lambda_retrieval": 0.1, "n_test": 300},
            "methods": {"CoT": m("baseline", 0.5, 0.0, 0.5), "Entropy[q: dev]": m("fixed", 0.7, 1.0, 0.6),
                        "learned[QueryGen](λ=0.1)": m("learned", 0.9, 1.0, 0.8)},
            "best_fixed": "Entropy[q: dev]", "breakdowns": {},
            "group_comparisons": [{"a": "A", "b": "B", "reward": {"diff": 0.01, "lo": -0.01, "hi": 0.03},
                                   "quality": {"diff": 0.0, "lo": -0.02, "hi": 0.02},
                                   "calls": {"diff": -0.1, "lo": -0.2, "hi": 0.0}}]}


def test_marked_blocks_are_regenerated_and_missing_runs_kept(tmp_path):
    s = tmp_path / "summary.json"
    s.write_text(json.dumps(_summary()))
    page = tmp_path / "results.md"
    page.write_text("# Results\n\n"
                    f"<!-- table: summary {s} methods=CoT;learned[QueryGen](λ=0.1) -->\nold\n<!-- /table -->\n\n"
                    f"<!-- table: groups {s} -->\n<!-- /table -->\n\n"
                    f"<!-- table: summary {tmp_path / 'gone.json'} -->\nkept as it was\n<!-- /table -->\n")
    assert update_page(page, check=True)["changed"]
    r = update_page(page)
    text = page.read_text()
    assert r["updated"] == [str(s), str(s)] and r["missing"] == [str(tmp_path / "gone.json")]
    assert "old" not in text and "kept as it was" in text and "Entropy" not in text.split("groups")[0]
    assert "| CoT | baseline |" in text and "| A − B | | +0.010 [-0.010, +0.030]" in text
    assert not update_page(page, check=True)["changed"]  # regenerating again changes nothing


def _detection():
    def det(auroc, rule="Youden's J on the train part", thr=0.3):
        return {"auroc": auroc, "auroc_ci95": [auroc - 0.05, auroc + 0.05], "pr_auc": 0.5, "f1": 0.4,
                "precision": 0.3, "recall": 0.6, "threshold": thr, "threshold_rule": rule}

    def split(n_steps, pulse):
        return {"info": {"test_steps": n_steps, "test_questions": 10, "test_error_rate": 0.25, "train_steps": 40},
                "interval_search": {"used": [0, 6], "rule": "best validation AUROC"}, "pulse_pooling": "mean",
                "detectors": {"pulse": det(pulse, "fixed p(error) threshold", 0.5), "entropy": det(0.8)},
                "ablations": {"parts magnitude only [0,6]": {"val_auroc": 0.6, "test_auroc": 0.55,
                                                             "test_auroc_ci95": [0.5, 0.6], "test_pr_auc": 0.3},
                              "interval early [0,2]": {"val_auroc": 0.61, "test_auroc": 0.56,
                                                       "test_auroc_ci95": [0.5, 0.6], "test_pr_auc": 0.31}},
                "hedging": {"n_steps": n_steps, "n_hedging_steps": 0, "error_ratio_non_hedging": 0.25,
                            "auroc_non_hedging": {"pulse": pulse, "entropy": 0.8}}}

    return {"splits": {"question": split(40, 0.7), "entity": split(20, 0.5)}}


def test_detection_blocks_render_table1_ablation_and_hedging(tmp_path):
    d = tmp_path / "detection_bench.json"
    d.write_text(json.dumps(_detection()))
    page = tmp_path / "results.md"
    page.write_text(f"<!-- table: detection {d} part=table1 -->\n<!-- /table -->\n\n"
                    f"<!-- table: detection {d} part=ablation rows=parts -->\n<!-- /table -->\n\n"
                    f"<!-- table: detection {d} part=hedging detectors=pulse;entropy -->\n<!-- /table -->\n")
    update_page(page)
    t1, abl, hedge = page.read_text().split("<!-- /table -->")[:3]
    assert "| PUlSE probe | p(error) ≥ 0.5 | 0.700 [0.650, 0.750] | 0.500 | 0.400 | 0.300 | 0.600 | 0.500 [0.450" in t1
    assert "| Entropy | Youden's J on train | 0.800" in t1 and "(a') entity-disjoint: 20 test steps" in t1
    assert "| parts magnitude only | 0.600 | 0.550 [0.500, 0.600] | 0.300 |" in abl and "interval early" not in abl
    assert "| (a) question | 40 | 0 | 0.250 → 0.250 | 0.700 → 0.700 | 0.800 → 0.800 |" in hedge
    assert not update_page(page, check=True)["changed"]


def test_suite_blocks_render_the_method_by_benchmark_table(tmp_path):
    from eval.bench.suite import summary_rows

    s = _summary()
    cells = summary_rows({"musique": s, "hotpotqa": {**s, "methods": {"CoT": s["methods"]["CoT"]}}})
    (tmp_path / "summary.json").write_text(json.dumps({"title": "Kairos benchmark suite: t", **cells}))
    page = tmp_path / "results.md"
    page.write_text(f"<!-- table: suite {tmp_path / 'summary.json'} methods=Entropy[q: dev];CoT -->\n<!-- /table -->\n")
    update_page(page)
    text = page.read_text()
    assert "# Kairos benchmark suite" not in text and "| Entropy[q: dev] | 0.700 / 1.00 / – | – |" in text
    assert text.index("| Entropy[q: dev]") < text.index("| CoT |") and "learned" not in text
    page.write_text(f"<!-- table: suite {tmp_path / 'summary.json'} methods=FLARE -->\n<!-- /table -->\n")
    with pytest.raises(ValueError, match="no method 'FLARE'"):
        update_page(page)


def test_summary_table_names_the_quality_metric_it_reports():
    from eval.bench.tables import methods_table

    s = _summary()
    assert "| accuracy [95% CI] |" in methods_table(s) and "reward = accuracy − 0.1" in methods_table(s)
    s["setup"]["quality_metric"] = "f1"
    table = methods_table(s)
    assert "| F1 [95% CI] |" in table and "accuracy" not in table and "reward = F1 − 0.1 · calls" in table


def test_scaling_blocks_render_each_axis_with_only_the_named_measures(tmp_path):
    from eval.perf.scaling_report import fit_axis

    sizes, points = [4, 8], {"episode": [{"unit": "episode", "tokens": 40.0, "wall_s": 1.0, "prefix_hit_rate": 0.8},
                                         {"unit": "episode", "tokens": 80.0, "wall_s": 2.0, "prefix_hit_rate": 0.9}],
                             "labels": [{"unit": "question", "tokens": 100.0, "wall_s": 3.0},
                                        {"skipped": "projected 900 s > budget 240 s", "skipped_short": "skipped"}]}
    measures = ["tokens", "wall_s", "prefix_hit_rate"]
    axis = {"title": "Cost against chain length", "size_label": "steps", "description": "2 chains.", "sizes": sizes,
            "points": points, "measures": measures, "fits": fit_axis(sizes, points, measures)}
    run = {"axes": {"chain_length": axis}, "config": {"threads": 1}, "command": "kairos bench scaling --env-from x",
           "seconds": 90.0, "environment": {"cpu_model": "AMD EPYC", "cpus": 2}}
    (tmp_path / "scaling_bench.json").write_text(json.dumps(run))
    page = tmp_path / "results.md"
    page.write_text(f"<!-- table: scaling {tmp_path / 'scaling_bench.json'} measures=tokens;prefix_hit_rate -->\n"
                    "<!-- /table -->\n")
    update_page(page)
    text = page.read_text()
    assert "| episode (per episode) | generated tokens | 40 | 80 | 1 | 1 |" in text
    assert "| episode (per episode) | prefix-cache hit rate | 0.8 | 0.9 |" in text and "wall s" not in text
    assert "- labels at steps 8: projected 900 s > budget 240 s" in text and "AMD EPYC, 2 CPUs" in text
