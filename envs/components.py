"""Build the parts an env needs from its config: questions, reasoner, retriever, query modes, signals, the
retrieval step's hooks (:mod:`envs.hooks`); the signal extractor and probes are built in :mod:`envs.env_signals`.

Kept apart from the env so the env reads top to bottom as the decision loop, and so tests (and the
benchmark) can hand an env prebuilt parts. Heavy imports happen here, lazily.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.env_config import EnvConfig
from envs.env_signals import (  # noqa: F401  (the signal builders: their old home re-exports them)
    DETECTORS,
    EIGEN_SAMPLES,
    _extractor,
    confidence_question,
    model_facts,
    model_side_signals,
    observation_groups,
    probe_pulse_layers,
    probe_value,
    reads_hidden_states,
    record_groups,
    rsus_weights,
    with_probe_pulse_layers,
)
from envs.hooks import LoopHooks
from envs.observation import group_signals, half_fields, scalar_signals
from envs.trajectory_cache import namespace_of

log = logging.getLogger(__name__)


@dataclass
class Components:
    """Everything the env calls. ``task`` provides questions, labels and answer quality."""

    config: EnvConfig
    task: Any
    reasoner: Any
    retriever: Any
    querygen: Any
    extractor: Any
    namespace: str
    feature_dims: dict[str, int] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)   # name -> callable(step, state) -> probability
    prefetcher: Any = None  # agents.retrievers.cache.Prefetcher when EnvConfig.prefetch (retriever is then cached)
    #: wall seconds and new records per env phase (start | next | retrieve | close), summed over the envs sharing
    #: these components: what a retrieval call costs end to end (search, injection, regeneration, its signals)
    phase_seconds: dict[str, list] = field(default_factory=dict)
    #: the retrieval step's hooks (selector, evidence transform, after regeneration, listeners): by default the
    #: ones the config names (:meth:`envs.hooks.LoopHooks.from_config`)
    hooks: LoopHooks | None = None
    #: why U_verb cannot be had on this env although its signals need it (the backend cannot be asked and there is no
    #: proxy; info["masked_reasons"] says it per step); ``None`` when it is asked, proxied or not configured — found
    #: from the config and the reasoner when the components are built
    verb_unavailable: str | None = None
    _warned_uncounted: bool = field(default=False, repr=False)  # U_cons samples without a token count: said once

    def __post_init__(self) -> None:
        if self.hooks is None:
            self.hooks = LoopHooks.from_config(self.config, self.prefetcher)
        if (self.verb_unavailable is None and confidence_question(self.config) is not None
                and getattr(self.reasoner, "confidence", None) is None):
            from agents.reasoners.confidence import confidence_unavailable

            self.verb_unavailable = confidence_unavailable(self.reasoner) or "the reasoner does not ask"

    @property
    def has_labels(self) -> bool:
        """Whether the task gives ground-truth step labels (the micro-world does; real QA data does not)."""
        return callable(getattr(self.task, "label", None))

    def gold_passages(self, q) -> list[str]:
        """Supporting passage ids of a question (empty when the task has none)."""
        fn = getattr(self.task, "gold_passages", None)
        return list(fn(q)) if callable(fn) else []

    @property
    def rsus_components(self) -> list[str]:
        return list(self.config.rsus_components)

    def scalar_names(self) -> list[str]:
        """Every scalar signal this env can report (a step reports the real ones, masks the rest)."""
        names = [k for k, (s, _) in scalar_signals().items() if s in self.extractor.names]
        names = [n for n in names if not (n.startswith("u_") and n[2:] not in self.rsus_components)]
        return names + list(self.probes)

    # -- question helpers used by the env
    @property
    def questions(self) -> list:
        return self.task.questions

    def question_id(self, q) -> str:
        return self.task.question_id(q)

    def question_text(self, q) -> str:
        return self.task.question_text(q)

    @property
    def graded(self) -> bool:
        """Whether the task scores answers (``Task.graded``, default true). An ungraded task (user questions, no
        gold answers: :class:`envs.ungraded.UngradedTask`) has no quality: it is NaN, and the reward is the costs
        alone."""
        return bool(getattr(self.task, "graded", True))

    def quality(self, q, record) -> float:
        if not self.graded:
            return float("nan")
        return 0.0 if record is None else float(self.task.quality(q, record.content))

    @property
    def has_partial_quality(self) -> bool:
        """Whether the task grades a chain cut short (its optional ``partial_quality``): what the horizon labels of
        :mod:`train.counterfactual` and ``reset``'s ``stop_at_step`` need."""
        return callable(getattr(self.task, "partial_quality", None))

    def partial_quality(self, q, lines: list[str]) -> float:
        """The task's partial quality of the chain's lines written so far (``lines``: every step's text, in order;
        NaN for an ungraded task). Only on a task that has one (:attr:`has_partial_quality`)."""
        if not self.graded:
            return float("nan")
        return float(self.task.partial_quality(q, list(lines)))

    @property
    def quality_metric(self) -> str:
        """The name of the metric :meth:`quality` returns (the task's ``quality_metric``; ``quality`` if none)."""
        return str(getattr(self.task, "quality_metric", "quality"))

    def metrics(self, q, record) -> dict[str, float]:
        """Every metric of the final answer (the task's ``metrics``; just the quality for a task without them)."""
        fn = getattr(self.task, "metrics", None)
        if callable(fn):
            return {k: float(v) for k, v in fn(q, None if record is None else record.content).items()}
        return {self.quality_metric: self.quality(q, record)}

    @property
    def can_close(self) -> bool:
        """Whether the reasoner can be asked for the answer (``with_answer_prompt``; ``EnvConfig.answer_closing``)."""
        return callable(getattr(self.reasoner, "with_answer_prompt", None))

    def qfs(self, question: str, prior_steps: list[str], step_text: str) -> str:
        """DRAGIN's QFS query of a step (query mode ``qfs``): the reasoner's attention pass, then
        :func:`agents.signals.attention.qfs_terms`."""
        from agents.signals.attention import qfs_terms

        fn = getattr(self.reasoner, "qfs_pass", None)
        if fn is None:
            raise ValueError(f"query mode 'qfs' needs a reasoner with an attention pass (qfs_pass); "
                             f"{type(self.reasoner).__name__} has none (the micro-world reasoner has)")
        return " ".join(qfs_terms(**fn(question, prior_steps, step_text)))

    # -- signals
    def precompute(self, steps: list, states: list) -> None:
        """Sampling work of the signals of many new steps, before :meth:`features` reads each: EigenScore's
        sampled continuations of every step in one set of generation calls (into ``step.meta["eigen_states"]``;
        a state's samples do not depend on the batch), and RSUS's U_cons samples (:meth:`_cons_samples`). The
        samples are paid by their step: their tokens are added to ``step.n_tokens`` and their seconds to
        ``step.seconds`` (what the record, and so the decision's cost and the observation's token count, counts);
        ``step.meta["eigen_samples"]`` / ``["cons_samples"]`` say how much of each was theirs."""
        if not steps:
            return
        self._cons_samples(steps, states)
        if "eigenscore" not in self.extractor.names:
            return
        from agents.signals.hidden import sample_states_batch

        for step, s in zip(steps, sample_states_batch(self.reasoner, states, k=EIGEN_SAMPLES, seed=self.config.seed,
                                                      greedy=steps)):
            step.meta["eigen_states"] = s.Z
            step.meta["eigen_samples"] = {"k": EIGEN_SAMPLES, "tokens": s.tokens, "seconds": s.seconds}
            step.n_tokens += s.tokens
            step.seconds += s.seconds

    def _cons_samples(self, steps: list, states: list) -> None:
        """RSUS's U_cons samples of each step — ``k`` alternatives of the step from the state it was generated from,
        the very call RSUS would make (:meth:`~agents.signals.rsus.RSUS.draw_alternatives`: the same seed)
        — into ``step.meta["alternatives"]``, where RSUS reads them, with what they cost added to the step. Only
        where RSUS would sample: U_cons weighted, the backend able to sample, the step not gated out
        (``cons_only_at_markers``). A backend that cannot count its samples' tokens (an OpenAI-compatible server
        without ``usage``) is charged their seconds only, said in ``meta["cons_samples"]["tokens"]`` (``None``) and
        logged once."""
        import time

        rsus = next((sig for sig in self.extractor.signals if sig.name == "rsus"), None)
        if (rsus is None or not self.extractor.supported.get("rsus") or rsus.alternatives_fn is not None
                or rsus.reasoner is None):
            return
        for step, state in zip(steps, states):
            if step.meta.get("alternatives") is not None or state is None or not rsus.scores_cons(step):
                continue
            t0 = time.perf_counter()
            alts = rsus.draw_alternatives(step, state)
            seconds = time.perf_counter() - t0
            tokens = getattr(alts, "tokens", None)
            if tokens is None and not self._warned_uncounted:
                self._warned_uncounted = True
                log.warning("U_cons: backend %s does not count its samples' tokens; they are charged their "
                            "seconds only (meta['cons_samples']['tokens'] is None)", type(rsus.reasoner).__name__)
            step.meta["alternatives"] = list(alts)
            step.meta["cons_samples"] = {"k": rsus.config.n_samples, "tokens": tokens, "seconds": seconds}
            step.n_tokens += int(tokens or 0)
            step.seconds += seconds

    def features(self, step, state) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, float]]:
        """Observation groups, scalar signals and the group mask of one step."""
        sig = self.extractor(step, state)
        names = self.extractor.names
        m = dict(zip(names, sig["mask"].tolist()))
        feats, mask = {}, {}
        fields, half = group_signals(), half_fields()
        for g in self.feature_dims:
            parts = fields[g]
            feats[g] = np.concatenate([sig[n] for n in parts]).astype(np.float16 if g in half else np.float32)
            mask[g] = float(min(m[n] for n in parts))
        scalars = {k: float(sig[s][i]) for k, (s, i) in scalar_signals().items() if s in sig and m.get(s, 0) > 0}
        # RSUS components that are not configured, or configured but not computable at this step (no confidence
        # source, no samples, no marker), are masked individually: left out of the scalars, so they show in
        # info["masked_signals"] (their observation slot is 0 with availability flag 0)
        if "rsus" in sig and m.get("rsus", 0) > 0:
            for i, comp in enumerate(("u_verb", "u_ent", "u_cons")):
                if comp[2:] not in self.rsus_components or sig["rsus"][4 + i] == 0:
                    scalars.pop(comp, None)
        served = step.meta.get("probes", {})  # computed next to the model by a reasoner service
        for name, probe in self.probes.items():
            value = float(served[name]) if name in served else probe_value(probe, step, state)
            if np.isfinite(value):  # NaN: masked — left out of the scalars, listed in info["masked_signals"]
                scalars[name] = value
        return feats, scalars, mask



def build_components(config: EnvConfig) -> Components:
    """Components of an env config: the builder its task registered (:data:`envs.tasks.TASKS`)."""
    from envs.tasks import TASKS

    return TASKS.get(TASKS.check(config.task, "EnvConfig.task"))(with_probe_pulse_layers(config))


#: bumped when what a cached StepRecord holds changes meaning (2: ``seconds`` is the record's own share of a
#: batched generation call, no longer the whole round's wall time; 3: the rsus group carries each component's
#: availability flag; 4: records are encoded with envs.records (no pickle) and namespaces hold content
#: fingerprints — artifact, probe weights, index, data file, POS tagger — never paths)
RECORD_VERSION = 4


def _namespace(kind: str, identity, config: EnvConfig, reasoner: Any = None) -> str:
    """What the outcomes of an env depend on, hashed. Files enter by their *content* (artifact, probe weights,
    prebuilt index, data file) — never by path — so a moved clone or a ``ray job submit`` working-dir copy reuses
    its cache, and a retrained probe in the same folder does not replay stale scores. ``reasoner``: the env's, when
    it asks a side question after each step (RSUS's U_verb by prompt) — the question enters then, and only then."""
    from envs.core.io import content_fingerprint

    outcome_fields = {k: v for k, v in config.to_dict().items()
                      if k not in ("costs", "cost_params", "cache_path", "split", "max_questions", "querygen",
                                   "fact_holdout", "artifact", "data_path", "corpus", "answer_closing",
                                   "reasoner_service", "cache_service", "retriever_service",
                                   "prefetch", "prefetch_queries", "kv_reuse", "pulse_layers_from", "observe_costs")}  # transport / speed only
    if config.probes:
        outcome_fields["probes"] = {n: content_fingerprint(p) for n, p in sorted(config.probes.items())}
    # transport settings of a backend decide how long a request may take, never what it returns
    outcome_fields["reasoner_options"] = {k: v for k, v in config.reasoner_options.items()
                                          if k not in ("timeout_s", "deadline_s", "retries", "retry_backoff_s",
                                                       "concurrency", "allow_insecure_key", "api_key_env")}
    if config.reasoner_options.get("segmenter"):  # a learned step segmenter enters by its weights, not its path
        outcome_fields["reasoner_options"]["segmenter"] = content_fingerprint(config.reasoner_options["segmenter"])
    if config.index_path:
        outcome_fields["index_path"] = _index_fingerprint(config.index_path)
    if "rind" in config.signals:  # 2: RIND's attention term is DRAGIN's (max over queries of the head mean), one
        outcome_fields["rind_definition"] = 2  # definition in stepgen and agents.signals.attention
    if "content_words" in config.query_modes or "qfs" in config.query_modes or "rind" in config.signals:
        # the POS tagger decides which words a content_words / QFS query keeps and which tokens RIND scores
        from agents.query import tagger_name

        outcome_fields["pos_tagger"] = tagger_name()
    # the retrieval caps decide which action prefixes an episode reaches, never what a prefix's record holds (a
    # capped "retrieve" is recorded as an accept): a capped run reads the records of an uncapped one. The same
    # holds for answer_closing (its closing record sits under a prefix of its own) and the corpus, which enters
    # by its content fingerprint (the identity), never by its spec
    defaults = EnvConfig()
    outcome_fields["max_retrievals_per_question"] = defaults.max_retrievals_per_question
    if "eigen" in config.signals or ("rsus" in config.signals and {"cons", "verb"} & set(config.rsus_components)):
        # 2: a regenerated step's sampled signals continue from the evidence-conditioned state (before: without it);
        # 3 (EigenScore): its k samples' tokens and seconds are charged to the step's record (before: not counted);
        # 4 (U_cons): its k samples' tokens and seconds are charged to the step's record too (before: its seconds
        # showed in the record's wall time only, its tokens nowhere)
        cons = "rsus" in config.signals and "cons" in config.rsus_components
        outcome_fields["state_signals"] = 4 if cons else 3 if "eigen" in config.signals else 2
    if not config.self_refine:  # off (the default): the namespace of runs made before the option existed
        outcome_fields.pop("self_refine", None)
    if not config.rerank:  # likewise
        outcome_fields.pop("rerank", None)
    for key in ("passages_per_retrieval", "max_evidence_passages"):  # at their defaults: as before the options
        if outcome_fields.get(key) == getattr(defaults, key):
            outcome_fields.pop(key, None)
    if not config.compress_evidence:  # off (the default): the namespace of runs made before the option existed
        outcome_fields.pop("compress_evidence", None)
        outcome_fields.pop("tau_rel", None)
    # (rsus_options: the keys a config sets — RSUSOptions.to_dict leaves out the unset ones, as the untyped
    # settings did)
    if config.rsus_options.weights is not None:  # a named weight set enters by its values (a refit changes them)
        outcome_fields["rsus_options"] = {**config.rsus_options.to_dict(), "weights": list(rsus_weights(config))}
    if config.rsus_options.verb_proxy:  # the U_verb proxy enters by its weights' content, not its path
        outcome_fields["rsus_options"] = {**outcome_fields["rsus_options"],
                                          "verb_proxy": content_fingerprint(config.rsus_options.verb_proxy)}
    asked = getattr(reasoner, "confidence", None)
    if asked is not None:  # U_verb by prompt: the reply is part of each record (its tokens, seconds and value)
        outcome_fields["verbal_confidence"] = asked.identity()
    if outcome_fields.get("rsus_options"):  # the side question's budget enters with the question, when it is asked
        outcome_fields["rsus_options"] = {k: v for k, v in outcome_fields["rsus_options"].items()
                                          if k != "verb_max_tokens"}
    if not outcome_fields.get("rsus_options"):  # default RSUS settings: the namespace of runs before the field
        outcome_fields.pop("rsus_options", None)
    if outcome_fields.get("content_layers") is None:  # default layers (or content off): as before the field
        outcome_fields.pop("content_layers", None)
    if any(m.startswith("gen:") for m in config.query_modes):  # a generative QueryGen: its weights, not its path
        from agents.query import mode_identity

        outcome_fields["query_modes"] = [mode_identity(m) for m in config.query_modes]
    return namespace_of(kind, identity, outcome_fields, RECORD_VERSION)


def build_reasoner(config: EnvConfig, world: Any = None):
    """The env's reasoner: a client of the running service ``reasoner_service`` names, else the backend itself
    (``micro`` over ``world`` or the config's artifact; any registered backend with ``reasoner_options``)."""
    from agents.reasoners.base import BranchingReasoner

    if config.reasoner_service is not None:  # (a replica builds its reasoner here too: it asks U_verb's question)
        unserved = {"compress_evidence": ("evidence compression scores sentences with the model's attention"
                                          if config.compress_evidence else None),
                    "signals 'eigen'": ("EigenScore samples hidden states of continuations"
                                        if "eigen" in config.signals else None)}
        for opt, why in unserved.items():
            if why:
                raise ValueError(f"EnvConfig.reasoner_service: {opt} is not served ({why} in the env's process, "
                                 "next to the model); drop it or run without the service")
        from envs.served import connect

        return connect(config.reasoner_service)
    if config.reasoner == "micro":
        from agents.reasoners.micro import MicroReasoner

        if world is None:
            from envs.core.microworld.artifact import load_artifact

            world = load_artifact(config.artifact)
        return with_confidence(config, MicroReasoner(  # DRAGIN's RIND / QFS: eager attention
            world, max_step_tokens=config.max_step_tokens, capture_attentions="rind" in config.signals,
            eager="qfs" in config.query_modes))
    from agents.reasoners.registry import make_reasoner

    extra = {}
    if "rind" in config.signals or "qfs" in config.query_modes:  # DRAGIN's RIND / QFS read last-layer attention:
        extra = {"attn_implementation": "eager", "capture_attentions": "rind" in config.signals}  # QFS: its own pass
    reasoner = make_reasoner(config.reasoner, max_step_tokens=config.max_step_tokens,
                             **{**config.reasoner_options, **extra})
    if "qfs" in config.query_modes and not callable(getattr(reasoner, "qfs_pass", None)):
        raise ValueError(f"EnvConfig.query_modes 'qfs' (DRAGIN's QFS) reads the reasoner's attention over the text; "
                         f"reasoner '{config.reasoner}' has no attention pass (the micro-world reasoner has)")
    if not isinstance(reasoner, BranchingReasoner):
        raise ValueError(f"reasoner '{config.reasoner}' does not implement agents.reasoners.base.BranchingReasoner "
                         "(snapshot / restore / with_evidence: the env's trajectory cache and batched regeneration "
                         "need them)")
    return with_confidence(config, reasoner)


def with_confidence(config: EnvConfig, reasoner):
    """``reasoner``, asking RSUS's U_verb question after every step when the env's signals need it
    (:func:`envs.env_signals.confidence_question`) and the backend can answer; a backend that cannot keeps U_verb
    masked (logged once here; ``info["masked_reasons"]`` says it per step)."""
    q = confidence_question(config)
    if q is None:
        return reasoner
    from agents.reasoners.confidence import confidence_unavailable

    why = confidence_unavailable(reasoner)
    if why is None:
        reasoner.confidence = q
    else:
        log.warning("RSUS U_verb is masked on reasoner '%s': %s", config.reasoner, why)
    return reasoner


def qa_components(config: EnvConfig, task: Any = None) -> Components:
    from agents.query import QueryGenerator
    from envs.qa_task import QATask

    task = task if task is not None else QATask(config.task, config.split, config.data_path)
    if isinstance(task, QATask):
        corpus = task.corpus(config.corpus)
    elif config.corpus is not None:  # a plugged-in task with a corpus spec from the config
        from agents.retrievers.corpus_spec import load_corpus

        corpus = load_corpus(config.corpus)
    else:
        corpus = task.corpus()
    reasoner = build_reasoner(config)
    retriever, prefetcher = with_prefetch(config, env_retriever(config, corpus))
    n_layers, hidden = model_facts(reasoner)
    from agents.reasoners.registry import reasoner_model_id

    extractor = _extractor(config, reasoner, n_layers, hidden, [p.text for p in corpus], config.reasoner,
                           reasoner_model_id(reasoner, config.reasoner))
    dims = extractor.dims
    feature_dims = {g: sum(dims[n] for n in group_signals()[g]) for g in record_groups(config)}
    ident = getattr(reasoner, "model_id", config.reasoner)
    probes = {}
    if config.probes:  # e.g. trained on retrieval-benefit labels: `kairos probe train --benefit-labels …`
        from agents.reasoners.registry import reasoner_model_id

        if not reasoner.capabilities.hidden_states:
            raise ValueError(f"EnvConfig.probes: reasoner '{config.reasoner}' exposes no hidden states")
        mid = reasoner_model_id(reasoner, config.reasoner)
        probes = {name: DETECTORS.make("probe", path, expected_model_id=mid, model_layers=n_layers)
                  for name, path in config.probes.items()}
    return Components(config, task, reasoner, retriever, QueryGenerator(list(config.query_modes)), extractor,
                      _namespace(config.reasoner, [ident, corpus.fingerprint(), _task_file(task)], config, reasoner),
                      feature_dims, probes, prefetcher)


def _index_fingerprint(path: str) -> str:
    """An index's content: its manifest when that lists every file's SHA-256 (which loading checks, so the index is
    hashed once, not twice), else every file's bytes."""
    from pathlib import Path

    from agents.retrievers.index import MANIFEST, read_manifest
    from envs.core.io import content_fingerprint, sha256_file

    if read_manifest(path).get("sha256"):
        return sha256_file(Path(path) / MANIFEST)
    return content_fingerprint(path)


def _task_file(task) -> str | None:
    """The content fingerprint of a task's question file (``None`` for a task without one)."""
    from envs.core.io import content_fingerprint

    path = getattr(task, "path", None)
    return content_fingerprint(path) if path is not None else None


def env_retriever(config: EnvConfig, corpus=None):
    """The env's retriever: a client of the running service ``retriever_service`` names, else the index over the
    task's corpus (``corpus``, or the one the config names: :func:`env_corpus`) in this process."""
    if config.retriever_service is not None:
        from envs.served import ServedRetriever

        return ServedRetriever(config.retriever_service)
    return task_retriever(config, corpus if corpus is not None else env_corpus(config))


def env_corpus(config: EnvConfig):
    """The corpus an env of ``config`` searches: the micro-world's facts, or a dataset task's passages (its own, or
    ``EnvConfig.corpus``) — without loading a model."""
    if config.task == "microworld":
        from envs.core.microworld.artifact import load_artifact

        return load_artifact(config.artifact, with_model=False).corpus()
    if config.task == "microworld_chain":
        from envs.microworld.chain import chain_corpus

        return chain_corpus(config)
    from envs.qa_task import QATask

    return QATask(config.task, config.split, config.data_path).corpus(config.corpus)


def with_prefetch(config: EnvConfig, retriever, relations=()) -> tuple[Any, Any]:
    """``(retriever, prefetcher)``: with ``EnvConfig.prefetch`` the retriever behind an in-memory query cache and a
    background :class:`~agents.retrievers.cache.Prefetcher` that fills it (``relations``: those every prefetch
    tries, besides the question's own); otherwise the retriever as it is and ``None``."""
    if not config.prefetch:
        return retriever, None
    from agents.retrievers.cache import CachedRetriever, Prefetcher

    cached = CachedRetriever(retriever)
    return cached, Prefetcher(cached, relations=relations, k=config.top_k, max_queries=config.prefetch_queries,
                              background=True)


def task_retriever(config: EnvConfig, corpus):  # shared by the real-data and micro-world tasks
    """The registered retriever built in memory over this task's corpus (``RETRIEVERS.get(kind).build(corpus)``), or
    any prebuilt index (``index_path``: BM25 or ColBERT/PLAID), checked against this task's corpus (count,
    fingerprint, files, known-answer probe) before use."""
    from agents.retrievers.index import RETRIEVERS

    RETRIEVERS.check(config.retriever, "EnvConfig.retriever")
    if config.index_path is None:
        if config.retriever == "colbert":
            raise ValueError("EnvConfig: retriever 'colbert' needs index_path (a PLAID index of this task's corpus; "
                             "build one with `kairos index build --retriever colbert …`)")
        return RETRIEVERS.get(config.retriever).build(corpus)
    from agents.retrievers.index import IndexMismatchError, load_index, read_manifest

    manifest = read_manifest(config.index_path)
    kind = manifest["kind"]
    if kind != config.retriever:
        raise ValueError(f"EnvConfig: index_path {config.index_path} holds a '{kind}' index but retriever is "
                         f"'{config.retriever}'")
    try:
        return load_index(config.index_path, corpus)
    except IndexMismatchError as e:  # the env's corpus is not the index's: say which two, and both ways out
        built = (manifest.get("corpus") or {}).get("spec") or "an unrecorded corpus"
        raise IndexMismatchError(
            f"EnvConfig.index_path {config.index_path} was built from corpus '{built}' "
            f"({manifest.get('n_docs')} passages), but this env searches {corpus.source} ({len(corpus)} passages; "
            f"EnvConfig.corpus: {config.corpus!r}). Either set EnvConfig.corpus to the corpus the index was built "
            f"from ('{built}'), or build an index of this corpus: `kairos index build --retriever {kind} --corpus "
            f"<spec of {corpus.source}> --out DIR` and point index_path at it. ({e})") from None


def microworld_components(config: EnvConfig) -> Components:
    from envs.core.microworld.artifact import load_artifact
    from envs.microworld.task import MicroWorldTask

    check_micro(config, "micro-world")
    world = load_artifact(config.artifact, with_model=config.reasoner_service is None)  # served: no weights here
    task = MicroWorldTask(world, config.split, config.fact_holdout)
    return world_components(config, world, task, world.corpus())


def check_micro(config: EnvConfig, what: str) -> None:
    """A micro-world task runs the micro-world LM over its own world's corpus (``what`` names the task)."""
    if config.reasoner != "micro":
        raise ValueError(f"the {what} task runs the micro-world LM (reasoner 'micro'), got '{config.reasoner}'")
    if config.corpus is not None:
        raise ValueError(f"EnvConfig.corpus {config.corpus!r}: the {what} task searches its own world's fact "
                         "corpus (leave corpus unset)")


def world_components(config: EnvConfig, world: Any, task: Any, corpus: Any, wrap=None) -> Components:
    """The components of a task over a loaded micro-world: its reasoner (``wrap(reasoner)`` when given: e.g. the
    chain of sub-questions, :mod:`envs.microworld.chain`), the retriever over ``corpus``, the signals and probes."""
    from agents.query import QueryGenerator

    reasoner = build_reasoner(config, world)
    if wrap is not None:
        reasoner = wrap(reasoner)
    retriever, prefetcher = with_prefetch(config, env_retriever(config, corpus), world.config.world.relations)
    querygen = QueryGenerator(list(config.query_modes))
    n_layers = world.model.config.num_hidden_layers
    if not config.pulse_layers:
        config = config.replace(pulse_layers=[0, n_layers])
    from envs.core.microworld.artifact import world_model_id

    extractor = _extractor(config, reasoner, n_layers, world.model.config.hidden_size, [p.text for p in corpus],
                           "micro", world_model_id(world))
    dims = extractor.dims
    feature_dims = {g: sum(dims[n] for n in group_signals()[g]) for g in record_groups(config)}
    probes = {}
    if config.probes:
        mid = world_model_id(world)
        probes = {name: DETECTORS.make("probe", path, expected_model_id=mid, model_layers=n_layers)
                  for name, path in config.probes.items()}
    from envs.core.microworld.artifact import artifact_fingerprint

    ns = _namespace("micro", [world.train_info, artifact_fingerprint(world.path)], config)
    return Components(config, task, reasoner, retriever, querygen, extractor, ns, feature_dims, probes, prefetcher)
