"""Every extension point is one :class:`envs.core.registry.Registry`; every registered entry meets its contract.

Parametrized over the registries and over every entry each one holds (Gymnasium's ``tests/envs/test_envs.py`` is the
model): a newly registered signal, trigger, cost, … is checked by these tests without writing one.
"""

from __future__ import annotations

import argparse
import inspect
import math

import numpy as np
import pytest

from envs.core.registry import DuplicateNameError, Registry, RegistryImportError, UnknownNameError


def _registries() -> dict[str, Registry]:
    from agents.query import QUERY_MODES
    from agents.reasoners.registry import REASONERS
    from agents.retrievers.index import RETRIEVERS
    from agents.signals.base import SIGNALS
    from envs.components import DETECTORS
    from envs.core.data.corpora import CORPUS_BUILDERS
    from envs.core.data.loaders import LOADERS
    from envs.costs import COSTS
    from envs.tasks import TASKS
    from eval.bench.methods import METHOD_KINDS
    from eval.bench_cli import BENCHES
    from eval.cli import COMMANDS
    from policies.querygen.rewards import REWARDS
    from policies.triggers import TRIGGERS
    from train.curriculum import LAMBDA_SCHEDULES

    return {"reasoners": REASONERS, "signals": SIGNALS, "query_modes": QUERY_MODES, "retrievers": RETRIEVERS,
            "costs": COSTS, "triggers": TRIGGERS, "lambda_schedules": LAMBDA_SCHEDULES, "tasks": TASKS,
            "querygen_rewards": REWARDS, "datasets": LOADERS, "corpus_builders": CORPUS_BUILDERS,
            "benchmarks": BENCHES, "commands": COMMANDS, "detectors": DETECTORS,
            "method_kinds": METHOD_KINDS}


REGISTRIES = _registries()
ENTRIES = [(reg, name) for reg, r in REGISTRIES.items() for name in r.names()]


# ------------------------------------------------------------------------------------------- the shared behaviour
@pytest.mark.parametrize("reg", sorted(REGISTRIES))
def test_registry_behaviour(reg):
    r = REGISTRIES[reg]
    names = r.names()
    assert names, f"{reg}: no entries"
    with pytest.raises(UnknownNameError, match=rf"unknown {r.kind} 'no_such_entry' \(registered: {names[0]}"):
        r.get("no_such_entry")
    with pytest.raises(DuplicateNameError, match=f"{r.kind} '{names[0]}' is already registered"):
        r.register(names[0], object())
    assert isinstance(UnknownNameError(r.kind, "x", names), ValueError)
    with pytest.raises(UnknownNameError):
        r.check("no_such_entry", "SomeConfig.key")


def test_dotted_paths_and_their_errors():
    from agents.query import QUERY_MODES, step_query

    assert QUERY_MODES.get("agents.query:step_query") is step_query
    with pytest.raises(RegistryImportError, match="cannot import module 'no_such_pkg.mod' \\(No module named"):
        QUERY_MODES.get("no_such_pkg.mod:f")
    with pytest.raises(RegistryImportError, match="cannot import 'nope' from module 'agents.query'"):
        QUERY_MODES.get("agents.query:nope")
    with pytest.raises(ValueError, match="EnvConfig.x: unknown query mode 'nope'"):
        QUERY_MODES.check("nope", "EnvConfig.x")
    r = Registry("thing")
    r.register_path("lazy", "math:sqrt")
    assert "lazy" in r and r.make("lazy", 9.0) == 3.0
    assert r.unregister("lazy") is math.sqrt
    with pytest.raises(ValueError, match="without ':'"):
        r.register("a:b", 1)


def test_builtin_modules_load_on_first_read(tmp_path, monkeypatch):
    (tmp_path / "kairos_probe_reg.py").write_text(
        "from envs.core.registry import Registry\nREG = Registry('plugin', builtins=('kairos_probe_plugins',))\n")
    (tmp_path / "kairos_probe_plugins.py").write_text("from kairos_probe_reg import REG\nREG.register('x', 42)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import kairos_probe_reg

    assert "kairos_probe_plugins" not in __import__("sys").modules  # not imported until read
    assert kairos_probe_reg.REG.get("x") == 42 and kairos_probe_reg.REG.names() == ["x"]


# ----------------------------------------------------------------------------------------- every entry's contract
STEP_TEXT, QUESTION = "Step 1 : Mira 's mother is Tovan .", "Who is Mira 's mother ?"


def _contract(reg: str, name: str) -> None:
    r = REGISTRIES[reg]
    entry = r.get(name)
    assert callable(entry), f"{reg} '{name}' is not callable"
    if reg == "signals":
        info = r.info(name)
        assert isinstance(getattr(entry, "dim", None), int) and getattr(entry, "name", None) == name
        assert all(isinstance(c, str) for c in getattr(entry, "requires", ()))
        if info["group"]:
            from envs.observation import config_groups, group_fields

            assert info["group"] in config_groups() and info["field"] in group_fields()[info["group"]]
        if entry.dim > 0:
            assert all(0 <= i < entry.dim for i in info["scalars"].values()), f"signal '{name}': scalar index >= dim"
    elif reg == "query_modes":
        # the context the env passes (qfs: the attention-selected words it computes from the reasoner)
        q = entry(STEP_TEXT, QUESTION, {"prior_steps": [], "qfs": "Paris capital"})
        assert isinstance(q, str) and q.strip(), f"query mode '{name}' gave an empty query"
    elif reg == "costs":
        from envs.costs import CostEvent, make_cost

        cost = make_cost(name)
        for ev in (CostEvent(), CostEvent(retrieved=True, n_passages=1, tokens_generated=5, tokens_injected=9)):
            v = float(cost(ev))
            assert math.isfinite(v) and v >= 0
    elif reg == "triggers":
        from policies.triggers import Trigger

        args = {"threshold": ("minprob", 0.5), "random": (0.5,), "fixed_mode": (r.make("always"), 1)}.get(name, ())
        t = r.make(name, *args)
        assert isinstance(t, Trigger)
        t.reset(0)
        info = {"signals": {"minprob": 0.2}, "step_index": 1, "retrievals_this_step": 0, "label": "wrong_fact"}
        a = t.decide({}, info)
        assert (a in (0, 1)) if not isinstance(a, tuple) else a[0] in (0, 1)
        assert isinstance(t.describe(), str) and t.describe()
    elif reg == "lambda_schedules":
        vals = [entry(0.5, 0.1, t) for t in np.linspace(0, 1, 11)]
        assert all(math.isfinite(v) and v >= 0 for v in vals) and vals[0] == pytest.approx(0.5)
    elif reg == "retrievers":
        for method in ("build", "load", "search"):
            assert callable(getattr(entry, method, None)), f"retriever '{name}' has no {method}()"
    elif reg == "datasets":
        params = inspect.signature(entry).parameters
        assert {"skip_bad_lines", "limit"} <= set(params)
    elif reg in ("benchmarks", "commands"):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        entry(sub)
        assert sub.choices, f"{reg} '{name}' registered no subcommand"
    elif reg == "reasoners":
        assert inspect.signature(entry).parameters, f"reasoner factory '{name}' takes no options"
    elif reg == "tasks":
        assert list(inspect.signature(entry).parameters)[0] == "config"


@pytest.mark.parametrize("reg,name", ENTRIES, ids=[f"{r}:{n}" for r, n in ENTRIES])
def test_entry_contract(reg, name):
    _contract(reg, name)


@pytest.mark.parametrize("name", ["micro", "openai"])
def test_offline_reasoners_implement_the_protocol(name):
    from agents.reasoners.base import Reasoner
    from agents.reasoners.registry import make_reasoner

    kw = {"base_url": "http://127.0.0.1:9/v1", "model": "m"} if name == "openai" else {}
    r = make_reasoner(name, **kw)
    assert isinstance(r, Reasoner)
    for method in ("start", "next_step", "regenerate", "sample_alternatives"):
        assert callable(getattr(r, method)), f"reasoner '{name}' lacks {method}()"


def test_a_user_signal_is_usable_by_the_env_with_one_decorator():
    """Registering a signal with a group makes it a valid ``EnvConfig.signals`` entry, an observation field and a
    scalar for threshold triggers — no other table to edit."""
    from agents.signals.base import SIGNALS, SignalBase, register_signal
    from envs.env_config import EnvConfig
    from envs.observation import config_groups, group_signals, scalar_signals

    @register_signal("_n_words", group="_words", scalars={"n_words": 0})
    class NWords(SignalBase):
        dim = 1

        def __call__(self, step, state=None):
            return np.array([len(step.content.split())], dtype=np.float32)

    try:
        assert "_words" in config_groups() and group_signals()["_words"] == ["_n_words"]
        assert scalar_signals()["n_words"] == ("_n_words", 0)
        EnvConfig.from_dict({"signals": ["output", "_words"]})  # validates
    finally:
        SIGNALS.unregister("_n_words")
    with pytest.raises(ValueError, match="unknown observation group '_words'"):
        EnvConfig.from_dict({"signals": ["output", "_words"]})


def test_every_scalar_signal_declares_its_label_and_error_direction():
    """One source for a signal's label and error direction: its own declaration (``SignalBase.label`` /
    ``error_direction``, or ``register_signal(scalar_labels=…)``), which the detection benchmark, the probe
    references and the benefit-label AUROCs read."""
    from agents.signals.base import retrieve_direction, signal_meta
    from envs.observation import scalar_signals
    from eval.detection.data import DETECTORS, TRAINING_FREE
    from eval.detection.labels import RANKED_SIGNALS
    from policies.probes.pipeline import REFERENCES

    for name in scalar_signals():
        meta = signal_meta(name)
        assert meta["label"] and meta["error_direction"] in (-1, 1), (name, meta)
    assert (signal_meta("minprob")["error_direction"], retrieve_direction("minprob")) == (-1, "below")
    assert (signal_meta("u_ent"), retrieve_direction("ppl")) == ({"label": "U_ent", "error_direction": 1,
                                                                  "signal": "rsus"}, "above")
    for name in TRAINING_FREE:
        assert DETECTORS[name] == (signal_meta(name)["label"], False, signal_meta(name)["error_direction"] > 0)
    assert all(REFERENCES[n] == (signal_meta(n)["error_direction"] > 0) for n in REFERENCES)
    assert set(RANKED_SIGNALS) <= set(scalar_signals())
    with pytest.raises(KeyError, match="'nope' is not registered"):
        signal_meta("nope")


def test_a_signal_is_selected_by_its_name_too():
    """``EnvConfig.signals`` takes a registered signal's name besides the groups: the observation field it writes
    (a signal without a group: a field of its own, named after it)."""
    from envs.env_config import EnvConfig
    from envs.observation import group_fields, group_signals, signal_names

    assert "ppl" in signal_names() and "output" not in signal_names()
    assert group_fields()["ppl"] == ["ppl"] and group_signals()["ppl"] == ["ppl"]
    assert group_fields()["step_embedding"] == ["step_embedding"]  # one field of the 'content' group
    assert EnvConfig.from_dict({"signals": ["output", "ppl"]}).signals == ["output", "ppl"]


def test_unknown_task_fails_on_the_config_naming_the_key():
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="EnvConfig.task: unknown task 'hotpot' \\(registered: microworld"):
        EnvConfig.from_dict({"task": "hotpot"})
