"""The training run: config → Ray → REINFORCE → checkpoints, TensorBoard, metrics, exported policy.

Read top to bottom: :func:`build_algo_config` turns a :class:`TrainConfig` into a :class:`ReinforceConfig`;
:func:`train` starts Ray if needed, restores the newest checkpoint with ``resume=True``, loops
``algo.train()`` until ``cfg.iterations``, logging each iteration (TensorBoard events written here with
``torch.utils.tensorboard`` — plain ``algo.train()`` writes none — plus ``metrics.jsonl`` and a terminal
line), saves checkpoints atomically (``save_to_path`` into a temp dir, then ``rename``) and finally exports
the policy (:func:`policies.rl.export.export_policy`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from envs.core.config import ConfigError
from envs.core.io import append_line, make_dir, write_json, writing
from envs.core.runlock import FolderLock
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
from train.config import TrainConfig, resume_changes
from train.services import placement, start_services, stop_services

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
ENV_NAME = "kairos_train_env"  # registered with ray.tune to train.env_factory.make_env


# ---------------------------------------------------------------- config
def runner_env_config(cfg: TrainConfig, services: dict | None = None) -> dict[str, Any]:
    """What every EnvRunner's env factory gets (:func:`train.env_factory.make_env`): the run's env config as it
    crosses the process boundary (``to_dict()``; a preset's already applied here, on the driver), the env to build
    (``_env``) and the specs of the running ``services``."""
    return {**cfg.env_config.to_dict(), "_env": cfg.env, **(services or {})}


def build_algo_config(cfg: TrainConfig, services: dict | None = None):
    """The :class:`train.reinforce.ReinforceConfig` of a run (``services``: env-config keys naming running
    services the EnvRunners' envs connect to — ``reasoner_service``, ``retriever_service``, ``cache_service``)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from policies.rl.module import KairosRLModule
    from train.env_factory import make_env
    from train.reinforce import KairosMetricsCallback, ReinforceConfig

    a = cfg.algo
    register_env(ENV_NAME, make_env)
    model_config = build_model_config(cfg)
    return (
        ReinforceConfig()
        .environment(env=ENV_NAME, env_config=runner_env_config(cfg, services))
        .env_runners(num_env_runners=cfg.num_env_runners, num_envs_per_env_runner=cfg.num_envs_per_env_runner,
                     gym_env_vectorize_mode="vector_entry_point", batch_mode="complete_episodes",
                     num_cpus_per_env_runner=1, num_gpus_per_env_runner=cfg.num_gpus_per_env_runner,
                     rollout_fragment_length="auto")
        .learners(num_learners=0)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=KairosRLModule, model_config=model_config))
        .training(lr=a.lr, grad_clip=a.grad_clip, grad_clip_by="global_norm", gamma=1.0,
                  num_episodes_per_train_batch=a.episodes_per_batch, baseline=a.baseline,
                  normalize_advantages=a.normalize_advantages, entropy_coeff=a.entropy_coeff,
                  vf_loss_coeff=a.vf_loss_coeff, floor_coeff=a.floor_coeff, group_size=a.group_size,
                  curriculum={k: s.to_dict() for k, s in cfg.curriculum.items()})
        .callbacks(KairosMetricsCallback)
        .debugging(seed=cfg.seed, log_level="WARN")
        .reporting(metrics_num_episodes_for_smoothing=a.episodes_per_batch)
    )


def init_ray(cfg: TrainConfig) -> bool:
    """Start (or join) Ray; returns True when this call started it. Inside ``ray job submit`` it joins the
    job's cluster (``RAY_ADDRESS`` is set); otherwise it starts its own local instance with ``cfg.num_cpus`` (even
    when another cluster runs on the machine) and puts the repo on the workers' ``PYTHONPATH``."""
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
    else:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        # address="local": always a new private instance — never silently join another Ray cluster running on this
        # machine (joining happens only when RAY_ADDRESS says so, as inside `ray job submit`)
        ray.init(address="local", num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    return True


def check_cluster(cfg: TrainConfig) -> None:
    """Every Ray resource request of the run — the EnvRunners (``num_env_runners`` × 1 CPU +
    ``num_gpus_per_env_runner``), the reasoner and retriever services' replicas (``num_cpus``, ``num_gpus``,
    ``resources``) — against the running cluster's nodes (:func:`envs.serving.check_requests`): one that no node can
    ever hold is a :class:`~envs.serving.ResourceRequestError` naming the key and what the nodes offer."""
    from envs.serving import check_requests, ray_request

    reqs = []
    if cfg.num_env_runners > 0:
        reqs.append((f"num_env_runners / num_gpus_per_env_runner (each of {cfg.num_env_runners} EnvRunners)",
                     ray_request({"num_cpus": 1, "num_gpus": cfg.num_gpus_per_env_runner}), cfg.num_env_runners))
    for key in ("reasoner_service", "retriever_service"):
        svc = getattr(cfg, key)
        if svc is not None:
            reqs.append((f"{key} (each of {svc.replicas} replicas)",
                         ray_request({"num_cpus": svc.num_cpus, "num_gpus": getattr(svc, "num_gpus", 0.0),
                                      "resources": svc.resources}), svc.replicas))
    check_requests(reqs)


class RemoteWorkerError(ValueError):
    """An EnvRunner (a Ray actor) failed: the message is the worker's own exception, not Ray's traceback (a
    ValueError, so every CLI prints it as its one error line)."""


def remote_error(e: BaseException) -> BaseException:
    """The error to show for an exception raised through Ray: the innermost user exception a remote worker raised
    (Ray wraps it in ``RayTaskError`` / ``RayActorError`` / ``ActorDiedError``, RLlib in more layers), as a
    :class:`RemoteWorkerError` naming its type and message; ``e`` itself when it did not come from a worker."""
    seen, inner, cur = set(), None, e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        mod = type(cur).__module__
        if not mod.startswith("ray."):
            inner = cur
        nxt = getattr(cur, "cause", None)
        if not isinstance(nxt, BaseException):
            nxt = cur.__cause__ or cur.__context__
        cur = nxt
    if inner is not None and inner is not e:
        return RemoteWorkerError(f"an EnvRunner failed: {type(inner).__name__}: {inner}")
    if type(e).__module__.startswith("ray.") and str(e).strip():  # only the remote traceback's text: its last line
        return RemoteWorkerError(f"an EnvRunner failed: {str(e).strip().splitlines()[-1]}")
    return e


def probe_env_in_worker(cfg: TrainConfig) -> RemoteWorkerError | None:
    """Build the run's env once in a Ray worker, as an EnvRunner would; its exception as a
    :class:`RemoteWorkerError` (``None`` when the env builds there)."""
    import ray

    from train.env_factory import make_env

    def build(ctx):
        env = make_env(ctx)
        env.close()

    ctx = runner_env_config(cfg)
    try:
        ray.get(ray.remote(num_cpus=0)(build).remote(ctx), timeout=600)
    except Exception as e:  # noqa: BLE001 - whatever the worker raised is what the user must see
        err = remote_error(e)
        return err if isinstance(err, RemoteWorkerError) else RemoteWorkerError(f"an EnvRunner failed: {e}")
    return None


# ---------------------------------------------------------------- metrics
def _get(d: dict, *path: str, default: float | None = None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def iteration_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The flat per-iteration metrics we log (answer quality, retrievals, costs and λ, losses, entropy)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    env = result.get("env_runners", {}) or {}
    learner = _get(result, "learners", DEFAULT_MODULE_ID, default={}) or {}
    out: dict[str, float] = {
        "episode_return": env.get("episode_return_mean"),
        "episode_len": env.get("episode_len_mean"),
        "episodes": env.get("num_episodes"),
        "quality": env.get("quality"),
        "retrievals_per_episode": env.get("retrievals"),
    }
    for k, v in env.items():
        if k.startswith(("cost_", "lambda_")):
            out[k] = v
    for k, v in (result.get("curriculum") or {}).items():
        out[f"curriculum_{k}"] = v
    for k in ("total_loss", "policy_loss", "vf_loss", "floor_loss", "entropy", "retrieve_prob", "return_to_go_mean",
              "gradients_default_optimizer_global_norm"):
        if k in learner:
            out[k] = learner[k]
    out["env_steps_lifetime"] = env.get("num_env_steps_sampled_lifetime")
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float))}


def progress_line(it: int, total: int, m: dict[str, float], secs: float) -> str:
    lam = m.get("curriculum_lambda_retrieval_calls", m.get("lambda_retrieval_calls", float("nan")))
    return (f"[{it:>4}/{total}] return {m.get('episode_return', float('nan')):+.3f}  "
            f"quality {m.get('quality', float('nan')):.3f}  retr/ep {m.get('retrievals_per_episode', float('nan')):.2f}  "
            f"λ {lam:.3f}  H {m.get('entropy', float('nan')):.3f}  p(retr) {m.get('retrieve_prob', float('nan')):.3f}  "
            f"loss {m.get('total_loss', float('nan')):+.3f}  {secs:.1f}s")


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


def build_model_config(cfg: TrainConfig) -> dict[str, Any]:
    """The RLModule's ``model_config`` of a run."""
    m = cfg.model
    return {"arch": m.arch, "d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads,
            "ff_dim": m.ff_dim, "normalize": m.normalize,
            "explore_floor": m.explore_floor, "explore_mix": m.explore_mix, "freeze": list(m.freeze),
            "drop_fields": list(m.drop_fields), "content_dim": m.content_dim,
            "query_modes": _query_modes(cfg)}


def _query_modes(cfg: TrainConfig) -> list[str]:
    """The env's query modes (the names of the query head's outputs): a preset env's ``query_modes`` — its default
    too — or a custom factory's ``query_modes`` setting ([] without one)."""
    from envs.env_config import EnvConfig

    env = cfg.env_config
    return list(env.query_modes) if isinstance(env, EnvConfig) else list(env.to_dict().get("query_modes", []))


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
    """
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
