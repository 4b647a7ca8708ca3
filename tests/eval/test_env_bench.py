"""``kairos bench env`` throughput measurement (structure; the figures themselves are benchmarks)."""

import time


class _FakeEnv:
    """Busy-waits ``cost`` CPU seconds per step whatever the batch: batching is free here."""

    def __init__(self, cost):
        self.cost = cost

    def reset(self, seed=None):
        return None, {}

    def step(self, actions):
        t0 = time.process_time()
        while time.process_time() - t0 < self.cost:
            pass


def test_interleaved_throughput_reports_medians_and_ratios():
    from eval.perf.env import interleaved_throughput

    res = interleaved_throughput(lambda b: _FakeEnv(0.002), steps=16, repeats=2)
    assert res["repeats"] == 2 and len(res["runs"]["1"]) == len(res["runs"]["8"]) == 2
    for kind in ("wall", "cpu"):
        assert res[f"batch8_{kind}_steps_s"] > res[f"batch1_{kind}_steps_s"] > 0
        lo, hi = res[f"ratio_{kind}_range"]
        assert lo <= res[f"ratio_{kind}"] <= hi
    assert 4 < res["ratio_cpu"] < 12  # 8 env steps per call at the same cost per call


def test_profile_counts_forward_passes_and_restores_the_model():
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.vector import make_batched
    from eval.perf.env import profile_batched

    cfg = EnvConfig(split="test", signals=["output"], rsus_components=["ent"])
    comps = build_components(cfg)
    model = comps.reasoner.model
    forward = model.forward
    p = profile_batched(lambda b: make_batched(b, cfg, comps), model, batch=4, steps=16)
    assert model.forward == forward  # the counting wrapper is removed
    assert p["steps"] == 16 and p["forwards"] > 0 and p["forwards_per_round"] >= 1
    assert 1 <= p["mean_rows_per_forward"] <= 4 and 0 < p["active_slot_share"] <= 1
    assert 0 < p["generate_steps_time_share"] <= 1


def test_content_overhead_measures_both_configurations():
    from envs.env_config import EnvConfig
    from eval.perf.env import content_overhead

    res = content_overhead(EnvConfig(split="train", rsus_components=["ent"]), steps=16, repeats=1, batch=4)
    assert set(res["cpu_steps_s"]) == {"without", "with"} and all(len(v) == 1 for v in res["cpu_steps_s"].values())
    assert res["overhead_range"][0] <= res["overhead_share"] <= res["overhead_range"][1]
    assert all(v[0] > 0 for v in res["cpu_steps_s"].values())
