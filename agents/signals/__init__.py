"""Per-step signals (docs/design.md §4) and the extractor that masks what a backend cannot provide.

Flat public API::

    from agents.signals import SignalExtractor, make_signal, pulse_features, coe_scores, eigenscore
"""

from agents.signals.attention import RIND, attention_received, rind_scores
from agents.signals.base import (
    SIGNALS,
    MissingCapabilityError,
    Signal,
    SignalBase,
    SignalUnavailable,
    available_signals,
    make_signal,
    register_signal,
    retrieve_direction,
    signal_meta,
)
from agents.signals.extractor import SignalExtractor
from agents.signals.hidden import (
    CoEC,
    CoER,
    EigenScore,
    Pulse,
    ReProbeInput,
    coe_scores,
    default_interval,
    eigenscore,
    micro_sample_states,
    pulse_features,
    sample_states,
    sample_states_batch,
    transitions,
)
from agents.signals.output import PPL, Entropy, MaxProb, MinProb, OutputGroup
from agents.signals.rsus import (
    CONFIDENCE_PROMPT,
    RSUS,
    BM25Scores,
    RSUSConfig,
    ScoreSource,
    VerbalConfidence,
    agreement,
    extract_entities,
    fit_weights,
    has_discourse_marker,
    surface_features,
    u_cons,
    u_ent,
)

__all__ = [
    "CONFIDENCE_PROMPT", "PPL", "RIND", "RSUS", "SIGNALS", "BM25Scores", "CoEC", "CoER", "EigenScore", "Entropy",
    "MaxProb", "MinProb", "MissingCapabilityError", "OutputGroup", "Pulse", "RSUSConfig", "ReProbeInput",
    "ScoreSource", "Signal", "SignalBase", "SignalExtractor", "SignalUnavailable", "VerbalConfidence",
    "agreement", "attention_received", "available_signals", "coe_scores", "default_interval", "eigenscore",
    "extract_entities", "fit_weights", "has_discourse_marker", "make_signal", "micro_sample_states",
    "pulse_features", "register_signal", "retrieve_direction", "rind_scores", "sample_states", "sample_states_batch",
    "signal_meta", "surface_features", "transitions", "u_cons", "u_ent",
]
