"""``RetrievalTimingEnv``: reasoning-with-retrieval as an episodic contextual bandit (DESIGN §1, §5).

One episode = one question; one env step = one decision about the step just generated:

* action ``0`` (or ``(0, m)``): accept the step; the reasoner writes the next one;
* action ``1`` (or ``(1, m)``): build a query (query mode ``m`` with QueryGen, else the default mode),
  retrieve the top-k, inject the first passage not used before for this question, and regenerate the
  step. Once the per-step retrieval cap is reached the regenerated step is accepted automatically. With
  ``self_refine: eigenscore`` (SeaKR's self-aware refinement) the original step stands instead when its
  EigenScore is the lower of the two (the retrieval still counts; ``info["refined"]`` says which one stood).
  With ``rerank: eigenscore`` (SeaKR's self-aware re-ranking) every unused top-k passage regenerates the step
  and the one whose step has the lowest EigenScore is injected (``info["rerank"]``: each candidate's score).

The episode terminates when an accepted step is the final ``Answer`` line, and is truncated after
``max_steps`` accepted steps. Reward per decision is ``−Σ λ_c · cost_c``, plus the answer quality at the end.
A chain that ends without a usable answer line (truncated, ended without one, ``Answer:`` with nothing after
it) is asked for the answer once (``answer_closing``, the way IRCoT closes with "So the answer is": the reasoner
continues after a written ``Answer:``); its tokens and seconds count in the last decision's cost, and the final
info says how the episode ended (``answer_status``: answered | closed | none) beside every answer metric.

Outcomes are cached by ``(question, action prefix)`` in a :class:`~envs.trajectory_cache.TrajectoryCache`;
greedy decoding makes them deterministic, so a warm cache replays episodes without running the LM.

The heavy parts (reasoner, retriever, signals) are built by :mod:`envs.components` from the config; tests
can inject their own through ``components=``.

The decision loop is batch-first (Gymnasium's vector envs are the model): :func:`step_batch` advances many env
copies that share one set of components in commented phases — actions and caps → the retrievals (cache, else
queries, ONE batched search and ONE batched generation) → the accepts (cache, else ONE batched generation) →
costs, quality, reward and info. :meth:`RetrievalTimingEnv.step` is its ``n = 1`` view and
:class:`envs.vector.BatchedRetrievalEnv` its ``n``-copy view. Per-question state lives in one :class:`Episode`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.segmentation import parse_header
from envs.cache_service import open_cache
from envs.components import episode_fields, observation_groups
from envs.costs import CostEvent, CostModel, modelled_seconds
from envs.env_config import EnvConfig
from envs.records import serializable

log = logging.getLogger(__name__)

HISTORY_DIM = 4  # step index, retrievals so far, tokens so far (/100), steps since last retrieval


@serializable("StepRecord")
@dataclass
class StepRecord:
    """What the cache stores for one (question, action prefix): the current step and how it came about."""

    text: str
    content: str
    is_answer: bool
    n_tokens: int
    seconds: float
    features: dict[str, np.ndarray]             # observation groups (pulse, output, rsus, coe)
    signals: dict[str, float]                   # scalar signals by name (for threshold triggers, logs)
    mask: dict[str, float]                      # observation group -> 1 real / 0 masked
    before: dict | None = None                  # reasoner snapshot the step was generated from
    after: dict | None = None                   # reasoner snapshot after the step
    evidence: tuple[str, ...] = ()              # evidence injected for this step so far
    query: str | None = None
    passage_ids: tuple[str, ...] = ()
    tokens_injected: int = 0
    ranked_ids: tuple[str, ...] = ()            # the retriever's top-k for this retrieval, best first (Recall@k)
    label: str | None = None
    error_kind: str | None = None
    chain_before: str | None = None             # micro-world: where the model's chain stood before the step
    chain_object: str | None = None             # ... and after it
    final: bool = False                         # the reasoner ended the text here (answer line or end-of-text)
    compression: dict | None = None             # evidence compression of this retrieval (sentences, tokens)
    rerank: dict | None = None                  # SeaKR's re-ranking: each candidate passage's EigenScore


@dataclass
class Episode:
    """Everything one env copy knows about its current question (reset builds it, the loop advances it)."""

    q: Any                                      # the question (task object)
    qidx: int                                   # its index in the env's questions
    record: StepRecord | None = None            # the current step: the one the next decision is about
    prefix: tuple = ()                          # the actions so far ("a" accept, "r<mode>" retrieve): the cache key
    before: Any = None                          # live reasoner state the current step was generated from ...
    after: Any = None                           # ... and after it (None: rebuilt from the record's snapshots)
    n_accepted: int = 0
    accepted_steps: list[str] = field(default_factory=list)
    retrievals: int = 0
    retrievals_this_step: int = 0
    tokens: int = 0                             # generated + injected
    seconds: float = 0.0                        # measured generation seconds of the records on this path
    since_retrieval: int = 0
    used: list[str] = field(default_factory=list)  # passage ids injected so far (never injected twice)
    log: list[dict[str, Any]] = field(default_factory=list)  # per decision, returned in the final info
    episode_feats: dict[str, tuple] = field(default_factory=dict)  # per-episode observation fields
    answer: StepRecord | None = None            # at the end: the record whose content is scored (None: no answer)
    answer_status: str | None = None            # at the end: answered | closed (by answer_closing) | none


def usable_answer(rec: StepRecord | None) -> bool:
    """Whether a step is a usable final answer: an ``Answer`` line with content that is not another answer
    header (``Answer:`` with nothing after it, or ``Answer: Answer: …``, are no answer)."""
    if rec is None or not rec.is_answer or not rec.content.strip():
        return False
    h = parse_header(rec.content.strip())
    return not (h is not None and h.kind == "answer")


# ----------------------------------------------------------------------------------------- the decision loop
def reset_batch(envs: list[RetrievalTimingEnv], seeds: list[int | None] | None = None,
                options: list[dict | None] | None = None) -> list[tuple[dict, dict]]:
    """Start a question in each env (they share components and cache): ``[(obs, info)]``."""
    n = len(envs)
    seeds, options = seeds or [None] * n, options or [None] * n
    # 1. each copy draws its question with its own RNG (or takes options["question_index"])
    for e, seed, opts in zip(envs, seeds, options):
        gym.Env.reset(e, seed=seed)
        questions = e.c.questions[: e.config.max_questions or None]
        idx = (opts or {}).get("question_index")
        if idx is None:
            idx = int(e.np_random.integers(len(questions)))
        elif not 0 <= int(idx) < len(questions):
            raise ValueError(f"question_index {idx} out of range [0, {len(questions)})")
        e.ep = Episode(q=questions[int(idx)], qidx=int(idx))
    # 2. the first step of every question: cache, else one batched generation
    for e, rec in zip(envs, _records(envs, "start")):
        ep = e.ep
        # episode-level content: the question's embedding is the context embedding of the first step
        ep.episode_feats = {g: (rec.features[src], rec.mask[src]) for g, src in episode_fields().items()
                            if g in e.groups}
        ep.tokens += rec.n_tokens
        ep.seconds += rec.seconds
        ep.record = rec
    return [(e._obs(), e._info(costs={k: 0.0 for k in e.costs.costs})) for e in envs]


def step_batch(envs: list[RetrievalTimingEnv], actions: list[Any]) -> list[tuple[dict, float, bool, bool, dict]]:
    """One decision in each env (they share components and cache): ``[(obs, reward, terminated, truncated,
    info)]``, exactly what each env's own ``step`` returns."""
    # 1. actions: validate; split into (retrieve?, query mode); a retrieval over a cap becomes an accept
    decided = []
    for e, action in zip(envs, actions):
        if getattr(e, "ep", None) is None or e.ep.record is None:
            raise RuntimeError("call reset() before step()")
        if not e.action_space.contains(e._normalise_action(action)):
            raise ValueError(f"action {action!r} is outside the action space {e.action_space}")
        retrieve, mode = e._split_action(action)
        ep, cfg = e.ep, e.config
        capped = bool(retrieve) and (ep.retrievals_this_step >= cfg.max_retrievals_per_step
                                     or ep.retrievals >= cfg.max_retrievals_per_question)
        decided.append({"retrieve": int(retrieve and not capped), "mode": mode, "capped": capped,
                        "step": ep.record, "event": CostEvent(step_index=ep.n_accepted + 1),
                        "retrieved": {"query": None, "passage_ids": []}, "done": (False, False)})

    # 2. retrieve: regenerate the current step with evidence (cache, else queries → one batched search → one
    #    batched generation); at the per-step cap the regenerated step is accepted in phase 3
    rix = [i for i, d in enumerate(decided) if d["retrieve"]]
    for i in rix:
        envs[i].ep.prefix += (f"r{decided[i]['mode']}",)
    for i, rec in zip(rix, _records([envs[i] for i in rix], "retrieve", [decided[i]["mode"] for i in rix])):
        ep, d = envs[i].ep, decided[i]
        ep.retrievals += 1
        ep.retrievals_this_step += 1
        ep.since_retrieval = 0
        ep.used += list(rec.passage_ids)
        d["retrieved"] = {"query": rec.query, "passage_ids": list(rec.passage_ids),
                          **({"compression": rec.compression} if rec.compression is not None else {}),
                          **({"rerank": rec.rerank} if rec.rerank is not None else {}),
                          **({"ranked_ids": list(rec.ranked_ids)} if rec.ranked_ids else {})}  # (the log only)
        d["event"] = CostEvent(retrieved=True, n_passages=len(rec.passage_ids), tokens_generated=rec.n_tokens,
                               tokens_injected=rec.tokens_injected, seconds_measured=rec.seconds,
                               step_index=ep.n_accepted + 1)
        ep.tokens += rec.n_tokens + rec.tokens_injected
        ep.seconds += rec.seconds
        ep.record = rec
        if envs[i].config.self_refine and rec.passage_ids and _refine_keeps_original(d["step"], rec):
            ep.record = d["step"]  # SeaKR: the model is surer without the evidence — the original step stands
            ep.before = ep.after = None  # (its live states are rebuilt from its snapshots)
            d["retrieved"]["refined"] = "original"
        elif envs[i].config.self_refine:
            d["retrieved"]["refined"] = "augmented"
        d["regenerated"] = ep.record.text  # the step that stands after the retrieval (info, not the log)

    # 3. accept: the step stands; the episode ends at the answer (or max_steps), else the next step is generated
    #    (cache, else one batched generation). An episode that ends without a usable answer line is asked for
    #    the answer once (answer_closing: "Answer:" written for the reasoner; cache, else one batched generation)
    aix = [i for i, d in enumerate(decided)
           if not d["retrieve"] or envs[i].ep.retrievals_this_step >= envs[i].config.max_retrievals_per_step]
    nix, cix = [], []
    for i in aix:
        ep, cfg = envs[i].ep, envs[i].config
        ep.n_accepted += 1
        ep.accepted_steps.append(ep.record.text)
        ep.retrievals_this_step = 0
        ep.since_retrieval += 1
        if ep.record.is_answer or ep.record.final:
            decided[i]["done"] = (True, False)
        elif ep.n_accepted >= cfg.max_steps:
            decided[i]["done"] = (False, True)
        else:
            ep.prefix += ("a",)
            nix.append(i)
            continue
        if usable_answer(ep.record):
            ep.answer, ep.answer_status = ep.record, "answered"
        elif cfg.answer_closing and envs[i].c.can_close:
            ep.prefix += ("c",)
            cix.append(i)
        else:  # no closing: the last line is scored as it stands (a truncated chain has no answer)
            ep.answer, ep.answer_status = (ep.record if decided[i]["done"][0] else None), "none"
    for kind, ix in (("next", nix), ("close", cix)):
        for i, rec in zip(ix, _records([envs[i] for i in ix], kind)):
            ep, d = envs[i].ep, decided[i]
            ep.tokens += rec.n_tokens
            ep.seconds += rec.seconds
            ep.record = rec
            ev = d["event"]
            d["event"] = CostEvent(**{**ev.__dict__, "tokens_generated": ev.tokens_generated + rec.n_tokens,
                                      "seconds_measured": ev.seconds_measured + rec.seconds})
            if kind == "close":
                ep.answer = rec if usable_answer(rec) else None
                ep.answer_status = "closed" if ep.answer is not None else "none"
                if ep.answer is None:
                    log.debug("%s: no usable answer after closing: %r", envs[i].c.question_id(ep.q), rec.text)

    # 4. costs, answer quality at the end, reward, info
    out = []
    for e, d in zip(envs, decided):
        ep, (terminated, truncated) = e.ep, d["done"]
        event = CostEvent(**{**d["event"].__dict__, "seconds_modelled": modelled_seconds(d["event"])})
        penalty, raw = e.costs(event)
        reward, quality = -penalty, None
        if terminated or truncated:
            quality = e.c.quality(ep.q, ep.answer)  # NaN for an ungraded task (no gold answers) ...
            if e.c.graded:  # ... whose reward reports the costs alone
                reward += quality
        ep.log.append({"action": [d["retrieve"], int(d["mode"])], "capped": d["capped"], "step": d["step"].text,
                       "label": d["step"].label, "signals": d["step"].signals, **d["retrieved"], "costs": raw,
                       "reward": reward})
        info = e._info(costs=raw, capped=d["capped"], quality=quality, retrieved=d["retrieved"],
                       regenerated=d.get("regenerated"))
        out.append((e._obs(), float(reward), terminated, truncated, info))
    return out


def _refine_keeps_original(original: StepRecord, regenerated: StepRecord) -> bool:
    """SeaKR's self-aware refinement (``EnvConfig.self_refine``): keep the original step when its EigenScore
    (inconsistency of sampled continuations) is lower than the evidence-conditioned one's; a score that could not
    be computed on either side keeps the regenerated step."""
    old, new = original.signals.get("eigenscore"), regenerated.signals.get("eigenscore")
    return old is not None and new is not None and bool(np.isfinite(old) and np.isfinite(new)) and old < new


def _evidence_state(c, cfg: EnvConfig, before, evidence: tuple[str, ...]):
    """The state a regenerated step is generated from: ``before`` with the evidence injected (``kv_reuse: false``:
    the whole prompt encoded again, as the naive integration does — same output)."""
    cond = c.reasoner.with_evidence(before, list(evidence), cfg.injection)
    return cond if cfg.kv_reuse else c.reasoner.restore(c.reasoner.snapshot(cond))


def _rerank_by_eigenscore(c, cfg: EnvConfig, eps: list[Episode], jobs: list[dict], ranked: list) -> int:
    """SeaKR's self-aware re-ranking (``EnvConfig.rerank``): every top-k passage not used yet in the question
    regenerates the step (the step's earlier evidence + that passage; all candidates in one batched generation and
    one batched EigenScore sampling); the passage whose regenerated step has the lowest EigenScore is the one
    injected (ties: the retriever's order). Fills each job's step, states, features and ``rerank`` log (each
    candidate's score; the tokens of every candidate's regeneration and passage, which the retrieval pays).
    Returns the number of re-ranked jobs."""
    from agents.retrievers.base import SelectionConfig, select_passages

    cands = []  # (job index, passage)
    for j, (ep, job, hits) in enumerate(zip(eps, jobs, ranked)):
        if job["passage_ids"]:
            cands += [(j, p) for p in select_passages(hits, ep.used, SelectionConfig(top_k=cfg.top_k,
                                                                                       n_inject=cfg.top_k))]
    if not cands:
        return 0
    conds = [_evidence_state(c, cfg, jobs[j]["before"], tuple(eps[j].record.evidence) + (p.text,))
             for j, p in cands]
    outs = c.reasoner.next_step(conds)
    c.precompute([step for step, _ in outs], conds)
    best: dict[int, tuple] = {}
    scores: dict[int, list] = {}
    tokens: dict[int, int] = {}
    injected: dict[int, int] = {}
    for (j, p), cond, (step, after) in zip(cands, conds, outs):
        features = c.features(step, cond)
        score = features[1].get("eigenscore", float("inf"))
        scores.setdefault(j, []).append([p.id, score])
        tokens[j] = tokens.get(j, 0) + step.n_tokens
        injected[j] = injected.get(j, 0) + len(p.text.split())
        if j not in best or score < best[j][0]:
            best[j] = (score, p, cond, step, after, features)
    for j, (_, p, cond, step, after, features) in best.items():
        jobs[j].update(passage_ids=(p.id,), evidence=tuple(eps[j].record.evidence) + (p.text,),
                       injected=injected[j], cond=cond, step=step, after=after, features=features,
                       rerank={"candidates": scores[j], "chosen": p.id, "tokens_generated": tokens[j]})
        if c.prefetcher is not None:  # the next step's likely queries, from the passage injected
            c.prefetcher.after_retrieval([p], c.question_text(eps[j].q))
    return len(best)


def _records(envs: list[RetrievalTimingEnv], kind: str, modes: list[int] | None = None) -> list[StepRecord]:
    """The record of each env's current action prefix (``kind``: start | retrieve | next | close): cache hits; for
    the misses the queries and ONE batched search (retrieve), ONE batched generation, then signals and labels — each
    new record cached. ``seconds`` of a new record: its env's own work plus its share of the batched calls."""
    if not envs:
        return []
    c, cfg, cache = envs[0].c, envs[0].config, envs[0].cache
    modes = modes or [0] * len(envs)
    # cache
    out: list[StepRecord | None] = cache.get_many([(c.question_id(e.ep.q), e.ep.prefix) for e in envs])
    for i, e in enumerate(envs):
        if out[i] is not None:
            e.ep.before = e.ep.after = None  # rebuilt from the record's snapshots only if we generate again
    miss = [i for i, r in enumerate(out) if r is None]
    if not miss:
        return out  # type: ignore[return-value]
    t0 = time.perf_counter()
    # the state each missing record is generated from
    jobs = []
    for i in miss:
        ep = envs[i].ep
        if kind == "start":
            job = {"before": c.reasoner.start(c.question_text(ep.q)), "chain_before": None}
        elif kind == "next":
            job = {"before": envs[i]._state("after"), "chain_before": ep.record.chain_object}
        elif kind == "close":  # "Answer:" written for the reasoner after the last step — or in place of an
            # unusable answer line (empty, repeated header), so the closing line replaces it
            if ep.record.is_answer:  # its own before-state, with the evidence it was regenerated with
                state = envs[i]._state("before")
                if ep.record.evidence:
                    state = c.reasoner.with_evidence(state, list(ep.record.evidence), cfg.injection)
            else:
                state = envs[i]._state("after")
            job = {"before": c.reasoner.with_answer_prompt(state),
                   "chain_before": ep.record.chain_before if ep.record.is_answer else ep.record.chain_object}
        else:
            job = {"before": envs[i]._state("before"), "chain_before": ep.record.chain_before}
        jobs.append(job)
    # retrieve: queries → one batched search → the passages to inject (first unused) → evidence
    rerank_s = 0.0
    if kind == "retrieve":
        from agents.retrievers.base import SelectionConfig, select_passages

        for i, job in zip(miss, jobs):
            ep = envs[i].ep
            context = {"prior_steps": list(ep.accepted_steps)}
            if c.querygen.modes[modes[i]] == "qfs":  # DRAGIN's QFS: from the reasoner's attention over the text
                context["qfs"] = c.qfs(c.question_text(ep.q), list(ep.accepted_steps), ep.record.text)
            job["query"] = c.querygen(ep.record.text, {"question": c.question_text(ep.q), "context": context},
                                      modes[i])
        ranked = c.retriever.search([job["query"] for job in jobs], k=cfg.top_k)
        for i, job, hits in zip(miss, jobs, ranked):
            ep = envs[i].ep
            chosen = select_passages(hits, ep.used, SelectionConfig(top_k=cfg.top_k))
            if c.prefetcher is not None and not cfg.rerank:  # the next step's likely queries, searched while this
                c.prefetcher.after_retrieval(chosen, c.question_text(ep.q))  # step regenerates (re-ranked: after it)
            texts = [p.text for p in chosen]
            job["compression"] = None
            if cfg.compress_evidence and texts:
                from agents.compression import compress_evidence

                texts, job["compression"] = compress_evidence(c.reasoner, job["before"], texts, ep.record.text,
                                                              cfg.tau_rel)
            job["passage_ids"] = tuple(p.id for p in chosen)
            job["ranked_ids"] = tuple(p.id for p in hits[: cfg.top_k])
            job["evidence"] = tuple(ep.record.evidence) + tuple(texts)
            job["injected"] = sum(len(t.split()) for t in texts)
        if cfg.rerank:  # SeaKR: one regeneration per fresh passage, the lowest EigenScore's is injected
            t_rr = time.perf_counter()
            n_rr = _rerank_by_eigenscore(c, cfg, [envs[i].ep for i in miss], jobs, ranked)
            rerank_s = time.perf_counter() - t_rr  # charged to the re-ranked records alone
            for job in jobs:
                if "rerank" in job:
                    job["rerank"]["seconds"] = rerank_s / n_rr
    # one batched generation (a retrieval with nothing new to inject keeps its step: no generation; a re-ranked
    # one has its step already). A step is generated from its conditioned state (for a regeneration: the state with
    # the evidence), and the signals that continue from the state (k-sample consistency, EigenScore, verbal
    # confidence) sample from that same state
    gen = [j for j, job in enumerate(jobs) if (kind != "retrieve" or job["passage_ids"]) and "step" not in job]
    for j in gen:
        jobs[j]["cond"] = (_evidence_state(c, cfg, jobs[j]["before"], jobs[j]["evidence"])
                           if kind == "retrieve" else jobs[j]["before"])
    own = (time.perf_counter() - t0 - rerank_s) / len(miss)
    for j, (step, after) in zip(gen, c.reasoner.next_step([jobs[j]["cond"] for j in gen]) if gen else []):
        jobs[j]["step"], jobs[j]["after"] = step, after
    # signals, labels → the new records (cached: one put of them all); EigenScore's samples of every new step in
    # one batched call
    c.precompute([jobs[j]["step"] for j in gen], [jobs[j]["cond"] for j in gen])
    new: list[tuple] = []
    for i, job in zip(miss, jobs):
        e, t1 = envs[i], time.perf_counter()
        ep = e.ep
        if "step" not in job:  # nothing new to inject (every top-k passage was used): the step stands as it was
            rec = StepRecord(**{**ep.record.__dict__, "query": job["query"], "passage_ids": (), "tokens_injected": 0,
                                "n_tokens": 0, "ranked_ids": job["ranked_ids"], "compression": None, "rerank": None})
        else:
            step, before, after = job["step"], job["before"], job["after"]
            feats, scalars, mask = job.get("features") or c.features(step, job["cond"])
            label = error_kind = chain_object = None
            if c.has_labels:
                label, error_kind, chain_object = c.task.label(ep.q, ep.n_accepted + 1, job["chain_before"],
                                                               step.content, step.is_answer)
            ep.before, ep.after = before, after
            seconds = own + (time.perf_counter() - t1) + float(getattr(step, "seconds", 0.0) or 0.0)
            n_tokens = step.n_tokens
            if "rerank" in job:  # every candidate's regeneration is paid: their tokens and wall time
                seconds = own + (time.perf_counter() - t1) + job["rerank"]["seconds"]
                n_tokens = job["rerank"]["tokens_generated"]
            rec = StepRecord(text=step.text, content=step.content, is_answer=step.is_answer, n_tokens=n_tokens,
                             seconds=seconds, features=feats, signals=scalars, mask=mask,
                             before=c.reasoner.snapshot(before), after=c.reasoner.snapshot(after),
                             evidence=job.get("evidence", ()), query=job.get("query"),
                             passage_ids=job.get("passage_ids", ()), tokens_injected=job.get("injected", 0),
                             ranked_ids=job.get("ranked_ids", ()),
                             label=label, error_kind=error_kind, chain_before=job["chain_before"],
                             chain_object=chain_object, compression=job.get("compression"),
                             rerank=job.get("rerank"),
                             final=step.is_answer or bool(getattr(after, "done", False)))
        new.append((c.question_id(ep.q), ep.prefix, rec))
        out[i] = rec
    cache.put_many(new)
    spent = c.phase_seconds.setdefault(kind, [0.0, 0])  # wall time of this phase's new records (efficiency bench)
    spent[0] += time.perf_counter() - t0
    spent[1] += len(miss)
    return out  # type: ignore[return-value]


class RetrievalTimingEnv(gym.Env):
    """The retrieval-timing environment. See the module docstring for the contract.

    Args:
        config: an :class:`EnvConfig` or a dict of its fields.
        components: optional prebuilt :class:`envs.components.Components` (reasoner, retriever, ...).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, config: EnvConfig | dict | None = None, components=None, render_mode: str | None = None):
        super().__init__()
        self.config = config if isinstance(config, EnvConfig) else EnvConfig.from_dict(config or {})
        if components is None:
            from envs.components import build_components

            components = build_components(self.config)
        self.c = components
        self.render_mode = render_mode
        self.costs = CostModel(self.config.costs, self.config.cost_params)
        self.cache = open_cache(self.config, self.c.namespace)
        dims = observation_groups(self.config, self.c.feature_dims)  # group -> dim (records' + episode groups)
        obs = {g: spaces.Box(-np.inf, np.inf, shape=(d,), dtype=np.float32) for g, d in dims.items()}
        obs["history"] = spaces.Box(0.0, np.inf, shape=(HISTORY_DIM,), dtype=np.float32)
        obs["mask"] = spaces.Box(0.0, 1.0, shape=(len(dims),), dtype=np.float32)
        self.observation_space = spaces.Dict(obs)
        self.groups = list(dims)
        n_modes = len(self.config.query_modes)
        self.action_space = (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(n_modes))) if self.config.querygen
                             else spaces.Discrete(2))
        self.ep: Episode | None = None  # the current question's state (reset builds it)

    # ------------------------------------------------------------------ runtime knobs
    def set_cost_weights(self, weights: dict[str, float]) -> None:
        """Change λ of some costs (curricula call this on every env runner)."""
        self.costs.set_weights(weights)

    def get_cost_weights(self) -> dict[str, float]:
        return dict(self.costs.weights)

    # ------------------------------------------------------------------ gym API: the n = 1 view of the loop
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return reset_batch([self], [seed], [options])[0]

    def step(self, action):
        return step_batch([self], [action])[0]

    # ------------------------------------------------------------------ internals
    def _normalise_action(self, action):
        if self.config.querygen:
            if isinstance(action, (tuple, list, np.ndarray)) and len(action) == 2:
                return (int(action[0]), int(action[1]))
            return action
        if isinstance(action, np.ndarray) and action.shape == ():
            return int(action)
        return action

    def _split_action(self, action) -> tuple[int, int]:
        a = self._normalise_action(action)
        if self.config.querygen:
            return int(a[0]), int(a[1])
        return int(a), 0

    def _state(self, which: str):
        """The live reasoner state before/after the current step (restored from its snapshot if needed)."""
        live = self.ep.before if which == "before" else self.ep.after
        if live is not None:
            return live
        return self.c.reasoner.restore(getattr(self.ep.record, which))

    def _obs(self) -> dict[str, np.ndarray]:
        ep = self.ep
        rec = ep.record
        feats = {**{g: (rec.features[g], rec.mask[g]) for g in rec.features}, **ep.episode_feats}
        obs = {g: np.asarray(feats[g][0], dtype=np.float32) for g in self.groups}
        obs["history"] = np.array([ep.n_accepted + 1, ep.retrievals, ep.tokens / 100.0,
                                   ep.since_retrieval], dtype=np.float32)
        obs["mask"] = np.array([feats[g][1] for g in self.groups], dtype=np.float32)
        return obs

    def _info(self, costs: dict[str, float], capped: bool = False, quality: float | None = None,
              retrieved: dict[str, Any] | None = None, regenerated: str | None = None) -> dict[str, Any]:
        """``info``: the current step (text, signals, label), what the last action cost and retrieved (with
        ``regenerated_step``: the step's text after the evidence), the episode's tokens and seconds so far; at the
        end the answer (``answer``: the last line, ``answer_content``: what is scored, ``None`` without a usable
        answer) and its ``quality`` — NaN for an ungraded task, whose ``metrics`` are empty."""
        retrieved = retrieved or {"query": None, "passage_ids": []}
        ep = self.ep
        rec = ep.record
        info = {
            "question_id": self.c.question_id(ep.q),
            "question": self.c.question_text(ep.q),
            "step_index": ep.n_accepted + 1,
            "step_text": rec.text,
            "is_answer": rec.is_answer,
            "signals": dict(rec.signals),
            "masked_signals": [n for n in self.c.scalar_names() if n not in rec.signals],
            "costs": costs,
            "cost_weights": dict(self.costs.weights),
            "retrievals": ep.retrievals,
            "retrievals_this_step": ep.retrievals_this_step,
            "query": retrieved["query"],
            "passage_ids": retrieved["passage_ids"],
            "capped": capped,
            **({"compression": retrieved["compression"]} if "compression" in retrieved else {}),
            **({"refined": retrieved["refined"]} if "refined" in retrieved else {}),
            **({"rerank": retrieved["rerank"]} if "rerank" in retrieved else {}),
            **({"regenerated_step": regenerated} if regenerated is not None else {}),
            "action_prefix": ",".join(ep.prefix),
            "tokens": ep.tokens,
            "seconds": round(ep.seconds, 6),
        }
        if rec.label is not None:
            info["label"] = rec.label
            info["error_kind"] = rec.error_kind
        if quality is not None:
            info["quality"] = quality
            info["metrics"] = self.c.metrics(ep.q, ep.answer)
            info["answer"] = rec.text
            info["answer_content"] = ep.answer.content if ep.answer is not None else None
            info["answer_status"] = ep.answer_status
            info["episode"] = list(ep.log)
        return info

    def render(self):
        ep = self.ep
        if self.render_mode == "ansi" and ep is not None and ep.record is not None:
            return f"[{self.c.question_id(ep.q)} | step {ep.n_accepted + 1}] {ep.record.text}"
        return None

    def close(self):
        self.cache.close()
