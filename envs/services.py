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
    from envs.services import ReasonerServiceConfig, start_service
    ray.init()
    spec = start_service({"task": "microworld"}, ReasonerServiceConfig(replicas=1))
    env = envs.vector.make_batched(16, {"task": "microworld", "reasoner_service": spec})
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from agents.reasoners.base import Step
from envs.served import replica_handles, retriever_handles
from envs.serving import (
    ReasonerServiceConfig,
    RetrieverServiceConfig,
    start_replicas,
    stop_replicas,
)

log = logging.getLogger(__name__)

__all__ = ["ReasonerReplica", "ReasonerServiceConfig", "RetrieverServer", "RetrieverServiceConfig",
           "start_retriever_service", "start_service", "stop_retriever_service", "stop_service"]


# ---------------------------------------------------------------------------------------------- the replica
def _apply(reasoner, key: str | None, snap: dict | None, ops: tuple, live: OrderedDict, cuts: list | None = None
           ) -> Any:
    """The live state a request names: its key's live state, else rebuilt from its snapshot; then its ops. Evidence
    is bounded by the backend's context window here, next to the model (the env's client cannot count its tokens):
    a cut is logged and the passages cut are appended to ``cuts`` (the generated step's
    ``meta["evidence_truncated"]``, which the env counts in ``info``)."""
    from agents.reasoners.base import fit_evidence

    state = live.get(key) if key is not None else None
    if state is None and snap is not None:
        state = reasoner.restore(snap)
    for op in ops:
        if op[0] == "start":
            state = reasoner.start(op[1], list(op[2]) or None)
        elif op[0] == "evidence":
            evidence, note = fit_evidence(reasoner, state, (), list(op[1]))
            if note:
                log.warning("reasoner service: evidence cut to fit the context window of %d tokens: %d passage(s) "
                            "truncated, %d token(s) dropped", note["window"], note["truncated"], note["tokens_dropped"])
                if cuts is not None:
                    cuts.append(note["truncated"])
            state = reasoner.with_evidence(state, evidence, op[2])
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

        self.config = EnvConfig.from_dict(env_config)  # the driver's EnvConfig.to_dict(), without the service
        self.reasoner = build_reasoner(self.config)
        self.max_batch, self.max_wait, self.active_s = max_batch, max_wait_ms / 1000.0, active_s
        self.features = None
        if features:  # the model-side signals, built as the env builds them
            from envs.components import model_side_signals

            self.features = model_side_signals(self.config, self.reasoner)
        # a U_verb proxy reads the hidden states in the env's RSUS: then the arrays must travel
        self.strip = features and not self.config.rsus_options.verb_proxy
        self.live: OrderedDict[str, Any] = OrderedDict()
        self.live_states = live_states
        # a backend that batches concurrent calls itself (vLLM's scheduler: `batches_itself`) gets every request at
        # once, on a thread of its own; the others share one model thread behind the batcher below
        self.direct = bool(getattr(self.reasoner, "batches_itself", False))
        self.pool = ThreadPoolExecutor(max_workers=max(8, max_batch) if self.direct else 1)
        self.lock = threading.Lock()  # the live states and counters, when several threads generate
        self.pending: list[tuple[list, asyncio.Future, float, str]] = []  # (requests, future, arrival, client)
        self.seen: dict[str, tuple[float, float]] = {}  # client -> (its last request's arrival, the gap before it)
        self.wake: asyncio.Event | None = None
        self.batcher: asyncio.Task | None = None
        self.stats = {"calls": 0, "states": 0, "requests": 0, "tokens": 0, "gen_seconds": 0.0, "live_hits": 0,
                      "restored": 0, "max_batch_seen": 0}

    async def info(self) -> dict:
        """What a client needs to stand in for the reasoner (capabilities, model facts, ids), plus where it runs."""
        import ray

        from agents.reasoners.confidence import confidence_unavailable
        from envs.components import model_facts

        r = self.reasoner
        n_layers, hidden_size = model_facts(r)
        node = ray.get_runtime_context().get_node_id()
        return {"capabilities": asdict(r.capabilities), "model_id": getattr(r, "model_id", None),
                "cfg_model": getattr(getattr(r, "cfg", None), "model", None),
                "n_layers": n_layers, "hidden_size": hidden_size, "batches_itself": self.direct,
                "answer_prompt": callable(getattr(r, "with_answer_prompt", None)),
                "confidence": (asdict(r.confidence) if getattr(r, "confidence", None) is not None else None),
                "confidence_unavailable": confidence_unavailable(r),
                "pid": os.getpid(), "node_id": node,
                "node_resources": next((n.get("Resources", {}) for n in ray.nodes() if n.get("NodeID") == node), {})}

    async def next_step(self, requests: list[tuple], client: str = "") -> list[tuple]:
        """``requests``: ``(key, snapshot, ops)`` each; returns ``(step, after_snapshot, after_key, done,
        before_snapshot_or_None)`` each, from one batched generation shared with every concurrent caller."""
        if self.batcher is None:
            self.wake = asyncio.Event()
            self.batcher = asyncio.get_running_loop().create_task(self._batch_loop())
        if self.direct:  # no batcher of ours: the engine's scheduler joins this call to the running batch
            return (await asyncio.get_running_loop().run_in_executor(self.pool, self._generate, [requests]))[0]
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
        with self.lock:
            for key, _, _ in flat:
                self.stats["live_hits" if key in self.live else "restored"] += 1
            cuts: list[list[int]] = [[] for _ in flat]
            states = [_apply(r, key, snap, tuple(ops), self.live, c) for (key, snap, ops), c in zip(flat, cuts)]
        t0 = time.perf_counter()
        outs = r.next_step(states)
        dt = time.perf_counter() - t0
        res = []
        for (_, _, ops), before, (step, after), cut in zip(flat, states, outs, cuts):
            if cut:
                step.meta["evidence_truncated"] = sum(cut)
            if self.features is not None:
                self._attach_features(step, before)
            res.append((step, r.snapshot(after), uuid.uuid4().hex, bool(getattr(after, "done", False)),
                        r.snapshot(before) if ops else None))
        with self.lock:
            self.stats["gen_seconds"] += dt
            self.stats["calls"] += 1
            self.stats["states"] += len(flat)
            self.stats["requests"] += len(batches)
            self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(flat))
            self.stats["tokens"] += sum(int(step.n_tokens) for step, *_ in res)
            for (_, _, key, _, _), (_, after) in zip(res, outs):
                self.live[key] = after
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
        from envs.components import probe_value

        ex, probes = self.features
        sig = ex(step, before)
        step.meta["signals"] = {n: (sig[n] if sig["mask"][i] > 0 else None) for i, n in enumerate(ex.names)}
        step.meta["probes"] = {n: probe_value(p, step, before) for n, p in probes.items()}  # NaN: masked
        if self.strip:
            step.hidden_mean = step.hidden_last = step.hidden_first = step.token_transitions = None

    async def resolve(self, key: str | None, snap: dict | None, ops: tuple) -> dict:
        """The snapshot of a state with pending operations (for a client that needs it before generating)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: self.reasoner.snapshot(self._state(key, snap, ops)))

    async def sample_alternatives(self, key: str | None, snap: dict | None, ops: tuple, k: int, seed: int) -> list:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.pool, lambda: self.reasoner.sample_alternatives(self._state(key, snap, ops), k, seed))

    def _state(self, key: str | None, snap: dict | None, ops: tuple) -> Any:
        with self.lock:
            return _apply(self.reasoner, key, snap, tuple(ops), self.live)

    async def get_stats(self) -> dict:
        """Counters since start: generation calls, states, tokens, seconds, live-state hits; peak RSS (MB), pid; for
        a backend that batches itself, the mean batch its engine ran (``engine_mean_batch``)."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        engine = getattr(self.reasoner, "engine", None)
        extra = {"engine_mean_batch": engine.mean_running(), "engine": dict(engine.stats)} if self.direct else {}
        return {**self.stats, **extra, "mean_batch": self.stats["states"] / max(1, self.stats["calls"]),
                "peak_rss_mb": ru.ru_maxrss / 1024, "cpu_seconds": ru.ru_utime + ru.ru_stime, "pid": os.getpid()}


# ---------------------------------------------------------------------------------------------- the driver
def _served_env(env_config, key: str) -> dict:
    """The env a service serves, as it crosses to the replicas (``to_dict()``), without the spec of ``key`` (an env of
    a service is not its client); a dict is checked here, on the driver, not in the replica."""
    from envs.env_config import EnvConfig

    if not isinstance(env_config, EnvConfig):
        env_config = EnvConfig.from_dict({k: v for k, v in dict(env_config).items() if k != key})
    return {**env_config.to_dict(), key: None}


def start_service(env_config, cfg: ReasonerServiceConfig | dict | None = None,
                  name: str | None = None) -> dict:
    """Start the replicas of a reasoner service for envs of ``env_config`` (an :class:`~envs.env_config.EnvConfig`,
    or a dict of its fields; Ray must be initialised); returns the
    spec envs take as ``EnvConfig.reasoner_service``. The caller owns the actors: they end with its Ray job (or
    :func:`stop_service`). Waits until every replica has loaded its model; a replica that cannot be placed (no node
    offers its resources) is an error naming the resources, after ``start_timeout_s``."""

    cfg = cfg if isinstance(cfg, ReasonerServiceConfig) else ReasonerServiceConfig.from_dict(cfg or {})
    env = _served_env(env_config, "reasoner_service")  # errors here, not remote
    name = name or f"reasoner-{uuid.uuid4().hex[:8]}"
    spec, infos = start_replicas(
        ReasonerReplica, name, cfg.replicas,
        (env, cfg.max_batch, cfg.max_wait_ms, cfg.live_states, cfg.active_s, cfg.features_on_service,
         max(1, int(cfg.num_cpus))),
        {"num_cpus": cfg.num_cpus, "num_gpus": cfg.num_gpus, "resources": dict(cfg.resources) or None,
         "max_restarts": cfg.max_restarts, "max_task_retries": -1, "max_concurrency": 1000},
        cfg.start_timeout_s, "reasoner service")
    for i, info in enumerate(infos):
        log.info("reasoner service %s/%d: pid %s on node %s", name, i, info["pid"], info["node_id"][:12])
    return spec


def stop_service(spec: dict) -> None:
    """End a service's replicas."""
    stop_replicas(spec, replica_handles)


# ---------------------------------------------------------------------------------------------- retrieval
# Retrieval placement on a cluster: the index in every EnvRunner (default) or in a retriever service.
#
# Default: every EnvRunner loads the env's retriever itself. A prebuilt BM25 index (``index_path``) is memory-mapped,
# so the runners of one node share its pages through the OS page cache — one index in memory per node. ColBERT/PLAID
# indexes are not memory-mapped (colbert-ai's mmap loader is broken: see :mod:`agents.retrievers.colbert`), so each
# runner holds a copy; for those, or for a node without the index files, serve it: ``TrainConfig.retriever_service``
# starts ``replicas`` :class:`RetrieverServer` actors (each loads the index once, on the resources it asks for) and
# every env's retriever is a :class:`ServedRetriever` whose ``search`` sends the env's batched queries (one call per
# env phase, all the runner's envs together) to a replica, round robin. Results are the same passages as in-process
# search (the same index, the same code).


class RetrieverServer:
    """One loaded retriever (a Ray actor: :func:`start_retriever_service` creates them)."""

    def __init__(self, env_config: dict):
        from envs.components import env_retriever
        from envs.env_config import EnvConfig

        self.retriever = env_retriever(EnvConfig.from_dict(env_config))  # the driver's, without the service
        self.queries = 0

    def search(self, queries: list[str], k: int) -> list:
        self.queries += len(queries)
        return self.retriever.search(queries, k=k)

    def info(self) -> dict:
        import ray

        return {"n": len(self.retriever), "describe": self.retriever.describe(), "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), "queries": self.queries}


def start_retriever_service(env_config, cfg: RetrieverServiceConfig | dict | None = None) -> dict:
    """Start the replicas for envs of ``env_config`` (an EnvConfig or a dict of its fields; Ray must be
    initialised); returns the spec envs take as
    ``EnvConfig.retriever_service``. Errors (no index, a mismatched corpus) surface here, on the driver."""

    cfg = cfg if isinstance(cfg, RetrieverServiceConfig) else RetrieverServiceConfig.from_dict(cfg or {})
    name = f"retriever-{uuid.uuid4().hex[:8]}"
    env = _served_env(env_config, "retriever_service")
    spec, _ = start_replicas(RetrieverServer, name, cfg.replicas, (env,),
                             {"num_cpus": cfg.num_cpus, "resources": dict(cfg.resources) or None,
                              "max_restarts": -1, "max_task_retries": -1}, cfg.start_timeout_s, "retriever service")
    return spec


def stop_retriever_service(spec: dict) -> None:
    stop_replicas(spec, retriever_handles)
