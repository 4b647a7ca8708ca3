"""What the Ray services (the reasoner's, the retriever's) share: named replicas started and waited for on the
driver — a replica that cannot be placed or fails to load is an error there, naming what it asked for — and looked
up by name from any process of the cluster."""

from __future__ import annotations

from typing import Any

#: the Ray namespace service actors are named in (a replica is ``<name>/<index>`` there)
NAMESPACE = "kairos"


def kill_all(handles: list) -> None:
    import ray

    for h in handles:
        ray.kill(h, no_restart=True)


#: handles of the replicas this process started, by service name (keeps them alive; :func:`stop_replicas` ends them)
OWNED: dict[str, list] = {}


def start_replicas(cls: type, name: str, n: int, args: tuple, options: dict[str, Any], timeout_s: float,
                   what: str) -> tuple[dict, list[dict]]:
    """``n`` actors of ``cls`` named ``<name>/<i>``, each built with ``args`` and Ray ``options``; waits until every
    one answers ``info()`` and returns ``(spec, infos)`` — the spec (``{name, namespace, replicas}``) is what envs
    take to connect. Raises (after killing them) when one is not placed within ``timeout_s`` — naming the resources
    it asked for and the cluster's — or when one fails to start. This process owns them (:data:`OWNED`)."""
    import ray

    handles = [ray.remote(cls).options(name=f"{name}/{i}", namespace=NAMESPACE, **options).remote(*args)
               for i in range(n)]
    refs = [h.info.remote() for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
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
