"""Configuration of the retrieval-timing environment (``kairos/RetrievalTiming-v0`` and its presets).

An :class:`EnvConfig` is built once, on the driver, and carried as such: :meth:`EnvConfig.from_preset` is the one
place a preset (:data:`PRESETS`) is merged with a config's env settings; :meth:`EnvConfig.with_overrides` applies a
partial override (:class:`EnvOverrides`, e.g. a benchmark method's ``env``). Its nested settings are typed too
(:class:`RSUSOptions`, :class:`FactHoldout`, the service specs of :mod:`envs.serving`). Across a process boundary
(Ray EnvRunners, warm-start workers, the reasoner service) it travels as ``to_dict()`` and is rebuilt with
``from_dict``.

Example:
    >>> cfg = EnvConfig.from_preset("hotpotqa", {"split": "dev[0:10]"})
    >>> cfg.reasoner, cfg.split
    ('hf', 'dev[0:10]')
    >>> cfg.with_overrides({"injection": "front"}).injection
    'front'
    >>> EnvConfig.from_dict({"rsus_options": {"n_sampels": 2}}, where="TrainConfig.env_config")
    Traceback (most recent call last):
    ...
    envs.core.config_files.ConfigError: TrainConfig.env_config.rsus_options: unknown config key 'n_sampels' (valid keys: agreement, bm25_k, cons_only_at_markers, n_samples, verb_max_tokens, verb_proxy, weights); did you mean 'n_samples'?
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.config import (
    ConfigBase,
    ConfigError,
    coerce_value,
    config_mapping,
    helpf,
    read_yaml_mapping,
    unknown_key_error,
)
from envs.env_options import ChainSettings, FactHoldout, RSUSOptions, pending_probes  # noqa: F401 (re-exported)
from envs.observation import config_groups, signal_names
from envs.serving import CacheServiceSpec, ReasonerServiceSpec, RetrieverServiceSpec
from envs.tasks import TASKS

#: the reasoners that expose last-layer attentions (DRAGIN's RIND signal and QFS query need them)
ATTENTION_REASONERS = ("micro", "hf")
#: the reasoners that sample continuations with their hidden states (SeaKR's EigenScore, signal group 'eigen')
SAMPLED_STATE_REASONERS = ("micro", "hf")

#: the env presets (Gymnasium ids ``kairos/MicroWorld-v0``, ``kairos/HotpotQA-v0``; ``TrainConfig.env``): the
#: EnvConfig keys a preset sets under a config's own. Merged only by :meth:`EnvConfig.from_preset`.
PRESETS: dict[str, dict[str, Any]] = {
    "microworld": {"task": "microworld", "reasoner": "micro", "retriever": "bm25"},
    "hotpotqa": {"task": "hotpotqa", "reasoner": "hf", "retriever": "bm25", "split": "dev"},
}


def _off_holdout(data: dict[str, Any]) -> dict[str, Any]:
    """``fact_holdout: {}`` (how the settings have always said "off") is ``None``."""
    if isinstance(data.get("fact_holdout"), dict) and not data["fact_holdout"]:
        data = {**data, "fact_holdout": None}
    return data


@dataclass
class EnvConfig(ConfigBase):
    """Everything that determines an episode's outcome (it is part of the trajectory-cache key)."""

    task: str = helpf("microworld", "question source, a registered task (envs.tasks.TASKS): microworld | "
                                    "microworld_chain (long chains: see chain) | hotpotqa | medmcqa")
    split: str = helpf("train", "question split (micro-world: train | dev | test; hotpotqa: dev or a range 'dev[0:100]')")
    reasoner: str = helpf("micro", "reasoner backend name (micro | hf | openai)")
    reasoner_options: dict = helpf({}, "the backend's own settings (its config class's fields), e.g. for openai: "
                                       "{base_url: http://127.0.0.1:8000/v1, model: qwen, api_key_env: MY_KEY}; "
                                       "for hf: {model: <path>}")
    artifact: str | None = helpf(None, "micro-world artifact directory (default: the shipped one)")
    max_questions: int | None = helpf(None, "use only the first N questions of the split (a training pool)")
    fact_holdout: FactHoldout | None = helpf(None, "micro-world fact-disjoint condition: {share, seed, keep: train "
                                                   "| test} — hold out a seeded share of the facts; 'train' keeps "
                                                   "the questions whose gold chain avoids them, 'test' those that "
                                                   "need one (null or {}: off)")
    chain: ChainSettings | None = helpf(None, "task microworld_chain: {questions, hops, count, seed, distractors} — "
                                              "each episode a chain of `questions` sub-questions of `hops` hops "
                                              "(questions x (hops + 1) steps), every sub-answer graded; null with "
                                              "that task: the defaults")
    data_path: str | None = helpf(None, "dataset file for real-data tasks (default: the shared data)")
    corpus: str | None = helpf(None, "what the retriever searches (real-data tasks): null = the task's own (its file's "
                                     "paragraphs; MedMCQA: explanations outside the split), 'paragraphs', "
                                     "'medmcqa_explanations[:PATH]', 'DATASET:PATH', 'flashrag:PATH' or PATH.jsonl "
                                     "(a FlashRAG corpus); a prebuilt index_path must have been built from it")
    retriever: str = helpf("bm25", "a registered retriever (agents.retrievers.index.RETRIEVERS): bm25 | colbert")
    index_path: str | None = helpf(None, "prebuilt index directory (default: build BM25 in memory)")
    top_k: int = helpf(3, "passages retrieved per query; the first passages_per_retrieval of them not used before "
                          "are injected")
    passages_per_retrieval: int = helpf(1, "passages injected per retrieval: the first N of the top_k not injected "
                                           "before for this question (1: the PUlSE protocol; IRCoT and Single RAG as "
                                           "published inject the top K, deduplicated); at most top_k", ge=1)
    max_evidence_passages: int | None = helpf(None, "at most this many passages injected in one episode, all "
                                                    "retrievals together (IRCoT caps the paragraphs it collects at "
                                                    "15): a retrieval past it injects only what still fits — nothing, "
                                                    "and the step stands; the call still counts. null: no cap",
                                              ge=1)
    injection: str = helpf("step", "where evidence goes: step (right before the regenerated step) | front")
    compress_evidence: bool = helpf(False, "keep only the evidence sentences the flagged step attends to "
                                    "(relative attention importance >= tau_rel; agents.compression)")
    prefetch: bool = helpf(False, "speculative prefetch: after each retrieval, search ahead on a background thread "
                                  "for the next step's likely queries (the retrieved passages' entities x the "
                                  "question's and the task's relations, phrased as the info_need mode asks) so the next "
                                  "lookup can be a cache hit (agents.retrievers.cache.Prefetcher). Same results: not "
                                  "part of the cache namespace")
    prefetch_queries: int = helpf(16, "speculative prefetch: at most this many queries searched ahead per retrieval")
    kv_reuse: bool = helpf(True, "regenerate a step from the live state's KV cache (only the evidence is prefilled); "
                                 "false re-encodes the whole prefix, as an integration that re-prompts the model does "
                                 "(same output; the efficiency benchmark's naive setting). Not part of the cache "
                                 "namespace")
    self_refine: str | None = helpf(None, "SeaKR's self-aware refinement: 'eigenscore' — after a retrieval, keep "
                                          "whichever of the original and the evidence-conditioned step has the lower "
                                          "EigenScore (needs signals 'eigen'), or another registered "
                                          "after-regeneration hook (envs.hooks.AFTER_REGENERATION); null: the "
                                          "regenerated step stands")
    rerank: str | None = helpf(None, "SeaKR's self-aware re-ranking: 'eigenscore' — a retrieval regenerates the "
                                     "step once with each top_k passage not used yet and injects the one whose "
                                     "regenerated step has the lowest EigenScore (needs signals 'eigen'), or another "
                                     "registered retrieval selector (envs.hooks.RETRIEVAL_SELECTORS); null: the "
                                     "first unused passage")
    tau_rel: float = helpf(0.45, "evidence compression: relative importance threshold in [0, 1]")
    query_modes: list[str] = helpf(["step", "content_words", "question_step", "info_need"],
                                   "query formulations QueryGen chooses from (the first is the default)")
    querygen: bool = helpf(False, "action = (retrieve?, query mode) instead of retrieve?")
    max_steps: int = helpf(8, "truncate the episode after this many accepted steps")
    answer_closing: bool = helpf(True, "a chain that reaches max_steps or ends without a usable answer line (none, "
                                       "empty, or 'Answer: Answer:') is asked for the answer once ('Answer:' "
                                       "written for the reasoner), counted as a step in tokens and cost")
    max_retrievals_per_step: int = helpf(1, "retrievals allowed on one step (then the step is accepted)")
    max_retrievals_per_question: int = helpf(4, "retrievals allowed in one episode (>= 0; no 'unlimited' value: "
                                                "max_steps x max_retrievals_per_step is no cap)")
    costs: dict[str, float] = helpf({"retrieval_calls": 0.1}, "cost name or dotted path -> weight λ")
    cost_params: dict[str, dict] = helpf({}, "cost name -> constructor kwargs")
    observe_costs: list[str] = helpf([], "costs whose weight λ the policy observes (observation field 'costs': "
                                         "log(λ + 0.01) each): a cost-conditioned policy, trained over a range of λ "
                                         "and told the budget at run time (`--lambda`). Not part of the cache "
                                         "namespace")
    signals: list[str] = helpf(["pulse", "output", "rsus"], "observation groups: pulse, output, rsus, coe, eigen (SeaKR EigenScore: "
                                                                 "k sampled continuations per step; micro or hf), "
                                                                 "rind (DRAGIN RIND: "
                                                                 "eager attention; micro or hf), content (question_embedding, "
                                                                 "step_embedding, context_embedding: what the "
                                                                 "step is about, from the generation pass)")
    pulse_layers: list[int] | None = helpf(None, "PUlSE layer interval [a, b] (default: the interval of "
                                                 "pulse_layers_from; else the whole stack [0, L] on the micro-world, "
                                                 "the middle of the stack (agents.signals.hidden.default_interval) "
                                                 "on other reasoners)")
    pulse_layers_from: str | None = helpf(None, "a PUlSE probe directory: the observation's PUlSE features use the "
                                                "interval recorded with it (`kairos probe train --signal pulse "
                                                "--layers chosen` picks it on validation); the interval, not the "
                                                "path, is part of the cache namespace")
    content_layers: list[int] | None = helpf(None, "layers of the content embeddings (group 'content': question, "
                                                   "step and context embeddings from the reasoner's own hidden "
                                                   "states; default: the middle and the last layer)")
    rsus_components: list[str] = helpf(["ent", "cons"], "RSUS parts to compute (verb: asked of the model after each "
                                                        "step — hf / vllm with a chat template, openai with api: chat "
                                                        "— or from rsus_options.verb_proxy; masked otherwise)")
    rsus_options: RSUSOptions = field(default_factory=RSUSOptions, metadata={"help": (
        "RSUS settings (agents.signals.rsus.RSUSConfig): n_samples (U_cons k, default 3), "
        "cons_only_at_markers (U_cons only at steps with a discourse marker), agreement "
        "(jaccard | exact), bm25_k (U_ent hits per entity), weights (a weight set by name "
        "or path: paper = 0.40/0.35/0.25, or one fitted with `kairos train rsus-weights`), "
        "verb_proxy (a probe directory of kind rsus_proxy: U_verb for reasoners that cannot "
        "state a confidence), verb_max_tokens (U_verb by prompt: the reply's token budget, default 16)")})
    probes: dict[str, str] = helpf({}, "learned detectors to expose as signals: name -> saved probe directory "
                                       "(e.g. {pulse_prob: runs/probes/pulse}); checked against the reasoner")
    cache_path: str | None = helpf(None, "trajectory cache SQLite file (None: in memory)")
    cache_service: CacheServiceSpec | None = helpf(None, "a running trajectory-cache server, {name, namespace} as "
                                            "envs.cache_service.start_cache_service returns it (the training driver "
                                            "sets it from TrainConfig.cache_service): records are read and written "
                                            "through it instead of the file; never part of the cache namespace")
    retriever_service: RetrieverServiceSpec | None = helpf(None, "a running retriever service, {name, namespace, replicas} as "
                                                "envs.services.start_retriever_service returns it (the "
                                                "training driver sets it from TrainConfig.retriever_service): the "
                                                "env's searches go to it; never part of the cache namespace")
    reasoner_service: ReasonerServiceSpec | None = helpf(None, "a running reasoner service, {name, namespace, replicas} as "
                                               "envs.services.start_service returns it (the training "
                                               "driver sets it from TrainConfig.reasoner_service): the env's reasoner "
                                               "is a client of it, no model in the env's process; unset: the env "
                                               "builds its own reasoner. Never part of the cache namespace")
    max_step_tokens: int = helpf(24, "cut a runaway step after this many tokens (>= 1)")
    seed: int = helpf(0, "seed of the env's own randomness (sampling for consistency signals)")
    plugins: list[str] = helpf([], "plug-in modules imported before the env's names are checked — in every process "
                                   "that builds the env (EnvRunners, warm-start workers, services): a user's "
                                   "signal, trigger, cost, retriever or query mode registers on import "
                                   "(envs.core.plugins); a training or bench config's top-level 'plugins' land here")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> EnvConfig:
        """As :meth:`ConfigBase.from_dict` (``plugins`` imported first, so their names are valid here)."""
        return super().from_dict(_off_holdout(config_mapping(cls, data, where)), where)

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`ConfigBase.to_dict`; ``plugins`` only when set (an env without plug-ins keeps its cache
        namespace)."""
        out = super().to_dict()
        for key in ("plugins", "observe_costs", "chain"):  # unset: the dict (and the cache namespace) as before the key
            if not out.get(key):
                out.pop(key, None)
        return out

    @classmethod
    def from_preset(cls, preset: str | None, overrides: dict[str, Any] | EnvOverrides | None = None,
                    where: str | None = None) -> EnvConfig:
        """The env of a preset (:data:`PRESETS`; ``None``: none) with ``overrides`` over it — the one place a
        preset is merged. Errors name ``where`` and the key."""
        if preset is not None and preset not in PRESETS:
            raise ConfigError(f"{where or cls.__name__}: unknown preset '{preset}' (valid: {', '.join(PRESETS)})")
        if isinstance(overrides, EnvOverrides):
            overrides = overrides.to_dict()
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ConfigError(f"{where or cls.__name__}: the env config is a mapping of EnvConfig keys (e.g. "
                              f"{{'split': 'dev'}}), got {type(overrides).__name__} {overrides!r:.60}")
        return cls.from_dict({**(PRESETS[preset] if preset else {}), **(overrides or {})}, where=where)

    def with_overrides(self, overrides: dict[str, Any] | EnvOverrides | None, where: str | None = None) -> EnvConfig:
        """This env with some keys replaced (a key replaces the whole value: ``rsus_options: {…}`` is the new RSUS
        settings), validated as a whole; errors name ``where`` and the key."""
        if not isinstance(overrides, EnvOverrides):
            overrides = EnvOverrides.from_dict(overrides or {}, where=where)
        if not overrides:
            return self
        return type(self).from_dict({**self.to_dict(), **overrides.to_dict()}, where=where)

    def overrides_over(self, base: EnvConfig) -> dict[str, Any]:
        """The keys whose value differs from ``base``'s (what this env sets over, e.g., its preset)."""
        mine, theirs = self.to_dict(), base.to_dict()
        return {k: v for k, v in mine.items() if theirs.get(k) != v}

    def validate(self, where: str = "EnvConfig") -> None:
        """Checks across fields and against the registries (each nested setting checks its own values)."""
        if self.injection not in ("step", "front"):
            raise ConfigError(f"{where}: injection must be 'step' or 'front', got '{self.injection}'")
        if self.top_k < 1 or self.max_steps < 1:
            raise ConfigError(f"{where}: top_k and max_steps must be >= 1")
        if not 0.0 <= self.tau_rel <= 1.0:
            raise ConfigError(f"{where}: tau_rel must be in [0, 1], got {self.tau_rel}")
        from envs.hooks import AFTER_REGENERATION, RETRIEVAL_SELECTORS

        for key, hooks in (("self_refine", AFTER_REGENERATION), ("rerank", RETRIEVAL_SELECTORS)):
            value = getattr(self, key)
            if value is not None and value not in hooks and ":" not in str(value):
                names = ", ".join(f"'{n}'" for n in hooks.names())
                raise ConfigError(f"{where}: {key} must be null or a registered {hooks.kind} ({names}; or a dotted "
                                  f"path package.module:Class), got {value!r}")
        if self.self_refine == "eigenscore" and "eigen" not in self.signals:
            raise ConfigError(f"{where}: self_refine 'eigenscore' compares the EigenScore of two steps: add 'eigen' "
                              "to signals")
        if self.rerank == "eigenscore" and "eigen" not in self.signals:
            raise ConfigError(f"{where}: rerank 'eigenscore' ranks passages by the EigenScore of the step each one "
                              "regenerates: add 'eigen' to signals")
        if self.rerank == "eigenscore" and self.compress_evidence:
            raise ConfigError(f"{where}: rerank and compress_evidence together are not supported (the re-ranked "
                              "candidates are injected whole): set one of them")
        if self.passages_per_retrieval > self.top_k:
            raise ConfigError(f"{where}: passages_per_retrieval ({self.passages_per_retrieval}) injects more passages "
                              f"than a search returns (top_k {self.top_k}): set top_k >= passages_per_retrieval")
        if self.rerank and self.passages_per_retrieval != 1:
            raise ConfigError(f"{where}: rerank '{self.rerank}' picks the one passage a retrieval injects: set "
                              "passages_per_retrieval: 1 (or rerank: null)")
        if self.prefetch_queries < 1:
            raise ConfigError(f"{where}: prefetch_queries must be >= 1, got {self.prefetch_queries}")
        if self.prefetch and self.retriever_service is not None:
            raise ConfigError(f"{where}: prefetch fills the env's own query cache; with retriever_service set the "
                              "searches run in the service — set prefetch: false")
        if self.max_retrievals_per_step < 1:
            raise ConfigError(f"{where}: max_retrievals_per_step must be >= 1, got {self.max_retrievals_per_step}")
        if self.max_retrievals_per_question < 0:
            most = self.max_steps * self.max_retrievals_per_step
            raise ConfigError(f"{where}: max_retrievals_per_question must be >= 0 (0: never retrieve), got "
                              f"{self.max_retrievals_per_question}; there is no 'unlimited' value (-1 is not one): "
                              f"an episode retrieves at most max_steps x max_retrievals_per_step = {most} times, so "
                              f"set max_retrievals_per_question: {most} for no cap")
        if self.max_step_tokens < 1:
            raise ConfigError(f"{where}: max_step_tokens must be >= 1 (tokens one reasoning step may have before it "
                              f"is cut), got {self.max_step_tokens}")
        if not self.query_modes:
            raise ConfigError(f"{where}: query_modes must name at least one query formulation")
        from agents.query import MASKED_PREFIX, MODE_FACTORIES, QUERY_MODES, get_query_mode
        from agents.reasoners.registry import REASONERS
        from agents.retrievers.index import RETRIEVERS

        TASKS.check(self.task, f"{where}.task", ConfigError)
        REASONERS.check(self.reasoner, f"{where}.reasoner", ConfigError)
        RETRIEVERS.check(self.retriever, f"{where}.retriever", ConfigError)
        if self.reasoner_options:  # the backend's own config class (it depends on the reasoner) checks them
            from envs.core.registry import import_dotted

            cls_path = REASONERS.info(self.reasoner).get("config")
            if cls_path is None:
                raise ConfigError(f"{where}.reasoner_options: reasoner '{self.reasoner}' takes no options")
            import_dotted(cls_path).from_dict({**self.reasoner_options, "max_step_tokens": self.max_step_tokens},
                                              where=f"{where}.reasoner_options")
        if ("rind" in self.signals or "qfs" in self.query_modes) and self.reasoner not in ATTENTION_REASONERS:
            raise ConfigError(f"{where}: signals 'rind' / query mode 'qfs' (DRAGIN) read the reasoner's attentions; "
                              f"reasoner '{self.reasoner}' does not expose them (reasoners that do: "
                              f"{', '.join(ATTENTION_REASONERS)}): drop the DRAGIN method or run it on one of those")
        if "eigen" in self.signals and self.reasoner not in SAMPLED_STATE_REASONERS:
            raise ConfigError(f"{where}: signals 'eigen' (SeaKR's EigenScore) read the hidden states of sampled "
                              f"continuations; reasoner '{self.reasoner}' does not sample them (reasoners that do: "
                              f"{', '.join(SAMPLED_STATE_REASONERS)}): drop the SeaKR method or run it on one of those")
        for mode in self.query_modes:
            if mode.partition(":")[0] not in MODE_FACTORIES:
                QUERY_MODES.check(mode, f"{where}.query_modes", ConfigError)
            elif mode.partition(":")[0] == MASKED_PREFIX:  # its argument (β) is checked here, on the driver
                try:
                    get_query_mode(mode)
                except ValueError as e:
                    raise ConfigError(f"{where}.query_modes: {e}") from None
        groups, names = config_groups(), signal_names()
        bad = [s for s in self.signals if s not in groups and s not in names]
        if bad:
            raise ConfigError(f"{where}: unknown observation group '{bad[0]}' in 'signals' (valid: "
                              f"{', '.join(groups)}; or a registered signal's name: {', '.join(names)})")
        from envs.costs import COSTS

        for key, names_ in (("costs", self.costs), ("cost_params", self.cost_params)):
            for name in names_:  # checked here, on the driver (a plug-in's cost once its module is imported)
                COSTS.check(name, f"{where}.{key}", ConfigError)
        for name, w in self.costs.items():  # finite on load (ConfigBase); a weight is a price: never negative
            if w < 0:
                raise ConfigError(f"{where}: key 'costs.{name}' must be a finite number >= 0 (a cost weight λ), "
                                  f"got {w}")
        unpriced = [c for c in self.observe_costs if c not in self.costs]
        if unpriced or len(set(self.observe_costs)) != len(self.observe_costs):
            raise ConfigError(f"{where}.observe_costs: each entry must name a cost of 'costs' once "
                              f"({', '.join(self.costs)}), got {self.observe_costs}")
        missing = sorted(set(self.cost_params) - set(self.costs))
        if missing:
            raise ConfigError(f"{where}.cost_params: params given for '{missing[0]}', which has no weight in costs "
                              f"({', '.join(self.costs)})")
        if self.rsus_options.verb_proxy and "verb" not in self.rsus_components:
            raise ConfigError(f"{where}: rsus_options.verb_proxy is set but 'verb' is not in rsus_components")
        if self.max_questions is not None and self.max_questions < 1:
            raise ConfigError(f"{where}: max_questions must be >= 1 (or null for the whole split), got "
                              f"{self.max_questions}")
        if self.fact_holdout is not None and self.task != "microworld":
            raise ConfigError(f"{where}: fact_holdout is a micro-world condition (task: microworld)")
        if self.chain is not None and self.task != "microworld_chain":
            raise ConfigError(f"{where}: chain holds the settings of task 'microworld_chain' (long chains of "
                              f"sub-questions); set task: microworld_chain or drop chain (task is '{self.task}')")
        if self.task == "microworld_chain":
            chain = self.chain or ChainSettings()
            if self.max_steps < chain.steps:
                raise ConfigError(f"{where}: max_steps ({self.max_steps}) would cut the chain before its last "
                                  f"sub-question: {chain.questions} sub-questions x ({chain.hops} hops + the answer "
                                  f"line) = {chain.steps} steps; set max_steps: {chain.steps} or more")
        if self.content_layers is not None and (not self.content_layers or min(self.content_layers) < 0):
            raise ConfigError(f"{where}: content_layers must be a non-empty list of layer indices >= 0, got "
                              f"{self.content_layers}")
        if self.pulse_layers is not None and (len(self.pulse_layers) != 2 or self.pulse_layers[0] >= self.pulse_layers[1]):
            raise ConfigError(f"{where}: pulse_layers must be [a, b] with a < b, got {self.pulse_layers}")


_ENV_FIELDS = {f.name for f in dataclasses.fields(EnvConfig)}


class EnvOverrides(ConfigBase):
    """A partial :class:`EnvConfig`: some of its keys, each value typed as its field (nested settings as their
    typed configs) — a benchmark method's ``env``. Loading checks the keys and values (errors name the key path);
    :meth:`EnvConfig.with_overrides` applies it and checks the whole env. :meth:`to_dict` is the keys as given
    (so a method's per-question files, named by a hash of it, keep their names)."""

    def __init__(self, values: dict[str, Any] | None = None):
        self._values: dict[str, Any] = dict(values or {})

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> EnvOverrides:
        where = where or cls.__name__
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping of EnvConfig keys, got {data!r}")
        data = _off_holdout(dict(data or {}))
        unknown = [k for k in data if k not in _ENV_FIELDS]
        if unknown:
            raise unknown_key_error(where, unknown[0], _ENV_FIELDS)
        hints = typing.get_type_hints(EnvConfig)
        return cls({k: coerce_value(k, hints[k], v, where) for k, v in data.items()})

    def to_dict(self) -> dict[str, Any]:
        import json

        from envs.core.config import plain_data

        return json.loads(json.dumps({k: plain_data(v) for k, v in self._values.items()}, default=str))

    def updated(self, **values: Any) -> EnvOverrides:
        """A copy with more keys set (checked like :meth:`from_dict`)."""
        return EnvOverrides.from_dict({**self.to_dict(), **values})

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def keys(self):
        return self._values.keys()

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __bool__(self) -> bool:
        return bool(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnvOverrides) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EnvOverrides({self.to_dict()!r})"


def env_config_from_file(path: str | Path, split: str | None = None) -> EnvConfig:
    """The env of a bench or env YAML (its ``env`` section, or the whole file), with ``split`` set; errors name the
    file and the key."""
    data = read_yaml_mapping(path)
    section = "env" in data
    env_cfg = dict(data["env"] if section else data)
    if split:
        env_cfg["split"] = split
    return EnvConfig.from_dict(env_cfg, where=f"{path}" + (".env" if section else ""))
