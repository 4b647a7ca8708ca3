"""Bad input fails loudly, naming the file, the line (or record) and the field; never a bare KeyError."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from envs.core.data import DataFormatError, UnknownDatasetError, load_dataset, load_flashrag_corpus

GOOD_MEDMCQA = {"question": "Q?", "opa": "a1", "opb": "b1", "opc": "c1", "opd": "d1", "cop": 2, "exp": None,
                "subject_name": "Anatomy", "topic_name": None, "id": "m1", "choice_type": "single"}


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _rec(**changes) -> str:
    rec = {**GOOD_MEDMCQA, **changes}
    return json.dumps({k: v for k, v in rec.items() if v is not ...})


def test_malformed_line_names_file_and_line(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(id="m1"), "", _rec(id="m2")[:-5], _rec(id="m3")])
    with pytest.raises(DataFormatError) as info:
        load_dataset("medmcqa", path)
    e = info.value
    assert e.line == 3 and e.path == str(path) and e.field is None
    assert str(e).startswith(f"{path}:3: invalid JSON")
    assert isinstance(e, ValueError)


def test_missing_field_names_it(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(id="m1"), _rec(id="m2", question=...)])
    with pytest.raises(DataFormatError, match=r"mc\.jsonl:2: field 'question': missing") as info:
        load_dataset("medmcqa", path)
    assert info.value.field == "question" and info.value.line == 2


def test_wrong_type_and_value_name_the_field(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(cop="2")])
    with pytest.raises(DataFormatError, match=r":1: field 'cop': expected an integer, got a string"):
        load_dataset("medmcqa", path)
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(cop=7)])
    with pytest.raises(DataFormatError, match=r"field 'cop': expected 1-4"):
        load_dataset("medmcqa", path)


def test_nested_field_is_named(tmp_path, fixtures_dir):
    rec = json.loads((fixtures_dir / "hotpotqa_ircot.jsonl").read_text())
    del rec["contexts"][1]["paragraph_text"]
    path = _write_lines(tmp_path / "h.jsonl", [json.dumps(rec)])
    with pytest.raises(DataFormatError, match=r"h\.jsonl:1: field 'contexts\[1\]\.paragraph_text': missing"):
        load_dataset("hotpotqa", path)


def test_whole_file_json_names_record(tmp_path, fixtures_dir):
    data = json.loads((fixtures_dir / "2wikimultihopqa_dev.json").read_text())
    del data[1]["answer"]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError, match=r"w\.json: record 1: field 'answer': missing") as info:
        load_dataset("2wikimultihopqa", path)
    assert info.value.line is None and info.value.record == 1


def test_supporting_fact_with_unknown_title(tmp_path, fixtures_dir):
    data = json.loads((fixtures_dir / "hotpotqa_dev_distractor.json").read_text())
    data[0]["supporting_facts"].append(["No Such Page", 0])
    path = tmp_path / "hp.json"
    path.write_text(json.dumps(data))
    expected = r"record 0: field 'supporting_facts\[3\]': title 'No Such Page'"
    with pytest.raises(DataFormatError, match=expected):
        load_dataset("hotpotqa", path)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=r"empty\.jsonl: empty file"):
        load_dataset("medmcqa", path, skip_bad_lines=True)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load_dataset("medmcqa", "/nonexistent/dev.jsonl")


def test_duplicate_id(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(id="x"), _rec(id="y"), _rec(id="x")])
    expected = r"mc\.jsonl:3: field 'id': duplicate id 'x' \(first at line 1\)"
    with pytest.raises(DataFormatError, match=expected):
        load_dataset("medmcqa", path)


def test_duplicate_pmid_in_json_object(tmp_path):
    rec = '{"QUESTION": "Q?", "CONTEXTS": ["c"], "final_decision": "yes"}'
    path = tmp_path / "pq.json"
    path.write_text(f'{{"111": {rec}, "222": {rec}, "111": {rec}}}')
    with pytest.raises(DataFormatError, match=r"pq\.json: duplicate key '111'"):
        load_dataset("pubmedqa", path)


def test_pubmedqa_bad_decision_names_pmid(tmp_path):
    path = tmp_path / "pq.json"
    path.write_text('{"111": {"QUESTION": "Q?", "CONTEXTS": ["c"], "final_decision": "perhaps"}}')
    with pytest.raises(DataFormatError, match=r"record 111: field 'final_decision': expected yes/no/maybe"):
        load_dataset("pubmedqa", path)


def test_unknown_dataset_lists_valid_names():
    expected = r"unknown dataset 'triviaqa' \(registered: 2wikimultihopqa, .*hotpotqa.*pubmedqa\)$"
    with pytest.raises(UnknownDatasetError, match=expected):
        load_dataset("triviaqa", "x.jsonl")


def test_not_an_object(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", [_rec(), "[1, 2]"])
    with pytest.raises(DataFormatError, match=r"mc\.jsonl:2: expected a JSON object, got a list"):
        load_dataset("medmcqa", path)


def test_inconsistent_answer_fields(tmp_path, fixtures_dir):
    rec = json.loads((fixtures_dir / "mmlu_pro_test.jsonl").read_text().splitlines()[0])
    path = _write_lines(tmp_path / "m.jsonl", [json.dumps({**rec, "answer_index": 3})])
    with pytest.raises(DataFormatError, match=r"field 'answer_index': 3 disagrees with answer 'B'"):
        load_dataset("mmlu_pro", path)
    rec = json.loads((fixtures_dir / "medqa_dev.jsonl").read_text().splitlines()[0])
    path = _write_lines(tmp_path / "q.jsonl", [json.dumps({**rec, "answer_idx": "F"})])
    with pytest.raises(DataFormatError, match=r"field 'answer_idx': 'F' is not one of the options"):
        load_dataset("medqa", path)


def test_skip_bad_lines_counts_and_logs(tmp_path, caplog):
    lines = [_rec(id="a"), "{not json", _rec(id="b", question=...), _rec(id="a"), _rec(id="c"),
             _rec(cop=0, id="d")]
    path = _write_lines(tmp_path / "mc.jsonl", lines)
    with caplog.at_level(logging.WARNING, logger="envs.core.data.loaders"):
        qs = load_dataset("medmcqa", path, skip_bad_lines=True)
    assert [q.id for q in qs] == ["a", "c"]
    assert qs.skipped == 4 and qs.skipped_at == [2, 3, 4, 6]
    assert sum("skipping bad record" in r.message for r in caplog.records) == 4
    assert "mc.jsonl:3: field 'question': missing" in caplog.text


def test_skip_bad_lines_first_line_bad_still_detects_ircot(tmp_path, fixtures_dir):
    good = (fixtures_dir / "hotpotqa_ircot.jsonl").read_text().strip()
    path = _write_lines(tmp_path / "h.jsonl", ["{oops", good])
    qs = load_dataset("hotpotqa", path, skip_bad_lines=True)
    assert qs.fmt == "ircot-jsonl" and len(qs) == 1 and qs.skipped_at == [1]


def test_all_lines_bad(tmp_path):
    path = _write_lines(tmp_path / "mc.jsonl", ["{oops", "[]"])
    with pytest.raises(DataFormatError, match=r"no usable medmcqa records \(2 bad records skipped\)"):
        load_dataset("medmcqa", path, skip_bad_lines=True)


def test_flashrag_corpus_errors(tmp_path):
    path = _write_lines(tmp_path / "c.jsonl", ['{"id": "1", "contents": "T\\nx"}', '{"id": "2"}'])
    with pytest.raises(DataFormatError, match=r"c\.jsonl:2: field 'contents': missing"):
        load_flashrag_corpus(path)
    lines = ['{"id": "1", "contents": "T\\nx"}', '{"id": "1", "contents": "U\\ny"}']
    path = _write_lines(tmp_path / "c.jsonl", lines)
    with pytest.raises(ValueError, match=r"duplicate passage id '1'"):
        load_flashrag_corpus(path)
