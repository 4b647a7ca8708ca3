"""Hidden-state signals (docs/design.md §4): PUlSE trajectories, CoE-R / CoE-C, ReProbe input, SeaKR EigenScore.

All of them read the per-layer states the reasoner captured in the generation pass
(``Step.hidden_mean`` / ``Step.hidden_last``, shape ``[n_layers + 1, d]``, row 0 = embedding output);
none runs a second pass over the step. The array functions accept leading batch axes (``[..., L+1, d]``),
so a whole step dataset is featurised with the same code the live signals use.

Note on Hugging Face models: the last row of ``hidden_states`` is taken *after* the final norm, so the
transition ``L-1 -> L`` includes that norm's rescaling (the default PUlSE interval stops before it).

Example:
    >>> import numpy as np
    >>> h = np.array([[1., 0.], [0., 1.], [0., 2.]])
    >>> m_theta = pulse_features(h, (0, 2))       # m = [sqrt 2, 1], theta = [pi/2, 0]
    >>> [round(float(x), 4) for x in m_theta]
    [1.4142, 1.0, 1.5708, 0.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal

EPS = 1e-12

#: known layer intervals of the design (model id substring, lower case) -> [a, b]
LAYER_PRESETS: dict[str, tuple[int, int]] = {"qwen2.5-7b": (7, 25), "llama-3.1-8b": (6, 31)}

PARTS = ("both", "magnitude", "angle")
#: pooling of the hidden states over a step's tokens: the states' mean or the last token's states
POOLINGS = ("mean", "last")
#: PUlSE's poolings: those of :data:`POOLINGS` (features of the pooled states), or the per-token features
#: (each token's transitions, ``Step.token_transitions``) pooled over the step's tokens by max or mean
PULSE_POOLINGS = ("mean", "last", "max", "token_mean")


def default_interval(n_layers: int, model_id: str | None = None) -> tuple[int, int]:
    """The default PUlSE interval ``[a, b]`` over rows ``0..n_layers`` (choose the real one on validation).

    A preset of :data:`LAYER_PRESETS` when ``model_id`` names one, else the middle of the stack:
    ``a = floor(n/4)``, ``b = round(0.9 n)`` (Qwen2.5-7B's 28 layers give the design's 7–25).

    Example:
        >>> default_interval(28), default_interval(6), default_interval(32, "meta-llama/Llama-3.1-8B")
        ((7, 25), (1, 5), (6, 31))
    """
    if model_id:
        low = model_id.lower()
        for key, iv in LAYER_PRESETS.items():
            if key in low:
                return iv
    if n_layers < 1:
        raise ValueError(f"need at least one layer, got n_layers={n_layers}")
    a = n_layers // 4
    b = max(a + 1, min(n_layers, int(round(0.9 * n_layers))))
    return a, b


def _check_interval(layers: tuple[int, int], n_rows: int) -> tuple[int, int]:
    a, b = int(layers[0]), int(layers[1])
    if not 0 <= a < b <= n_rows - 1:
        raise ValueError(f"layer interval [{a}, {b}] is outside the model's rows 0..{n_rows - 1} "
                         f"(need 0 <= a < b <= {n_rows - 1})")
    return a, b


def transitions(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and angle of every consecutive layer pair.

    Args:
        h: ``[..., n, d]`` states of ``n`` consecutive layers.

    Returns:
        ``m`` and ``theta``, each ``[..., n - 1]``: ``m_l = ||h_{l+1} - h_l||_2`` and
        ``theta_l = arccos(clip(cos(h_l, h_{l+1}), -1, 1))``. A zero vector has cosine 0 with anything
        (angle pi/2) by convention.
    """
    h = np.asarray(h, dtype=np.float64)
    x, y = h[..., :-1, :], h[..., 1:, :]
    m = np.linalg.norm(y - x, axis=-1)
    cos = (x * y).sum(-1) / np.maximum(np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1), EPS)
    return m, np.arccos(np.clip(cos, -1.0, 1.0))


def pulse_features(h: np.ndarray, layers: tuple[int, int] | None = None, parts: str = "both") -> np.ndarray:
    """PUlSE trajectory feature ``[m_a … m_{b-1}, θ_a … θ_{b-1}]`` of pooled states ``h`` (``[..., L+1, d]``).

    Args:
        h: per-layer pooled states (row 0 = embeddings); leading batch axes allowed.
        layers: interval ``[a, b]`` of rows (default: the whole stack ``[0, L]``).
        parts: ``both`` (2·(b−a) numbers), ``magnitude`` or ``angle`` (b−a numbers; ablations).
    """
    if parts not in PARTS:
        raise ValueError(f"unknown PUlSE parts '{parts}' (valid: {', '.join(PARTS)})")
    h = np.asarray(h)
    a, b = _check_interval(layers if layers is not None else (0, h.shape[-2] - 1), h.shape[-2])
    m, theta = transitions(h[..., a: b + 1, :])
    out = {"both": lambda: np.concatenate([m, theta], axis=-1), "magnitude": lambda: m, "angle": lambda: theta}
    return out[parts]().astype(np.float32)


def pool_token_transitions(tt: np.ndarray, pooling: str) -> np.ndarray:
    """Per-token transitions ``[T, 2, L]`` (``Step.token_transitions``) pooled over the ``T`` tokens: ``[2, L]``.

    ``max``: each magnitude and each angle's maximum over the tokens (the strongest per-token change — the pooling
    arXiv 2605.18549 finds best for detection, there over per-token probe scores); ``token_mean``: their mean
    (unlike ``mean`` pooling, which takes the transitions of the mean-pooled states).

    Example:
        >>> tt = np.array([[[1., 2.], [0.5, 0.25]], [[3., 0.], [1.5, 0.0]]])      # 2 tokens, L = 2
        >>> pool_token_transitions(tt, "max").tolist(), pool_token_transitions(tt, "token_mean").tolist()
        ([[3.0, 2.0], [1.5, 0.25]], [[2.0, 1.0], [1.0, 0.125]])
    """
    tt = np.asarray(tt, dtype=np.float64)
    if tt.ndim != 3 or tt.shape[1] != 2 or tt.shape[0] == 0:
        raise ValueError(f"per-token transitions must be [T >= 1, 2, L], got shape {list(tt.shape)}")
    if pooling == "max":
        return tt.max(0).astype(np.float32)
    if pooling == "token_mean":
        return tt.mean(0).astype(np.float32)
    raise ValueError(f"unknown per-token pooling '{pooling}' (valid: max, token_mean)")


def pulse_from_transitions(mt: np.ndarray, layers: tuple[int, int] | None = None, parts: str = "both") -> np.ndarray:
    """PUlSE feature ``[m_a … m_{b-1}, θ_a … θ_{b-1}]`` from pooled transitions ``mt`` (``[..., 2, L]``, the
    output of :func:`pool_token_transitions`): the same layout as :func:`pulse_features`.

    Example:
        >>> mt = np.array([[3., 2., 1.], [0.75, 0.5, 0.25]])      # L = 3
        >>> pulse_from_transitions(mt, (1, 3)).tolist()
        [2.0, 1.0, 0.5, 0.25]
    """
    if parts not in PARTS:
        raise ValueError(f"unknown PUlSE parts '{parts}' (valid: {', '.join(PARTS)})")
    mt = np.asarray(mt)
    a, b = _check_interval(layers if layers is not None else (0, mt.shape[-1]), mt.shape[-1] + 1)
    m, theta = mt[..., 0, a:b], mt[..., 1, a:b]
    out = {"both": lambda: np.concatenate([m, theta], axis=-1), "magnitude": lambda: m, "angle": lambda: theta}
    return out[parts]().astype(np.float32)


def step_pulse(step: Step, layers: tuple[int, int], pooling: str = "mean", parts: str = "both") -> np.ndarray:
    """PUlSE features of one step under any of :data:`PULSE_POOLINGS` (the signal's and the probes' one path);
    :class:`~agents.signals.base.SignalUnavailable` when the step lacks what the pooling reads."""
    if pooling not in PULSE_POOLINGS:
        raise ValueError(f"unknown PUlSE pooling '{pooling}' (valid: {', '.join(PULSE_POOLINGS)})")
    if pooling in POOLINGS:
        return pulse_features(_pooled(step, pooling), layers, parts)
    if step.token_transitions is None or len(step.token_transitions) == 0:
        raise SignalUnavailable(f"step {step.index} has no per-token layer transitions ({pooling} pooling; the "
                                "reasoner did not capture hidden states at its content tokens)")
    return pulse_from_transitions(pool_token_transitions(step.token_transitions, pooling), layers, parts)


def coe_scores(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CoE-R and CoE-C over the whole stack ``0..L`` (higher = more likely correct).

    ``M_l = ||h_{l+1} − h_l|| / ||h_L − h_0||``, ``A_l = θ_l / arccos(cos(h_L, h_0))``;
    CoE-R = mean M − mean A; CoE-C = ``|| mean_l (M_l cos A_l, M_l sin A_l) ||``.

    Args:
        h: ``[..., L+1, d]`` per-layer states.

    Returns:
        ``(coe_r, coe_c)``, each of shape ``[...]``.
    """
    h = np.asarray(h, dtype=np.float64)
    m, theta = transitions(h)
    ends = np.stack([h[..., 0, :], h[..., -1, :]], axis=-2)
    m_total, theta_total = transitions(ends)
    M = m / np.maximum(m_total, EPS)
    A = theta / np.maximum(theta_total, EPS)
    coe_r = M.mean(-1) - A.mean(-1)
    coe_c = np.hypot((M * np.cos(A)).mean(-1), (M * np.sin(A)).mean(-1))
    return coe_r, coe_c


def eigenscore(Z: np.ndarray, alpha: float = 1e-3) -> float:
    """SeaKR EigenScore ``(1/k) · logdet(Z J Zᵀ + αI)`` with ``J = I_d − 11ᵀ/d``.

    Centering convention: ``J`` is ``d × d`` and multiplies from the right, so each *row* (one sample's
    state) is centred over its own ``d`` features — **not** over the ``k`` samples. Adding a constant to
    every feature of a sample leaves the score unchanged; shifting all samples by a common vector does not.

    Args:
        Z: ``[k, d]`` mid-layer last-token states of the ``k`` sampled continuations (+ greedy).
        alpha: ridge that keeps the ``k × k`` Gram matrix non-singular.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 1:
        raise ValueError(f"EigenScore needs a [k, d] matrix, got shape {Z.shape}")
    k = Z.shape[0]
    Zc = Z - Z.mean(axis=1, keepdims=True)  # = Z @ J (J is symmetric and idempotent, so Z J Zᵀ = Zc Zcᵀ)
    sign, logdet = np.linalg.slogdet(Zc @ Zc.T + alpha * np.eye(k))
    if sign <= 0:  # cannot happen for alpha > 0 (positive definite); guard against alpha <= 0
        raise ValueError(f"EigenScore: Z J Zᵀ + {alpha}·I is not positive definite")
    return float(logdet / k)


def _pooled(step: Step, pooling: str) -> np.ndarray:
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling '{pooling}' (valid: {', '.join(POOLINGS)})")
    h = step.hidden_mean if pooling == "mean" else step.hidden_last
    if h is None:
        raise SignalUnavailable(f"step {step.index} has no captured hidden states ({pooling} pooling)")
    return h


@register_signal("pulse", group="pulse")
class Pulse(SignalBase):
    """PUlSE trajectory over the layer interval ``[a, b]`` (2·(b−a) numbers: magnitudes then angles).

    Args:
        layers: ``(a, b)``; default :func:`default_interval` of ``n_layers`` (pass it explicitly for a
            fixed observation shape on backends without hidden states).
        pooling: ``mean`` over the step's generating positions (default) or ``last`` (``hidden_last``): the
            features of the pooled states; or ``max`` / ``token_mean``: each token's features
            (``Step.token_transitions``) pooled over the step's tokens (:func:`pool_token_transitions`).
        parts: ``both`` | ``magnitude`` | ``angle`` (ablations).
        n_layers, model_id: model facts (filled in by the extractor).

    Example:
        >>> import numpy as np
        >>> from agents.reasoners.base import Step
        >>> s = Step(1, "", "", False, hidden_mean=np.array([[1., 0.], [0., 1.], [0., 2.]]))
        >>> [round(float(x), 4) for x in Pulse(layers=(0, 2))(s)]
        [1.4142, 1.0, 1.5708, 0.0]
    """

    label = "PUlSE"
    requires = ("hidden_states",)
    bounds = (0.0, math.inf)

    def __init__(self, layers: tuple[int, int] | list[int] | None = None, pooling: str = "mean",
                 parts: str = "both", n_layers: int | None = None, model_id: str | None = None):
        if pooling not in PULSE_POOLINGS:
            raise ValueError(f"unknown PUlSE pooling '{pooling}' (valid: {', '.join(PULSE_POOLINGS)})")
        if parts not in PARTS:
            raise ValueError(f"unknown PUlSE parts '{parts}' (valid: {', '.join(PARTS)})")
        if layers is None and n_layers is not None:
            layers = default_interval(n_layers, model_id)
        self.layers = (int(layers[0]), int(layers[1])) if layers is not None else None
        if self.layers is not None and not 0 <= self.layers[0] < self.layers[1]:
            raise ValueError(f"PUlSE layer interval must satisfy 0 <= a < b, got {list(self.layers)}")
        if self.layers is not None and n_layers is not None:
            _check_interval(self.layers, n_layers + 1)
        self.pooling, self.parts = pooling, parts
        n = (self.layers[1] - self.layers[0]) if self.layers else 0
        self.dim = 2 * n if parts == "both" else n

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        if self.layers is None:
            raise SignalUnavailable("PUlSE has no layer interval (give layers= or n_layers=)")
        return step_pulse(step, self.layers, self.pooling, self.parts)


class _CoE(SignalBase):
    requires = ("hidden_states",)
    error_direction = -1
    which = 0

    def __init__(self, pooling: str = "mean"):
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling '{pooling}' (valid: {', '.join(POOLINGS)})")
        self.pooling = pooling

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        return np.array([coe_scores(_pooled(step, self.pooling))[self.which]], dtype=np.float32)


@register_signal("coe_r", group="coe", scalars={"coe_r": 0})
class CoER(_CoE):
    """CoE-R (training-free, whole stack): mean normalised magnitude − mean normalised angle."""

    label = "CoE-R"
    which = 0


@register_signal("coe_c", group="coe", scalars={"coe_c": 0})
class CoEC(_CoE):
    """CoE-C (training-free, whole stack): length of the mean (M cos A, M sin A) vector."""

    label = "CoE-C"
    which = 1
    bounds = (0.0, math.inf)


@register_signal("reprobe")
class ReProbeInput(SignalBase):
    """ReProbe input: every layer's state at the step's last token, flattened (``(L+1)·d`` numbers).

    The probe reshapes it to ``[L+1, d]`` (one token per layer).
    """

    label = "ReProbe"
    requires = ("hidden_states",)

    def __init__(self, pooling: str = "last", n_layers: int | None = None, hidden_size: int | None = None):
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling '{pooling}' (valid: {', '.join(POOLINGS)})")
        self.pooling = pooling
        self.shape = (n_layers + 1, hidden_size) if n_layers is not None and hidden_size is not None else None
        self.dim = self.shape[0] * self.shape[1] if self.shape else 0

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        h = np.asarray(_pooled(step, self.pooling), dtype=np.float32)
        if self.shape is not None and h.shape != self.shape:
            raise ValueError(f"ReProbe expects states of shape {self.shape}, step has {h.shape}")
        return h.reshape(-1)


@register_signal("eigenscore", group="eigen", scalars={"eigenscore": 0})
class EigenScore(SignalBase):
    """SeaKR EigenScore of ``k`` sampled continuations (higher = more inconsistent = more likely wrong).

    The ``[k, d]`` states come from ``step.meta["eigen_states"]`` when set (the env samples every new step of a
    batch in one call: :func:`sample_states_batch`), else from ``states_fn(step, state)`` (e.g. a partial of
    :func:`sample_states`).
    """

    label = "SeaKR"
    requires = ("hidden_states", "sampling")
    error_direction = 1

    def __init__(self, alpha: float = 1e-3, states_fn=None):
        self.alpha = alpha
        self.states_fn = states_fn

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        if "eigen_states" in step.meta:  # precomputed (the env samples every new step of a batch in one call)
            Z = step.meta["eigen_states"]
        else:
            Z = self.states_fn(step, state) if self.states_fn is not None else None
        if Z is None:
            raise SignalUnavailable(f"step {step.index} has no sampled states for EigenScore "
                                    "(set step.meta['eigen_states'] or pass states_fn)")
        return np.array([eigenscore(Z, self.alpha)], dtype=np.float32)


@dataclass
class SampledStates:
    """What EigenScore's sampling gave one state: ``Z`` (``[k (+1), d]``, ``None`` when no sample had content
    tokens), the ``tokens`` the ``k`` samples generated and their share of the generation calls' wall ``seconds``
    (the env charges both to the step: :meth:`envs.components.Components.precompute`)."""

    Z: np.ndarray | None
    tokens: int = 0
    seconds: float = 0.0


def sample_states(reasoner, state, k: int = 4, layer: int | None = None, seed: int = 0,
                  greedy: Step | None = None, temperature: float = 1.0) -> np.ndarray:
    """``[k (+1), d]`` mid-layer last-token states of ``k`` sampled next steps of ``state``.

    Args:
        reasoner: a :class:`~agents.reasoners.micro.MicroReasoner` or any reasoner with ``generate_sampled`` (the
            Hugging Face one: :meth:`~agents.reasoners.hf.HFReasoner.generate_sampled`).
        state: the state the step is generated from.
        k: number of samples.
        layer: hidden-state row (default ``n_layers // 2``, the middle of the stack as in INSIDE / SeaKR).
        seed: sampling seed.
        greedy: the greedy step; its ``hidden_last[layer]`` is appended as the last row when given.
        temperature: sampling temperature.
    """
    Z = sample_states_batch(reasoner, [state], k, layer, seed, [greedy], temperature)[0].Z
    if Z is None:
        raise SignalUnavailable("no sampled continuation had content tokens")
    return Z


def sample_states_batch(reasoner, states: list, k: int = 4, layer: int | None = None, seed: int = 0,
                        greedy: list[Step | None] | None = None, temperature: float = 1.0) -> list[SampledStates]:
    """:func:`sample_states` of many states in batched generation calls (``reasoner.max_batch`` rows each, 64 when
    it has none), with what the samples cost. Sample ``j`` of every state draws from its own RNG seeded ``(seed,
    j)`` (Gumbel-max), so a state's samples are the same alone or in any batch. The state at the last content token
    of each sample (``hidden_last``: the input that generated the end of the line) is its row; a sample without
    content tokens adds none."""
    import time

    import torch

    layer = reasoner.n_layers // 2 if layer is None else layer
    greedy = greedy or [None] * len(states)
    rows_in = [s for s in states for _ in range(k)]
    per_call = max(k, (getattr(reasoner, "max_batch", 64) // k) * k)
    outs, secs = [], []
    for i in range(0, len(rows_in), per_call):
        chunk = rows_in[i: i + per_call]
        gens = [torch.Generator().manual_seed(seed * 1_000_003 + j % k) for j in range(len(chunk))]
        t0 = time.perf_counter()
        outs += _sampled_outputs(reasoner, chunk, gens, temperature)
        secs += [(time.perf_counter() - t0) / len(chunk)] * len(chunk)
    result = []
    for n, g in enumerate(greedy):
        mine = outs[n * k: (n + 1) * k]
        rows = [o.hidden_last[layer] for o in mine if o.hidden_last is not None]
        if g is not None and g.hidden_last is not None:
            rows.append(g.hidden_last[layer])
        result.append(SampledStates(np.stack(rows).astype(np.float32) if rows else None,
                                    sum(len(o.ids) for o in mine), float(sum(secs[n * k: (n + 1) * k]))))
    return result


def _sampled_outputs(reasoner, states: list, gens: list, temperature: float) -> list:
    """One sampled step of each state (hidden states captured; one RNG per row): the reasoner's own
    ``generate_sampled`` (the Hugging Face backend), else the micro-world LM's generation
    (:class:`~agents.reasoners.micro.MicroReasoner`'s model, stop ids, header token)."""
    fn = getattr(reasoner, "generate_sampled", None)
    if callable(fn):
        return [o for o, _ in fn(states, gens, temperature)]
    from agents.reasoners.stepgen import generate_steps

    return generate_steps(reasoner.model, [s.gen for s in states], stop_ids=reasoner.stop_ids,
                          header_end_id=reasoner.colon_id, pad_id=reasoner.tok.pad_id,
                          max_new_tokens=reasoner.max_step_tokens, capture_hidden=True, sample=True,
                          temperature=temperature, generator=gens)


def micro_sample_states_batch(reasoner, states: list, k: int = 4, layer: int | None = None, seed: int = 0,
                              greedy: list[Step | None] | None = None, temperature: float = 1.0
                              ) -> list[np.ndarray | None]:
    """The ``Z`` of each state of :func:`sample_states_batch` (its historical micro-world name)."""
    return [s.Z for s in sample_states_batch(reasoner, states, k, layer, seed, greedy, temperature)]


#: :func:`sample_states` under its historical micro-world name
micro_sample_states = sample_states


def default_content_layers(n_layers: int) -> tuple[int, ...]:
    """The content embedding's default layers: the middle of the stack and the last layer (``n_layers``)."""
    return (max(1, n_layers // 2), n_layers)


class _Embedding(SignalBase):
    """The reasoner's own hidden state at chosen layers, concatenated (content, not confidence).

    From the generation pass itself (no second forward): a feature vector that only a learned policy
    interprets (``error_direction = 0``). The env reduces nothing; a policy projects it (see
    :class:`policies.rl.net.PolicySpec` ``reduce``)."""

    requires = ("hidden_states",)
    attr = "hidden_mean"

    def __init__(self, layers: tuple[int, ...] | list[int] | None = None, n_layers: int | None = None,
                 hidden_size: int | None = None):
        if layers is None:
            if n_layers is None:
                raise ValueError(f"{type(self).__name__}: give layers= or n_layers= (model facts)")
            layers = default_content_layers(n_layers)
        self.layers = tuple(int(x) for x in layers)
        if not self.layers or min(self.layers) < 0 or (n_layers is not None and max(self.layers) > n_layers):
            raise ValueError(f"{type(self).__name__}: layers {list(self.layers)} must lie in [0, {n_layers}]")
        if hidden_size is None:
            raise ValueError(f"{type(self).__name__}: hidden_size (a model fact) is needed for a fixed dimension")
        self.dim = len(self.layers) * int(hidden_size)

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        h = getattr(step, self.attr)
        if h is None:
            raise SignalUnavailable(f"step {step.index} has no captured {self.attr}")
        return np.concatenate([np.asarray(h[layer], dtype=np.float32) for layer in self.layers])


@register_signal("step_embedding", group="content", field="step_embedding", dtype="float16")
class StepEmbedding(_Embedding):
    """What the step says: the hidden state pooled (mean) over the step's content tokens at ``layers``.

    Example:
        >>> from agents.reasoners.base import Step
        >>> s = Step(1, "", "", False, hidden_mean=np.array([[1., 0.], [0., 1.], [0., 2.]]))
        >>> StepEmbedding(layers=(1, 2), hidden_size=2)(s).tolist()
        [0.0, 1.0, 0.0, 2.0]
    """

    label = "step embedding"
    attr = "hidden_mean"


@register_signal("context_embedding", group="content", field="context_embedding", dtype="float16",
                 episode_field="question_embedding")
class ContextEmbedding(_Embedding):
    """Where the chain stands: the hidden state at the last context token before the step (question + earlier
    steps + injected evidence), the input that generated the step's first token. At step 1 it is the
    question's embedding (the env keeps it as ``question_embedding`` for the whole episode)."""

    label = "context embedding"
    attr = "hidden_first"
