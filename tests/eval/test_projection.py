"""kairos bench projection: the GPU projection on paper from the scaling bench's chain-length exponents — the fit,
the scaling by tokens per step, the totals and hours, merged runs, its errors, and its `kairos results` block."""

from __future__ import annotations

import json

import pytest

from envs.core.config import ConfigError
from eval.perf.projection import ProjectionConfig, format_markdown, project, run

SIZES = [4, 8, 16, 32]


def _scaling(path, costs: dict[str, tuple[float, float]], sizes=SIZES, command="kairos bench scaling --tiny",
             episodes_per_iteration=4):
    """A scaling_bench.json whose cost c has tokens a·n^b at every size (costs: c -> (a, b))."""
    points = {}
    for c, (a, b) in costs.items():
        rows = []
        for n in sizes:
            row = {"n": 4, "tokens": a * n ** b}
            if c == "reinforce":
                row = {"n": 1, "tokens": a * n ** b * episodes_per_iteration, "episodes": episodes_per_iteration}
            rows.append(row)
        points[c] = rows
    data = {"command": command, "environment": {"cpu_model": "Test CPU"},
            "axes": {"chain_length": {"sizes": sizes, "points": points}}}
    path.write_text(json.dumps(data))
    return str(path)


COSTS = {"episode": (10.0, 1.0), "labels": (5.0, 2.0), "reinforce": (12.0, 1.0), "benchmark": (30.0, 1.0),
         "oracle": (1.0, 4.0)}


def test_each_cost_is_its_fit_at_the_target_length_scaled_by_tokens_per_step(tmp_path):
    cfg = ProjectionConfig(scaling=[_scaling(tmp_path / "s.json", COSTS)], steps=50, questions=1000,
                           tokens_per_step=[100], throughput=[1000.0, 4000.0], train_episodes=200,
                           out=str(tmp_path / "out"))
    r = project(cfg)
    assert r["micro_world_tokens_per_step"] == pytest.approx(10.0)  # the episode's 10·n tokens over n steps
    rows = {x["cost"]: x for x in r["rows"]}
    scale = 100 / 10.0
    assert rows["labels"]["exponent"] == pytest.approx(2.0)
    assert rows["labels"]["tokens_per_unit"] == pytest.approx(5.0 * 50 ** 2 * scale)
    assert rows["labels"]["total_tokens"] == pytest.approx(5.0 * 50 ** 2 * scale * 1000)
    assert rows["reinforce"]["tokens_per_unit"] == pytest.approx(12.0 * 50 * scale)  # per episode, not iteration
    assert rows["reinforce"]["total_tokens"] == pytest.approx(12.0 * 50 * scale * 200)
    assert rows["labels"]["hours"]["1000.0"] == pytest.approx(rows["labels"]["total_tokens"] / 1000 / 3600)
    assert rows["labels"]["hours"]["4000.0"] == pytest.approx(rows["labels"]["hours"]["1000.0"] / 4)
    assert rows["oracle"]["extrapolated"] and rows["oracle"]["max_measured_steps"] == 32


def test_a_later_run_fills_and_replaces_points_of_an_earlier_one(tmp_path):
    first = _scaling(tmp_path / "a.json", {"episode": (10.0, 1.0), "labels": (5.0, 2.0)}, sizes=[4, 8, 16])
    longer = _scaling(tmp_path / "b.json", {"labels": (5.0, 2.0)}, sizes=[16, 32, 64])
    r = project(ProjectionConfig(scaling=[first, longer], out=str(tmp_path / "o")))
    assert r["fits"]["labels"]["sizes"] == [4, 8, 16, 32, 64]
    assert r["fits"]["labels"]["exponent"] == pytest.approx(2.0)
    assert [s["command"] for s in r["sources"]] == ["kairos bench scaling --tiny"] * 2


def test_a_cost_with_fewer_than_two_points_is_masked_and_says_so(tmp_path):
    path = _scaling(tmp_path / "s.json", {"episode": (10.0, 1.0)})
    data = json.loads(open(path).read())
    data["axes"]["chain_length"]["points"]["oracle"] = [{"n": 4, "tokens": 100.0}, None, None, None]
    open(path, "w").write(json.dumps(data))
    r = project(ProjectionConfig(scaling=[path], tokens_per_step=[64], out=str(tmp_path / "o")))
    oracle = next(x for x in r["rows"] if x["cost"] == "oracle")
    assert oracle["masked"] == "fewer than 2 points"
    assert "fewer than 2 points" in format_markdown(r)


def test_the_report_says_it_is_a_projection_and_writes_json_and_markdown(tmp_path):
    cfg = ProjectionConfig(scaling=[_scaling(tmp_path / "s.json", COSTS)], out=str(tmp_path / "out"))
    run(cfg)
    md = (tmp_path / "out" / "projection.md").read_text()
    assert md.startswith("**A projection on paper, not a measurement**")
    assert "| warm start: counterfactual labels (exact) | 2.00 (1.000, 4), measured to 32 steps |" in md
    assert json.loads((tmp_path / "out" / "projection.json").read_text())["note"].startswith("a projection")


@pytest.mark.parametrize("data, says", [
    ({"scaling": []}, "--scaling is empty"),
    ({"steps": 0}, "steps"),
    ({"throughput": [0]}, "throughput"),
    ({"tokens_per_step": [0]}, "tokens_per_step"),
])
def test_bad_settings_name_the_field(data, says):
    with pytest.raises(ConfigError, match=says):
        ProjectionConfig.from_dict(data, where="kairos bench projection")


def test_a_missing_or_foreign_scaling_file_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        project(ProjectionConfig(scaling=[str(tmp_path / "none.json")]))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"axes": {"corpus": {}}}))
    with pytest.raises(ConfigError, match="no chain-length axis"):
        project(ProjectionConfig(scaling=[str(other)]))


def test_the_cli_and_the_results_block(tmp_path, capsys):
    from eval.cli import main
    from eval.results_cli import update_page

    src = _scaling(tmp_path / "s.json", COSTS)
    out = tmp_path / "proj"
    assert main(["bench", "projection", "--scaling", src, "--steps", "20", "--tokens-per-step", "64",
                 "--throughput", "2500,12500", "--out", str(out)]) == 0
    assert "20-step chains" in capsys.readouterr().out
    assert main(["bench", "projection", "--scaling", src, "--steps", "many", "--out", str(out)]) == 2
    assert "--steps 'many' is not a number" in capsys.readouterr().err
    page = tmp_path / "page.md"
    page.write_text(f"# x\n<!-- table: projection {out / 'projection.json'} -->\nold\n<!-- /table -->\n")
    assert update_page(page)["updated"] == [str(out / "projection.json")]
    assert "20-step chains" in page.read_text() and "old" not in page.read_text()
