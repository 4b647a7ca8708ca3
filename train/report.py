"""Learning curves of a training run.

``python -m train.report --run runs/train/microworld`` writes ``curves.png`` from ``metrics.jsonl``. Comparing a
trained policy with dev-calibrated fixed triggers on held-out questions is the benchmark's job:
``kairos bench policies --config configs/bench_microworld.yaml`` (:mod:`eval.bench.policies`).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

CURVES = [("episode_return", "episode return"), ("quality", "answer quality"),
          ("retrievals_per_episode", "retrievals / episode"), ("curriculum_lambda_retrieval_calls", "λ retrieval"),
          ("entropy", "policy entropy"), ("retrieve_prob", "π(retrieve)"), ("policy_loss", "policy loss"),
          ("vf_loss", "value loss")]


def load_metrics(path: Path) -> list[dict]:
    """Rows of ``metrics.jsonl``; after a resume the last row of each iteration wins."""
    rows: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            rows[d["iteration"]] = d
    return [rows[k] for k in sorted(rows)]


def plot_curves(metrics_path: Path, out_png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_metrics(metrics_path)
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    for ax, (key, title) in zip(axes.flat, CURVES):
        xs = [r["iteration"] for r in rows if key in r]
        ax.plot(xs, [r[key] for r in rows if key in r], marker=".")
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.report", description=__doc__)
    p.add_argument("--run", required=True, help="run directory (out_dir of the training config)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    run = Path(args.run)
    if not (run / "metrics.jsonl").is_file():
        p.error(f"{run / 'metrics.jsonl'} not found (is --run the out_dir of a training run?)")
    log.info("wrote %s", plot_curves(run / "metrics.jsonl", run / "curves.png"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    from envs.core.cli_errors import run_handled

    raise SystemExit(run_handled("python -m train.report", main))
