"""The trace inspector page in a real headless Chromium, standalone (opened as a file, no server): it reads the
trace files Kairos writes — ``kairos answer --json`` lines, a benchmark's per-question rows — and draws the chain
step by step. (Served by ``kairos serve`` and asking through it: tests/test_serve.py.)"""

import json
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "kairos" / "inspector" / "index.html"


@pytest.fixture
def standalone(browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(PAGE.as_uri())
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    return browser


def _open(drv, path):
    from selenium.webdriver.common.by import By

    drv.find_element(By.CSS_SELECTOR, "#file-input").send_keys(str(path))


def test_a_kairos_answer_file_renders_the_four_step_trace(standalone, four_step_trace, assert_trace_page,
                                                          screenshot, trace_policy, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from kairos import Pipeline

    a = four_step_trace
    with Pipeline("never", trace_policy[1]) as p:
        other = p.answer("Who is Steithkroum 's father 's father ?")
    f = tmp_path / "answers.jsonl"  # what `kairos answer --json` prints
    f.write_text(a.to_json() + "\n" + other.to_json() + "\n")
    drv = standalone
    assert "standalone" in drv.find_element(By.TAG_NAME, "body").get_attribute("class")
    assert not drv.find_element(By.CSS_SELECTOR, "#ask-panel").is_displayed()  # no server: no asking
    _open(drv, f)
    assert_trace_page(drv, a)
    assert len(drv.find_elements(By.CSS_SELECTOR, "#file-rows li")) == 2
    shot = screenshot(drv, "inspector_four_step_trace.png")
    assert shot.stat().st_size > 10_000
    drv.find_elements(By.CSS_SELECTOR, "#file-rows li")[1].click()  # the other answer: no retrieval
    WebDriverWait(drv, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps > li.step"))
                                 == len(other.steps))
    assert not drv.find_elements(By.CSS_SELECTOR, "#steps .marker.retrieve")
    assert drv.find_element(By.CSS_SELECTOR, "#answer").text == other.answer


def test_a_benchmark_trace_file_renders_its_decisions(standalone, trace_policy, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from kairos import load_policy
    from train.evaluate import evaluate_policy

    f = tmp_path / "per_question" / "test" / "FLARE.jsonl"  # what `kairos bench policies` writes
    policy, env = trace_policy
    res = evaluate_policy(load_policy(policy), {**env, "split": "dev"}, [10, 11], batch_size=2,
                          jsonl_path=f, return_episodes=True)
    rows = {r["question_index"]: r for r in res["episodes"]}
    drv = standalone
    _open(drv, f)
    WebDriverWait(drv, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#file-rows li")) == 2)
    first = json.loads(f.read_text().splitlines()[0])
    row = rows[first["question_index"]]
    WebDriverWait(drv, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps > li.step"))
                                 == len(row["decisions"]))
    items = drv.find_elements(By.CSS_SELECTOR, "#steps > li.step")
    assert [li.get_attribute("data-retrieved") == "true" for li in items] == \
        [bool(d["action"][0]) for d in row["decisions"]]
    assert drv.find_element(By.CSS_SELECTOR, "#trace-head .q").text == row["question"]
    hit = next(i for i, d in enumerate(row["decisions"]) if d["action"][0])
    li, d = items[hit], row["decisions"][hit]
    assert li.find_element(By.CSS_SELECTOR, ".query-text").text == d["query"]
    ids = [p.text for p in li.find_elements(By.CSS_SELECTOR, "li.passage.injected .pid")]
    assert ids == [f"[{i}]" for i in d["passage_ids"]]
    assert f"label: {d['label']}" in li.find_element(By.CSS_SELECTOR, ".why").text
    assert li.find_elements(By.CSS_SELECTOR, ".after .diff ins") or "unchanged" in li.text


def test_a_file_that_is_no_trace_says_why(standalone, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    f = tmp_path / "notes.jsonl"
    f.write_text('{"question": "x"}\nnot json\n')
    _open(standalone, f)
    box = WebDriverWait(standalone, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#error") if d.find_element(By.CSS_SELECTOR, "#error").text
        else None)
    assert "notes.jsonl" in box.text and "line 2: not JSON" in box.text


def test_a_learned_policy_shows_its_retrieve_probability_against_its_threshold(standalone, learned_export, tmp_path):
    """A chat completion's JSON (what ``kairos serve`` answers) of a learned policy with a QueryGen head: the
    decision chart is π(retrieve) per step against τ, each step names its probability and query-mode choice."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from kairos import Pipeline
    from kairos.openai_api import completion

    with Pipeline.from_policy(learned_export, batch_size=4) as p:
        answers = p.answer_many(["Which company does Kresvais 's spouse 's father 's mother work for ?",
                                 "Who is Furbrou 's spouse 's father 's spouse 's mother ?"])
    a = next((x for x in answers if {s.retrieved for s in x.steps} == {True, False}), answers[0])
    f = tmp_path / "completion.json"
    f.write_text(json.dumps(completion("chatcmpl-1", 0, "kairos", a.to_dict(), {"id": "r:1", "size": 2})))
    _open(standalone, f)
    WebDriverWait(standalone, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps > li.step"))
                                        == len(a.steps))
    chart = standalone.find_element(By.CSS_SELECTOR, "#decision-chart")
    assert chart.get_attribute("data-series") == "π(retrieve)" and "π > 0.5" in chart.text
    points = chart.find_elements(By.CSS_SELECTOR, "circle.pt")
    assert [("retrieved" in c.get_attribute("class")) for c in points] == [s.retrieved for s in a.steps]
    assert chart.find_elements(By.CSS_SELECTOR, "line.threshold")
    why = [li.find_element(By.CSS_SELECTOR, ".why").text for li in
           standalone.find_elements(By.CSS_SELECTOR, "#steps > li.step")]
    def js(x):  # the page's number format: 3 significant digits, as JavaScript prints them
        v = float(f"{x:.3g}")
        return str(int(v)) if v.is_integer() else repr(v)

    assert all(f"π(retrieve) {js(s.probability)}" in w and "τ 0.5" in w for w, s in zip(why, a.steps)), why
    assert all("query modes info_need" in w for w in why)
