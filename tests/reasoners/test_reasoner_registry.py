"""The reasoner registry: names, the dotted-path escape hatch, clear errors."""

import pytest

from agents.reasoners.hf import HFReasoner
from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig
from agents.reasoners.registry import available_reasoners, make_reasoner, register_reasoner, resolve_reasoner
from envs.core.config import ConfigError


def test_names():
    assert {"micro", "hf", "openai"} <= set(available_reasoners())


def test_openai_from_options_and_config():
    r = make_reasoner("openai", base_url="http://127.0.0.1:1/v1", api="chat")
    assert isinstance(r, OpenAIReasoner) and r.cfg.api == "chat"
    r = make_reasoner("openai", config={"model": "m"}, timeout_s=3)
    assert (r.cfg.model, r.cfg.timeout_s) == ("m", 3.0)
    r = make_reasoner("openai", config=OpenAIReasonerConfig(model="m2"))
    assert r.cfg.model == "m2"
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        make_reasoner("openai", bogus=1)


def test_hf_from_a_local_folder(tmp_path, tok, random_model):
    random_model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    r = make_reasoner("hf", model=str(tmp_path / "tiny"), max_steps=2, max_step_tokens=4)
    assert isinstance(r, HFReasoner) and r.cfg.max_steps == 2
    assert len(r.run_chains(["x ?"])[0]) <= 2


def test_dotted_path_and_errors():
    f = resolve_reasoner("agents.reasoners.openai_compat:OpenAIReasoner")
    assert f is OpenAIReasoner
    with pytest.raises(ValueError, match="unknown reasoner 'gpt'"):
        make_reasoner("gpt")
    with pytest.raises(ValueError, match="cannot import"):
        make_reasoner("agents.nope:X")
    with pytest.raises(ValueError, match="already registered"):
        register_reasoner("hf")(lambda **kw: None)
