"""``kairos results update``: the marked tables of a page regenerated from a benchmark's JSON; a missing run keeps
its block; --check reports a stale page."""

import json

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
