"""Retrieval placement on a cluster: the index in every EnvRunner (default) or in a retriever service.

Default: every EnvRunner loads the env's retriever itself. A prebuilt BM25 index (``index_path``) is memory-mapped,
so the runners of one node share its pages through the OS page cache — one index in memory per node. ColBERT/PLAID
indexes are not memory-mapped (colbert-ai's mmap loader is broken: see :mod:`agents.retrievers.colbert`), so each
runner holds a copy; for those, or for a node without the index files, serve it: ``TrainConfig.retriever_service``
starts ``replicas`` :class:`RetrieverServer` actors (each loads the index once, on the resources it asks for) and
every env's retriever is a :class:`ServedRetriever` whose ``search`` sends the env's batched queries (one call per
env phase, all the runner's envs together) to a replica, round robin. Results are the same passages as in-process
search (the same index, the same code).
"""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass
from typing import Any

from agents.serving import lookup_replicas, start_replicas, stop_replicas
from envs.config import ConfigBase, ConfigError, helpf


@dataclass
class RetrieverServiceConfig(ConfigBase):
    """A retriever service (``TrainConfig.retriever_service``; unset: every EnvRunner loads the index itself)."""

    replicas: int = helpf(1, "retriever replicas (Ray actors), each holding the index once")
    num_cpus: float = helpf(1.0, "CPUs a replica reserves")
    resources: dict[str, float] = helpf({}, "custom resources a replica reserves (pins it to nodes offering them)")
    start_timeout_s: float = helpf(300.0, "how long the driver waits for every replica to load its index")

    def validate(self) -> None:
        if self.replicas < 1 or self.num_cpus < 0 or self.start_timeout_s <= 0:
            raise ConfigError("RetrieverServiceConfig: replicas must be >= 1, num_cpus >= 0, start_timeout_s > 0")


def check_retriever_spec(spec: Any, where: str = "EnvConfig.retriever_service") -> dict:
    if not isinstance(spec, dict) or set(spec) != {"name", "namespace", "replicas"}:
        raise ConfigError(f"{where}: expected {{name, namespace, replicas}} as returned by "
                          f"agents.retrievers.service.start_retriever_service, got {spec!r}")
    return spec


class RetrieverServer:
    """One loaded retriever (a Ray actor: :func:`start_retriever_service` creates them)."""

    def __init__(self, env_config: dict):
        from envs.components import env_retriever
        from envs.env_config import EnvConfig

        self.retriever = env_retriever(EnvConfig.from_dict({k: v for k, v in env_config.items()
                                                            if k != "retriever_service"}))
        self.queries = 0

    def search(self, queries: list[str], k: int) -> list:
        self.queries += len(queries)
        return self.retriever.search(queries, k=k)

    def info(self) -> dict:
        import ray

        return {"n": len(self.retriever), "describe": self.retriever.describe(), "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), "queries": self.queries}


def start_retriever_service(env_config: dict, cfg: RetrieverServiceConfig | dict | None = None) -> dict:
    """Start the replicas for envs of ``env_config`` (Ray must be initialised); returns the spec envs take as
    ``EnvConfig.retriever_service``. Errors (no index, a mismatched corpus) surface here, on the driver."""

    cfg = cfg if isinstance(cfg, RetrieverServiceConfig) else RetrieverServiceConfig.from_dict(cfg or {})
    name = f"retriever-{uuid.uuid4().hex[:8]}"
    spec, _ = start_replicas(RetrieverServer, name, cfg.replicas, (dict(env_config),),
                             {"num_cpus": cfg.num_cpus, "resources": dict(cfg.resources) or None,
                              "max_restarts": -1, "max_task_retries": -1}, cfg.start_timeout_s, "retriever service")
    return spec


def _handles(spec: dict) -> list:
    return lookup_replicas(check_retriever_spec(spec), "retriever service",
                           "agents.retrievers.service.start_retriever_service, or set TrainConfig.retriever_service "
                           "and let the training driver start it")


def stop_retriever_service(spec: dict) -> None:
    stop_replicas(spec, _handles)


class ServedRetriever:
    """The Retriever protocol over a running retriever service."""

    def __init__(self, spec: dict):
        import ray

        self.replicas = _handles(spec)
        info = ray.get(self.replicas[0].info.remote())
        self._n, self._describe = info["n"], info["describe"]
        self._next = itertools.cycle(range(len(self.replicas)))
        for _ in range(os.getpid() % len(self.replicas)):  # runners start on different replicas
            next(self._next)

    def search(self, queries, k: int = 10) -> list:
        import ray

        return ray.get(self.replicas[next(self._next)].search.remote(list(queries), k))

    def __len__(self) -> int:
        return self._n

    def describe(self) -> dict[str, Any]:
        return {**self._describe, "served": True}
