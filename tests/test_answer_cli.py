"""``kairos answer``: questions from arguments, a file or stdin; a readable trace or ``--json``; clear errors."""

import json
import subprocess
import sys

import pytest

from envs.core.microworld.artifact import DEFAULT_ARTIFACT
from eval.cli import main

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")
Q1 = "Which company does Teimshox 's mother 's spouse 's father work for ?"
Q2 = "Where was Faindal 's spouse 's spouse born ?"


def _kairos(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "eval", "answer", *args], input=stdin, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def env_yaml(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "env.yaml"
    p.write_text("env:\n  rsus_components: [ent]\n  query_modes: [info_need, step]\n")
    return p


def test_json_answers_from_arguments_and_stdin(env_yaml, tmp_path):
    qfile = tmp_path / "qs.txt"
    qfile.write_text(Q2 + "\n")
    r = _kairos("--policy", "always", "--env-config", str(env_yaml), "--json", Q1, "-", "--questions-file",
                str(qfile), stdin=Q2 + "\n\n")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [a["question"] for a in rows] == [Q1, Q2, Q2]
    a = rows[0]
    assert a["answer"] and a["calls"] > 0 and a["steps"][0]["retrieved"] and a["steps"][0]["passages"]
    assert a["steps"][0]["query_mode"] == "info_need" and a["policy"] == "Always"
    assert rows[1]["answer"] == rows[2]["answer"] and rows[1]["question_id"] == rows[2]["question_id"]


def test_the_readable_trace(env_yaml):
    r = _kairos("--policy", "minprob<0.9995", "--query-mode", "step", "--env-config", str(env_yaml), Q1)
    assert r.returncode == 0, r.stderr[-2000:]
    assert Q1 in r.stdout and "retrieval call" in r.stdout and "Step 1" in r.stdout
    assert "τ 0.9995" in r.stdout and "minprob" in r.stdout


def test_errors_name_the_path_and_the_fix(tmp_path, capsys):
    assert main(["answer", "--policy", str(tmp_path / "missing_policy"), Q1]) == 2
    err = capsys.readouterr().err
    assert "missing_policy" in err and "no exported policy" in err and "kairos quickstart" in err
    assert main(["answer", "--policy", "never", "--corpus", str(tmp_path / "nope.jsonl"), Q1]) == 2
    err = capsys.readouterr().err
    assert "nope.jsonl" in err and "not found" in err and "FlashRAG" in err
    assert main(["answer", "--policy", "never"]) == 2
    assert "no questions" in capsys.readouterr().err
    assert main(["answer", "--bench", str(tmp_path), "--method", "x", Q1]) == 2
    assert "no finished benchmark" in capsys.readouterr().err
    # an index that does not match the corpus it is given
    from agents.retrievers.index import build_index
    from envs.core.data.loaders import load_flashrag_corpus

    jl = tmp_path / "c.jsonl"
    jl.write_text("".join(json.dumps({"id": f"d{i}", "contents": f"T{i}\nfact {i} ."}) + "\n" for i in range(5)))
    build_index("bm25", load_flashrag_corpus(jl), tmp_path / "idx", corpus_spec=f"flashrag:{jl}")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "x", "contents": "T\nsomething else ."}) + "\n")
    assert main(["answer", "--policy", "never", "--index", str(tmp_path / "idx"), "--corpus", str(other), Q1]) == 2
    err = capsys.readouterr().err
    assert "does not match" in err and str(tmp_path / "idx") in err and "kairos index build" in err
