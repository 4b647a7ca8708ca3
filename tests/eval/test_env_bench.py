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
    from eval.env_bench import interleaved_throughput

    res = interleaved_throughput(lambda b: _FakeEnv(0.002), steps=16, repeats=2)
    assert res["repeats"] == 2 and len(res["runs"]["1"]) == len(res["runs"]["8"]) == 2
    for kind in ("wall", "cpu"):
        assert res[f"batch8_{kind}_steps_s"] > res[f"batch1_{kind}_steps_s"] > 0
        lo, hi = res[f"ratio_{kind}_range"]
        assert lo <= res[f"ratio_{kind}"] <= hi
    assert 4 < res["ratio_cpu"] < 12  # 8 env steps per call at the same cost per call
