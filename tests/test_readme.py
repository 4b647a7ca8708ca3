"""The README is the first screen: the two set-up commands, what Kairos is, the headline with its real-data
counterpart, and where to go next — short, and true.

* the two commands come first, and are the same text on the docs site's home and getting-started pages;
* the README stays short (≤ 150 lines);
* every number of the headline is one of docs/results.md (the home of numbers), and the link to it resolves;
* every relative link points at a file of the repository (the docs pages it names exist);
* its python example names the public API (``kairos.Pipeline`` …), and the first-screen commands and imports are
  checked with every other page's by tests/test_docs.py (every ``kairos`` / ``make`` line parsed by the real parser).

The examples that used to live here ("Plug in your own …") are on docs/tutorials/plugins.md, run by
tests/test_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


def _first_block(text: str) -> str:
    return text.split("```bash\n", 1)[1].split("```", 1)[0]


def github_slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (lower case, punctuation dropped, spaces to hyphens)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_two_commands_come_first_and_match_the_docs():
    block = _first_block(README)
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert [ln.split()[:2] for ln in lines] == [["make", "quickstart"], ["make", "test"]], lines
    minutes = re.search(r"\(≈ (\d+) min on an? ([A-Z][\w ]+); 2 CPUs\)", lines[0])
    assert minutes and ".ci/run" in lines[1], lines
    # the time it states, measured on the machine it names
    measured = re.search(r"`make quickstart` from a fresh clone([^:]*): (\d+\.\d) min", RESULTS)
    assert measured and round(float(measured.group(2))) == int(minutes.group(1)), "README and results.md disagree"
    assert minutes.group(2) in measured.group(1), f"results.md times make quickstart on another machine than {minutes.group(2)}"
    assert README.index("```bash") < README.index("## "), "the commands are the first thing on the page"
    for page in ("docs/index.md", "docs/getting-started.md"):
        assert _first_block((ROOT / page).read_text(encoding="utf-8")) == block, page


def test_the_readme_is_short():
    n = len(README.splitlines())
    assert n <= 150, f"README.md has {n} lines; move the detail into docs/"


def test_the_headline_numbers_are_those_of_results_md():
    headline = README.split("## The headline", 1)[1].split("\n## ", 1)[0]
    numbers = re.findall(r"[+−-]?\d+\.\d+", headline)
    assert len(numbers) >= 15, numbers  # the micro-world rows and the real-data counterpart
    missing = [x for x in numbers if x.lstrip("+") not in RESULTS and x.replace("−", "-") not in RESULTS]
    assert not missing, f"numbers in the README's headline that docs/results.md does not hold: {missing}"
    assert "real data" in headline.lower() and "docs/results.md" in headline


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert len(links) >= 10, links
    for link in links:
        if link.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {github_slug(h) for h in headings}, link


def test_the_readme_points_at_every_tutorial():
    for page in sorted((ROOT / "docs" / "tutorials").glob("*.md")):
        assert f"docs/tutorials/{page.name}" in README, page.name
    for page in ("docs/design.md", "docs/results.md", "docs/getting-started.md"):
        assert page in README, page
