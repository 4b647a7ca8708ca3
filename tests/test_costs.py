import sys
import textwrap

import pytest

from envs.costs import CostEvent, CostModel, make_cost, modelled_seconds


def test_builtin_costs():
    ev = CostEvent(retrieved=True, n_passages=1, tokens_generated=10, tokens_injected=20, seconds_measured=0.7)
    m = CostModel({"retrieval_calls": 0.5, "tokens": 0.01, "latency": 1.0, "dollars": 1.0})
    total, raw = m(ev)
    assert raw["retrieval_calls"] == 1.0 and raw["tokens"] == 30.0
    assert raw["latency"] == pytest.approx(0.05 + 0.002 * 30)
    assert raw["dollars"] == pytest.approx((20 * 0.15 + 10 * 0.60) / 1e6)
    assert total == pytest.approx(0.5 + 0.3 + raw["latency"] + raw["dollars"])
    assert CostModel({"latency": 1.0}, {"latency": {"mode": "measured"}})(ev)[1]["latency"] == 0.7
    assert modelled_seconds(CostEvent()) == 0.0


def test_set_weights_and_errors():
    m = CostModel({"retrieval_calls": 0.5})
    m.set_weights({"retrieval_calls": 0.1})
    assert m(CostEvent(retrieved=True))[0] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown cost 'tokenz'"):
        m.set_weights({"tokenz": 1.0})
    with pytest.raises(ValueError, match="unknown cost 'nope'.*registered"):
        CostModel({"nope": 1.0})
    with pytest.raises(ValueError, match="cannot import"):
        make_cost("no.such.module:Thing")
    with pytest.raises(ValueError, match="mode must be"):
        make_cost("latency", mode="wallclock")


def test_user_cost_by_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "mycosts.py").write_text(textwrap.dedent("""
        class GpuSeconds:
            name = "gpu_seconds"
            def __init__(self, price_per_s=2.0):
                self.price_per_s = price_per_s
            def __call__(self, event):
                return self.price_per_s * event.seconds_modelled
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mycosts", None)
    m = CostModel({"mycosts:GpuSeconds": 0.5}, {"mycosts:GpuSeconds": {"price_per_s": 3.0}})
    total, raw = m(CostEvent(seconds_modelled=2.0))
    assert raw["mycosts:GpuSeconds"] == 6.0 and total == 3.0
