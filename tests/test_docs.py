"""The docs site builds, and what the README and the docs pages tell a user to type is true.

* ``mkdocs build --strict`` (mkdocs.yml: every page in the nav, every link and anchor resolves, the API reference
  renders from the docstrings) runs into a temporary directory.
* **Marked blocks run.** A fenced block right after ``<!-- docs-test: run [slow] [config=Class] -->`` is executed,
  per page, in page order, in a fresh working directory that mirrors the repository (its top-level entries
  linked, ``.venv/bin/{kairos,python,mkdocs}`` pointing at this interpreter): a block whose first line is
  ``# NAME.ext`` is written to that file (a module ``# mypkg/costs.py``, a YAML or JSONL file; ``config=Class``
  also loads it into that config class); the page's python blocks run in one fresh interpreter (registrations are
  process-wide), followed by the page's checks below; each bash command runs and must exit 0. ``slow`` blocks run
  in the slow test.
* **Every command parses.** Each ``kairos …`` / ``python -m …`` / ``python script.py`` line of every bash block
  (marked or not; ``ray job submit … -- python -m …`` too) is parsed by the real argument parser, without running
  it: a subcommand or option the code does not have fails. ``make X`` needs the Makefile target, ``bash X`` the
  file.
* Unmarked python blocks compile and their imports import; YAML blocks parse; every repository path a page names
  in backticks (``envs/engine.py``, ``configs/….yaml``, ``scripts/…``) exists.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
ALL_TEXT = [ROOT / "README.md", *PAGES]
#: pages that document an earlier commit (docs/history/): their paths and commands are that commit's, so the checks
#: that hold the current pages to today's code skip them (the site still builds them, links and anchors checked)
CURRENT = [p for p in ALL_TEXT if "history" not in p.relative_to(ROOT).parts]
MARK = re.compile(r"^<!-- docs-test: (.*) -->$")
FILE_LINE = re.compile(r"# ([\w./-]+\.(?:py|ya?ml|jsonl?|txt))")
REPO_PATH = re.compile(r"`((?:envs|agents|policies|train|eval|kairos|tests|scripts|configs)/[\w./-]*)(?::[\w.]+)?`")

#: what a page's python blocks must have done, checked in the same interpreter after them
PAGE_CHECKS = {
    "tutorials/plugins.md": '''
# retrieval selector: the env of the last example runs the user's selector
assert type(env.unwrapped.c.hooks.selector).__name__ == "LastUnused" and info["retrievals"] == 1, info
import gymnasium as gym
from envs.env_config import EnvConfig
from policies.triggers import TRIGGERS
from agents.reasoners.registry import REASONERS
from train.curriculum import ScheduleConfig, schedule_value

# signal: one decorator makes it a config group, an observation field and a scalar
e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "signals": ["output", "length"], "max_questions": 2})
obs, info = e.reset(seed=0)
assert obs["length"].shape == (1,) and obs["length"][0] == info["signals"]["n_words"] > 0, (obs["length"], info)
# trigger
t = TRIGGERS.make("every_other")
assert t.decide({}, {"step_index": 2, "retrievals_this_step": 0}) == 1
# cost: the user's module, by dotted path, with its parameters and the weight set at run time
e = gym.make("kairos/MicroWorld-v0", config={"costs": {"retrieval_calls": 0.1, "mypkg.costs:GpuSeconds": 0.5},
                                              "cost_params": {"mypkg.costs:GpuSeconds": {"price_per_s": 2.0}}})
e.unwrapped.set_cost_weights({"retrieval_calls": 0.05})
e.reset(seed=0)
_, r, _, _, info = e.step(1)
gpu = info["costs"]["mypkg.costs:GpuSeconds"]
assert gpu > 0 and abs(r - -(0.05 * info["costs"]["retrieval_calls"] + 0.5 * gpu)) < 1e-9, (r, info["costs"])
# query mode + retriever, through the env: a retrieval with the user's retriever and query formulation
e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "retriever": "overlap", "max_questions": 2,
                                              "query_modes": ["last_words"]})
e.reset(seed=0)
_, _, _, _, info = e.step(1)
assert info["retrievals"] == 1 and info["passage_ids"] and 0 < len(info["query"].split()) <= 4, info
assert type(e.unwrapped.c.retriever).__name__ == "Overlap"
# reasoner, task, λ schedule
assert "my_llm" in REASONERS
assert EnvConfig.from_dict({"task": "hotpotqa_hard", "reasoner": "my_llm"}).task == "hotpotqa_hard"
s = ScheduleConfig(kind="step_down", start=0.5, end=0.1, iterations=4)
assert [schedule_value(s, i) for i in range(5)] == [0.5, 0.5, 0.1, 0.1, 0.1]
''',
    "tutorials/application.md": '''
assert a.answer and a.steps and json.loads(a.to_json())["question"].startswith("Which company")
''',
    "guide/environment.md": '''
assert isinstance(reward, float) and info["retrievals"] == 1, info
''',
}


# ----------------------------------------------------------------------------------------------- reading pages
@dataclass
class Block:
    page: str
    lang: str
    text: str
    line: int
    mark: set[str] = field(default_factory=set)
    config: str | None = None

    @property
    def file(self) -> str | None:
        first = self.text.splitlines()[0].strip() if self.text.strip() else ""
        m = FILE_LINE.fullmatch(first)
        return m.group(1) if m else None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the docs-test mark right before it."""
    out, fence, lang, buf, start, mark, prev = [], False, "", [], 0, "", ""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            if fence:
                words = mark.split()
                config = next((w.split("=", 1)[1] for w in words if w.startswith("config=")), None)
                out.append(Block(str(path.relative_to(DOCS) if path.is_relative_to(DOCS) else path.name), lang,
                                 "\n".join(buf) + "\n", start, {w for w in words if "=" not in w}, config))
                fence, buf, prev = False, [], ""
            else:
                fence, lang, start = True, line[3:].strip().split(" ")[0], i
                m = MARK.match(prev)
                mark = m.group(1) if m else ""
            continue
        if fence:
            buf.append(line)
        elif line.strip():
            prev = line
    return out


def commands(text: str) -> list[str]:
    """The logical command lines of a bash block (continuations joined, comments and heredoc bodies dropped)."""
    out, cur, heredoc = [], "", None
    for line in text.splitlines():
        if heredoc:
            if line.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*'?(\w+)'?", line)
        if m:
            heredoc = m.group(1)
        cur += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            if cur.strip() and not cur.lstrip().startswith("#"):
                out.append(cur.strip())
            cur = ""
    return out


def argv_of(cmd: str) -> tuple[str, str, list[str]] | None:
    """``(kind, target, argv)`` of a command line this test can check without running it, else None."""
    if "$(" in cmd or "<<" in cmd:
        return None
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    for i, w in enumerate(words):  # a redirect or a pipe ends the command
        if w in ("<", ">", "|", "&&", ";", "2>", ">>") or w.startswith((">", "2>")):
            words = words[:i]
            break
    if words[:3] == ["ray", "job", "submit"] and "--" in words:
        words = words[words.index("--") + 1:]
    if not words:
        return None
    prog, rest = words[0].removeprefix(".venv/bin/"), words[1:]
    if prog == "kairos":
        return "module", "eval", rest
    if prog == "python" and rest[:1] == ["-m"] and len(rest) > 1:
        return "module", rest[1], rest[2:]
    if prog == "python" and rest and rest[0].endswith(".py"):
        return "script", rest[0], rest[1:]
    if prog == "make":
        return "make", (rest[0] if rest and "=" not in rest[0] else "setup"), []
    if prog == "bash" and rest and rest[0].endswith(".sh"):
        return "file", rest[0], []
    return None


PARSE_ONLY = r'''
import argparse, io, json, runpy, sys, contextlib
class Parsed(BaseException):
    pass
orig = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    orig(self, args, namespace)
    raise Parsed()
argparse.ArgumentParser.parse_args = parse_args
out = []
for kind, target, argv in json.load(open(sys.argv[1])):
    sys.argv = [target, *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        out.append("not parsed: the command ran without parsing its arguments")
    except Parsed:
        out.append("")
    except SystemExit as e:
        out.append(f"exit {e.code}: {err.getvalue()[-600:]}")
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print(json.dumps(out))
'''


def check_commands(cmds: list[tuple[str, str, str, list[str]]], tmp: Path) -> list[str]:
    """Parse each ``(where, kind, target, argv)`` with its real parser; returns the failures."""
    failures, to_parse = [], []
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for where, kind, target, argv in cmds:
        if kind == "make" and target not in targets:
            failures.append(f"{where}: make {target}: no such Makefile target")
        elif kind == "file" and not (ROOT / target).is_file():
            failures.append(f"{where}: {target}: no such file")
        elif kind == "script" and not (ROOT / target).is_file():
            failures.append(f"{where}: {target}: no such file")
        elif kind in ("module", "script"):
            to_parse.append((where, kind, target, argv))
    if to_parse:
        spec = tmp / "commands.json"
        spec.write_text(json.dumps([[k, str(ROOT / t) if k == "script" else t, a] for _, k, t, a in to_parse]))
        r = subprocess.run([sys.executable, "-c", PARSE_ONLY, str(spec)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr[-3000:]
        for (where, _, target, argv), res in zip(to_parse, json.loads(r.stdout.splitlines()[-1])):
            if res:
                failures.append(f"{where}: {target} {shlex.join(argv)}: {res}")
    return failures


# ----------------------------------------------------------------------------------------------- the checks
def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: `pip install -e '.[docs]'` (make setup installs it)")
    r = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-4000:]
    for page in ("index.html", "design/index.html", "tutorials/plugins/index.html", "api/envs/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    # the API reference is generated from the code: a docstring and a config field's help text are in it
    api = (tmp_path / "site" / "api" / "envs" / "index.html").read_text(encoding="utf-8")
    assert "Everything that determines an episode" in api and "passages retrieved per query" in api


def test_every_command_parses(tmp_path):
    cmds = []
    for path in CURRENT:
        for b in blocks(path):
            if b.lang in ("bash", "sh", "console"):
                for c in commands(b.text):
                    parsed = argv_of(c)
                    if parsed:
                        cmds.append((f"{path.relative_to(ROOT)}:{b.line}", *parsed))
    assert len(cmds) > 60, len(cmds)  # the pages' commands were found
    failures = check_commands(cmds, tmp_path)
    assert not failures, "\n".join(failures)


def test_the_command_check_can_fail(tmp_path):
    """The parse check catches an option, a subcommand or a make target the code does not have."""
    bad = ["kairos answer --no-such-option q", "kairos bench no-such-bench", "python -m train --confg x.yaml",
           "make no-such-target"]
    failures = check_commands([("bad", *argv_of(c)) for c in bad], tmp_path)
    assert len(failures) == len(bad), failures
    assert not check_commands([("good", *argv_of("kairos bench policies --config x.yaml --set a=1"))], tmp_path)


def test_python_imports_yaml_and_paths():
    problems, imports = [], []
    for path in CURRENT:
        text = path.read_text(encoding="utf-8")
        for m in REPO_PATH.finditer(text):
            p = m.group(1).rstrip(".")
            if not any(ch in p for ch in "{*<…") and not p.endswith("-v0") and not (ROOT / p).exists():
                problems.append(f"{path.relative_to(ROOT)}: `{p}` does not exist")
        for b in blocks(path):
            where = f"{path.relative_to(ROOT)}:{b.line}"
            if b.lang == "python":
                try:
                    tree = ast.parse(b.text)
                except SyntaxError as e:
                    problems.append(f"{where}: {e}")
                    continue
                imports += [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            elif b.lang == "yaml":
                try:
                    yaml.safe_load(b.text)
                except yaml.YAMLError as e:
                    problems.append(f"{where}: {e}")
    assert not problems, "\n".join(problems)
    mods = {i for i in imports if "mypkg" not in i}
    r = subprocess.run([sys.executable, "-c", "\n".join(sorted(mods))], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]


#: the project's internal tracker numbers ("issue 36", "stop 29", "session-22"): a reader cannot follow them, so a
#: page names the commit, the date or the change instead (another project's issue links, `…/issues/123`, pass)
TRACKER_REF = re.compile(r"\b(?:stop|issue|session)s?[ -]?#?\d+", re.IGNORECASE)


def test_pages_speak_without_tracker_numbers():
    hits = [f"{path.relative_to(ROOT)}:{i}: {m.group(0)!r}"
            for path in ALL_TEXT
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for m in TRACKER_REF.finditer(line)]
    assert not hits, "internal tracker numbers in the docs (name the commit or the change):\n" + "\n".join(hits)
    assert TRACKER_REF.search("the runs of Stop 30") and TRACKER_REF.search("(issue #36 item 2)")
    assert not TRACKER_REF.search("see github.com/org/repo/issues/36 and `stop_at_step`")


# ----------------------------------------------------------------------------------------------- running pages
def _workdir(tmp: Path) -> Path:
    """A working directory that looks like the repository root: its entries linked, a .venv/bin of shims."""
    work = tmp / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("runs", ".venv", ".git", "site") and not entry.name.startswith("."):
            (work / entry.name).symlink_to(entry)
    bin_ = work / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for name, line in (("kairos", f'exec "{sys.executable}" -m eval "$@"'), ("python", f'exec "{sys.executable}" "$@"'),
                       ("mkdocs", f'exec "{sys.executable}" -m mkdocs "$@"')):
        (bin_ / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_ / name).chmod(0o755)
    return work


def _config_check(cls: str, path: Path) -> None:
    if cls == "EnvConfig":
        from envs.env_config import env_config_from_file
        env_config_from_file(path)
    elif cls == "TrainConfig":
        from train.config import TrainConfig
        TrainConfig.from_yaml(path)
    elif cls == "BenchConfig":
        from eval.bench.config import load_config
        load_config(str(path))
    else:
        raise AssertionError(f"unknown config class {cls}")


def run_page(page: str, tmp: Path, slow: bool) -> int:
    """Run the page's marked blocks of the given speed (files are always written); returns how many ran."""
    work = _workdir(tmp)
    env = {**os.environ, "PYTHONPATH": f"{work}:{ROOT}", "NO_MKDOCS_2_WARNING": "1"}
    python, ran = [], 0
    for b in blocks(DOCS / page):
        if "run" not in b.mark:
            continue
        if b.file:
            target = work / b.file
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.suffix == ".py":
                (target.parent / "__init__.py").touch()
            target.write_text(b.text.split("\n", 1)[1])
            if b.config and not slow:
                _config_check(b.config, target)
                ran += 1
            continue
        if ("slow" in b.mark) != slow:
            continue
        if b.lang == "python":
            python.append(textwrap.dedent(b.text))
        elif b.lang == "bash":
            for c in commands(b.text):
                r = subprocess.run(["bash", "-c", c], cwd=work, capture_output=True, text=True, timeout=900, env=env)
                assert r.returncode == 0, (f"{page}:{b.line}: {c}", r.stdout[-2000:], r.stderr[-3000:])
                ran += 1
    if python:
        script = work / "page.py"
        script.write_text("import json\n" + "\n".join(python) + PAGE_CHECKS.get(page, "") + "\nprint('PAGE OK')\n")
        r = subprocess.run([sys.executable, str(script)], cwd=work, capture_output=True, text=True, timeout=600,
                           env=env)
        assert r.returncode == 0 and "PAGE OK" in r.stdout, (page, r.stderr[-3000:])
        ran += 1
    return ran


RUN_PAGES = [str(p.relative_to(DOCS)) for p in PAGES if any("run" in b.mark for b in blocks(p))]
SLOW_PAGES = [str(p.relative_to(DOCS)) for p in PAGES if any({"run", "slow"} <= b.mark for b in blocks(p))]


def test_the_tutorials_have_runnable_blocks():
    for page in ("tutorials/plugins.md", "tutorials/own-model-data-corpus.md", "tutorials/application.md",
                 "tutorials/benchmark.md", "guide/environment.md", "getting-started.md"):
        assert page in RUN_PAGES, page
    for what in ("signal", "fixed trigger", "reward cost", "query formulation", "retriever", "retrieval step"):
        assert re.search(rf"^## An? {what}", (DOCS / "tutorials/plugins.md").read_text(), re.MULTILINE), what


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_blocks_run(page, tmp_path):
    run_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES)
def test_page_slow_blocks_run(page, tmp_path):
    assert run_page(page, tmp_path, slow=True) > 0


def test_design_sections_the_code_cites_exist():
    """Source files cite the design as "docs/design.md §N": every cited section is a heading of docs/design.md."""
    sections = set(re.findall(r"^##+ (\d+[a-z]?(?:\.\d+)?)\.? ", (DOCS / "design.md").read_text(encoding="utf-8"),
                              re.MULTILINE))
    cited, old = {}, []
    for pkg in ("envs", "agents", "policies", "train", "eval", "kairos", "tests", "scripts", "configs"):
        for path in (ROOT / pkg).rglob("*"):
            if path.suffix in (".py", ".yaml", ".sh") and path.is_file():
                text = path.read_text(encoding="utf-8")
                old += [str(path.relative_to(ROOT))] if "DESIGN" + " §" in text else []
                for sec in re.findall(r"docs/design\.md §(\d+[a-z]?(?:\.\d+)?)", text):
                    cited.setdefault(sec, str(path.relative_to(ROOT)))
    assert len(cited) >= 8, cited
    missing = {s: f for s, f in cited.items() if s not in sections}
    assert not missing, f"cited sections docs/design.md does not have: {missing}"
    assert not old, f"cite docs/design.md, not DESIGN: {old}"
