"""The extractor: masking by capability, strict errors, per-step unavailability, the registry."""

import numpy as np
import pytest

from agents.reasoners.base import Capabilities, Step
from agents.signals import (
    SIGNALS,
    MissingCapabilityError,
    Pulse,
    SignalBase,
    SignalExtractor,
    available_signals,
    make_signal,
    register_signal,
)

BLACK_BOX = Capabilities(hidden_states=False, logprobs=True, attentions=False, sampling=True)
WHITE_BOX = Capabilities(hidden_states=True, logprobs=True, attentions=False, sampling=True)
H = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])


def _step(**kw):
    return Step(1, "Step 1 : a b", "a b", False, **kw)


def test_registry_has_every_design_signal():
    assert {"pulse", "coe_r", "coe_c", "ppl", "maxprob", "entropy", "minprob", "rind", "eigenscore", "reprobe",
            "rsus", "output"} <= set(available_signals())
    with pytest.raises(ValueError, match="unknown signal 'plse'.*registered: "):
        make_signal("plse")
    assert isinstance(make_signal("agents.signals.hidden:Pulse", layers=(0, 2)), Pulse)
    with pytest.raises(ValueError, match="cannot import"):
        make_signal("agents.signals.hidden:Nope")


def test_masked_not_silently_zero_filled():
    ex = SignalExtractor(["ppl", "pulse", "coe_r"], BLACK_BOX, backend="openai", options={"pulse": {"layers": (0, 2)}})
    out = ex(_step(logprobs=np.log([0.5, 0.5]), hidden_mean=H))
    assert out["ppl"].tolist() == [2.0]
    assert out["pulse"].shape == (4,) and not out["pulse"].any()
    assert out["mask"].tolist() == [1.0, 0.0, 0.0]
    assert ex.supported == {"ppl": True, "pulse": False, "coe_r": False}
    assert all(v.dtype == np.float32 for v in out.values())


def test_strict_error_names_signal_capability_and_backend():
    with pytest.raises(MissingCapabilityError,
                       match="PUlSE needs hidden_states, which backend 'openai' does not expose"):
        SignalExtractor(["ppl", "pulse"], BLACK_BOX, backend="openai", strict=True, options={"pulse": {"layers": (0, 2)}})
    with pytest.raises(MissingCapabilityError, match="DRAGIN needs attentions"):
        SignalExtractor(["rind", "pulse"], BLACK_BOX, backend="openai", strict=["rind"])
    # strict only for the named ones: pulse is masked quietly
    SignalExtractor(["ppl", "pulse"], BLACK_BOX, backend="openai", strict=["ppl"])


def test_unavailable_and_nonfinite_steps_are_masked():
    ex = SignalExtractor(["ppl", "pulse", "minprob"], WHITE_BOX, options={"pulse": {"layers": (0, 2)}})
    out = ex(_step(logprobs=np.array([]), hidden_mean=H))  # no content tokens -> PPL unavailable
    assert out["mask"].tolist() == [0.0, 1.0, 0.0]
    out = ex(_step(logprobs=np.array([-np.inf]), hidden_mean=H))  # p = 0 -> PPL inf
    assert out["mask"].tolist() == [0.0, 1.0, 1.0] and out["ppl"].tolist() == [0.0]


def test_context_from_reasoner_sets_model_dependent_dims():
    class R:
        capabilities = WHITE_BOX
        n_layers, hidden_size = 6, 4

    ex = SignalExtractor(["pulse", "reprobe", "rsus"], reasoner=R())
    assert ex.backend == "R"
    assert ex.dims == {"pulse": 8, "reprobe": 28, "rsus": 7}  # default interval (1, 5) of 6 layers
    steps = [_step(hidden_mean=np.ones((7, 4)), hidden_last=np.ones((7, 4)))] * 2
    outs = ex.extract(steps)
    assert len(outs) == 2 and outs[0]["mask"].tolist() == [1.0, 1.0, 0.0]  # RSUS: no component source


def test_custom_signal_and_bad_dimension():
    @register_signal("test_const")
    class Const(SignalBase):
        dim = 2

        def __call__(self, step, state=None):
            return np.array([1.0, 2.0, 3.0])

    try:
        with pytest.raises(ValueError, match="declared dim 2"):
            SignalExtractor(["test_const"], WHITE_BOX)(_step())
        with pytest.raises(ValueError, match="not requested"):
            SignalExtractor(["test_const"], WHITE_BOX, options={"ppl": {}})
    finally:
        SIGNALS.unregister("test_const")
