"""A trajectory cache shared across nodes: one Ray actor owns the SQLite file, every env reads through it.

SQLite must not be shared over a network file system, so on a cluster each node's runners would otherwise keep
caches that never see each other. With ``TrainConfig.cache_service: true`` the training driver starts one
:class:`CacheServer` actor on its own node (where ``env_config.cache_path`` lives); every env opens a
:class:`SharedTrajectoryCache` — the usual in-memory LRU in front, then one batched ``get_many`` / ``put_many``
round trip per env phase. Same file, same records, same namespaces as :class:`~envs.trajectory_cache.TrajectoryCache`
(the server stores the encoded blobs as they come: it never decodes a record).

Crash safety is SQLite's, as today: every ``put_many`` is one committed transaction on the server; a killed runner
loses nothing the server acknowledged. The server is restarted by Ray when it dies (its calls are retried). A
runner that cannot reach it keeps working from its LRU (misses are generated again — the same records, since the
outcome of a prefix is a pure function of the namespace) and reconnects after ``retry_s``, with a warning each time.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from envs.core.config import ConfigError
from envs.records import RecordFormatError, decode, encode
from envs.trajectory_cache import TrajectoryCache, TrajectoryCacheError, open_store

log = logging.getLogger(__name__)

NAMESPACE = "kairos"


class CacheServer:
    """The owner of one SQLite trajectory-cache file (a Ray actor: :func:`start_cache_service` creates it)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = open_store(self.path)
        self.stats = {"gets": 0, "hits": 0, "puts": 0}

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        out = []
        for k in keys:
            row = self.db.execute("SELECT value FROM steps WHERE key = ?", (k,)).fetchone()
            out.append(None if row is None else bytes(row[0]))
        self.stats["gets"] += len(keys)
        self.stats["hits"] += sum(v is not None for v in out)
        return out

    def put_many(self, items: list[tuple[str, bytes]]) -> int:
        """Store records in one committed transaction; returns how many."""
        self.db.execute("BEGIN")
        try:
            self.db.executemany("INSERT OR REPLACE INTO steps (key, value) VALUES (?, ?)", items)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.stats["puts"] += len(items)
        return len(items)

    def count(self, namespace: str) -> int:
        return self.db.execute("SELECT COUNT(*) FROM steps WHERE key LIKE ?", (f"{namespace}|%",)).fetchone()[0]

    def get_stats(self) -> dict:
        import os

        import ray

        return {**self.stats, "path": str(self.path), "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id()}


def check_cache_spec(spec: Any, where: str = "EnvConfig.cache_service") -> dict:
    from envs.serving import spec_dict

    spec = spec_dict(spec)
    if not isinstance(spec, dict) or set(spec) != {"name", "namespace"}:
        raise ConfigError(f"{where}: expected {{name, namespace}} as returned by "
                          f"envs.cache_service.start_cache_service, got {spec!r}")
    return spec


def start_cache_service(path: str, name: str | None = None) -> dict:
    """Start the cache server of ``path`` on this process's node (Ray must be initialised); returns the spec envs
    take as ``EnvConfig.cache_service``. The caller owns the actor."""
    import uuid

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    name = name or f"cache-{uuid.uuid4().hex[:8]}"
    here = ray.get_runtime_context().get_node_id()  # the file is on this node's disk
    h = ray.remote(CacheServer).options(
        name=name, namespace=NAMESPACE, num_cpus=0, max_restarts=-1, max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(str(Path(path).resolve()))
    try:
        ray.get(h.get_stats.remote())
    except ray.exceptions.RayActorError as e:  # the server's own error (e.g. not a SQLite file), on the driver
        ray.kill(h, no_restart=True)
        msg = str(e)
        cause = next((ln for ln in msg.splitlines() if "TrajectoryCacheError" in ln), msg.splitlines()[-1])
        raise TrajectoryCacheError(cause.split("TrajectoryCacheError:", 1)[-1].strip()) from None
    _OWNED[name] = h
    return {"name": name, "namespace": NAMESPACE}


_OWNED: dict[str, Any] = {}


def stop_cache_service(spec: dict) -> None:
    import ray

    h = _OWNED.pop(spec["name"], None)
    if h is None:
        h = ray.get_actor(spec["name"], namespace=spec["namespace"])
    ray.kill(h, no_restart=True)


def cache_server_stats(spec: dict) -> dict:
    import ray

    return ray.get(ray.get_actor(spec["name"], namespace=spec["namespace"]).get_stats.remote())


class SharedTrajectoryCache(TrajectoryCache):
    """A :class:`TrajectoryCache` whose store is a :class:`CacheServer` (LRU in front; batched round trips)."""

    def __init__(self, spec: dict, namespace: str, lru_size: int = 100_000, timeout_s: float = 60.0,
                 retry_s: float = 30.0):
        super().__init__(None, namespace, lru_size)
        self.spec = check_cache_spec(spec)
        self.timeout_s, self.retry_s = timeout_s, retry_s
        self._server = None
        self._down_until = 0.0
        self.unreachable = 0  # calls that could not reach the server (served from the LRU / regenerated)

    def __getstate__(self) -> dict[str, Any]:
        d = super().__getstate__()
        d["_server"] = None
        return d

    def _handle(self):
        if self._server is None:
            import ray

            self._server = ray.get_actor(self.spec["name"], namespace=self.spec["namespace"])
        return self._server

    def _call(self, method: str, *args) -> Any:
        """A server call, or ``None`` when the server cannot be reached (warned; retried after ``retry_s``)."""
        if time.monotonic() < self._down_until:
            self.unreachable += 1
            return None
        import ray

        try:
            return ray.get(getattr(self._handle(), method).remote(*args), timeout=self.timeout_s)
        except (ray.exceptions.RayError, ValueError) as e:  # ValueError: no actor of that name (yet)
            self.unreachable += 1
            self._server, self._down_until = None, time.monotonic() + self.retry_s
            log.warning("trajectory cache service '%s' unreachable (%s): serving from memory, reconnecting in %.0f s",
                        self.spec["name"], type(e).__name__, self.retry_s)
            return None

    def get(self, qid: str, prefix: tuple) -> Any | None:
        return self.get_many([(qid, prefix)])[0]

    def get_many(self, items: list[tuple[str, tuple]]) -> list[Any | None]:
        keys = [self._key(q, p) for q, p in items]
        out: list[Any] = [None] * len(keys)
        ask = []
        with self._lock:
            for i, k in enumerate(keys):
                if k in self.lru:
                    self.lru.move_to_end(k)
                    out[i] = self.lru[k]
                else:
                    ask.append(i)
        blobs = self._call("get_many", [keys[i] for i in ask]) if ask else []
        with self._lock:
            for i, blob in zip(ask, blobs or [None] * len(ask)):
                if blob is not None:
                    try:
                        out[i] = decode(blob)
                    except RecordFormatError as e:
                        raise TrajectoryCacheError(f"trajectory cache service '{self.spec['name']}': record "
                                                   f"{keys[i]!r}: {e}") from e
                    self._remember(keys[i], out[i])
            self.hits += sum(v is not None for v in out)
            self.misses += sum(v is None for v in out)
        return out

    def put(self, qid: str, prefix: tuple, value: Any) -> None:
        self.put_many([(qid, prefix, value)])

    def put_many(self, items: list[tuple[str, tuple, Any]]) -> None:
        rows = []
        with self._lock:
            for q, p, v in items:
                k = self._key(q, p)
                self._remember(k, v)
                rows.append((k, encode(v)))
        if rows:
            self._call("put_many", rows)

    def __len__(self) -> int:
        n = self._call("count", self.namespace)
        return len(self.lru) if n is None else int(n)

    def close(self) -> None:
        self._server = None


def open_cache(config, namespace: str) -> TrajectoryCache:
    """The trajectory cache an env of ``config`` uses: the shared service's client when ``cache_service`` is set,
    else the SQLite file ``cache_path`` (or memory)."""
    if getattr(config, "cache_service", None) is not None:
        return SharedTrajectoryCache(config.cache_service, namespace)
    return TrajectoryCache(config.cache_path, namespace=namespace)
