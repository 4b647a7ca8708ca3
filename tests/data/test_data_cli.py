"""``kairos data`` through a subprocess (``python -m eval``), as users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _kairos(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "eval", *args], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_stats_real_hotpotqa(real_file):
    path = real_file("hotpotqa/dev_500.jsonl")
    proc = _kairos("data", "stats", "--dataset", "hotpotqa", "--path", str(path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "questions" in out and "500" in out
    assert "10: 489" in out and "2: 500" in out and "4,858" in out
    assert "loaded 500 hotpotqa questions" in proc.stderr  # logs go to stderr, the table to stdout


def test_stats_json_on_fixture(fixtures_dir):
    proc = _kairos("data", "stats", "--dataset", "musique", "--path", str(fixtures_dir / "musique_dev.jsonl"),
                   "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["questions"] == 2 and stats["hops"] == {"2": 1, "3": 1}
    assert stats["context paragraphs (total)"] == 7 and stats["corpus passages (deduplicated)"] == 6


def test_convert_writes_flashrag(fixtures_dir, tmp_path):
    out = tmp_path / "flashrag"
    proc = _kairos("data", "convert", "--dataset", "2wikimultihopqa", "--path",
                   str(fixtures_dir / "2wikimultihopqa_dev.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len((out / "questions.jsonl").read_text().splitlines()) == 2
    assert len((out / "corpus.jsonl").read_text().splitlines()) == 4


def test_convert_medmcqa_with_disjoint_knowledge(tmp_path):
    def rec(qid: str, exp: str) -> str:
        return json.dumps({"question": f"Question {qid}?", "opa": "a", "opb": "b", "opc": "c", "opd": "d",
                           "cop": 1, "exp": exp, "subject_name": "Anatomy", "topic_name": None, "id": qid,
                           "choice_type": "single"})

    evaluated = tmp_path / "dev.jsonl"
    evaluated.write_text(rec("e1", "Ans. a. The femoral nerve supplies the quadriceps.") + "\n")
    knowledge = tmp_path / "train.jsonl"
    knowledge.write_text("\n".join([rec("e1", "Ans. a. The femoral nerve supplies the quadriceps."),
                                    rec("k1", "Ans: B. The radial nerve supplies the triceps.")]) + "\n")
    out = tmp_path / "out"
    proc = _kairos("data", "convert", "--dataset", "medmcqa", "--path", str(evaluated), "--knowledge-path",
                   str(knowledge), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert corpus == [{"id": "medmcqa-k1", "contents": "Anatomy\nThe radial nerve supplies the triceps."}]


def test_user_errors_are_one_clean_line(tmp_path):
    proc = _kairos("data", "stats", "--dataset", "nope", "--path", "x.jsonl")
    assert proc.returncode == 2
    assert "unknown dataset 'nope' (registered: 2wikimultihopqa" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1"\n')
    proc = _kairos("data", "stats", "--dataset", "medmcqa", "--path", str(bad))
    assert proc.returncode == 2 and f"{bad}:1: invalid JSON" in proc.stderr
    assert _kairos("data").returncode == 2
