"""The README's "Plug in your own …" examples run as written, and what they register works through the env.

They run in a fresh interpreter (registrations are process-wide); a block that starts with ``# mypkg/….py`` is
written to that module file instead, so the examples that name it by dotted path import it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECKS = '''
import gymnasium as gym
import envs  # noqa: F401
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
print("README EXAMPLES OK")
'''


def readme_examples() -> list[str]:
    """The python blocks of every "Plug in your own …" section (a section ends at the next heading of any level;
    lines inside code fences are never headings)."""
    blocks, section, fence, block, lang = [], "", False, [], ""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if fence:
                if section.startswith("Plug in your own") and lang == "python":
                    blocks.append("\n".join(block) + "\n")
                fence, block = False, []
            else:
                fence, lang = True, line[3:].strip()
            continue
        if fence:
            block.append(line)
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
    return blocks


def test_readme_has_one_example_per_extension_point():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for what in ("signal", "fixed trigger", "query formulation", "retriever", "reward cost"):
        assert f"### Plug in your own {what}" in text, what
    assert len(readme_examples()) >= 6


def test_readme_examples_run(tmp_path):
    main = []
    for block in readme_examples():
        first = block.splitlines()[0].strip()
        if re.fullmatch(r"# [\w/]+\.py", first):  # a module file of the example
            path = tmp_path / first[2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / "__init__.py").touch()
            path.write_text(block)
        else:
            main.append(block)
    script = tmp_path / "examples.py"
    # the README's env section imports these once for every example after it
    preamble = "import gymnasium as gym\nimport envs  # noqa: F401\n"
    script.write_text(preamble + "\n".join(textwrap.dedent(b) for b in main) + CHECKS)
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert out.returncode == 0 and "README EXAMPLES OK" in out.stdout, out.stderr[-3000:]
