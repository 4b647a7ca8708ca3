"""The README's main job runs end to end on the shipped micro-world and writes its report."""

import json
import subprocess
import sys

import pytest

from envs.microworld.artifact import DEFAULT_ARTIFACT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")]


def test_quickstart_writes_report(tmp_path):
    r = subprocess.run([sys.executable, "-m", "eval", "quickstart", "--out", str(tmp_path), "--n", "24",
                        "--n-dev", "12"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "Fixed triggers through the env" in report and "FLARE" in report
    trig = json.loads((tmp_path / "triggers.json").read_text())
    assert trig["CoT"]["calls_per_question"] == 0.0 and trig["IRCoT"]["calls_per_question"] > 1.0
    m = json.loads((tmp_path / "microworld_eval.json").read_text())
    assert m["targets"]["known_recall>=0.95"]["met"]
