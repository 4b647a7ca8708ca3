"""The env-side clients of the Ray services (:mod:`envs.services`): :class:`ServedReasoner` implements the
:class:`~agents.reasoners.base.BranchingReasoner` protocol over the reasoner replicas, :class:`ServedRetriever` the
Retriever protocol over the retriever replicas. What an env builds when ``EnvConfig.reasoner_service`` /
``retriever_service`` is set (:func:`envs.components.build_reasoner`, :func:`envs.components.env_retriever`)."""

from __future__ import annotations

import itertools
import os
import uuid
from types import SimpleNamespace
from typing import Any

from agents.reasoners.base import Capabilities, Step
from envs.serving import check_retriever_spec, check_spec, lookup_replicas

#: the environment variable bounding one call to a service's replicas (seconds)
CALL_TIMEOUT_ENV = "KAIROS_SERVICE_TIMEOUT_S"
#: its default: a batch's generation, or a replica restarting and loading its model, fits well inside
DEFAULT_CALL_TIMEOUT_S = 900.0


def call_service(refs: Any, what: str) -> Any:
    """``ray.get(refs)`` within ``KAIROS_SERVICE_TIMEOUT_S`` (default 900 s); past it a one-line ``TimeoutError``
    naming the service and the fix."""
    import ray

    from envs.ray_address import seconds_from_env

    timeout = seconds_from_env(CALL_TIMEOUT_ENV, DEFAULT_CALL_TIMEOUT_S)
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(f"the {what} service did not answer within {timeout:g} s ({CALL_TIMEOUT_ENV}): a replica "
                           "is stuck or cannot be placed — see `ray status` and its log, or raise "
                           f"{CALL_TIMEOUT_ENV}") from None


def replica_handles(spec: dict) -> list:
    """The replicas' actor handles (looked up by name: works in any process of the cluster)."""
    return lookup_replicas(check_spec(spec), "reasoner service",
                           "envs.services.start_service, or set TrainConfig.reasoner_service and let the "
                           "training driver start it")


def service_stats(spec: dict) -> list[dict]:
    """Every replica's counters (:meth:`ReasonerReplica.get_stats`)."""
    return call_service([h.get_stats.remote() for h in replica_handles(spec)], "reasoner")


def retriever_handles(spec: dict) -> list:
    return lookup_replicas(check_retriever_spec(spec), "retriever service",
                           "envs.services.start_retriever_service, or set TrainConfig.retriever_service "
                           "and let the training driver start it")


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
        self.spec = check_spec(spec)
        self.replicas = replica_handles(spec)
        info = call_service(self.replicas[0].info.remote(), "reasoner")
        self.capabilities = Capabilities(**info["capabilities"])
        if info["model_id"] is not None:  # what the env's cache namespace reads (as it would from the backend)
            self.model_id = info["model_id"]
        if info["cfg_model"] is not None:  # what reasoner_model_id reads (probes are checked against it)
            self.cfg = SimpleNamespace(model=info["cfg_model"])
        self.n_layers, self.hidden_size = info["n_layers"], info["hidden_size"]
        if not info["answer_prompt"]:
            self.with_answer_prompt = None  # type: ignore[assignment]  (closing is masked, as for the backend)
        # RSUS's U_verb by prompt: the replicas ask (inside next_step, batched with every client's steps); the steps
        # come back with the reply in their meta. Here: what the env's namespace and masking reasons read
        from agents.reasoners.confidence import ConfidenceQuestion

        self.confidence = ConfidenceQuestion(**info["confidence"]) if info.get("confidence") else None
        self._confidence_unavailable = info.get("confidence_unavailable")
        self._offset = os.getpid() % len(self.replicas)  # runners start filling different replicas
        self.client_id = uuid.uuid4().hex  # the replicas' batchers wait for the active clients' requests

    def confidence_unavailable(self) -> str | None:
        """Why the served backend cannot be asked for its confidence (``None``: it can)."""
        return self._confidence_unavailable

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
            r = self._replica_of(state, {})
            state.resolved = call_service(self.replicas[r].resolve.remote(state.key, state.snap, state.ops), "reasoner")
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
        for r, res in zip(refs, call_service(list(refs.values()), "reasoner")):
            for i, (step, snap, key, done, before) in zip(groups[r], res):
                if before is not None:
                    states[i].resolved = before
                out[i] = (step, ServedState(snap, key, r, (), done))
        return out

    def regenerate(self, states: list[ServedState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, ServedState]]:
        return self.next_step([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def sample_alternatives(self, state: ServedState, k: int, seed: int = 0) -> list[str]:
        """The replica's backend's samples (an :class:`~agents.reasoners.base.Alternatives`: their token count
        travels with them)."""
        r = self._replica_of(state, {})
        return call_service(self.replicas[r].sample_alternatives.remote(state.key, state.snap, state.ops, k, seed),
                            "reasoner")


def connect(spec: dict) -> ServedReasoner:
    """A client of the service ``spec`` names (:func:`start_service`)."""
    return ServedReasoner(spec)


class ServedRetriever:
    """The Retriever protocol over a running retriever service."""

    def __init__(self, spec: dict):
        self.replicas = retriever_handles(spec)
        info = call_service(self.replicas[0].info.remote(), "retriever")
        self._n, self._describe = info["n"], info["describe"]
        self._next = itertools.cycle(range(len(self.replicas)))
        for _ in range(os.getpid() % len(self.replicas)):  # runners start on different replicas
            next(self._next)

    def search(self, queries, k: int = 10) -> list:
        return call_service(self.replicas[next(self._next)].search.remote(list(queries), k), "retriever")

    def __len__(self) -> int:
        return self._n

    def describe(self) -> dict[str, Any]:
        return {**self._describe, "served": True}
