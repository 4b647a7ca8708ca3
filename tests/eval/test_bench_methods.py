"""The benchmark's method kinds: one spec class per kind in a registry; a YAML mapping's ``kind`` picks the class,
a key of another kind is an error naming the method's key; a new kind is one class and a registration."""

import json
from dataclasses import dataclass

import pytest

from envs.core.config import ConfigError, helpf
from eval.bench.config import BenchConfig, load_record
from eval.bench.methods import KIND_HELP, METHOD_KINDS, MethodSpec


def test_every_builtin_kind_is_a_registered_spec_class_with_its_own_keys():
    assert set(METHOD_KINDS.names()) >= {"never", "always", "single", "threshold", "random", "oracle", "cache_oracle",
                                         "learned", "trigger", "ircot", "flare"}
    for kind, cls in METHOD_KINDS.items():
        assert issubclass(cls, MethodSpec) and cls.__dataclass_fields__["kind"].default == kind
        assert cls.report_kind in ("baseline", "fixed", "random", "oracle", "learned")
    m = MethodSpec.from_dict({"name": "F", "signal": "minprob"})  # kind defaults to threshold, as before
    assert type(m) is METHOD_KINDS.get("threshold") and m.kind == "threshold"
    assert MethodSpec.from_dict(m.to_dict()) == m


def test_a_key_of_another_kind_names_the_method_key_and_the_valid_keys():
    with pytest.raises(ConfigError, match=r"BenchConfig.methods\['L'\].signal: unknown config key 'signal' for a "
                                          r"'learned' method \(a key of kind threshold; valid keys: calibrate, env, "):
        BenchConfig.from_dict({"methods": [{"name": "L", "kind": "learned", "path": "p", "signal": "minprob"}],
                               "reference": "L"})
    with pytest.raises(ConfigError, match=r"methods\['F'\].sigal: .*did you mean 'signal'"):
        BenchConfig.from_dict({"methods": [{"name": "F", "kind": "threshold", "signal": "x", "sigal": 1}],
                               "reference": "F"})
    with pytest.raises(ConfigError, match=r"methods\['C'\]: kind must be one of \('never', .*got 'nevr'"):
        BenchConfig.from_dict({"methods": [{"name": "C", "kind": "nevr"}], "reference": "C"})


def test_a_new_kind_is_one_class_and_a_registration():
    from policies.triggers import AlwaysTrigger

    @dataclass
    class EveryMethod(MethodSpec):
        kind: str = helpf("every", KIND_HELP)
        stride: int = helpf(1, "retrieve every stride-th step")

        def make_trigger(self, threshold=None, p=None, seed=0):
            t = AlwaysTrigger()
            t.name = self.name
            return t

    METHOD_KINDS.register("every", EveryMethod)
    try:
        cfg = BenchConfig.from_dict({"methods": [{"name": "CoT", "kind": "never"},
                                                 {"name": "E", "kind": "every", "stride": 2}]})
        assert isinstance(cfg.methods[1], EveryMethod) and cfg.methods[1].stride == 2
        assert cfg.methods[1].make_trigger().name == "E"
        assert BenchConfig.from_dict(cfg.to_dict()) == cfg
        with pytest.raises(ConfigError, match=r"methods\['N'\].stride: .* \(a key of kind every; valid keys"):
            BenchConfig.from_dict({"methods": [{"name": "N", "kind": "never", "stride": 2}], "reference": "N"})
    finally:
        METHOD_KINDS.unregister("every")


def test_a_config_json_recorded_when_every_method_listed_every_key_still_loads(tmp_path):
    """``evaluated_policy`` reads a benchmark's ``config.json``; one written before the kinds had their own classes
    lists every key with its default."""
    old = {"name": "CoT", "kind": "never", "trigger": None, "options": {}, "signal": None, "direction": "below",
           "thresholds": None, "fixed_threshold": None, "match": None, "p": None, "seeds": 3, "path": None,
           "lam": None, "group": None, "select_on_dev": False, "env": {}, "querygen": False, "query_mode": None,
           "query_modes": [], "curve": True, "calibrate": False}
    flare = {**old, "name": "FLARE", "kind": "threshold", "signal": "minprob", "query_modes": ["all"]}
    cfg = load_record(json.loads(json.dumps({"methods": [old, flare]})), where="config.json")
    assert [m.kind for m in cfg.methods] == ["never", "threshold"] and cfg.methods[1].query_modes == ["all"]
    with pytest.raises(ConfigError, match="unknown config key 'signal' for a 'never' method"):
        load_record({"methods": [{**old, "signal": "minprob"}]}, where="config.json")  # not a default: an error
    # a Single RAG row recorded before 'single' took k injected one passage: it replays as k = 1
    single = load_record({"methods": [old, {**old, "name": "SingleRAG", "kind": "single"}]}, where="config.json")
    assert single.methods[1].k == 1 and single.methods[1].run_env(single.env).to_dict() == {
        "query_modes": [*single.env.query_modes, "question"]}
