"""The reasoner benchmark runs end to end on a tiny local model folder (no timing asserted)."""

import json

from eval.perf.reasoner import format_table, main, run_reasoner_bench


def test_bench_on_a_tiny_folder(tmp_path, tok, random_model):
    random_model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    res = run_reasoner_bench(model=str(tmp_path / "tiny"), batch_sizes=(1, 2), steps=2, max_step_tokens=4,
                             repeats=1, attention=True, n_questions=3, decode_tokens=3,
                             out=tmp_path / "bench.json")
    rows = res["rows"]
    assert [(r["batch"], r["attn_impl"], r["variant"]) for r in rows] == [
        (1, "sdpa", "plain"), (1, "sdpa", "hidden"), (2, "sdpa", "plain"), (2, "sdpa", "hidden"),
        (1, "eager", "plain"), (1, "eager", "hidden"), (1, "eager", "hidden+attn"),
        (2, "eager", "plain"), (2, "eager", "hidden"), (2, "eager", "hidden+attn")]
    assert all(r["same_tokens"] and r["tokens"] > 0 for r in rows)
    assert json.loads((tmp_path / "bench.json").read_text())["rows"] == rows
    assert [d["batch"] for d in res["decode"]] == [1, 2] and all(d["stepgen_tok_s"] > 0 for d in res["decode"])
    assert "tok/s" in format_table(res)


def test_cli_entry(tmp_path, tok, random_model):
    random_model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "b.json"
    assert main(["--model", str(tmp_path / "tiny"), "--batch-sizes", "2", "--steps", "1", "--repeats", "1",
                 "--max-step-tokens", "3", "--n-questions", "2", "--decode-tokens", "0", "--out", str(out)]) == 0
    assert out.is_file()
