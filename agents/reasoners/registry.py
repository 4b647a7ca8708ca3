"""Reasoner backends by name: ``micro``, ``hf``, ``vllm``, ``openai`` — plus a dotted-path escape hatch.

A factory takes keyword options and returns a :class:`~agents.reasoners.base.Reasoner`. Heavy imports
(torch, transformers, the micro-world artifact) happen inside the factories, so importing this module is
cheap. ``"package.module:Factory"`` works anywhere a name does.

Example:
    >>> sorted(available_reasoners())
    ['hf', 'micro', 'openai', 'vllm']
    >>> r = make_reasoner("openai", base_url="http://127.0.0.1:8000/v1", model="qwen")
    >>> r.capabilities.hidden_states
    False
    >>> @register_reasoner("echo")
    ... def _echo(**kw):
    ...     return "an object implementing the Reasoner protocol"
    >>> make_reasoner("echo")
    'an object implementing the Reasoner protocol'
    >>> _ = REASONERS.unregister("echo")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs.core.registry import Registry

#: reasoner factories by name (``REASONERS.names()``; a dotted path ``package.module:Factory`` works too)
REASONERS: Registry[Callable[..., Any]] = Registry("reasoner")


def register_reasoner(name: str, config: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a reasoner factory under ``name`` (re-registering a name is an error).

    ``config``: dotted path of the backend's config class (its fields are the factory's options), so
    ``EnvConfig.reasoner_options`` is validated on the driver, naming the key."""
    return REASONERS.register(name, config=config)


def available_reasoners() -> list[str]:
    """Registered reasoner names."""
    return REASONERS.names()


def resolve_reasoner(name: str) -> Callable[..., Any]:
    """The factory registered as ``name``, or the object at dotted path ``package.module:attr``."""
    obj = REASONERS.get(name)
    if not callable(obj):
        raise ValueError(f"reasoner '{name}' is not callable")
    return obj


def make_reasoner(name: str, **options: Any) -> Any:
    """Build the reasoner ``name`` with ``options`` (the backend's config fields, or its factory kwargs)."""
    return resolve_reasoner(name)(**options)


def reasoner_model_id(reasoner, backend: str) -> str:
    """The model id probes trained on a real-data reasoner are saved with: ``<backend>:<model>`` (e.g.
    ``hf:smollm2-135m-instruct``, or the local model path)."""
    return f"{backend}:{getattr(getattr(reasoner, 'cfg', None), 'model', backend)}"


def _config(cls, config: Any, options: dict[str, Any]):
    """A backend config from a config object / dict / None, with keyword overrides (validated)."""
    if config is None:
        base: dict[str, Any] = {}
    elif isinstance(config, cls):
        base = config.to_dict()
    elif isinstance(config, dict):
        base = dict(config)
    else:
        raise TypeError(f"config must be a {cls.__name__}, a dict or None, got {type(config).__name__}")
    return cls.from_dict({**base, **options})


@register_reasoner("micro")
def micro_reasoner(artifact: str | None = None, world: Any = None, **options: Any):
    """The micro-world reasoner over a loaded world, or the artifact at ``artifact`` (default: shipped)."""
    from agents.reasoners.micro import MicroReasoner

    if world is None:
        from envs.core.microworld.artifact import load_artifact

        world = load_artifact(artifact)
    return MicroReasoner(world, **options)


@register_reasoner("hf", config="agents.reasoners.hf:HFReasonerConfig")
def hf_reasoner(config: Any = None, **options: Any):
    """A transformers reasoner (:class:`~agents.reasoners.hf.HFReasonerConfig` fields as options)."""
    from agents.reasoners.hf import HFReasoner, HFReasonerConfig

    return HFReasoner.from_config(_config(HFReasonerConfig, config, options))


@register_reasoner("openai", config="agents.reasoners.openai_compat:OpenAIReasonerConfig")
def openai_reasoner(config: Any = None, **options: Any):
    """An OpenAI-compatible endpoint (:class:`~agents.reasoners.openai_compat.OpenAIReasonerConfig` fields)."""
    from agents.reasoners.openai_compat import OpenAIReasoner, OpenAIReasonerConfig

    return OpenAIReasoner(_config(OpenAIReasonerConfig, config, options))


@register_reasoner("vllm", config="agents.reasoners.vllm:VLLMReasonerConfig")
def vllm_reasoner(config: Any = None, **options: Any):
    """vLLM's engine in this process (:class:`~agents.reasoners.vllm.VLLMReasonerConfig` fields as options)."""
    from agents.reasoners.vllm import VLLMReasoner, VLLMReasonerConfig

    return VLLMReasoner.from_config(_config(VLLMReasonerConfig, config, options))
