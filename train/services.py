"""The shared services a training run starts on its driver and owns: the trajectory-cache server, the retriever
replicas and the reasoner replicas (:mod:`envs.services`); and where a served run's replicas ran."""

from __future__ import annotations

from typing import Any

from train.config import TrainConfig


def start_services(cfg: TrainConfig) -> dict[str, dict]:
    """The shared services a run asks for, started by (and owned by) this driver: the trajectory-cache server
    (``cache_service``), the retriever replicas (``retriever_service``) and the reasoner replicas
    (``reasoner_service``); their specs by env-config key."""
    out: dict[str, dict] = {}
    if cfg.cache_service:
        from envs.cache_service import start_cache_service

        out["cache_service"] = start_cache_service(cfg.kairos_env.cache_path)
    if cfg.retriever_service is not None:
        from envs.services import start_retriever_service

        out["retriever_service"] = start_retriever_service(cfg.kairos_env, cfg.retriever_service)
    if cfg.reasoner_service is not None:
        from envs.services import start_service

        out["reasoner_service"] = start_service(cfg.kairos_env, cfg.reasoner_service)
    return out


def stop_services(services: dict[str, dict]) -> None:
    if "reasoner_service" in services:
        from envs.services import stop_service

        stop_service(services["reasoner_service"])
    if "retriever_service" in services:
        from envs.services import stop_retriever_service

        stop_retriever_service(services["retriever_service"])
    if "cache_service" in services:
        from envs.cache_service import stop_cache_service

        stop_cache_service(services["cache_service"])


def placement(algo, service: dict) -> dict[str, Any]:
    """Where a served run ran: each replica's node, pid and counters (mean batch, tokens, peak RSS), and the
    node of every remote EnvRunner — so a cluster user can check the replicas landed on the nodes they asked for."""
    import ray

    from envs.served import replica_handles, service_stats

    infos = ray.get([h.info.remote() for h in replica_handles(service)])
    stats = service_stats(service)
    runners = algo.env_runner_group.foreach_env_runner(lambda r: ray.get_runtime_context().get_node_id(),
                                                       local_env_runner=False) if algo.env_runner_group else []
    return {"spec": service, "replicas": [{**i, **s} for i, s in zip(infos, stats)], "env_runner_nodes": runners}
