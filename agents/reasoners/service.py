"""A reasoner served by Ray actors: N replicas, one model copy each, batching the requests of every EnvRunner.

Without a service every EnvRunner builds its own reasoner: one model copy (and one GPU) per runner, generation
batches no larger than one runner's envs. With one (``TrainConfig.reasoner_service``), the training driver starts
``replicas`` :class:`ReasonerReplica` actors — each builds the env's reasoner once, on the resources it asks for
(``num_cpus``, ``num_gpus``, custom resources such as ``{"reasoner_node": 1}`` that pin it to the nodes offering
them) — and every env holds a thin :class:`ServedReasoner` client that implements the
:class:`~agents.reasoners.base.BranchingReasoner` protocol. The flow of one ``next_step`` call:

1. client: group the states by replica — a state the replica produced goes back to it (sticky: its live state
   there still holds the KV cache); a new one to the replica with the fewest states in this call;
2. replica: queue the request; a batcher gathers the requests of every caller — until every active client (one
   that sent a request lately) has one waiting, ``max_batch`` states wait, or the oldest waited ``max_wait_ms`` — and runs ONE
   batched ``next_step`` of the real reasoner (in a worker thread, so the actor keeps accepting requests while
   the model runs);
3. replica: keep each after-state live (an LRU of ``live_states``) under a fresh key and return, per state, the
   :class:`~agents.reasoners.base.Step`, the after-state's snapshot and key.

Requests carry plain data, never chat text: a state is its snapshot (token ids, evidence, step count) plus the
pending operations written on it since (``start``, ``evidence``, ``answer``: the client's ``start`` /
``with_evidence`` / ``with_answer_prompt`` cost no round trip and are applied next to the model), so a
regenerated step is token-exact and a replica that lost its live states (restarted, evicted) rebuilds any state
from its snapshot. Greedy generation is batch-invariant, so a served env produces the same records as a local one.

Ray only — actors, named handles, ``max_restarts`` / ``max_task_retries`` for faults — no RPC layer of our own.
The signals that read the model's internals (PUlSE, the content fields, hidden-state probes) are computed in the
replica, next to the model, with the env's own settings (``features_on_service``, default on); the step then
travels without its per-layer hidden states — kilobytes, whatever the model's depth. Output-level signals, RSUS and
text-only content are computed by the env from the step's text and log-probabilities, as without a service.

Example (a local Ray, the micro-world)::

    import ray
    from agents.reasoners.service import ReasonerServiceConfig, start_service
    ray.init()
    spec = start_service({"task": "microworld"}, ReasonerServiceConfig(replicas=1))
    env = envs.vector.make_batched(16, {"task": "microworld", "reasoner_service": spec})
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

from agents.reasoners.base import Capabilities, Step
from agents.serving import lookup_replicas, start_replicas, stop_replicas
from envs.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)



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


def check_spec(spec: Any, where: str = "EnvConfig.reasoner_service") -> dict:
    """A service spec (what :func:`start_service` returns: ``{name, namespace, replicas}``), checked."""
    if not isinstance(spec, dict) or set(spec) != {"name", "namespace", "replicas"}:
        raise ConfigError(f"{where}: expected {{name, namespace, replicas}} as returned by "
                          f"agents.reasoners.service.start_service, got {spec!r}")
    if not isinstance(spec["replicas"], int) or spec["replicas"] < 1:
        raise ConfigError(f"{where}.replicas must be an integer >= 1, got {spec['replicas']!r}")
    return spec


# ---------------------------------------------------------------------------------------------- the replica
def _apply(reasoner, key: str | None, snap: dict | None, ops: tuple, live: OrderedDict) -> Any:
    """The live state a request names: its key's live state, else rebuilt from its snapshot; then its ops."""
    state = live.get(key) if key is not None else None
    if state is None and snap is not None:
        state = reasoner.restore(snap)
    for op in ops:
        if op[0] == "start":
            state = reasoner.start(op[1], list(op[2]) or None)
        elif op[0] == "evidence":
            state = reasoner.with_evidence(state, list(op[1]), op[2])
        elif op[0] == "answer":
            state = reasoner.with_answer_prompt(state)
        else:
            raise ValueError(f"reasoner service: unknown operation {op[0]!r}")
    if state is None:
        raise ValueError("reasoner service: a request names no state (no key, snapshot or start)")
    return state


class ReasonerReplica:
    """One model copy behind a batching queue (a Ray actor: :func:`start_service` creates them)."""

    def __init__(self, env_config: dict, max_batch: int, max_wait_ms: float, live_states: int,
                 active_s: float = 1.0, features: bool = True, threads: int = 1):
        import torch

        torch.set_num_threads(threads)  # the CPUs it reserved
        from envs.components import build_reasoner
        from envs.env_config import EnvConfig

        self.config = EnvConfig.from_dict({k: v for k, v in env_config.items() if k != "reasoner_service"})
        self.reasoner = build_reasoner(self.config)
        self.max_batch, self.max_wait, self.active_s = max_batch, max_wait_ms / 1000.0, active_s
        self.features = None
        if features:  # the model-side signals, built as the env builds them
            from envs.components import model_side_signals

            self.features = model_side_signals(self.config, self.reasoner)
        # a U_verb proxy reads the hidden states in the env's RSUS: then the arrays must travel
        self.strip = features and not self.config.rsus_options.get("verb_proxy")
        self.live: OrderedDict[str, Any] = OrderedDict()
        self.live_states = live_states
        self.pool = ThreadPoolExecutor(max_workers=1)  # the model runs in one thread, off the event loop
        self.pending: list[tuple[list, asyncio.Future, float, str]] = []  # (requests, future, arrival, client)
        self.seen: dict[str, tuple[float, float]] = {}  # client -> (its last request's arrival, the gap before it)
        self.wake: asyncio.Event | None = None
        self.batcher: asyncio.Task | None = None
        self.stats = {"calls": 0, "states": 0, "requests": 0, "tokens": 0, "gen_seconds": 0.0, "live_hits": 0,
                      "restored": 0, "max_batch_seen": 0}

    async def info(self) -> dict:
        """What a client needs to stand in for the reasoner (capabilities, model facts, ids), plus where it runs."""
        import ray

        r = self.reasoner
        mc = getattr(getattr(r, "model", None), "config", None)
        node = ray.get_runtime_context().get_node_id()
        return {"capabilities": asdict(r.capabilities), "model_id": getattr(r, "model_id", None),
                "cfg_model": getattr(getattr(r, "cfg", None), "model", None),
                "n_layers": getattr(mc, "num_hidden_layers", 0) or 0, "hidden_size": getattr(mc, "hidden_size", 0) or 0,
                "answer_prompt": callable(getattr(r, "with_answer_prompt", None)),
                "pid": os.getpid(), "node_id": node,
                "node_resources": next((n.get("Resources", {}) for n in ray.nodes() if n.get("NodeID") == node), {})}

    async def next_step(self, requests: list[tuple], client: str = "") -> list[tuple]:
        """``requests``: ``(key, snapshot, ops)`` each; returns ``(step, after_snapshot, after_key, done,
        before_snapshot_or_None)`` each, from one batched generation shared with every concurrent caller."""
        if self.batcher is None:
            self.wake = asyncio.Event()
            self.batcher = asyncio.get_running_loop().create_task(self._batch_loop())
        fut = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        self.pending.append((requests, fut, now, client))
        last, _ = self.seen.get(client, (None, 0.0))
        self.seen[client] = (now, 0.0 if last is None else now - last)
        self.wake.set()
        return await fut

    def _all_clients_waiting(self) -> bool:
        """Every active client has a request waiting: nobody else is about to send one, so waiting longer only adds
        latency. A client is active while its silence is shorter than ``active_s`` or three of its own intervals
        between requests (a runner between two training iterations stops being waited for)."""
        now = time.monotonic()
        waiting = {p[3] for p in self.pending}
        return all(c in waiting for c, (t, gap) in self.seen.items() if now - t < max(self.active_s, 3 * gap))

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.pending:
                self.wake.clear()
                await self.wake.wait()
            # gather: until max_batch states wait, every active client has a request waiting, or the oldest request
            # waited max_wait
            while sum(len(p[0]) for p in self.pending) < self.max_batch and not self._all_clients_waiting():
                left = self.max_wait - (time.monotonic() - self.pending[0][2])
                if left <= 0:
                    break
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=left)
                except asyncio.TimeoutError:
                    break
            batch, n = [], 0
            while self.pending and (not batch or n + len(self.pending[0][0]) <= self.max_batch):
                batch.append(self.pending.pop(0))
                n += len(batch[-1][0])
            try:
                results = await loop.run_in_executor(self.pool, self._generate, [p[0] for p in batch])
                for p, res in zip(batch, results):
                    p[1].set_result(res)
            except Exception as e:  # the callers get the error; the replica goes on serving
                for p in batch:
                    fut = p[1]
                    if not fut.done():
                        fut.set_exception(e)

    def _generate(self, batches: list[list[tuple]]) -> list[list[tuple]]:
        r = self.reasoner
        flat = [req for reqs in batches for req in reqs]
        for key, _, _ in flat:
            self.stats["live_hits" if key in self.live else "restored"] += 1
        states = [_apply(r, key, snap, tuple(ops), self.live) for key, snap, ops in flat]
        t0 = time.perf_counter()
        outs = r.next_step(states)
        self.stats["gen_seconds"] += time.perf_counter() - t0
        self.stats["calls"] += 1
        self.stats["states"] += len(flat)
        self.stats["requests"] += len(batches)
        self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(flat))
        res = []
        for (_, _, ops), before, (step, after) in zip(flat, states, outs):
            self.stats["tokens"] += int(step.n_tokens)
            if self.features is not None:
                self._attach_features(step, before)
            k = uuid.uuid4().hex
            self.live[k] = after
            res.append((step, r.snapshot(after), k, bool(getattr(after, "done", False)),
                        r.snapshot(before) if ops else None))
        while len(self.live) > self.live_states:
            self.live.popitem(last=False)
        out, i = [], 0
        for reqs in batches:
            out.append(res[i: i + len(reqs)])
            i += len(reqs)
        return out

    def _attach_features(self, step: Step, before: Any) -> None:
        """The model-side signals and probe scores into ``step.meta`` (the env's extractor reads them there); the
        per-layer hidden states dropped, so the step travels in kilobytes."""
        ex, probes = self.features
        sig = ex(step, before)
        step.meta["signals"] = {n: (sig[n] if sig["mask"][i] > 0 else None) for i, n in enumerate(ex.names)}
        step.meta["probes"] = {n: float(p(step, before)) for n, p in probes.items()}
        if self.strip:
            step.hidden_mean = step.hidden_last = step.hidden_first = None

    async def resolve(self, key: str | None, snap: dict | None, ops: tuple) -> dict:
        """The snapshot of a state with pending operations (for a client that needs it before generating)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.pool, lambda: self.reasoner.snapshot(_apply(self.reasoner, key, snap, tuple(ops), self.live)))

    async def sample_alternatives(self, key: str | None, snap: dict | None, ops: tuple, k: int, seed: int) -> list:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.pool, lambda: self.reasoner.sample_alternatives(_apply(self.reasoner, key, snap, tuple(ops),
                                                                        self.live), k, seed))

    async def get_stats(self) -> dict:
        """Counters since start: generation calls, states, tokens, seconds, live-state hits; peak RSS (MB), pid."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {**self.stats, "mean_batch": self.stats["states"] / max(1, self.stats["calls"]),
                "peak_rss_mb": ru.ru_maxrss / 1024, "cpu_seconds": ru.ru_utime + ru.ru_stime, "pid": os.getpid()}


# ---------------------------------------------------------------------------------------------- the driver
def start_service(env_config: dict, cfg: ReasonerServiceConfig | dict | None = None, name: str | None = None) -> dict:
    """Start the replicas of a reasoner service for envs of ``env_config`` (Ray must be initialised); returns the
    spec envs take as ``EnvConfig.reasoner_service``. The caller owns the actors: they end with its Ray job (or
    :func:`stop_service`). Waits until every replica has loaded its model; a replica that cannot be placed (no node
    offers its resources) is an error naming the resources, after ``start_timeout_s``."""

    cfg = cfg if isinstance(cfg, ReasonerServiceConfig) else ReasonerServiceConfig.from_dict(cfg or {})
    from envs.env_config import EnvConfig

    EnvConfig.from_dict({k: v for k, v in env_config.items() if k != "reasoner_service"})  # errors here, not remote
    name = name or f"reasoner-{uuid.uuid4().hex[:8]}"
    spec, infos = start_replicas(
        ReasonerReplica, name, cfg.replicas,
        (dict(env_config), cfg.max_batch, cfg.max_wait_ms, cfg.live_states, cfg.active_s, cfg.features_on_service,
         max(1, int(cfg.num_cpus))),
        {"num_cpus": cfg.num_cpus, "num_gpus": cfg.num_gpus, "resources": dict(cfg.resources) or None,
         "max_restarts": cfg.max_restarts, "max_task_retries": -1, "max_concurrency": 1000},
        cfg.start_timeout_s, "reasoner service")
    for i, info in enumerate(infos):
        log.info("reasoner service %s/%d: pid %s on node %s", name, i, info["pid"], info["node_id"][:12])
    return spec


def replica_handles(spec: dict) -> list:
    """The replicas' actor handles (looked up by name: works in any process of the cluster)."""
    return lookup_replicas(check_spec(spec), "reasoner service",
                           "agents.reasoners.service.start_service, or set TrainConfig.reasoner_service and let the "
                           "training driver start it")


def service_stats(spec: dict) -> list[dict]:
    """Every replica's counters (:meth:`ReasonerReplica.get_stats`)."""
    import ray

    return ray.get([h.get_stats.remote() for h in replica_handles(spec)])


def stop_service(spec: dict) -> None:
    """End a service's replicas."""
    stop_replicas(spec, replica_handles)


# ---------------------------------------------------------------------------------------------- the client
class ServedState:
    """A client-side state: the snapshot of a state a replica produced (and its key there), plus pending
    operations. ``before`` is filled in by the call that generated from it (its snapshot after the operations)."""

    __slots__ = ("snap", "key", "replica", "ops", "done", "resolved")

    def __init__(self, snap: dict | None, key: str | None = None, replica: int | None = None, ops: tuple = (),
                 done: bool = False):
        self.snap, self.key, self.replica, self.ops, self.done = snap, key, replica, ops, done
        self.resolved: dict | None = None

    def then(self, op: tuple) -> ServedState:
        return ServedState(self.snap, self.key, self.replica, self.ops + (op,), False)


class ServedReasoner:
    """The Reasoner protocol over a running service (what an env builds when ``EnvConfig.reasoner_service`` is set)."""

    def __init__(self, spec: dict):
        import ray

        self.spec = check_spec(spec)
        self.replicas = replica_handles(spec)
        info = ray.get(self.replicas[0].info.remote())
        self.capabilities = Capabilities(**info["capabilities"])
        if info["model_id"] is not None:  # what the env's cache namespace reads (as it would from the backend)
            self.model_id = info["model_id"]
        if info["cfg_model"] is not None:  # what reasoner_model_id reads (probes are checked against it)
            self.cfg = SimpleNamespace(model=info["cfg_model"])
        self.n_layers, self.hidden_size = info["n_layers"], info["hidden_size"]
        if not info["answer_prompt"]:
            self.with_answer_prompt = None  # type: ignore[assignment]  (closing is masked, as for the backend)
        self._offset = os.getpid() % len(self.replicas)  # runners start filling different replicas
        self.client_id = uuid.uuid4().hex  # the replicas' batchers wait for the active clients' requests

    # -- cheap operations: written on the state, applied next to the model with the next generation
    def start(self, question: str, context: list[str] | None = None) -> ServedState:
        return ServedState(None, ops=(("start", question, tuple(context or ())),))

    def with_evidence(self, state: ServedState, evidence: list[str], mode: str = "step") -> ServedState:
        if mode not in ("step", "front"):
            raise ValueError(f"unknown injection mode '{mode}' (valid: front, step)")
        return state.then(("evidence", tuple(evidence), mode))

    def with_answer_prompt(self, state: ServedState) -> ServedState:
        return state.then(("answer",))

    def snapshot(self, state: ServedState) -> dict:
        if not state.ops:
            return state.snap
        if state.resolved is None:
            import ray

            r = self._replica_of(state, {})
            state.resolved = ray.get(self.replicas[r].resolve.remote(state.key, state.snap, state.ops))
        return state.resolved

    def restore(self, snap: dict) -> ServedState:
        return ServedState(snap, done=bool(snap.get("done", False)))

    # -- generation
    def _replica_of(self, state: ServedState, load: dict[int, int]) -> int:
        if state.key is not None and state.replica is not None:
            return state.replica  # sticky: its live state (and KV cache) is there
        n = len(self.replicas)
        return min(((self._offset + j) % n for j in range(n)), key=lambda r: load.get(r, 0))

    def next_step(self, states: list[ServedState]) -> list[tuple[Step, ServedState]]:
        import ray

        groups: dict[int, list[int]] = {}
        load: dict[int, int] = {}
        for i, s in enumerate(states):
            r = self._replica_of(s, load)
            groups.setdefault(r, []).append(i)
            load[r] = load.get(r, 0) + 1
        refs = {r: self.replicas[r].next_step.remote([(states[i].key, states[i].snap, states[i].ops) for i in idx],
                                                     self.client_id)
                for r, idx in groups.items()}
        out: list[Any] = [None] * len(states)
        for r, res in zip(refs, ray.get(list(refs.values()))):
            for i, (step, snap, key, done, before) in zip(groups[r], res):
                if before is not None:
                    states[i].resolved = before
                out[i] = (step, ServedState(snap, key, r, (), done))
        return out

    def regenerate(self, states: list[ServedState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, ServedState]]:
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def sample_alternatives(self, state: ServedState, k: int, seed: int = 0) -> list[str]:
        import ray

        r = self._replica_of(state, {})
        return ray.get(self.replicas[r].sample_alternatives.remote(state.key, state.snap, state.ops, k, seed))


def connect(spec: dict) -> ServedReasoner:
    """A client of the service ``spec`` names (:func:`start_service`)."""
    return ServedReasoner(spec)
