"""The signals an env computes, built from its config: the signal extractor, the learned detectors (probes) it
exposes as scalar signals, the RSUS weights, and the observation groups a step record stores.

Split from :mod:`envs.components` (which re-exports these names) so that module reads as "what an env is made of";
a reasoner service builds the model-side half of the same signals here (:func:`model_side_signals`).
"""

from __future__ import annotations

from typing import Any

from agents.signals.base import SignalUnavailable
from envs.core.registry import Registry
from envs.env_config import EnvConfig
from envs.observation import episode_fields, group_fields, group_signals

#: loaders of the learned detectors ``EnvConfig.probes`` exposes as scalar signals: ``fn(path, expected_model_id)``
#: -> callable ``(step, state) -> probability``. Named by string: the probes live in the policies layer above.
DETECTORS: Registry = Registry("detector")
DETECTORS.register_path("probe", "policies.probes.probe:Probe.load")

#: SeaKR's EigenScore: sampled continuations per step (k extra generations, charged to the step's tokens and
#: seconds; the micro-world and Hugging Face reasoners)
EIGEN_SAMPLES = 4


def can_sample_states(reasoner, backend: str) -> bool:
    """Whether EigenScore's sampled hidden states can come from ``reasoner``: the micro-world LM, or a backend with
    ``generate_sampled`` (the Hugging Face one)."""
    return backend == "micro" or callable(getattr(reasoner, "generate_sampled", None))


def probe_value(probe, step, state) -> float:
    """A probe's score of one step; NaN (masked) where the step lacks what it reads — e.g. a step with no content
    tokens has no pooled hidden states (:class:`~agents.signals.base.SignalUnavailable`), as PUlSE itself masks it.
    Used by the env and by the reasoner service that scores probes next to the model."""
    try:
        return float(probe(step, state))
    except SignalUnavailable:
        return float("nan")


def record_groups(config: EnvConfig) -> list[str]:
    """The observation groups a step record stores (``content`` = the three embedding fields; the question's is
    taken by the env from the episode's first record, so records store the step and context ones)."""
    out: list[str] = []
    fields = group_fields()
    for g in config.signals:
        for x in fields[g]:
            if x not in out:
                out.append(x)
    return out


def observation_groups(config: EnvConfig, feature_dims: dict[str, int]) -> dict[str, int]:
    """Every observation group and its dimension: the record groups plus the episode groups of ``content``."""
    dims = dict(feature_dims)
    for g, src in episode_fields().items():
        if src in feature_dims:
            dims[g] = feature_dims[src]
    return dims

def with_probe_pulse_layers(config: EnvConfig) -> EnvConfig:
    """``config`` with ``pulse_layers_from`` resolved into ``pulse_layers`` (unchanged when it is unset)."""
    if not config.pulse_layers_from:
        return config
    return config.replace(pulse_layers=probe_pulse_layers(config), pulse_layers_from=None)


def probe_pulse_layers(config: EnvConfig) -> list[int]:
    """The PUlSE interval recorded with the probe ``pulse_layers_from`` names (its ``spec.layers``); an error naming
    the file when it is not a PUlSE probe, or when ``pulse_layers`` asks for another interval."""
    import json
    from pathlib import Path

    meta = Path(config.pulse_layers_from) / "probe.json"
    if not meta.is_file():
        raise FileNotFoundError(f"EnvConfig.pulse_layers_from: no probe at {config.pulse_layers_from} (missing "
                                "probe.json; train one with `kairos probe train --signal pulse --layers chosen --out …`)")
    spec = json.loads(meta.read_text()).get("spec", {})
    if spec.get("signal") != "pulse" or not spec.get("layers"):
        raise ValueError(f"EnvConfig.pulse_layers_from: {meta} is a '{spec.get('signal')}' probe, not a PUlSE one "
                         "with a layer interval")
    layers = [int(x) for x in spec["layers"]]
    if config.pulse_layers and list(config.pulse_layers) != layers:
        raise ValueError(f"EnvConfig: pulse_layers {config.pulse_layers} disagrees with the interval {layers} recorded "
                         f"in {meta}; set one of them")
    return layers


def rsus_weights(config: EnvConfig) -> tuple[float, float, float]:
    """RSUS weights of an env: the weight set ``rsus_options.weights`` names (``paper`` by default: docs/design.md §4's
    0.40 / 0.35 / 0.25; or one fitted with ``kairos train rsus-weights``), 0 for a component not in
    ``rsus_components``. Raises when every configured component has weight 0."""
    from agents.signals.rsus import load_rsus_weights

    spec = config.rsus_options.weights or "paper"
    full = load_rsus_weights(spec)
    w = tuple(float(x) if c in config.rsus_components else 0.0 for x, c in zip(full, ("verb", "ent", "cons")))
    if "rsus" in config.signals and sum(w) <= 0:
        raise ValueError(f"EnvConfig.rsus_options.weights '{spec}' gives weight 0 to every configured component "
                         f"{config.rsus_components} ({dict(zip(('verb', 'ent', 'cons'), full))})")
    return w  # type: ignore[return-value]


def confidence_question(config: EnvConfig):
    """The side question an env of ``config`` asks its reasoner after every step
    (:class:`agents.reasoners.confidence.ConfidenceQuestion`), or ``None`` when its signals do not need it: asked
    exactly when RSUS is computed with ``verb`` in ``rsus_components``, a weight on it, and no learned proxy
    (``rsus_options.verb_proxy``) in its place. Whether the backend can answer is the reasoner's to say
    (:func:`agents.reasoners.confidence.confidence_unavailable`)."""
    from agents.reasoners.confidence import ConfidenceQuestion

    fields = group_signals()
    computes_rsus = "rsus" in [n for g in record_groups(config) for n in fields[g]]
    if not computes_rsus or "verb" not in config.rsus_components or config.rsus_options.verb_proxy:
        return None
    if rsus_weights(config)[0] <= 0:
        return None
    tokens = config.rsus_options.verb_max_tokens
    return ConfidenceQuestion() if tokens is None else ConfidenceQuestion(max_tokens=int(tokens))


def reads_hidden_states(name: str) -> bool:
    """Whether the registered signal ``name`` reads the model's internals (hidden states or attentions)."""
    from agents.signals.base import SIGNALS

    req = getattr(SIGNALS.get(name), "requires", ())
    return "hidden_states" in req or "attentions" in req


def _extractor(config: EnvConfig, reasoner, n_layers: int, hidden: int, corpus_texts: list[str], backend: str,
               model_id: str | None = None, model_side_only: bool = False):
    """The signal extractor of an env: observation groups -> registered signals (``model_side_only``: just those
    that read the model's internals — what a reasoner service computes next to the model)."""
    from agents.signals.extractor import SignalExtractor
    from agents.signals.rsus import RSUSConfig

    fields = group_signals()
    names = [n for g in record_groups(config) for n in fields[g]]
    if model_side_only:
        names = [n for n in names if reads_hidden_states(n)]
    opts = config.rsus_options.rsus_config()
    w = rsus_weights(config)
    rsus_cfg = RSUSConfig(w_verb=w[0], w_ent=w[1], w_cons=w[2], seed=config.seed, **opts)
    layers = tuple(config.pulse_layers) if config.pulse_layers else None
    options = {}
    if "pulse" in names:
        options["pulse"] = {"layers": layers} if layers else {}
    if "rsus" in names:
        options["rsus"] = {"config": rsus_cfg, "corpus": corpus_texts, "reasoner": reasoner}
        if config.rsus_options.verb_proxy:  # U_verb from a trained proxy (a probe of kind rsus_proxy)
            proxy = DETECTORS.make("probe", config.rsus_options.verb_proxy, expected_model_id=model_id,
                                   expected_spec={"signal": "rsus_proxy"})
            options["rsus"]["u_verb"] = proxy
    if "eigenscore" in names:
        if not can_sample_states(reasoner, backend):
            raise ValueError(f"EnvConfig.signals 'eigen' (SeaKR EigenScore) samples continuations of each step with "
                             f"their hidden states; reasoner '{backend}' cannot (the micro-world ('micro') and Hugging "
                             "Face ('hf') reasoners can; vLLM and HTTP backends do not)")
        from agents.signals.hidden import sample_states

        def states_fn(step, state, _r=reasoner, _seed=config.seed):
            return sample_states(_r, state, k=EIGEN_SAMPLES, seed=_seed, greedy=step)

        options["eigenscore"] = {"states_fn": states_fn}
    for n in ("step_embedding", "context_embedding"):
        if n in names and config.content_layers:
            options[n] = {"layers": tuple(config.content_layers)}
    return SignalExtractor(names, reasoner.capabilities, backend=backend, options=options,
                           context={"n_layers": n_layers, "hidden_size": hidden} if n_layers else {})


def model_facts(reasoner) -> tuple[int, int]:
    """``(n_layers, hidden_size)`` of a reasoner's model (0, 0 when it has none it can tell)."""
    if hasattr(reasoner, "n_layers") and hasattr(reasoner, "hidden_size"):
        return int(reasoner.n_layers or 0), int(reasoner.hidden_size or 0)
    mc = getattr(getattr(reasoner, "model", None), "config", None)
    return getattr(mc, "num_hidden_layers", 0) or 0, getattr(mc, "hidden_size", 0) or 0


def model_side_signals(config: EnvConfig, reasoner) -> tuple[Any, dict[str, Any]]:
    """``(extractor, probes)`` of the signals of an env of ``config`` that read the model's internals, built as the
    env builds them: what a reasoner service computes next to the model, so a step travels with its features and
    without its per-layer hidden states (:mod:`envs.services`)."""
    n_layers, hidden = model_facts(reasoner)
    config = with_probe_pulse_layers(config)  # as build_components
    if config.reasoner == "micro":
        from envs.core.microworld.artifact import world_model_id

        mid = world_model_id(reasoner.world)
        if not config.pulse_layers:  # as microworld_components
            config = config.replace(pulse_layers=[0, n_layers])
    else:
        from agents.reasoners.registry import reasoner_model_id

        mid = reasoner_model_id(reasoner, config.reasoner)
    ex = _extractor(config, reasoner, n_layers, hidden, [], config.reasoner, mid, model_side_only=True)
    probes = {name: DETECTORS.make("probe", path, expected_model_id=mid, model_layers=n_layers)
              for name, path in config.probes.items()}
    return ex, probes
