"""Learning curves and a held-out comparison of a trained policy against fixed triggers.

``python -m train.report --run runs/train/microworld`` writes ``curves.png`` (from ``metrics.jsonl``) and,
with ``--compare``, ``comparison.json``: thresholds of fixed triggers are swept on calibration dev
questions (``--calib``), the best by reward is kept, and every policy — never, always, Single RAG, the best
fixed trigger, the learned trigger — is evaluated greedily on disjoint held-out dev questions (``--eval``).
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


def fixed_candidates():
    from policies.triggers import AlwaysTrigger, NeverTrigger, SingleTrigger, ThresholdTrigger

    out = [NeverTrigger(), AlwaysTrigger(), SingleTrigger()]
    out += [ThresholdTrigger("minprob", t, "below", name=f"FLARE(minprob<{t})") for t in (0.3, 0.5, 0.7, 0.9)]
    out += [ThresholdTrigger("entropy", t, "above", name=f"entropy>{t}") for t in (0.05, 0.2, 0.5)]
    out += [ThresholdTrigger("rsus", t, "above", name=f"RSUS>{t}") for t in (0.4, 0.5, 0.6, 0.65)]
    return out


def compare(run_dir: Path, env_config: dict, calib: list[int], held_out: list[int]) -> dict:
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.registration import PRESETS
    from policies.rl.export import LearnedTrigger
    from train.evaluate import evaluate_policy

    cfg = {**PRESETS["microworld"], **env_config}
    comps = build_components(EnvConfig.from_dict(cfg))
    cands = fixed_candidates()
    sweep = []
    for t in cands[1:] if len(calib) == 0 else cands:
        if not calib:
            break
        r = evaluate_policy(t, cfg, calib, components=comps)
        log.info("calib %-22s acc %.3f calls %.2f reward %.3f", r["policy"], r["accuracy"],
                 r["calls_per_question"], r["reward"])
        sweep.append(r)
    best_fixed = max((r for r in sweep if r["policy"] not in ("CoT", "IRCoT")), key=lambda r: r["reward"])
    best_trigger = next(t for t in cands if t.name == best_fixed["policy"])
    learned = LearnedTrigger.load(run_dir / "policy_trigger", name="learned")
    results = {}
    for t in (cands[0], cands[1], best_trigger, learned):
        r = evaluate_policy(t, cfg, held_out, components=comps)
        log.info("held-out %-22s acc %.3f calls %.2f reward %.3f", r["policy"], r["accuracy"],
                 r["calls_per_question"], r["reward"])
        results[r["policy"]] = r
    return {"calibration": sweep, "best_fixed": best_fixed["policy"], "held_out": results,
            "calib_questions": [calib[0], calib[-1]] if calib else [], "held_out_questions": [held_out[0], held_out[-1]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.report", description=__doc__)
    p.add_argument("--run", required=True, help="run directory (out_dir of the training config)")
    p.add_argument("--compare", action="store_true", help="also run the held-out comparison (generates text)")
    p.add_argument("--calib", type=int, default=100, help="dev questions [0, N) for the threshold sweep")
    p.add_argument("--eval", type=int, default=200, help="held-out dev questions [calib, calib + N)")
    p.add_argument("--lam", type=float, default=0.1, help="λ of retrieval calls in the reported reward")
    p.add_argument("--cache", default="runs/train/cache_dev.sqlite", help="trajectory cache for dev episodes")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    import torch

    torch.set_num_threads(1)
    run = Path(args.run)
    if (run / "metrics.jsonl").is_file():
        log.info("wrote %s", plot_curves(run / "metrics.jsonl", run / "curves.png"))
    if args.compare:
        env_cfg = {"split": "dev", "rsus_components": ["ent"], "cache_path": args.cache,
                   "costs": {"retrieval_calls": args.lam}}
        out = compare(run, env_cfg, list(range(args.calib)), list(range(args.calib, args.calib + args.eval)))
        (run / "comparison.json").write_text(json.dumps(out, indent=2))
        log.info("wrote %s", run / "comparison.json")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
