"""What the Ray services (the reasoner's, the retriever's) share — their typed configs and specs, and: named replicas started and waited for on the
driver — a replica that cannot be placed or fails to load is an error there, naming what it asked for — and looked
up by name from any process of the cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf

#: the Ray namespace service actors are named in (a replica is ``<name>/<index>`` there)
NAMESPACE = "kairos"


def kill_all(handles: list) -> None:
    import ray

    for h in handles:
        ray.kill(h, no_restart=True)


#: handles of the replicas this process started, by service name (keeps them alive; :func:`stop_replicas` ends them)
OWNED: dict[str, list] = {}

#: seconds between two progress lines while the driver waits for actors to be placed / to load
PROGRESS_EVERY_S = 15.0


class ResourceRequestError(ValueError, RuntimeError):
    """A Ray resource request no node of the cluster can ever satisfy (a resource type it lacks, or more of one than
    any single node has). A ``ValueError`` (a setting to change: every CLI prints it as its one error line) and a
    ``RuntimeError`` (what a replica that cannot start raised before)."""


def ray_request(options: dict[str, Any]) -> dict[str, float]:
    """The Ray resources an actor of ``options`` (``num_cpus``, ``num_gpus``, ``resources``) asks for, as one dict
    by resource name (``CPU``, ``GPU``, custom names); zero amounts left out."""
    out = {"CPU": float(options.get("num_cpus") or 0.0), "GPU": float(options.get("num_gpus") or 0.0)}
    out.update({str(k): float(v) for k, v in (options.get("resources") or {}).items()})
    return {k: v for k, v in out.items() if v > 0}


def cluster_nodes() -> list[dict[str, float]]:
    """The resource totals of every alive node of the running Ray cluster (``node:…`` markers left out)."""
    import ray

    return [{k: float(v) for k, v in (n.get("Resources") or {}).items() if not k.startswith("node:")}
            for n in ray.nodes() if n.get("Alive")]


def _offers(nodes: list[dict[str, float]]) -> str:
    def one(n):
        return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(n.items())
                               if k not in ("memory", "object_store_memory")) + "}"
    return "; ".join(one(n) for n in nodes) or "no alive node"


def check_requests(requests: list[tuple], nodes: list[dict[str, float]] | None = None) -> None:
    """Each ``(config key, resources[, count])`` request against the cluster's nodes at once: a request that no
    single node can ever hold (a resource type no node has — e.g. a GPU on a cluster without any — or more than the
    largest node's total) is a :class:`ResourceRequestError` naming the key, the resource and what each node offers.
    The requests are actors that live together (a run's EnvRunners and service replicas, ``count`` of each): more of
    a resource in all than the whole cluster has can never be placed at once — an error too, not a silent wait."""
    nodes = cluster_nodes() if nodes is None else nodes
    fix = ("lower it (or set it to 0 / remove it), or start Ray on nodes that offer it (`ray start --num-cpus N "
           "--num-gpus N --resources '{\"NAME\": N}'`)")
    for key, req, *_ in requests:
        if not req or any(all(n.get(r, 0.0) >= amount for r, amount in req.items()) for n in nodes):
            continue
        lacking = [r for r in req if not any(n.get(r, 0.0) > 0 for n in nodes)]
        if lacking:
            why = (f"no node of the cluster has any '{lacking[0]}'" + (" (no GPU at all)" if lacking[0] == "GPU"
                                                                         else ""))
        else:
            short = next((r for r in req if max(n.get(r, 0.0) for n in nodes) < req[r]), None)
            why = (f"'{short}': {req[short]:g} asked, the largest node has {max(n.get(short, 0.0) for n in nodes):g}"
                   if short else "each resource exists, but no single node has all of them together")
        raise ResourceRequestError(f"{key} asks Ray for {_fmt(req)}, which no node can ever provide: {why}; the "
                                   f"cluster's nodes offer {_offers(nodes)}. Fix: {fix}")
    total: dict[str, float] = {}
    for _key, req, *n in requests:
        for r, v in req.items():
            total[r] = total.get(r, 0.0) + v * (n[0] if n else 1)
    have = {r: sum(n.get(r, 0.0) for n in nodes) for r in total}
    over = [r for r in total if total[r] > have[r] + 1e-9]
    if over:
        parts = "; ".join(f"{k}: {_fmt(req)}" + (f" x {n[0]}" if n else "") for k, req, *n in requests if req)
        raise ResourceRequestError(f"together the run's actors ask Ray for "
                                   f"{', '.join(f'{r}: {total[r]:g}' for r in over)}, more than the whole cluster "
                                   f"has ({', '.join(f'{r}: {have[r]:g}' for r in over)}), and they must all run at "
                                   f"once: they would wait forever ({parts}). Fix: {fix}")


def _fmt(req: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in req.items()) + "}"


def wait_reporting(refs: list, timeout_s: float, what: str, waiting_for: str, every_s: float | None = None):
    """``ray.wait`` for all ``refs`` within ``timeout_s``, logging every ``every_s`` seconds (default
    :data:`PROGRESS_EVERY_S`) how many are still pending, what they wait for and what the cluster has free now:
    ``(ready, pending)``."""
    import logging
    import time

    import ray

    every = PROGRESS_EVERY_S if every_s is None else every_s
    t0 = time.monotonic()
    ready: list = []
    pending = list(refs)
    while pending:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            break
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=min(every, left))
        ready += done
        if pending and time.monotonic() - t0 < timeout_s:
            free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU") or
                    not (k.startswith("node:") or k in ("memory", "object_store_memory"))}
            logging.getLogger(__name__).warning(
                "%s: still waiting for %d of %d (%s) after %.0f of %.0f s; free now: %s", what, len(pending),
                len(refs), waiting_for, time.monotonic() - t0, timeout_s, _fmt(free))
    return ready, pending


def start_replicas(cls: type, name: str, n: int, args: tuple, options: dict[str, Any], timeout_s: float,
                   what: str) -> tuple[dict, list[dict]]:
    """``n`` actors of ``cls`` named ``<name>/<i>``, each built with ``args`` and Ray ``options``; waits until every
    one answers ``info()`` and returns ``(spec, infos)`` — the spec (``{name, namespace, replicas}``) is what envs
    take to connect. Raises (after killing them) when one is not placed within ``timeout_s`` — naming the resources
    it asked for and the cluster's — or when one fails to start. This process owns them (:data:`OWNED`)."""
    import ray

    asked = ray_request(options)
    check_requests([(f"{what.replace(' ', '_')} (per replica)", asked, n)])  # never placeable: an error now
    handles = [ray.remote(cls).options(name=f"{name}/{i}", namespace=NAMESPACE, **options).remote(*args)
               for i in range(n)]
    refs = [h.info.remote() for h in handles]
    ready, _ = wait_reporting(refs, timeout_s, f"{what} '{name}'",
                              f"each replica asks for {_fmt(asked)} and then loads its model or index")
    if len(ready) < len(refs):
        kill_all(handles)
        asked = {k: v for k, v in options.items() if k in ("num_cpus", "num_gpus", "resources")}
        raise RuntimeError(f"{what} '{name}': {len(refs) - len(ready)} of {n} replicas did not start within "
                           f"{timeout_s:.0f} s — each asks for {asked}; the cluster offers {ray.cluster_resources()} "
                           f"(free now: {ray.available_resources()})")
    try:
        infos = ray.get(refs)
    except ray.exceptions.RayActorError as e:  # the replica's own error (e.g. a missing model or index)
        kill_all(handles)
        raise RuntimeError(f"{what} '{name}' could not start: {str(e).strip().splitlines()[-1]}") from None
    OWNED[name] = handles
    return {"name": name, "namespace": NAMESPACE, "replicas": n}, infos


def stop_replicas(spec: dict, lookup) -> None:
    """End a service's replicas (those this process started, else the ones ``lookup(spec)`` finds)."""
    kill_all(OWNED.pop(spec["name"], None) or lookup(spec))


def lookup_replicas(spec: dict, what: str, how_to_start: str) -> list:
    """The actor handles of a running service's replicas (by name)."""
    import ray

    try:
        return [ray.get_actor(f"{spec['name']}/{i}", namespace=spec["namespace"]) for i in range(spec["replicas"])]
    except ValueError:
        raise RuntimeError(f"{what} '{spec['name']}' is not running in this Ray cluster (start it with "
                           f"{how_to_start})") from None


@dataclass
class ReasonerServiceConfig(ConfigBase):
    """A shared reasoner service (``TrainConfig.reasoner_service``; unset: every EnvRunner builds its own)."""

    replicas: int = helpf(1, "reasoner replicas (Ray actors), each holding one model copy")
    max_batch: int = helpf(64, "a replica runs one generation call once this many states wait")
    max_wait_ms: float = helpf(200.0, "... or once the oldest waiting request is this old (ms); it runs at once when "
                                     "every active client (one that sent a request lately) has a request waiting")
    num_cpus: float = helpf(1.0, "CPUs a replica reserves (and its torch threads)")
    num_gpus: float = helpf(0.0, "GPUs a replica reserves (> 0 places it on a GPU node)")
    resources: dict[str, float] = helpf({}, "custom resources a replica reserves, e.g. {reasoner_node: 1} "
                                            "(it then runs only on nodes started with that resource)")
    active_s: float = helpf(1.0, "a client that sent a request within this many seconds (or three of its own "
                                 "intervals between requests) is active: the batcher waits (up to max_wait_ms) for its "
                                 "next request")
    features_on_service: bool = helpf(True, "compute the signals that read the model's internals (PUlSE, content "
                                            "fields, hidden-state probes) in the replica and send the step without "
                                            "its per-layer hidden states; false: the arrays travel, the env computes")
    live_states: int = helpf(256, "after-states a replica keeps live (with their KV cache) for the request that "
                                  "continues them; older ones are rebuilt from their snapshot. Memory: each holds its "
                                  "KV cache — size it to the episodes in flight (runners × envs × 2) for a big model")
    max_restarts: int = helpf(-1, "restarts of a replica that died (-1: always); its in-flight calls are retried")
    start_timeout_s: float = helpf(300.0, "how long the driver waits for every replica to load its model")

    def validate(self) -> None:
        if self.replicas < 1 or self.max_batch < 1 or self.live_states < 1:
            raise ConfigError("ReasonerServiceConfig: replicas, max_batch and live_states must be >= 1")
        if self.max_wait_ms < 0 or self.active_s < 0 or self.num_cpus < 0 or self.num_gpus < 0 or self.start_timeout_s <= 0:
            raise ConfigError("ReasonerServiceConfig: max_wait_ms, num_cpus and num_gpus must be >= 0, "
                              "start_timeout_s > 0")
        bad = {k: v for k, v in self.resources.items() if not isinstance(v, (int, float)) or v <= 0}
        if bad:
            raise ConfigError(f"ReasonerServiceConfig.resources: amounts must be positive numbers, got {bad}")


class _Spec(ConfigBase):
    """A running service's address; a mapping with other keys names the function that returns one."""

    #: the function that returns a spec of this kind
    started_by = ""

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None):
        keys = list(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        if not isinstance(data, dict) or set(data) != set(keys):
            raise ConfigError(f"{where or cls.__name__}: expected {{{', '.join(keys)}}} as returned by "
                              f"{cls.started_by}, got {data!r}")
        return super().from_dict(data, where)


@dataclass
class ServiceSpec(_Spec):
    """Where a running service is (``{name, namespace, replicas}``, as its start function returns it)."""

    name: str = helpf(help="the service's name (its replicas are the actors '<name>/<i>')")
    namespace: str = helpf(help="the Ray namespace of its actors")
    replicas: int = helpf(help="how many replicas it runs")

    def validate(self, where: str = "ServiceSpec") -> None:
        if self.replicas < 1:
            raise ConfigError(f"{where}.replicas must be an integer >= 1, got {self.replicas!r}")


@dataclass
class ReasonerServiceSpec(ServiceSpec):
    """A running reasoner service (``EnvConfig.reasoner_service``; the training driver sets it)."""

    started_by = "envs.services.start_service"


@dataclass
class RetrieverServiceSpec(ServiceSpec):
    """A running retriever service (``EnvConfig.retriever_service``; the training driver sets it)."""

    started_by = "envs.services.start_retriever_service"


@dataclass
class CacheServiceSpec(_Spec):
    """A running trajectory-cache server (``EnvConfig.cache_service``: ``{name, namespace}`` as
    :func:`envs.cache_service.start_cache_service` returns it; the training driver sets it)."""

    name: str = helpf(help="the cache server actor's name")
    namespace: str = helpf(help="the Ray namespace of the actor")

    started_by = "envs.cache_service.start_cache_service"


def spec_dict(spec: Any) -> Any:
    """A typed spec (:class:`ReasonerServiceSpec`, :class:`RetrieverServiceSpec`, :class:`CacheServiceSpec`) as the plain dict the clients use; anything
    else as it is."""
    return spec.to_dict() if isinstance(spec, _Spec) else spec


def check_spec(spec: Any, where: str = "EnvConfig.reasoner_service") -> dict:
    """A service spec (what :func:`start_service` returns: ``{name, namespace, replicas}``; typed or a dict),
    checked, as a dict."""
    spec = spec_dict(spec)
    if not isinstance(spec, dict) or set(spec) != {"name", "namespace", "replicas"}:
        raise ConfigError(f"{where}: expected {{name, namespace, replicas}} as returned by "
                          f"envs.services.start_service, got {spec!r}")
    if not isinstance(spec["replicas"], int) or spec["replicas"] < 1:
        raise ConfigError(f"{where}.replicas must be an integer >= 1, got {spec['replicas']!r}")
    return spec


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
    spec = spec_dict(spec)
    if not isinstance(spec, dict) or set(spec) != {"name", "namespace", "replicas"}:
        raise ConfigError(f"{where}: expected {{name, namespace, replicas}} as returned by "
                          f"envs.services.start_retriever_service, got {spec!r}")
    return spec
