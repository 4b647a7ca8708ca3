"""Configuration of the retrieval-timing environment (``kairos/RetrievalTiming-v0`` and its presets)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf, read_yaml_mapping
from envs.observation import config_groups
from envs.tasks import TASKS


@dataclass
class EnvConfig(ConfigBase):
    """Everything that determines an episode's outcome (it is part of the trajectory-cache key)."""

    task: str = helpf("microworld", "question source, a registered task (envs.tasks.TASKS): microworld | hotpotqa | "
                                    "medmcqa")
    split: str = helpf("train", "question split (micro-world: train | dev | test; hotpotqa: dev or a range 'dev[0:100]')")
    reasoner: str = helpf("micro", "reasoner backend name (micro | hf | openai)")
    reasoner_options: dict = helpf({}, "the backend's own settings (its config class's fields), e.g. for openai: "
                                       "{base_url: http://127.0.0.1:8000/v1, model: qwen, api_key_env: MY_KEY}; "
                                       "for hf: {model: <path>}")
    artifact: str | None = helpf(None, "micro-world artifact directory (default: the shipped one)")
    max_questions: int | None = helpf(None, "use only the first N questions of the split (a training pool)")
    fact_holdout: dict = helpf({}, "micro-world fact-disjoint condition: {share, seed, keep: train | test} — hold "
                                   "out a seeded share of the facts; 'train' keeps the questions whose gold chain "
                                   "avoids them, 'test' those that need one ({}: off)")
    data_path: str | None = helpf(None, "dataset file for real-data tasks (default: the shared data)")
    corpus: str | None = helpf(None, "what the retriever searches (real-data tasks): null = the task's own (its file's "
                                     "paragraphs; MedMCQA: explanations outside the split), 'paragraphs', "
                                     "'medmcqa_explanations[:PATH]', 'DATASET:PATH', 'flashrag:PATH' or PATH.jsonl "
                                     "(a FlashRAG corpus); a prebuilt index_path must have been built from it")
    retriever: str = helpf("bm25", "a registered retriever (agents.retrievers.index.RETRIEVERS): bm25 | colbert")
    index_path: str | None = helpf(None, "prebuilt index directory (default: build BM25 in memory)")
    top_k: int = helpf(3, "passages retrieved per query; the first one not used before is injected")
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
                                          "EigenScore (needs signals 'eigen'); null: the regenerated step stands")
    rerank: str | None = helpf(None, "SeaKR's self-aware re-ranking: 'eigenscore' — a retrieval regenerates the "
                                     "step once with each top_k passage not used yet and injects the one whose "
                                     "regenerated step has the lowest EigenScore (needs signals 'eigen'); null: the "
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
    max_retrievals_per_question: int = helpf(4, "retrievals allowed in one episode")
    costs: dict[str, float] = helpf({"retrieval_calls": 0.1}, "cost name or dotted path -> weight λ")
    cost_params: dict[str, dict] = helpf({}, "cost name -> constructor kwargs")
    signals: list[str] = helpf(["pulse", "output", "rsus"], "observation groups: pulse, output, rsus, coe, eigen (SeaKR EigenScore, "
                                                                 "micro-world only), rind (DRAGIN RIND: "
                                                                 "eager attention; micro or hf), content (question_embedding, "
                                                                 "step_embedding, context_embedding: what the "
                                                                 "step is about, from the generation pass)")
    pulse_layers: list[int] | None = helpf(None, "PUlSE layer interval [a, b] (default: the whole stack, or the "
                                                 "interval of pulse_layers_from)")
    pulse_layers_from: str | None = helpf(None, "a PUlSE probe directory: the observation's PUlSE features use the "
                                                "interval recorded with it (`kairos probe train --signal pulse "
                                                "--layers chosen` picks it on validation); the interval, not the "
                                                "path, is part of the cache namespace")
    content_layers: list[int] | None = helpf(None, "layers of the content embeddings (group 'content': question, "
                                                   "step and context embeddings from the reasoner's own hidden "
                                                   "states; default: the middle and the last layer)")
    rsus_components: list[str] = helpf(["ent", "cons"], "RSUS parts to compute (verb needs a proxy or a chatty LM)")
    rsus_options: dict = helpf({}, "RSUS settings (agents.signals.rsus.RSUSConfig): n_samples (U_cons k, default 3), "
                                   "cons_only_at_markers (U_cons only at steps with a discourse marker), agreement "
                                   "(jaccard | exact), bm25_k (U_ent hits per entity), weights (a weight set by name "
                                   "or path: paper = 0.40/0.35/0.25, or one fitted with `kairos train rsus-weights`), "
                                   "verb_proxy (a probe directory of kind rsus_proxy: U_verb for reasoners that cannot "
                                   "state a confidence)")
    probes: dict[str, str] = helpf({}, "learned detectors to expose as signals: name -> saved probe directory "
                                       "(e.g. {pulse_prob: runs/probes/pulse}); checked against the reasoner")
    cache_path: str | None = helpf(None, "trajectory cache SQLite file (None: in memory)")
    cache_service: dict | None = helpf(None, "a running trajectory-cache server, {name, namespace} as "
                                            "envs.cache_service.start_cache_service returns it (the training driver "
                                            "sets it from TrainConfig.cache_service): records are read and written "
                                            "through it instead of the file; never part of the cache namespace")
    retriever_service: dict | None = helpf(None, "a running retriever service, {name, namespace, replicas} as "
                                                "envs.services.start_retriever_service returns it (the "
                                                "training driver sets it from TrainConfig.retriever_service): the "
                                                "env's searches go to it; never part of the cache namespace")
    reasoner_service: dict | None = helpf(None, "a running reasoner service, {name, namespace, replicas} as "
                                               "envs.services.start_service returns it (the training "
                                               "driver sets it from TrainConfig.reasoner_service): the env's reasoner "
                                               "is a client of it, no model in the env's process; unset: the env "
                                               "builds its own reasoner. Never part of the cache namespace")
    max_step_tokens: int = helpf(24, "cut a runaway step after this many tokens")
    seed: int = helpf(0, "seed of the env's own randomness (sampling for consistency signals)")

    def validate(self) -> None:
        if self.injection not in ("step", "front"):
            raise ConfigError(f"EnvConfig: injection must be 'step' or 'front', got '{self.injection}'")
        if self.top_k < 1 or self.max_steps < 1:
            raise ConfigError("EnvConfig: top_k and max_steps must be >= 1")
        if not 0.0 <= self.tau_rel <= 1.0:
            raise ConfigError(f"EnvConfig: tau_rel must be in [0, 1], got {self.tau_rel}")
        if self.self_refine not in (None, "eigenscore"):
            raise ConfigError(f"EnvConfig: self_refine must be null or 'eigenscore', got {self.self_refine!r}")
        if self.self_refine and "eigen" not in self.signals:
            raise ConfigError("EnvConfig: self_refine 'eigenscore' compares the EigenScore of two steps: add 'eigen' "
                              "to signals")
        if self.rerank not in (None, "eigenscore"):
            raise ConfigError(f"EnvConfig: rerank must be null or 'eigenscore', got {self.rerank!r}")
        if self.rerank and "eigen" not in self.signals:
            raise ConfigError("EnvConfig: rerank 'eigenscore' ranks passages by the EigenScore of the step each one "
                              "regenerates: add 'eigen' to signals")
        if self.rerank and self.compress_evidence:
            raise ConfigError("EnvConfig: rerank and compress_evidence together are not supported (the re-ranked "
                              "candidates are injected whole): set one of them")
        if self.prefetch_queries < 1:
            raise ConfigError(f"EnvConfig: prefetch_queries must be >= 1, got {self.prefetch_queries}")
        if self.prefetch and self.retriever_service is not None:
            raise ConfigError("EnvConfig: prefetch fills the env's own query cache; with retriever_service set the "
                              "searches run in the service — set prefetch: false")
        if self.max_retrievals_per_step < 1:
            raise ConfigError("EnvConfig: max_retrievals_per_step must be >= 1")
        if self.cache_service is not None:
            from envs.cache_service import check_cache_spec

            check_cache_spec(self.cache_service)
        if self.retriever_service is not None:
            from envs.serving import check_retriever_spec

            check_retriever_spec(self.retriever_service)
        if self.reasoner_service is not None:
            from envs.serving import check_spec

            check_spec(self.reasoner_service)
        if not self.query_modes:
            raise ConfigError("EnvConfig: query_modes must name at least one query formulation")
        from agents.query import MODE_FACTORIES, QUERY_MODES
        from agents.reasoners.registry import REASONERS
        from agents.retrievers.index import RETRIEVERS

        TASKS.check(self.task, "EnvConfig.task", ConfigError)
        REASONERS.check(self.reasoner, "EnvConfig.reasoner", ConfigError)
        RETRIEVERS.check(self.retriever, "EnvConfig.retriever", ConfigError)
        if self.reasoner_options:
            from envs.core.registry import import_dotted

            cls_path = REASONERS.info(self.reasoner).get("config")
            if cls_path is None:
                raise ConfigError(f"EnvConfig.reasoner_options: reasoner '{self.reasoner}' takes no options")
            import_dotted(cls_path).from_dict({**self.reasoner_options, "max_step_tokens": self.max_step_tokens},
                                              where="EnvConfig.reasoner_options")
        for mode in self.query_modes:
            if mode.partition(":")[0] not in MODE_FACTORIES:
                QUERY_MODES.check(mode, "EnvConfig.query_modes", ConfigError)
        groups = config_groups()
        bad = [s for s in self.signals if s not in groups]
        if bad:
            raise ConfigError(f"EnvConfig: unknown observation group '{bad[0]}' in 'signals' (valid: "
                              f"{', '.join(groups)})")
        allowed = ("n_samples", "cons_only_at_markers", "agreement", "bm25_k", "weights", "verb_proxy")
        extra = sorted(set(self.rsus_options) - set(allowed))
        if extra:
            raise ConfigError(f"EnvConfig: rsus_options has unknown key '{extra[0]}' (valid: {', '.join(allowed)}; the "
                              "weights follow rsus_components)")
        o = self.rsus_options
        if "weights" in o:
            from agents.signals.rsus import load_rsus_weights

            if not isinstance(o["weights"], str):
                raise ConfigError(f"EnvConfig: rsus_options.weights must be a weight-set name or path, got "
                                  f"{o['weights']!r}")
            try:
                load_rsus_weights(o["weights"])
            except (FileNotFoundError, ValueError) as e:
                raise ConfigError(f"EnvConfig.rsus_options.weights: {e}") from None
        if o.get("verb_proxy"):
            if "verb" not in self.rsus_components:
                raise ConfigError("EnvConfig: rsus_options.verb_proxy is set but 'verb' is not in rsus_components")
            if not (Path(str(o["verb_proxy"])) / "probe.json").is_file():
                raise ConfigError(f"EnvConfig.rsus_options.verb_proxy: no probe at {o['verb_proxy']} (train one with "
                                  "`kairos probe train --signal rsus_proxy …`)")
        for k in ("n_samples", "bm25_k"):
            if k in o and (not isinstance(o[k], int) or isinstance(o[k], bool) or o[k] < 1):
                raise ConfigError(f"EnvConfig: rsus_options.{k} must be an integer >= 1, got {o[k]!r}")
        if "cons_only_at_markers" in o and not isinstance(o["cons_only_at_markers"], bool):
            raise ConfigError(f"EnvConfig: rsus_options.cons_only_at_markers must be true or false, got "
                              f"{o['cons_only_at_markers']!r}")
        if "agreement" in o and o["agreement"] not in ("jaccard", "exact"):
            raise ConfigError(f"EnvConfig: rsus_options.agreement must be jaccard or exact, got {o['agreement']!r}")
        if self.max_questions is not None and self.max_questions < 1:
            raise ConfigError(f"EnvConfig: max_questions must be >= 1 (or null for the whole split), got "
                              f"{self.max_questions}")
        if self.fact_holdout:
            extra = sorted(set(self.fact_holdout) - {"share", "seed", "keep"})
            if extra:
                raise ConfigError(f"EnvConfig: fact_holdout has unknown key '{extra[0]}' (valid: share, seed, keep)")
            share = self.fact_holdout.get("share")
            if not isinstance(share, (int, float)) or not 0.0 < float(share) < 1.0:
                raise ConfigError(f"EnvConfig: fact_holdout.share must be in (0, 1), got {share!r}")
            if self.fact_holdout.get("keep", "train") not in ("train", "test"):
                raise ConfigError(f"EnvConfig: fact_holdout.keep must be 'train' or 'test', got "
                                  f"{self.fact_holdout.get('keep')!r}")
            if self.task != "microworld":
                raise ConfigError("EnvConfig: fact_holdout is a micro-world condition (task: microworld)")
        if self.content_layers is not None and (not self.content_layers or min(self.content_layers) < 0):
            raise ConfigError(f"EnvConfig: content_layers must be a non-empty list of layer indices >= 0, got "
                              f"{self.content_layers}")
        if self.pulse_layers is not None and (len(self.pulse_layers) != 2 or self.pulse_layers[0] >= self.pulse_layers[1]):
            raise ConfigError(f"EnvConfig: pulse_layers must be [a, b] with a < b, got {self.pulse_layers}")


def env_config_from_file(path: str | Path, split: str | None = None) -> dict[str, Any]:
    """The env settings of a bench or env YAML (its ``env`` section, or the whole file), with ``split`` set."""
    data = read_yaml_mapping(path)
    env_cfg = dict(data.get("env", data))
    if split:
        env_cfg["split"] = split
    return env_cfg
