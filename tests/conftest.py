"""Shared fixtures: single-threaded torch, a tiny micro-world, the shared data directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "configs" / "experiments" / "microworld" / "microworld_tiny.yaml"
SHARED_DATA = Path(os.environ.get("KAIROS_SHARED_DATA", REPO.parent / "shared" / "data"))

# fixture modules are data for the tests, not tests: --doctest-modules would import them at collection (a plug-in
# fixture would then register its names before the tests that check they are unknown without it)
collect_ignore = ["fixtures"]


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A tiny micro-world trained for a few steps (exercises the build path; not competent)."""
    from envs.core.microworld.config import BuildConfig
    from envs.microworld.build import train_world

    cfg = BuildConfig.from_yaml(TINY_CONFIG)
    out = tmp_path_factory.mktemp("tiny_world")
    return train_world(cfg, out, progress=False)


@pytest.fixture(scope="module")
def ray_local():
    """A private local Ray instance for one test module (``address="local"``: never another cluster on this host)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


# ----------------------------------------------------------------------------------------- headless Chromium
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = REPO / "runs" / "artifacts"


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by selenium (Debian's ``chromium`` + ``chromium-driver``; ``.ci/run`` installs them
    when missing). Skips, saying so, only where Chromium or its driver is absent."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium chromium-driver; .ci/run "
                    "installs it)")
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1200", "--allow-file-access-from-files"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


@pytest.fixture
def screenshot(tmp_path):
    """``screenshot(driver, name)``: a PNG under the test's tmp dir, copied to ``runs/artifacts/``."""

    def take(drv, name: str) -> Path:
        path = tmp_path / name
        assert drv.save_screenshot(str(path)), f"no screenshot written to {path}"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, ARTIFACTS / name)
        return path

    return take


#: the policy and env of the inspector's tests: FLARE-style (retrieve when the step's min token probability < 0.5)
TRACE_POLICY, TRACE_ENV = "minprob<0.5", {"rsus_components": ["ent"]}


@pytest.fixture(scope="session")
def trace_policy() -> tuple[str, dict]:
    """``(policy, env config)`` of the inspector and server tests (:data:`TRACE_POLICY`, :data:`TRACE_ENV`)."""
    return TRACE_POLICY, dict(TRACE_ENV)


@pytest.fixture(scope="session")
def learned_export(tmp_path_factory):
    """A learned policy with a QueryGen head over ``[info_need, step]`` (random weights, π(retrieve) spread around
    0.5), exported with the env it runs in — what ``kairos train`` writes."""
    import torch

    from envs.registration import make_env
    from policies.rl.export import export_policy
    from policies.rl.module import spec_from_spaces
    from policies.rl.net import PolicyNet

    cfg = {**TRACE_ENV, "query_modes": ["info_need", "step"], "querygen": True}
    env = make_env("microworld", cfg)
    torch.manual_seed(0)
    net = PolicyNet(spec_from_spaces(env.observation_space, env.action_space,
                                     {"arch": "mlp", "query_modes": ["info_need", "step"]}))
    with torch.no_grad():  # (as tests/test_pipeline.py's export)
        net.retrieve_head.weight.normal_(0.0, 2.0)
        net.retrieve_head.bias[1] += 3.2
    record = env.unwrapped.config.to_dict()
    env.close()
    return export_policy(net, tmp_path_factory.mktemp("learned") / "policy", heads=("retrieve", "query"),
                         env_config=record)


@pytest.fixture(scope="session")
def four_step_trace():
    """A micro-world question whose chain under :data:`TRACE_POLICY` has 4 steps and one retrieval, and its
    :class:`kairos.Answer` (the first such among the dev questions)."""
    from envs.core.microworld.artifact import DEFAULT_ARTIFACT, load_artifact

    if not (DEFAULT_ARTIFACT / "manifest.json").is_file():
        pytest.skip("no shipped micro-world artifact")
    from kairos import Pipeline

    questions = [q.text for q in load_artifact(None, with_model=False).questions["dev"]]
    with Pipeline(TRACE_POLICY, TRACE_ENV, batch_size=32) as p:
        for start in range(0, 256, 64):
            for a in p.answer_many(questions[start:start + 64]):
                if len(a.steps) == 4 and a.calls == 1 and not a.steps[-1].retrieved:
                    return a
    raise AssertionError("no dev question with a 4-step chain and one retrieval among the first 256")


#: the text of an element without its children matching a selector (whitespace normalised)
WITHOUT = """const c = arguments[0].cloneNode(true); c.querySelectorAll(arguments[1]).forEach((e) => e.remove());
return c.textContent.split(/\\s+/).filter(Boolean).join(" ");"""


@pytest.fixture
def assert_trace_page():
    """``check(driver, answer)``: the inspector shows ``answer``'s trace — the step list (one item per step, the
    retrieval's item marked, its query, passages with the injected one, the step after injection), the decision
    chart (a point per step, the retrieval's marked, the threshold line) and the signal charts."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def check(drv, answer) -> None:
        n = len(answer.steps)
        WebDriverWait(drv, 60).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps > li.step")) == n
            and d.find_elements(By.CSS_SELECTOR, "#answer"))
        items = drv.find_elements(By.CSS_SELECTOR, "#steps > li.step")
        want = [s.index for s in answer.steps if s.retrieved]
        assert [int(li.get_attribute("data-index")) for li in items] == [s.index for s in answer.steps]
        assert [int(li.get_attribute("data-index")) for li in items if "retrieved" in li.get_attribute("class")] \
            == want
        text = lambda e: e.get_attribute("textContent").strip()  # noqa: E731
        markers = [text(li.find_element(By.CSS_SELECTOR, ".marker")) for li in items]
        assert markers == ["retrieve" if s.retrieved else "go on" for s in answer.steps]
        assert len(drv.find_elements(By.CSS_SELECTOR, "#steps .marker.retrieve")) == len(want)
        for li, s in zip(items, answer.steps):
            assert text(li.find_element(By.CSS_SELECTOR, ".step-text")) == s.text
            if not s.retrieved:
                assert not li.find_elements(By.CSS_SELECTOR, ".retrieval")
                continue
            assert text(li.find_element(By.CSS_SELECTOR, ".query-text")) == s.query
            passages = li.find_elements(By.CSS_SELECTOR, "ol.passages > li.passage")
            assert len(passages) == len(s.passages)
            injected = [p.id for p in s.passages if p.injected]
            got = [text(p.find_element(By.CSS_SELECTOR, ".pid")) for p in passages
                   if "injected" in p.get_attribute("class")]
            assert got == [f"[{i}]" for i in injected]
            after = li.find_element(By.CSS_SELECTOR, ".after")
            if s.regenerated == s.text:
                assert "unchanged" in text(after)
            else:  # the word diff: without its deletions it reads as the regenerated step, without its insertions
                diff = after.find_element(By.CSS_SELECTOR, ".diff")  # as the original
                after_text, before_text = drv.execute_script(WITHOUT, diff, "del"), drv.execute_script(WITHOUT, diff, "ins")
                assert (after_text, before_text) == (" ".join(s.regenerated.split()), " ".join(s.text.split()))
                assert diff.find_elements(By.CSS_SELECTOR, "ins")
        assert text(drv.find_element(By.CSS_SELECTOR, "#answer")) == answer.answer
        points = drv.find_elements(By.CSS_SELECTOR, "#decision-chart svg circle.pt")
        assert len(points) == n
        assert [int(c.get_attribute("data-step")) for c in points if "retrieved" in c.get_attribute("class")] == want
        assert drv.find_elements(By.CSS_SELECTOR, "#decision-chart svg line.threshold")
        assert drv.find_element(By.CSS_SELECTOR, "#decision-chart").get_attribute("data-series") == "minprob"
        assert drv.find_elements(By.CSS_SELECTOR, "#signal-charts figure.signal-chart[data-signal='minprob']")

    return check
