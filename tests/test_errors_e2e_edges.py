"""End to end, as a user meets them (issue 53, "Reliability, round four"): what enters at the edges is checked or
normalised once, where every caller passes.

1. Text is Unicode-normalised where answers enter scoring (NFKC in ``normalize_answer``) and where questions and
   passages enter retrieval (NFKC in BM25's one tokeniser, NFC for ColBERT).
2. One rule for passages without text in every corpus form (refused with file:line), and BM25 safe on a corpus with
   nothing to index (one clear line, no ``max() arg is an empty sequence``).
3. Out-of-range token log-probabilities (positive, NaN, infinite) are masked with a WARNING; the public API refuses a
   bare string where a list of questions is expected.
4. Every command that writes a folder takes the output-folder lock (``kairos index build``, ``kairos retriever
   train-colbert``, ``kairos microworld build``, ``kairos train querygen``).
5. ``kairos serve`` checks OpenAI's sampling fields as OpenAI does, and refuses the ones it would ignore.

CLI cases run ``python -m eval …`` (the ``kairos`` command) in a subprocess and assert the exit status, ONE error line
(``: error: ``, no traceback) and what it names.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from test_errors_e2e_runs import _one_line_error  # the one-line-error check every e2e test shares

from envs.core.microworld.artifact import DEFAULT_ARTIFACT

ROOT = Path(__file__).resolve().parents[1]
needs_world = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(), reason="no shipped artifact")


def _kairos(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "eval", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


# ================================================================================== 1. text normalised at the edges
def test_an_nfd_gold_answer_scores_like_its_nfc_prediction():
    """A gold answer in decomposed Unicode (NFD) against the same answer composed (NFC) scores EM 1 and F1 1 — through
    the EM/F1 functions and through ``score`` — and an option text matches across the two forms (it scored 0)."""
    from envs.core.data.types import QAExample
    from envs.scoring import exact_match, extract_choice, score, token_f1

    gold, pred = nfd("Café Müller"), nfc("Café Müller")
    assert gold != pred
    assert exact_match(pred, [gold]) == 1.0 and token_f1(pred, [gold]) == 1.0
    assert exact_match(gold, [pred]) == 1.0 and token_f1(gold, pred) == 1.0
    assert score(f"Step 1: ...\nAnswer: {pred}", QAExample("q", "?", [gold])) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    assert exact_match("Ｐａｒｉｓ", ["Paris"]) == 1.0  # NFKC: full-width letters are the plain ones
    assert extract_choice(f"Answer: {nfd('Crème brûlée')}, because ...", ["Tiramisu", nfc("Crème brûlée")],
                          "strict") == 1


def test_a_bm25_search_with_an_nfd_query_finds_the_nfc_passage(tmp_path):
    """``kairos index search`` with a decomposed (NFD) query finds the passage written composed (NFC) — the query and
    the passages go through one NFKC tokeniser — and an NFD corpus is found by an NFC query (it found nothing)."""
    corpus = _jsonl(tmp_path / "c.jsonl", [
        {"id": "bausch", "contents": nfc("Café Müller\nCafé Müller is a dance piece by Pina Bausch.")},
        {"id": "rome", "contents": "Rome\nRome is the capital of Italy."},
        {"id": "paris", "contents": "Paris\nParis is the capital of France."}])
    out = tmp_path / "idx"
    r = _kairos("index", "build", "--retriever", "bm25", "--corpus", str(corpus), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    r = _kairos("index", "search", "--index", str(out), "--json", "-k", "1", nfd("Who made Müller's café?"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert [h["id"] for h in json.loads(r.stdout)[0]["results"]] == ["bausch"]

    from agents.retrievers.bm25 import BM25Config, BM25Retriever, bm25_tokenize
    from envs.core.data.types import Corpus, Passage

    assert bm25_tokenize(nfd("Müller café"), BM25Config(stemmer="none")) == [nfc("müller"), nfc("café")]
    decomposed = Corpus.from_passages([Passage("a", "", nfd("Café Müller is a dance piece.")),
                                       Passage("b", "", "Rome is a city.")])
    hits = BM25Retriever.build(decomposed, BM25Config()).search([nfc("Café Müller")], k=1)
    assert [h.id for h in hits[0]] == ["a"]


# ================================================================================== 2. passages with no text
@pytest.mark.parametrize("row,field", [
    ({"id": "a", "contents": "Paris\n"}, "contents"),  # a title, no body: was accepted silently
    ({"id": "a", "contents": "Paris"}, "contents"),  # one line is a title too (FlashRAG: "title\ntext")
    ({"id": "a", "contents": "\"Paris\"\n   \n"}, "contents"),
    ({"id": "a", "contents": ""}, "contents"),  # refused before
    ({"id": "a", "title": "Paris", "text": ""}, "text"),  # refused before
])
def test_a_passage_without_text_is_refused_with_file_and_line_in_every_corpus_form(tmp_path, row, field):
    """One rule for every FlashRAG corpus form: a passage whose text is empty once the title is taken off is refused
    with file:line and the field, as an empty ``text`` or ``contents`` always was (skipped with a warning under
    ``skip_bad_lines``); passages in memory follow the same rule."""
    from envs.core.data.errors import DataFormatError
    from envs.core.data.loaders import load_flashrag_corpus
    from envs.ungraded import knowledge_corpus

    path = _jsonl(tmp_path / "c.jsonl", [{"id": "ok", "contents": "Rome\nRome is in Italy."}, row])
    with pytest.raises(DataFormatError, match=rf"c\.jsonl:2: field '{field}'"):
        load_flashrag_corpus(path)
    assert load_flashrag_corpus(path, skip_bad_lines=True).ids == ["ok"]
    for bad in (["Rome is in Italy.", "  "], [("p1", "Paris", "")], [{"id": "p1", "title": "Paris", "text": ""}]):
        with pytest.raises(ValueError, match=r"knowledge: passage \d .*has no text"):
            knowledge_corpus(bad)


def test_a_corpus_of_titles_only_is_one_line_for_index_build_and_answer(tmp_path):
    """A corpus made only of ``"Title\\n"`` lines crashed ``kairos answer`` with ``max() arg is an empty sequence``:
    now ``kairos index build`` and ``kairos answer`` refuse it in one line naming file:line."""
    titles = _jsonl(tmp_path / "titles.jsonl", [{"id": "a", "contents": "Paris\n"}, {"id": "b", "contents": "Rome\n"}])
    r = _kairos("index", "build", "--retriever", "bm25", "--corpus", str(titles), "--out", str(tmp_path / "idx"))
    _one_line_error(r, f"{titles}:1: field 'contents'", "no text")
    assert not (tmp_path / "idx" / "kairos_index.json").exists()
    r = _kairos("answer", "--policy", "never", "--corpus", str(titles), "Where is Paris ?")
    line = _one_line_error(r, f"{titles}:1: field 'contents'", "no text")
    assert "max()" not in line


def test_bm25_on_a_corpus_with_nothing_to_index_is_one_clear_line(tmp_path):
    """BM25 over passages that all tokenise to nothing (empty, stop words, single letters) — the retriever and RSUS's
    U_ent scorer alike — is a clear error naming the corpus, never bm25s' ``max() arg is an empty sequence``."""
    from agents.retrievers.bm25 import BM25Config, BM25Retriever
    from agents.signals.rsus import BM25Scores
    from envs.core.data.errors import CorpusError
    from envs.core.data.types import Corpus, Passage

    empty = Corpus.from_passages([Passage("a", "", "the"), Passage("b", "", "a of")], source="stopwords")
    with pytest.raises(CorpusError, match="stopwords: none of its 2 passages has a word BM25 can index"):
        BM25Retriever.build(empty, BM25Config())
    with pytest.raises(ValueError, match="none of the corpus's 2 passages has a word BM25 can index"):
        BM25Scores(["", "the"])
    txt = tmp_path / "stop.txt"
    txt.write_text("the\na of\n")
    r = _kairos("answer", "--policy", "never", "--corpus", str(txt), "Where is Paris ?")
    line = _one_line_error(r, str(txt), "none of its 2 passages has a word BM25 can index")
    assert "max()" not in line


# ================================================================================== 3. log-probabilities in range
def _http_step(logprobs: list[float], top_offset: float = -2.0):
    """A step parsed by the HTTP backend from a completions answer carrying these content-token log-probabilities."""
    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIState

    toks = ["Step", " 1", ":", " Paris", " is", " big", "."]
    lps = [-0.1, -0.1, -0.1, *logprobs]
    choice = {"index": 0, "finish_reason": "stop", "stop_reason": "\n", "text": "".join(toks[:len(lps)]),
              "logprobs": {"tokens": toks[:len(lps)], "token_logprobs": lps,
                           "top_logprobs": [{t: lp, "other": lp + top_offset} for t, lp in zip(toks, lps)]}}
    step, _ = OpenAIReasoner()._to_step(OpenAIState("q"), choice, {}, 0.1)
    return step


def test_out_of_range_http_logprobs_are_masked_with_a_warning(monkeypatch, caplog):
    """A positive log-probability (+5) from an HTTP backend gave max-probability 148 and entropy −742 with nothing
    masked; NaN was masked at debug level only; +1000 raised OverflowError. Now every out-of-range case (> 0 beyond
    1e-3, NaN, +inf) masks the signals read from token log-probabilities, with a WARNING once per cause; in-range
    steps are untouched."""
    import agents.signals.extractor as extractor
    from agents.reasoners.base import Capabilities

    monkeypatch.setattr(extractor, "_warned", set())
    ex = extractor.SignalExtractor(["ppl", "maxprob", "entropy", "minprob"], Capabilities(logprobs=True),
                                   backend="openai")
    ok = ex(_http_step([-0.2, -0.3, -0.1]))
    assert ok["mask"].tolist() == [1, 1, 1, 1] and 0 < ok["maxprob"][0] <= 1 and ok["entropy"][0] >= 0
    assert ex(_http_step([-0.2, 0.0004, -0.1]))["mask"].tolist() == [1, 1, 1, 1]  # rounding of a sure token
    caplog.set_level(logging.DEBUG, logger="agents.signals.extractor")
    for lps, top, cause in [([-0.2, 5.0, -0.1], -2.0, "a log-probability above 0 (+5)"),
                            ([-0.2, float("nan"), -0.1], -2.0, "NaN in step.logprobs"),
                            ([-0.2, float("inf"), -0.1], -2.0, "an infinite value in step.logprobs"),
                            ([-0.2, -0.1, -0.1], 7.0, "a max-probability outside [0, 1]"),
                            ([-0.2, 1000.0, -0.1], -2.0, None)]:  # same cause as +5: no second warning
        caplog.clear()
        step = _http_step(lps, top)
        out = ex(step)
        assert out["mask"].tolist() == [0, 0, 0, 0], (lps, top, out)
        assert all(v.tolist() == [0.0] for k, v in out.items() if k != "mask")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if cause is None:
            assert warnings == []
        else:
            assert len(warnings) == 1 and cause in warnings[0] and "ppl, maxprob, entropy, minprob" in warnings[0]
    assert extractor.token_array_problem(_http_step([-0.2, -0.3, -0.1])) is None
    assert not math.isnan(float(np.mean(ok["ppl"])))
    from agents.reasoners.base import Step

    # log 0 = -inf is a probability of 0, in range (MinProb 0 is a real value; PPL inf is masked as non-finite)
    assert extractor.token_array_problem(Step(1, "", "a", False, logprobs=np.array([-np.inf, -0.1]))) is None


def test_a_non_finite_signal_is_masked_with_a_warning(monkeypatch, caplog):
    """A signal that comes out NaN was masked with a debug line only: now a WARNING says so (once per signal)."""
    import agents.signals.extractor as extractor
    from agents.reasoners.base import Capabilities, Step
    from agents.signals.base import SignalBase

    class Broken(SignalBase):
        name, dim, requires = "broken", 1, ()

        def __call__(self, step, state=None):
            return np.array([np.nan])

    monkeypatch.setattr(extractor, "_warned", set())
    ex = extractor.SignalExtractor([Broken()], Capabilities(), backend="test")
    with caplog.at_level(logging.WARNING, logger="agents.signals.extractor"):
        out = [ex(Step(i, "", "a", False)) for i in (1, 2)]
    assert [o["mask"].tolist() for o in out] == [[0.0], [0.0]]
    assert len([r for r in caplog.records if "signal broken is not finite" in r.getMessage()]) == 1


def test_the_api_refuses_a_bare_string_where_a_list_of_questions_is_expected():
    """``UngradedTask`` read a string as one question per character; it is a TypeError now (``Pipeline.answer_many``
    / ``stream`` with a string and ``answer`` with a list: below, with a pipeline)."""
    from envs.ungraded import UngradedTask

    with pytest.raises(TypeError, match="questions are a list of strings, got a single str"):
        UngradedTask("Who is Mira ?")
    assert [q.text for q in UngradedTask(["Who is Mira ?"]).questions] == ["Who is Mira ?"]


@needs_world
def test_the_pipeline_refuses_a_bare_string_naming_the_call_to_use():
    """``Pipeline.answer_many("…")`` answered one question per character; now ``answer_many`` and ``stream`` refuse a
    bare string with a TypeError naming ``answer(question)`` (at the call, before any work), and ``answer`` refuses a
    list naming ``answer_many``."""
    from kairos import Pipeline

    with Pipeline("never", {"rsus_components": ["ent"]}, knowledge=["Paris is the capital of France ."]) as p:
        with pytest.raises(TypeError, match=r"answer_many\(\) takes a list of questions.*use answer\(question\)"):
            p.answer_many("Where is Paris ?")
        with pytest.raises(TypeError, match=r"stream\(\) takes a list of questions.*use answer\(question\)"):
            p.stream("Where is Paris ?")
        with pytest.raises(TypeError, match=r"answer\(\) takes one question.*use answer_many\(questions\)"):
            p.answer(["Where is Paris ?"])
        assert p.task.questions == []  # nothing was set


# ================================================================================== 4. the output-folder lock
@pytest.mark.parametrize("command", ["index", "colbert", "microworld", "querygen"])
def test_every_command_writing_a_folder_refuses_one_another_run_holds(tmp_path, command):
    """Two ``kairos index build`` runs into one ``--out`` both reported success and one index survived: now the build
    (and ``retriever train-colbert``, ``microworld build``, ``train querygen``) takes the folder's lock; while another
    run holds it, the command refuses at once in one line naming the folder and the holder, and writes nothing."""
    from envs.core.runlock import FolderLock

    out = tmp_path / "out"
    args = {"index": ["index", "build", "--retriever", "bm25", "--corpus", "microworld", "--out", str(out)],
            "colbert": ["retriever", "train-colbert", "--out", str(out), "--steps", "0"],
            "microworld": ["microworld", "build", "--out", str(out), "--max-steps", "1", "--no-eval"],
            "querygen": ["train", "querygen", "--config", str(tmp_path / "qg.yaml")]}[command]
    (tmp_path / "qg.yaml").write_text(f"out_dir: {out}\n")
    with FolderLock(out, "kairos index build --out elsewhere"):
        r = _kairos(*args)
    _one_line_error(r, f"{out} is in use by another run (pid {os.getpid()}", "kairos index build --out elsewhere")
    assert sorted(p.name for p in out.iterdir()) == []


def test_index_build_releases_the_lock_and_keeps_it_out_of_the_index(tmp_path):
    """The build's lock is gone when the build ends (a second build with --overwrite runs; no ``.kairos-lock`` left
    in the index folder or listed in its manifest)."""
    from agents.retrievers.corpus_spec import load_corpus
    from agents.retrievers.index import build_index, load_index

    out = tmp_path / "idx"
    build_index("bm25", load_corpus("microworld"), out, corpus_spec="microworld")
    manifest = build_index("bm25", load_corpus("microworld"), out, corpus_spec="microworld", overwrite=True)
    assert ".kairos-lock" not in {p.name for p in out.iterdir()} and not any("lock" in f for f in manifest["files"])
    assert len(load_index(out)) == manifest["n_docs"]


# ================================================================================== 5. request fields as OpenAI's
def _refused(body: dict) -> tuple[int, str | None, str | None, str]:
    from kairos.openai_api import APIError, parse_chat_request

    with pytest.raises(APIError) as e:
        parse_chat_request(json.dumps({"model": "kairos", "messages": [{"role": "user", "content": "Who ?"}], **body}),
                           ["kairos"], 100)
    err = e.value.body()["error"]
    return e.value.status, err["param"], err["code"], err["message"]


@pytest.mark.parametrize("fields,param,code", [
    ({"temperature": -1}, "temperature", "decimal_below_min_value"),  # was accepted and ignored
    ({"temperature": 2.5}, "temperature", "decimal_above_max_value"),
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"temperature": True}, "temperature", "invalid_type"),
    ({"top_p": 0}, "top_p", "decimal_below_min_value"),
    ({"top_p": 1.5}, "top_p", "decimal_above_max_value"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),  # was accepted and ignored
    ({"max_tokens": 2.5}, "max_tokens", "invalid_type"),
    ({"max_completion_tokens": -3}, "max_completion_tokens", "integer_below_min_value"),
    ({"n": 2}, "n", "invalid_value"),
    ({"logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
    ({"stop": ["\n"]}, "stop", "unsupported_parameter"),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
    ({"top_k": 5}, "top_k", "unknown_parameter"),  # a vLLM sampling extra
    ({"temprature": 0.2}, "temprature", "unknown_parameter"),
])
def test_sampling_fields_are_checked_as_openai_checks_them(fields, param, code):
    """``kairos serve`` accepted ``temperature: -1`` and ``max_tokens: 0`` and ignored them: now the request parser
    returns a 400 naming the field for a value OpenAI refuses, for a field it cannot honour, and for an unknown one."""
    status, got_param, got_code, message = _refused(fields)
    assert (status, got_param, got_code) == (400, param, code), message
    assert param in message


def test_sampling_fields_openai_accepts_still_pass():
    """In-range sampling fields, the defaults of unsupported ones, nulls and bookkeeping fields are accepted."""
    from kairos.openai_api import parse_chat_request

    for fields in ({"temperature": 0, "top_p": 1, "max_tokens": 1, "n": 1},
                   {"temperature": 2.0, "top_p": 0.1, "max_completion_tokens": 4096, "seed": 3, "user": "u"},
                   {"logprobs": False, "presence_penalty": 0.0, "frequency_penalty": 0, "stop": None, "tools": [],
                    "temperature": None, "stream_options": {"include_usage": True}, "metadata": {"a": "b"}}):
        req = parse_chat_request(json.dumps({"model": "kairos", "messages": [{"role": "user", "content": "Who ?"}],
                                             **fields}), ["kairos"], 100)
        assert req.question == "Who ?", fields
