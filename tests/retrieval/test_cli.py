"""``kairos index`` / ``kairos bench retrieval`` through subprocess, BM25 only (fast)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAS_STEMMER = importlib.util.find_spec("Stemmer") is not None


@pytest.fixture(scope="module")
def micro_index(tmp_path_factory, kairos):
    out = tmp_path_factory.mktemp("cli") / "micro-bm25"
    p = kairos("index", "build", "--retriever", "bm25", "--corpus", "microworld", "--out", str(out),
               "--stemmer", "english" if HAS_STEMMER else "none")
    built = json.loads(p.stdout)
    assert built["kind"] == "bm25" and built["n_docs"] == 328
    return out


def test_build_search_info(micro_index, kairos):
    p = kairos("index", "search", "--index", str(micro_index), "-k", "2", "--json", "Belsheth 's mother")
    res = json.loads(p.stdout)
    assert res[0]["query"] == "Belsheth 's mother" and len(res[0]["results"]) == 2
    assert res[0]["results"][0]["text"] == "Belsheth 's mother is Mumdril ."
    p = kairos("index", "search", "--index", str(micro_index), "Belsheth 's mother", "zzzz")
    assert "Mumdril" in p.stdout and "no passage shares a term" in p.stdout
    p = kairos("index", "info", "--index", str(micro_index), "--check")
    assert "passed" in p.stdout and "microworld:0" in p.stdout
    info = json.loads(kairos("index", "info", "--index", str(micro_index), "--json").stdout)
    assert info["n_docs"] == 328


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in-process (the subprocess smoke test above covers the entry point)."""
    from eval.cli import main

    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_errors_are_one_clear_line(tmp_path, micro_index, capsys):
    rc, _, err = run_main(capsys, "index", "search", "--index", str(tmp_path / "none"), "q")
    assert rc == 2 and "kairos index build --retriever" in err and "Traceback" not in err
    rc, _, err = run_main(capsys, "index", "search", "--index", str(micro_index), "--corpus", "microworld:1", "q")
    assert rc == 2 and "corpus" in err and "rebuild" in err
    rc, _, err = run_main(capsys, "index", "build", "--retriever", "bm25", "--corpus", "microworld", "--out",
                          str(tmp_path / "x"), "--nbits", "2")
    assert rc == 2 and "--nbits is not a bm25 setting" in err
    rc, _, err = run_main(capsys, "index", "build", "--retriever", "colbert", "--corpus", "microworld", "--out",
                          str(tmp_path / "y"))
    assert rc == 2 and "checkpoint is required" in err


@pytest.mark.skipif(not HAS_STEMMER, reason="PyStemmer missing (the retrieval extra should install it)")
def test_bench_retrieval_bm25_only(tmp_path, capsys):
    fixture = REPO / "tests" / "fixtures" / "hotpotqa_ircot.jsonl"
    out = tmp_path / "bench"
    rc, stdout, _ = run_main(capsys, "bench", "retrieval", "--out", str(out), "--retrievers", "bm25", "--hotpotqa",
                             str(fixture), "--eval-questions", "0:3", "--micro-questions", "20",
                             "--prefetch-questions", "10")
    assert rc == 0
    assert "## HotpotQA" in stdout and "## Micro-world query modes" in stdout and "## Caches" in stdout
    result = json.loads((out / "retrieval_bench.json").read_text())
    row = result["hotpotqa"]["rows"][0]
    assert row["system"] == "bm25" and 0 <= row["R@10"] <= 1 and row["median_ms"] > 0
    assert "R@3" in row  # the injection window's recall beside R@2/5/10
    micro = result["microworld"]["systems"][0]  # the cost of each index on the micro-world too
    assert micro["system"] == "bm25" and micro["median_ms"] > 0 and micro["size_mb"] >= 0 and "Cost per index" in stdout
    modes = {r["mode"] for r in result["microworld"]["rows"]}
    assert modes == {"step", "content_words", "question_step", "info_need", "question"}
    info_need = [r for r in result["cache"]["rows"] if r["mode"] == "info_need" and r["prefetch"]][0]
    assert info_need["prefetch_hit_rate"] > 0 and info_need["prefetch_searches_per_lookup"] > 0
    assert (out / "retrieval_bench.md").is_file()
