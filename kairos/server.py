"""``kairos serve``: a trained policy (or any trigger) behind an OpenAI-compatible HTTP endpoint, on Ray Serve.

::

    kairos serve --policy runs/quickstart/train/policy_trigger                     # http://127.0.0.1:8000
    kairos serve --bench runs/quickstart/bench --method "learned[QueryGen](λ=0.1)" --traces runs/quickstart/bench
    kairos serve --config configs/serve_microworld.yaml --replicas 2 --port 8100

Routes (:mod:`kairos.openai_api` for the protocol):

* ``POST /v1/chat/completions`` — the last user message is the question; the answer is the message content, the
  trace (:meth:`kairos.Answer.to_dict`) and the batch that answered it are in the ``kairos`` extension field;
  ``"stream": true`` sends each step as it is decided (``chat.completion.chunk`` events, ``data: [DONE]``).
  A bad request is a 4xx with OpenAI's error body naming the field (``param``).
* ``GET /v1/models`` (and ``/v1/models/{id}``), ``GET /health`` (this replica: its pipeline and batches),
  ``GET /v1/kairos/stats`` (its batch sizes and generation calls).
* ``GET /`` — the trace inspector page (:mod:`kairos.inspector`); ``GET /v1/kairos/traces`` and
  ``/v1/kairos/traces/{file}`` list and read the benchmark trace files under ``--traces``
  (:mod:`kairos.traces`).

**Scale-out and batching** are Ray Serve's: a deployment of ``replicas`` replicas (each a Ray actor with its own
:class:`kairos.Pipeline` — the pipeline is not thread-safe — and trajectory cache; a replica that dies is replaced
by Serve's controller), and ``@serve.batch`` on each: the requests that arrive within ``batch_wait_timeout_s``
(up to ``max_batch_size``) are answered by **one** :meth:`kairos.Pipeline.stream` call over all their questions
— the env's batched loop, one generation call per round for the whole batch. Plain and streaming requests share
the batches: every request follows its question's events and a plain one answers at its question's end. Each
answer names its batch (``kairos.batch``: id, size, the generation calls and states so far), so a client can
measure the batching it got.

Configured by :class:`kairos.config.ServeConfig` (flags or ``--config`` YAML), validated on the driver before Ray
starts. Registered in :data:`eval.cli.COMMANDS`.
"""

# (no ``from __future__ import annotations``: FastAPI reads the route handlers' annotations — ``Request`` — at
# definition time, inside build_app, where fastapi is imported; the CLI imports this module without it)
import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from kairos.config import PipelineSpec, ServeConfig, parse_options
from kairos.openai_api import APIError, chunk, completion, finish_reason, models_list, parse_chat_request, sse

log = logging.getLogger(__name__)

#: the inspector page's files (served at ``/`` and next to it; :mod:`kairos.inspector`)
INSPECTOR_FILES = {"index.html": "text/html; charset=utf-8", "inspector.js": "text/javascript; charset=utf-8",
                   "inspector.css": "text/css; charset=utf-8"}
#: the Serve deployment's name (its replicas' actors are named after it)
DEPLOYMENT = "KairosServer"


def inspector_file(name: str) -> bytes:
    """One of the inspector page's files (shipped as package data)."""
    if name not in INSPECTOR_FILES:
        raise FileNotFoundError(f"no inspector file '{name}'")
    return resources.files("kairos.inspector").joinpath(name).read_bytes()


# ----------------------------------------------------------------------------------------- batch statistics
class BatchStats:
    """What a replica's batches held: requests per batch, and the generation calls and states each made.

    Example:
        >>> s = BatchStats("r1")
        >>> b = s.open(3); s.count_generation(3); s.count_generation(2); s.close()
        >>> b["id"], s.summary()["mean_batch_size"], s.summary()["states_per_generation_call"]
        ('r1:1', 3.0, 2.5)
    """

    def __init__(self, replica: str, keep: int = 256):
        self.replica = replica
        self.batches = 0
        self.requests = 0
        self.generation_calls = 0
        self.generation_states = 0
        self.max_size = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.current: dict[str, Any] | None = None

    def open(self, size: int) -> dict[str, Any]:
        """A new batch of ``size`` requests (its record, updated as it generates)."""
        self.batches += 1
        self.requests += size
        self.max_size = max(self.max_size, size)
        self.current = {"id": f"{self.replica}:{self.batches}", "replica": self.replica, "size": size,
                        "generation_calls": 0, "generation_states": 0, "started": time.time()}
        return self.current

    def count_generation(self, states: int) -> None:
        """One generation call of ``states`` states (the reasoner's ``next_step``)."""
        self.generation_calls += 1
        self.generation_states += states
        if self.current is not None:
            self.current["generation_calls"] += 1
            self.current["generation_states"] += states

    def close(self) -> None:
        """The current batch is done."""
        if self.current is not None:
            self.current["seconds"] = round(time.time() - self.current.pop("started"), 6)
            self.recent.append(self.current)
            self.current = None

    def summary(self) -> dict[str, Any]:
        return {"replica": self.replica, "batches": self.batches, "requests": self.requests,
                "mean_batch_size": self.requests / self.batches if self.batches else None,
                "max_batch_size": self.max_size, "generation_calls": self.generation_calls,
                "states_per_generation_call": (self.generation_states / self.generation_calls
                                               if self.generation_calls else None),
                "recent": list(self.recent)[-16:]}


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()


# ----------------------------------------------------------------------------------------- the Serve app
def build_app(config: ServeConfig):
    """The Serve application: the :data:`DEPLOYMENT` deployment (``config.replicas`` replicas, each a pipeline
    behind the FastAPI routes of the module docstring), bound to ``config``."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from ray import serve
    from starlette.exceptions import HTTPException

    app = FastAPI(title="Kairos", description="a retrieval-timing policy behind an OpenAI-compatible endpoint",
                  docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _bad_parameter(request: Request, exc: RequestValidationError):
        first = (exc.errors() or [{}])[0]
        param = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
        err = APIError(400, f"{param}: {first.get('msg', 'invalid')}", param, "invalid_value")
        return JSONResponse(err.body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        code = "not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None
        err = APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail} (routes: POST "
                                        "/v1/chat/completions, GET /v1/models, /health, /)", None, code)
        return JSONResponse(err.body(), status_code=exc.status_code)

    @serve.deployment(name=DEPLOYMENT)
    @serve.ingress(app)
    class KairosServer:
        """One replica: a :class:`kairos.Pipeline` and the routes; concurrent requests share batched loops."""

        def __init__(self, cfg: dict[str, Any]):
            import torch

            self.config = ServeConfig.from_dict(cfg, where="kairos serve")
            torch.set_num_threads(max(1, int(self.config.replica_cpus)))
            self.replica = _replica_id()
            t0 = time.perf_counter()
            self.pipeline = self.config.pipeline.build(batch_size=self.config.max_batch_size)
            self.pipeline.venv  # noqa: B018  (build the env copies now, not on the first request)
            self.stats = BatchStats(self.replica)
            reasoner = self.pipeline.components.reasoner
            inner = reasoner.next_step

            def counted(states, _inner=inner):  # the generation calls each batch makes
                out = _inner(states)
                self.stats.count_generation(len(states))
                return out

            reasoner.next_step = counted
            self.description = self.pipeline.describe()
            # the replica's one thread for the loop: batches run one after another, never at once
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kairos-loop")
            self.started = time.time()
            log.info("replica %s ready in %.1f s: %s", self.replica, time.perf_counter() - t0, self.description)

        # ---------------------------------------------------------- the batched loop
        @serve.batch(max_batch_size=config.max_batch_size, batch_wait_timeout_s=config.batch_wait_timeout_s)
        async def answer_batch(self, asked: list[tuple[str, float | None]]):
            """Answer a batch of ``(question, budget)`` requests with one :meth:`Pipeline.stream` call (each question
            at its own budget); per round, yields each request's events (a list, empty when its question had none;
            ``StopIteration`` once it is answered)."""
            questions, budgets = [q for q, _ in asked], [lam for _, lam in asked]
            n = len(questions)
            batch = self.stats.open(n)
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue = asyncio.Queue()
            pipeline = self.pipeline

            def produce():  # the loop runs in the replica's one loop thread (the pipeline is not thread-safe)
                try:
                    for ev in pipeline.stream(questions, lam=budgets if any(b is not None for b in budgets) else None):
                        loop.call_soon_threadsafe(queue.put_nowait, ev)
                except BaseException as e:  # noqa: BLE001 — handed to the requests of the batch
                    loop.call_soon_threadsafe(queue.put_nowait, _Failure(e))
                finally:
                    loop.call_soon_threadsafe(queue.put_nowait, _END)

            self.executor.submit(produce)
            done = [False] * n
            try:
                while not all(done):
                    items = [await queue.get()]
                    while not queue.empty():
                        items.append(queue.get_nowait())
                    groups: list[list[dict[str, Any]]] = [[] for _ in range(n)]
                    end = False
                    for it in items:
                        if it is _END:
                            end = True
                            break
                        if isinstance(it, _Failure):
                            raise RuntimeError(f"the pipeline failed: {type(it.error).__name__}: {it.error}") \
                                from it.error
                        if it["event"] == "answer":
                            it["batch"] = {k: v for k, v in batch.items() if k != "started"}
                        groups[it["question_index"]].append(it)
                    yield [StopIteration if done[i] else groups[i] for i in range(n)]
                    answered = [i for i, g in enumerate(groups) if not done[i] and any(e["event"] == "answer" for e in g)]
                    if answered:  # end those requests' streams now (not at the batch's next events)
                        for i in answered:
                            done[i] = True
                        yield [StopIteration if done[i] else [] for i in range(n)]
                    if end:
                        break
            finally:
                self.stats.close()

        async def events(self, question: str, lam: float | None = None):
            """This request's events, as its batch's loop makes them."""
            async for group in self.answer_batch((question, lam)):
                for ev in group:
                    yield ev

        # ---------------------------------------------------------- OpenAI routes
        @app.post("/v1/chat/completions")
        async def chat_completions(self, request: Request):
            req = parse_chat_request(await request.body(), self.config.models, self.config.max_question_chars)
            if req.lam is not None and not self.pipeline.reads_budget:
                raise APIError(400, f"kairos.lambda: this model's policy ({self.description['policy']}) does not read "
                                    "a budget — it was trained for one λ; serve a cost-conditioned policy to set one "
                                    "per request", "kairos.lambda", "unsupported_parameter")
            rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            if req.stream:
                return StreamingResponse(self._sse(req, rid, created), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            answer = None
            try:
                async for ev in self.events(req.question, req.lam):  # (to its end: the batch closes each stream)
                    if ev["event"] == "answer":
                        answer = ev
            except Exception as e:  # noqa: BLE001 — a failure of the loop: the request gets a 500
                log.exception("answering %r failed", req.question)
                raise APIError(500, f"answering failed: {e}", None, "pipeline_error") from None
            if answer is None:
                raise APIError(500, "the loop ended without an answer", None, "pipeline_error")
            return JSONResponse(completion(rid, created, req.model, answer["answer"], answer["batch"]))

        async def _sse(self, req, rid: str, created: int):
            yield sse(chunk(rid, created, req.model, {"role": "assistant", "content": ""}))
            try:
                async for ev in self.events(req.question, req.lam):
                    if ev["event"] == "step":
                        yield sse(chunk(rid, created, req.model, {}, None,
                                        {"event": "step", "question_id": ev["question_id"], "step": ev["step"]}))
                        continue
                    a = ev["answer"]
                    yield sse(chunk(rid, created, req.model, {"content": a.get("answer") or ""}))
                    yield sse(chunk(rid, created, req.model, {}, finish_reason(a),
                                    {"event": "answer", "answer": a, "batch": ev["batch"]}))
            except Exception as e:  # noqa: BLE001 — an error event (the OpenAI client raises it)
                log.exception("streaming %r failed", req.question)
                yield sse(APIError(500, f"answering failed: {e}", None, "pipeline_error").body())
                return
            yield sse("[DONE]")

        @app.get("/v1/models")
        async def models(self):
            return models_list(self.config.models, int(self.started))

        @app.get("/v1/models/{model}")
        async def model(self, model: str):
            if model not in self.config.models:
                raise APIError(404, f"the model '{model}' does not exist here; served: "
                                    f"{', '.join(self.config.models)}", "model", "model_not_found")
            return models_list([model], int(self.started))["data"][0]

        @app.get("/health")
        async def health(self):
            return {"status": "ok", "replica": self.replica, "uptime_s": round(time.time() - self.started, 3),
                    "models": self.config.models, "pipeline": self.description,
                    "max_batch_size": self.config.max_batch_size, "max_question_chars": self.config.max_question_chars,
                    "traces": bool(self.config.traces), "batches": self.stats.summary()}

        @app.get("/v1/kairos/stats")
        async def stats(self):
            return self.stats.summary()

        # ---------------------------------------------------------- the inspector
        @app.get("/")
        async def index(self):
            return Response(inspector_file("index.html"), media_type=INSPECTOR_FILES["index.html"])

        @app.get("/inspector.js")
        async def script(self):
            return Response(inspector_file("inspector.js"), media_type=INSPECTOR_FILES["inspector.js"])

        @app.get("/inspector.css")
        async def style(self):
            return Response(inspector_file("inspector.css"), media_type=INSPECTOR_FILES["inspector.css"])

        @app.get("/v1/kairos/traces")
        async def traces(self):
            from kairos.traces import list_trace_files

            files = list_trace_files(self.config.traces) if self.config.traces else []
            return {"enabled": bool(self.config.traces), "data": [t.to_dict() for t in files]}

        @app.get("/v1/kairos/traces/{file_id:path}")
        async def trace_file(self, file_id: str, offset: int = 0, limit: int = 500):
            from kairos.traces import MAX_ROWS, read_trace_file

            if not self.config.traces:
                raise APIError(404, "no trace directory: start the server with --traces DIR (a benchmark's output)",
                               None, "not_found")
            if offset < 0 or not 1 <= limit <= MAX_ROWS:
                raise APIError(400, f"offset >= 0 and limit in 1..{MAX_ROWS}", "limit" if offset >= 0 else "offset",
                               "invalid_value")
            try:
                return read_trace_file(self.config.traces, file_id, offset, limit)
            except FileNotFoundError as e:
                raise APIError(404, str(e), "file", "not_found") from None
            except ValueError as e:
                raise APIError(422, str(e), "file", "invalid_file") from None

    return KairosServer.options(
        num_replicas=config.replicas, max_ongoing_requests=config.ongoing_requests(),
        health_check_period_s=config.health_check_period_s, health_check_timeout_s=config.health_check_timeout_s,
        ray_actor_options={"num_cpus": config.replica_cpus, "num_gpus": config.replica_gpus},
    ).bind(config.to_dict())


def _replica_id() -> str:
    from ray import serve

    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 — outside a replica (a test building the class directly)
        return f"local-{os.getpid()}"


# ----------------------------------------------------------------------------------------- running it
def check_port_free(host: str, port: int) -> None:
    """Raise (naming the flag) when ``host:port`` cannot be bound — before Ray starts."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"cannot listen on {host}:{port} ({e.strerror}): another server uses it? pick another "
                             "--port (or --host)") from None


def free_port(host: str = "127.0.0.1", low: int = 20000) -> int:
    """A port that binds on ``host`` now, drawn from below the kernel's ephemeral range (``ip_local_port_range``,
    where every outgoing connection — Ray's own included — takes its local port) and above Ray's worker ports
    (10002–19999): a port the OS hands out (``bind(0)``) is an ephemeral one, which any connection opened before
    the server binds it can take."""
    import random

    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        high = 32767
    if high <= low:
        low, high = 1024, max(1025, high)
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, high)
        try:
            check_port_free(host, port)
        except ValueError:
            continue
        return port
    raise RuntimeError(f"no free port on {host} in {low}-{high}")


#: how the serve config's cluster address is named in errors
RAY_ADDRESS_KEY = "ray_address (--ray-address)"


def init_ray(config: ServeConfig, temp_dir: str | None = None, log_to_driver: bool = True) -> None:
    """Join ``config.ray_address``, else ``RAY_ADDRESS``, once a connect within a deadline shows it runs
    (:func:`envs.ray_address.joined_address`, the rule ``python -m train`` follows too); else start a private local
    Ray cluster (``temp_dir``: its own session directory). Workers import this source tree (``PYTHONPATH``)."""
    import ray

    import kairos
    from envs.ray_address import joined_address

    root = str(Path(kairos.__file__).resolve().parents[1])
    paths = [root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    threads = str(max(1, int(config.replica_cpus)))
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": threads}}
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = joined_address(config.ray_address, RAY_ADDRESS_KEY)
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=log_to_driver)
    else:
        ray.init(address="local", num_cpus=config.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                 log_to_driver=log_to_driver, _temp_dir=temp_dir)


class ServeStartError(RuntimeError):
    """The application did not start (a replica failed to build its pipeline, or Serve could not deploy)."""


def start(config: ServeConfig, temp_dir: str | None = None, log_to_driver: bool = True) -> str:
    """Start Serve and the application (Ray too, unless it runs): returns the base URL once every replica is
    ready. :func:`stop` ends it.

    Raises:
        ServeStartError: a replica could not build its pipeline (its error's last line).
    """
    import ray
    from ray import serve

    config.validate()
    if not ray.is_initialized():
        check_port_free(config.host, config.port)
        init_ray(config, temp_dir, log_to_driver)
    from envs.serving import ResourceRequestError, check_requests, ray_request

    try:  # a replica no node can ever hold: an error now, naming the key, not a deployment that waits forever
        check_requests([(f"replica_cpus / replica_gpus (each of {config.replicas} replicas)",
                         ray_request({"num_cpus": config.replica_cpus, "num_gpus": config.replica_gpus}),
                         config.replicas)])
    except ResourceRequestError as e:
        raise ServeStartError(str(e)) from None
    serve.start(http_options={"host": config.host, "port": config.port})
    try:
        serve.run(build_app(config), name=config.app_name, route_prefix="/")
    except Exception as e:  # noqa: BLE001 — a replica's constructor failed; Serve reports the traceback
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else repr(e))
        raise ServeStartError(f"the '{config.app_name}' application did not start: {why.strip()}") from e
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    return f"http://{host}:{config.port}"


def start_on_a_free_port(config: ServeConfig, attempts: int = 3, **kwargs: Any) -> tuple[str, ServeConfig]:
    """:func:`start` on ``config.port``, and when Serve's proxy finds it taken (another process bound it between
    the draw and the proxy's bind) shut Serve down and start again on another :func:`free_port`. Returns the URL
    and the config it runs with. For benchmarks and tests, which own no fixed port; a user's ``--port`` is kept."""
    from ray import serve

    for _ in range(attempts - 1):
        try:
            return start(config, **kwargs), config
        except Exception as e:  # noqa: BLE001 - Serve wraps the proxy's bind error in a RayTaskError
            if "Failed to bind" not in str(e):
                raise
            log.warning("port %d was taken before Serve's proxy bound it; starting again on another", config.port)
            serve.shutdown()
            config = config.replace(port=free_port(config.host))
    return start(config, **kwargs), config


def stop(config: ServeConfig | None = None, shutdown_ray: bool = True) -> None:
    """End the application: on a cluster of its own (the local one :func:`init_ray` started) Serve shuts down with
    it; on a cluster it joined (``ray_address`` or ``RAY_ADDRESS``) only this application is deleted — other
    applications go on."""
    import ray
    from ray import serve

    from envs.ray_address import address_to_join

    if not ray.is_initialized():
        return
    if config is not None and address_to_join(config.ray_address, RAY_ADDRESS_KEY):
        try:
            serve.delete(config.app_name)
        except Exception as e:  # noqa: BLE001 - already gone, or Serve not running there: nothing to end
            log.debug("serve.delete(%s): %s", config.app_name, e)
    else:
        serve.shutdown()
    if shutdown_ray:
        ray.shutdown()


# ----------------------------------------------------------------------------------------- the CLI
def register(sub: argparse._SubParsersAction) -> None:
    from kairos.cli import add_pipeline_args

    p = sub.add_parser("serve", help="serve a policy behind an OpenAI-compatible endpoint (Ray Serve) with the trace "
                                     "inspector at /", description=__doc__.split("Routes")[0].strip(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, metavar="YAML",
                   help="a serve YAML (ServeConfig keys; the pipeline under `pipeline:`); flags override it")
    srv = p.add_argument_group("the server (ServeConfig)")
    ServeConfig.add_cli_args(srv)
    srv.add_argument("--model", action="append", default=None, metavar="NAME",
                     help="a model name to serve (repeatable; default: kairos)")
    srv.add_argument("--traces", default=None, metavar="DIR",
                     help="benchmark outputs whose per-question trace files the inspector lists")
    srv.add_argument("--ray-address", default=None,
                     help="a running Ray cluster (default: RAY_ADDRESS when set, else start a local one)")
    srv.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    add_pipeline_args(p)
    p.set_defaults(func=run)


def config_from_args(args: Any) -> ServeConfig:
    """The :class:`ServeConfig` of ``--config`` YAML and the flags over it."""
    from envs.core.config import read_yaml_mapping

    data = read_yaml_mapping(args.config) if args.config else {}
    data.update(ServeConfig.cli_overrides(args))
    if args.model:
        data["models"] = list(args.model)
    pipe = dict(data.get("pipeline") or {})
    pipe.update({k: v for k, v in vars(args).items() if k in PipelineSpec.__dataclass_fields__ and v is not None})
    if args.reasoner_option:
        pipe["reasoner_options"] = parse_options(args.reasoner_option)
    data["pipeline"] = pipe
    return ServeConfig.from_dict(data, where=args.config or "kairos serve")


def run(args: Any) -> int:
    config = config_from_args(args)
    config.check_paths()
    config = config.resolved()
    config.validate()
    check_port_free(config.host, config.port)
    if config.replica_gpus == 0:  # (a GPU replica's model may not even load on this host: its replica checks it)
        config.pipeline.check_loaded()  # saved objects against the env, before Ray and the replicas start
    init_ray(config)
    # our handlers replace the one ray.init installs (it exits with status 15): a SIGTERM or Ctrl-C from here on —
    # while the replicas still start too — ends the application and Ray cleanly, with status 0
    stopping = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            url = start(config)
        except ServeStartError as e:
            log.debug("start failed", exc_info=True)
            print(f"kairos serve: error: {e}", file=sys.stderr, flush=True)
            return 2
        from rich.console import Console

        what = config.pipeline.policy or f"{config.pipeline.method} ({config.pipeline.bench})"
        Console(stderr=True).print(
            f"[bold green]kairos serve[/] {config.replicas} replica(s) of {what} at [bold]{url}[/] — POST "
            f"{url}/v1/chat/completions (models: {', '.join(config.models)}), the trace inspector at {url}/; "
            "Ctrl-C stops", soft_wrap=True)  # one line whatever the width: a wrapped URL or name breaks grep and log readers
        while not stopping.wait(1.0):
            pass
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
        stop(config)
    return 0


__all__ = ["BatchStats", "DEPLOYMENT", "INSPECTOR_FILES", "ServeStartError", "build_app", "check_port_free",
           "config_from_args", "init_ray", "inspector_file", "register", "start", "stop"]
