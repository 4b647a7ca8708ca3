"""The training run: config → Ray → REINFORCE → checkpoints, TensorBoard, metrics, exported policy.

Read top to bottom: :func:`train.algo_config.build_algo_config` turns a :class:`TrainConfig` into a
:class:`ReinforceConfig`; :func:`train` starts Ray if needed (:mod:`train.cluster`), restores the newest checkpoint
with ``resume=True``, loops ``algo.train()`` until ``cfg.iterations``, logging each iteration (TensorBoard events
written here with ``torch.utils.tensorboard`` — plain ``algo.train()`` writes none — plus ``metrics.jsonl`` and a
terminal line: :mod:`train.metrics`), saves checkpoints atomically (``save_to_path`` into a temp dir, then
``rename``) and finally exports the policy (:func:`policies.rl.export.export_policy`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from envs.core.config import ConfigError
from envs.core.io import append_line, make_dir, write_json, writing
from envs.core.runlock import FolderLock
from train.algo_config import build_algo_config, build_model_config, runner_env_config  # noqa: F401  (re-exported)
from train.checkpoints import (  # noqa: F401  (re-exported: the resume helpers' old home)
    CKPT_PREFIX,
    last_metrics,
    list_checkpoints,
    read_metrics,
    remove_stale_temps,
    restore_newest,
    save_checkpoint,
    trim_metrics,
)
from train.cluster import (  # noqa: F401  (re-exported: the Ray helpers' old home)
    RemoteWorkerError,
    check_cluster,
    init_ray,
    probe_env_in_worker,
    remote_error,
)
from train.config import TrainConfig, resume_changes
from train.metrics import iteration_metrics, progress_line
from train.services import placement, start_services, stop_services

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- export
def learner_net(algo):
    """The learner's current :class:`PolicyNet` (a fresh torch copy; no Ray objects)."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from policies.rl.net import PolicyNet

    module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
    net = PolicyNet(module.net.spec)
    net.load_state_dict({k: torch.as_tensor(v).clone() for k, v in module.net.state_dict().items()})
    return net.eval()


def warm_start(algo, path: str, env_config: Any = None) -> None:
    """Load an exported policy into the learner's module and push the weights to the env runners. The export must
    read the run's observation fields at the run's sizes (:func:`policies.rl.compat.check_policy_env`: an error
    naming the path, the fields and the fix, not a torch size-mismatch traceback); a field the run has and the
    export lacks starts from scratch (logged)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from policies.rl.compat import check_policy_env
    from policies.rl.export import LearnedTrigger, load_policy

    src, meta = load_policy(path)
    module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
    t = LearnedTrigger(src, name=f"warm start {Path(path).name}")
    t.path, t.env_config = str(path), meta.get("env_config")
    check_policy_env(t, dict(module.net.spec.fields), env_config if env_config is not None else {},
                     querygen=False, where="model.warm_start")
    fresh = sorted(set(module.net.spec.fields) - set(src.spec.fields))
    if fresh:
        log.warning("warm start %s: it has no weights for the fields %s; they start from scratch", path, fresh)
    module.net.load_state_dict(src.state_dict(), strict=False)
    # wait for every runner to hold the weights: RLlib's default (timeout 0) does not wait, and a runner that samples
    # the first batch before the weights arrive trains on a random policy's episodes (seen under CPU contention:
    # the same seed then gave another run)
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True,
                                       timeout_seconds=600.0)


def run_warmstart_of(cfg: TrainConfig, show_progress: bool = True) -> Path:
    """The run's supervised warm start (``cfg.warmstart``): counterfactual labels of the training env's questions
    at the curriculum's final λ, the policy fitted with the run's model options; ``<out_dir>/warmstart``."""
    from train import dagger  # noqa: F401 — registers warm-start kind "dagger" with train.warmstart
    from train.curriculum import Curriculum
    from train.warmstart import run_warmstart

    env = cfg.kairos_env  # the run's env (its preset applied on load), as the env runners build it
    lam = cfg.curriculum["retrieval_calls"].end if "retrieval_calls" in cfg.curriculum else \
        float(env.costs.get("retrieval_calls", 0.1))
    ranges = {k: v for k, v in Curriculum(cfg.curriculum).final().items() if isinstance(v, tuple)}
    return run_warmstart(env.replace(max_questions=None), cfg.warmstart, Path(cfg.out_dir) / "warmstart",
                         model_config=build_model_config(cfg), lam=lam, seed=cfg.seed, progress=show_progress,
                         cost_ranges=ranges)


def policy_env_config(cfg: TrainConfig) -> dict[str, Any] | None:
    """The env config a run's policy is trained in (its EnvConfig, the preset applied on load, as a dict), which
    every export records (``spec.json``'s ``env_config``: ``kairos.Pipeline.from_policy`` rebuilds the env from it);
    ``None`` for a custom env factory."""
    from envs.env_config import EnvConfig

    return cfg.env_config.to_dict() if isinstance(cfg.env_config, EnvConfig) else None


# ---------------------------------------------------------------- the run
def train(cfg: TrainConfig, resume: bool = False, stop_after: int | None = None, show_progress: bool = True,
          on_iteration=None) -> dict[str, Any]:
    """Train (or continue) a run; returns a summary dict (also written to ``out_dir/summary.json``).

    Args:
        cfg: the run's config.
        resume: continue from the newest checkpoint in ``out_dir/checkpoints`` (fresh start if none).
        stop_after: stop after this many iterations *of this call* (for tests / time-boxing); the final
            checkpoint is still written.
        show_progress: show a rich progress bar with the latest metrics line.
        on_iteration: ``f(iteration, metrics)`` after every iteration (Tune trials report through it).

    Raises:
        ConfigError: ``stop_after`` that is not an integer >= 1 (0 would export an untrained policy), before any work.
    """
    if stop_after is not None and (isinstance(stop_after, bool) or not isinstance(stop_after, int) or stop_after < 1):
        raise ConfigError(f"stop_after (--stop-after) must be an integer >= 1, got {stop_after!r}; leave it out to "
                          "train to the config's iterations")
    with FolderLock(cfg.out_dir):  # one run per out_dir: a second one refuses, naming this one
        return _train(cfg, resume, stop_after, show_progress, on_iteration)


def _train(cfg: TrainConfig, resume: bool, stop_after: int | None, show_progress: bool, on_iteration) -> dict:
    t_start = time.perf_counter()
    out = _prepare_out(cfg, resume)
    ckpt_dir = out / "checkpoints"
    warm = cfg.model.warm_start
    if cfg.warmstart.enabled and not (resume and list_checkpoints(ckpt_dir)):
        warm = str(run_warmstart_of(cfg, show_progress))  # on the driver, before Ray starts
    if cfg.iterations == 0:  # no REINFORCE (and no Ray): the warm start is the run's policy
        from policies.rl.export import load_policy

        summary = {"iteration": 0, "resumed_from": None, "first_iteration": 0, "final_metrics": {},
                   "policy_dir": str(_export_net(load_policy(warm)[0], cfg, out, 0)),
                   "wall_seconds": time.perf_counter() - t_start,
                   "driver_peak_rss_mb": _peak_rss_mb()}
        if cfg.eval_questions > 0 and cfg.env == "microworld":
            summary["dev_eval"] = _dev_eval(cfg, out)
        write_json(out / "summary.json", summary)
        return summary
    started = init_ray(cfg)
    try:
        check_cluster(cfg)  # a request no node can ever satisfy fails now, naming the key (not after a silent wait)
    except Exception:
        if started:
            import ray

            ray.shutdown()
        raise
    services = start_services(cfg)
    algo = _build_algo(cfg, services)
    try:
        restored = _restore_or_warm_start(algo, cfg, out, resume, warm)
        first = algo.iteration
        if restored and first > cfg.iterations:
            log.warning("resume: %s is at iteration %d already, past iterations = %d: nothing to train (the policy "
                        "is exported from iteration %d; raise iterations to continue)", out, first, cfg.iterations,
                        first)
        elif restored and first == cfg.iterations:
            log.info("resume: %s finished all %d iterations already: nothing to train", out, first)
        last = _iterate(algo, cfg, out, bool(restored), stop_after, show_progress, on_iteration)
        if not list_checkpoints(ckpt_dir) or int(list_checkpoints(ckpt_dir)[-1].name[len(CKPT_PREFIX):]) != algo.iteration:
            save_checkpoint(algo, ckpt_dir, cfg.keep_checkpoints)
        policy_dir = _export_policies(algo, cfg, out)
        summary = _summary(algo, services, restored, first, t_start, last, policy_dir)
    finally:
        algo.stop()
        stop_services(services)
        if started:
            import ray

            ray.shutdown()
    if cfg.eval_questions > 0 and cfg.env == "microworld":
        summary["dev_eval"] = _dev_eval(cfg, out)
    write_json(out / "summary.json", summary)
    return summary


def _prepare_out(cfg: TrainConfig, resume: bool) -> Path:
    """The run's folder (and its cache file's), checked against what it holds, with the config written into it
    (called holding the folder's lock).

    * ``resume`` over checkpoints: the config must be the one the run was trained with — the keys that change what
      a run computes (:func:`train.config.resume_changes`) are compared with ``config.json`` and a change is an
      error naming them (``iterations`` and resources may change);
    * ``resume`` without a checkpoint: an explicit restart from iteration 1, said in a log line, the earlier
      attempt's metrics rows dropped;
    * a new run (no ``resume``) into a folder that holds a run's checkpoints or metrics: an error (``--resume``
      continues it; another out_dir starts a new one) — never two runs' rows in one file;
    * temp folders of an interrupted save (a dead run's: we hold the lock) are removed.
    """
    out = make_dir(cfg.out_dir)
    cache = cfg.env_config.to_dict().get("cache_path")
    if cache:
        make_dir(Path(cache).parent)
    ckpt_dir, metrics = out / "checkpoints", out / "metrics.jsonl"
    remove_stale_temps(ckpt_dir)
    ckpts, rows = list_checkpoints(ckpt_dir), read_metrics(metrics, warn=False)
    if not resume and (ckpts or rows):
        held = (f"checkpoints up to iteration {int(ckpts[-1].name[len(CKPT_PREFIX):])}" if ckpts
                else "no checkpoint")
        raise ConfigError(f"{out} already holds a training run ({held}, {len(rows)} metrics rows): continue it with --resume, or choose another out_dir "
                          "(or delete that folder) to start a new run")
    if resume and ckpts and (out / "config.json").is_file():
        import json

        try:
            old = json.loads((out / "config.json").read_text())
        except ValueError:
            old = None
            log.warning("%s: unreadable; the config cannot be compared with the run's", out / "config.json")
        if isinstance(old, dict):
            try:  # the recorded config with today's defaults filled in (a key added since is no change)
                old = TrainConfig.from_dict(old, where=str(out / "config.json")).to_dict()
            except ValueError:
                pass
        changed = resume_changes(old, cfg.to_dict()) if isinstance(old, dict) else []
        if changed:
            shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed[:6])
            more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
            raise ConfigError(f"--resume: the config changed since {out} was trained ({shown}{more}); the "
                              "checkpoints were trained with the old values — restore them to continue this run, "
                              "or start a new run in another out_dir")
    if resume and not ckpts:
        if rows:
            log.warning("--resume: no checkpoint in %s (the earlier attempt stopped before its first save; "
                        "checkpoint_every = %d): starting over from iteration 1, its %d metrics rows dropped",
                        ckpt_dir, cfg.checkpoint_every, len(rows))
        else:
            log.info("--resume: no checkpoint in %s: starting a new run from iteration 1", ckpt_dir)
        trim_metrics(metrics, 0)
    write_json(out / "config.json", cfg.to_dict())
    return out


def _build_algo(cfg: TrainConfig, services: dict):
    """The algorithm, built; a remote EnvRunner that failed to start raises its own error, not Ray's wrapping."""
    try:
        return build_algo_config(cfg, services).build_algo()
    except Exception as e:
        err = remote_error(e)
        if err is e:  # RLlib lost the worker's exception (e.g. an IndexError in get_spaces): ask a worker again
            err = probe_env_in_worker(cfg) or e
        raise err from e


def _restore_or_warm_start(algo, cfg: TrainConfig, out: Path, resume: bool, warm: str | None) -> Path | None:
    """With ``resume``: the newest checkpoint that loads (its later metrics rows dropped); else the warm start's
    weights, if any. Returns the checkpoint restored (``None``: a fresh start)."""
    ckpts = list_checkpoints(out / "checkpoints")
    if resume and ckpts:
        restored = restore_newest(algo, ckpts)
        trim_metrics(out / "metrics.jsonl", algo.iteration)
        algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True,
                                           timeout_seconds=600.0)  # as after a warm start: wait for the runners
        log.info("resumed from %s (iteration %d)", restored, algo.iteration)
        return restored
    if warm:
        warm_start(algo, warm, cfg.env_config.to_dict() if hasattr(cfg.env_config, "to_dict") else None)
        if cfg.snapshot_every and not (out / "snapshots" / "iter_0000").exists():
            # the starting point is a candidate too: model selection on dev may keep it
            shutil.copytree(warm, out / "snapshots" / "iter_0000")
    return None


def _iterate(algo, cfg: TrainConfig, out: Path, restored: bool, stop_after: int | None, show_progress: bool,
             on_iteration) -> dict[str, float]:
    """``algo.train()`` until ``cfg.iterations`` (or ``stop_after`` more), each iteration logged (TensorBoard,
    ``metrics.jsonl``, the progress line), checkpointed and snapshotted on schedule. Returns the last metrics."""
    from torch.utils.tensorboard import SummaryWriter

    with writing(out / "tb", "write TensorBoard events to"):
        writer = SummaryWriter(str(out / "tb"), purge_step=algo.iteration + 1)
    first = algo.iteration
    last: dict[str, float] = last_metrics(out / "metrics.jsonl")  # a finished run resumed keeps its final metrics
    with _Progress(cfg.iterations, first, enabled=show_progress) as progress:
        while algo.iteration < cfg.iterations and (stop_after is None or algo.iteration - first < stop_after):
            last = _one_iteration(algo, cfg, out, writer, progress)
            if on_iteration is not None:
                on_iteration(algo.iteration, last)
            _save_on_schedule(algo, cfg, out, algo.iteration)
    writer.flush()
    writer.close()
    return last


def _one_iteration(algo, cfg: TrainConfig, out: Path, writer, progress: _Progress) -> dict[str, float]:
    """One ``algo.train()``, logged: its metrics (and the iteration's seconds)."""
    t0 = time.perf_counter()
    try:
        result = algo.train()
    except Exception as e:
        raise remote_error(e) from e
    it = algo.iteration
    last = iteration_metrics(result)
    last["iteration_seconds"] = time.perf_counter() - t0
    for k, v in last.items():
        writer.add_scalar(f"{cfg.name}/{k}", v, it)
    append_line(out / "metrics.jsonl", json.dumps({"iteration": it, "time": time.time(), **last}))
    line = progress_line(it, cfg.iterations, last, last["iteration_seconds"])
    progress.update(it, line)
    log.info(line)
    return last


def _save_on_schedule(algo, cfg: TrainConfig, out: Path, it: int) -> None:
    """The checkpoint every ``checkpoint_every`` iterations and the policy snapshot every ``snapshot_every`` (from
    ``snapshot_from``), both at the last iteration too."""
    if it % cfg.checkpoint_every == 0 or it >= cfg.iterations:
        save_checkpoint(algo, out / "checkpoints", cfg.keep_checkpoints)
    if cfg.snapshot_every and it >= cfg.snapshot_from and (it % cfg.snapshot_every == 0 or it >= cfg.iterations):
        from policies.rl.export import export_policy

        export_policy(learner_net(algo), out / "snapshots" / f"iter_{it:04d}", heads=("retrieve", "query"),
                      extra={"name": f"{cfg.name}-iter{it}", "iteration": it}, env_config=policy_env_config(cfg))


def _export_policies(algo, cfg: TrainConfig, out: Path) -> Path:
    """The trained policy (every head), its trigger alone and its QueryGen head alone; returns the policy's
    folder. Each export records the env its observations come from."""
    return _export_net(learner_net(algo), cfg, out, algo.iteration)


def _export_net(net, cfg: TrainConfig, out: Path, iteration: int) -> Path:
    """:func:`_export_policies` of a :class:`PolicyNet`."""
    from policies.rl.export import export_policy

    env_config = policy_env_config(cfg)
    policy_dir = export_policy(net, out / "policy", heads=("retrieve", "query", "value"),
                               extra={"name": cfg.name, "iteration": iteration}, env_config=env_config)
    export_policy(net, out / "policy_trigger", heads=("retrieve",), extra={"name": f"{cfg.name}-trigger"},
                  env_config=env_config)
    if net.query_head is not None:
        export_policy(net, out / "policy_querygen", heads=("query",), extra={"name": f"{cfg.name}-querygen"},
                      env_config=env_config)
    return policy_dir


def _peak_rss_mb() -> float:
    """The driver process's peak resident memory so far, in MB (every run's summary reports it)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _summary(algo, services: dict, restored: Path | None, first: int, t_start: float, last: dict[str, float],
             policy_dir: Path) -> dict[str, Any]:
    """What ``summary.json`` says about the run (with the services' placement and counters when it had some)."""
    summary = {
        "iteration": algo.iteration, "resumed_from": str(restored) if restored else None,
        "first_iteration": first, "wall_seconds": time.perf_counter() - t_start,
        "driver_peak_rss_mb": _peak_rss_mb(),
        "final_metrics": last, "policy_dir": str(policy_dir),
    }
    if "reasoner_service" in services:
        summary["reasoner_service"] = placement(algo, services["reasoner_service"])
    if "cache_service" in services:
        from envs.cache_service import cache_server_stats

        summary["cache_service"] = cache_server_stats(services["cache_service"])
    return summary


def _dev_eval(cfg: TrainConfig, out: Path) -> dict[str, Any]:
    """The trained trigger's greedy evaluation on the first ``eval_questions`` dev questions (final λ)."""
    from policies.rl.export import LearnedTrigger
    from train.evaluate import evaluate_policy

    env_cfg = cfg.kairos_env.replace(max_questions=None, split="dev",
                                     costs={k: s.end for k, s in cfg.curriculum.items()})
    return evaluate_policy(LearnedTrigger.load(out / "policy_trigger"), env_cfg, list(range(cfg.eval_questions)))


class _Progress:
    """A rich progress bar whose description is the latest metrics line (no-op when disabled)."""

    def __init__(self, total: int, done: int, enabled: bool = True):
        self.enabled = enabled
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), transient=False)
            self.task = self.p.add_task("starting…", total=total, completed=done)

    def __enter__(self):
        if self.enabled:
            self.p.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)

    def update(self, it: int, line: str) -> None:
        if self.enabled:
            self.p.update(self.task, completed=it, description=line)
