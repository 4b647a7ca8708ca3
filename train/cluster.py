"""A run's Ray cluster: started (or joined) for the run (:func:`init_ray`), every resource request checked against
its nodes before anything waits on it (:func:`check_cluster`), and a failed EnvRunner's own exception shown instead
of Ray's wrapping of it (:func:`remote_error`, :func:`probe_env_in_worker`).
"""

from __future__ import annotations

import os
from pathlib import Path

from train.algo_config import runner_env_config
from train.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def init_ray(cfg: TrainConfig) -> bool:
    """Start (or join) Ray; returns True when this call started it. With ``RAY_ADDRESS`` set (inside ``ray job
    submit``) it joins that cluster once a connect within a deadline shows it runs
    (:func:`envs.ray_address.joined_address`, the rule ``kairos serve`` follows too); otherwise it starts its own local
    instance with ``cfg.num_cpus`` (even when another cluster runs on the machine) and puts the repo on the workers'
    ``PYTHONPATH``."""
    import ray

    from envs.ray_address import joined_address

    if ray.is_initialized():
        return False
    address = joined_address()
    if address:
        ray.init(address=address, log_to_driver=False)
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
