"""The measurements of ``kairos bench scaling`` (:mod:`eval.perf.scaling`): what one cost of Kairos takes, measured
from outside the code that pays it.

:class:`Meter` wraps one measurement: wall and CPU seconds, the tokens the reasoner generated (every step it returned,
sampled alternatives included) and the LM's forward passes (counted at the model's ``forward``; on vLLM its engine's
batched steps, and the share of the prompt tokens its prefix cache served — ``prefix_hit_rate``), the peak resident
memory above the measurement's start (sampled every 5 ms) and the bytes of trajectory-cache records it wrote (the
encoded records in its own SQLite cache file). Each cost function runs the real code on a cold cache of its own:

* :func:`episode_cost` — episodes of a Bernoulli(0.3) retrieval policy (``train.evaluate.evaluate_policy``);
* :func:`labels_cost` — the counterfactual warm start's labels (``train.counterfactual.counterfactual_labels``,
  π₀ = never): every decision of π₀'s path flipped and continued to the answer;
* :func:`labels_horizon_cost` — the same labels with a horizon H (``WarmStartOptions.horizon``): each flipped branch
  generated only until H steps past its decision and scored by the task's partial quality there; where the exact
  labels ran at the same size, how far the two agree (:func:`label_agreement`);
* :func:`oracle_cost` — the cache oracle (``eval.bench.calibration.cache_oracle``: the best leaf per question at λ);
* :func:`oracle_labels_cost` — the exact oracle's action values at every decision of π₀'s path (DAgger's labels,
  ``envs.oracle.oracle_action_values``);
* :func:`reinforce_cost` — one REINFORCE iteration in this process: a batch of episodes sampled from a fresh
  :class:`policies.rl.net.PolicyNet`, then one update with ``train.reinforce.reinforce_loss`` (RLlib's EnvRunner and
  Learner actors are not started: Ray's start-up would dominate at this size);
* :func:`benchmark_cost` — the fixed triggers' runs the policy benchmark makes per test question (CoT, always,
  Bernoulli(0.3), MinProb < 0.5) on one shared cache;
* :func:`index_cost` / :func:`search_cost` — building a retriever's index of a corpus, and one query's search.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

#: λ of retrieval calls of every measured reward
LAMBDA = 0.1
#: the oracles' leaf cap (``envs.oracle``'s default): a question whose search reaches it is not searched exactly —
#: the cache oracle says so in ``leaf_cap_share``, the exact oracle's labels refuse (the size is then not measured)
MAX_LEAVES = 4096


def rss_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Meter:
    """One measurement's counters (see the module docstring); ``with meter.running(components, cache_path):``."""

    def __init__(self):
        self.wall = self.cpu = 0.0
        self.tokens = self.forwards = self.peak_rss = self.cache_bytes = 0
        self.engine: dict[str, float] | None = None  # a vLLM engine's counters over the measurement (prefix cache)

    @contextlib.contextmanager
    def running(self, components: Any = None, cache_path: Path | None = None) -> Iterator[Meter]:
        start_rss, peak, stop = rss_bytes(), [0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_bytes())
                stop.wait(0.005)

        thread = threading.Thread(target=sample, daemon=True)
        undo = self._count(components) if components is not None else []
        thread.start()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield self
        finally:
            self.wall, self.cpu = time.perf_counter() - t0, time.process_time() - c0
            stop.set()
            thread.join()
            self.peak_rss = max(0, max(peak[0], rss_bytes()) - start_rss)
            for fn in undo:
                fn()
            if cache_path is not None:
                self.cache_bytes = stored_bytes(cache_path)

    def _count(self, components: Any) -> list:
        """Count the generated tokens (at the reasoner) and the LM's forward passes (at its model) while running."""
        reasoner = components.reasoner
        next_step, sample = reasoner.next_step, reasoner.sample_alternatives

        def counted_next(states):
            out = next_step(states)
            self.tokens += sum(int(step.n_tokens) for step, _ in out)
            return out

        def counted_sample(*a, **kw):
            alts = sample(*a, **kw)
            self.tokens += int(getattr(alts, "tokens", 0) or 0)
            return alts

        reasoner.next_step, reasoner.sample_alternatives = counted_next, counted_sample
        undo = [lambda: delattr(reasoner, "next_step"), lambda: delattr(reasoner, "sample_alternatives")]
        model = getattr(reasoner, "model", None)
        if model is not None:
            forward = model.forward

            def counted_forward(*a, **kw):
                self.forwards += 1
                return forward(*a, **kw)

            model.forward = counted_forward
            undo.append(lambda: delattr(model, "forward"))
        stats = getattr(getattr(reasoner, "engine", None), "stats", None)
        if isinstance(stats, dict) and "cached_tokens" in stats:  # vLLM: its engine steps are the forward passes
            before = dict(stats)
            undo.append(lambda: self._engine_delta(before, stats))
        return undo

    def _engine_delta(self, before: dict, after: dict) -> None:
        """The engine's counters over the measurement: batched engine steps (the forward passes), prompt tokens sent
        and the ones its prefix cache served."""
        d = {k: after[k] - before[k] for k in ("engine_steps", "prompt_tokens", "cached_tokens")}
        self.forwards += int(d["engine_steps"])
        self.engine = d

    def row(self, n: int, unit: str = "question", **extra: Any) -> dict[str, Any]:
        """The measurement per ``unit`` (``n`` of them) and in total."""
        per = max(1, n)
        return {"n": n, "unit": unit, "wall_s": self.wall / per, "cpu_s": self.cpu / per,
                "tokens": self.tokens / per, "forwards": self.forwards / per, "peak_rss_mb": self.peak_rss / 2**20,
                "cache_bytes": self.cache_bytes / per, "total_wall_s": self.wall, "total_tokens": self.tokens,
                "total_cache_bytes": self.cache_bytes,
                **(self.prefix_cache(per) if self.engine is not None else {}), **extra}

    def prefix_cache(self, per: int) -> dict[str, Any]:
        """vLLM's prefix cache over the measurement: prompt tokens sent per unit, and the share of them it served
        from cached blocks (``prefix_hit_rate``; None when nothing was sent)."""
        sent, hit = self.engine["prompt_tokens"], self.engine["cached_tokens"]
        return {"prompt_tokens": sent / per, "cached_prompt_tokens": hit / per,
                "prefix_hit_rate": hit / sent if sent else None}


def stored_bytes(path: Path) -> int:
    """Bytes of the encoded records in a trajectory-cache file (what its ``steps`` table stores)."""
    if not Path(path).is_file():
        return 0
    db = sqlite3.connect(str(path))
    try:
        return int(db.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM steps").fetchone()[0])
    finally:
        db.close()


@contextlib.contextmanager
def cold_cache(cfg: Any) -> Iterator[tuple[Any, Path]]:
    """``(cfg with a fresh SQLite trajectory cache, its path)``: a measurement that starts from nothing cached."""
    with tempfile.TemporaryDirectory(prefix="kairos-scaling-") as tmp:
        path = Path(tmp) / "cache.sqlite"
        yield cfg.replace(cache_path=str(path)), path


# ------------------------------------------------------------------------------------------------ the costs
def episode_cost(cfg: Any, comps: Any, questions: list[int], batch: int, p: float = 0.3) -> dict[str, Any]:
    """Episodes of a Bernoulli(``p``) retrieval policy (1.0: always retrieve, up to the env's caps), per episode."""
    from policies.triggers import AlwaysTrigger, RandomTrigger
    from train.evaluate import evaluate_policy

    policy = AlwaysTrigger() if p >= 1.0 else RandomTrigger(p, seed=0)
    with cold_cache(cfg) as (c, path), Meter().running(comps, path) as m:
        r = evaluate_policy(policy, c, questions, batch_size=batch, components=comps, progress="episodes")
    return m.row(len(questions), "episode", steps=r["steps_per_question"], accuracy=r["accuracy"],
                 calls=r["calls_per_question"])


def labels_cost(cfg: Any, comps: Any, questions: list[int], batch: int, horizon: int | None = None
                ) -> dict[str, Any]:
    """The counterfactual warm start's labels (π₀ = never), per question; ``decisions``: labelled decisions.
    ``horizon``: the horizon labels' H (``WarmStartOptions.horizon``; None: the exact labels). The row also holds
    ``_labels`` — ``(question, ΔR)`` per labelled decision, for :func:`label_agreement` (not for the report:
    :func:`eval.perf.scaling.measure_along` drops it)."""
    from train.counterfactual import counterfactual_labels
    from train.warmstart import WarmStartOptions

    opts = WarmStartOptions(enabled=True, questions=None, behavior="never", batch_envs=batch, horizon=horizon)
    with tempfile.TemporaryDirectory(prefix="kairos-scaling-labels-") as out, cold_cache(cfg) as (c, path), \
            Meter().running(comps, path) as m:
        res = counterfactual_labels(c, questions, opts, LAMBDA, Path(out), components=comps, progress=True)
    n_dec = int(len(res["y"]))
    return m.row(len(questions), "question", decisions=n_dec / max(1, len(questions)),
                 tokens_per_decision=m.tokens / max(1, n_dec), wall_s_per_decision=m.wall / max(1, n_dec),
                 positive_share=float(np.mean(res["y"])) if n_dec else float("nan"),
                 **({"horizon": int(horizon)} if horizon is not None else {}),
                 _labels=(np.asarray(res["question"]), np.asarray(res["delta"], dtype=np.float64)))


#: the horizon of :func:`labels_horizon_cost` when none is given: 4 steps, the rest of a 3-hop sub-question (its
#: hops and its answer line) from any of its decisions
HORIZON = 4


def labels_horizon_cost(cfg: Any, comps: Any, questions: list[int], batch: int, horizon: int = HORIZON
                        ) -> dict[str, Any]:
    """The counterfactual labels with horizon ``horizon`` (each branch generated until ``horizon`` steps past its
    decision, ``train.counterfactual``), per question: what :func:`labels_cost` measures, plus ``horizon``."""
    return labels_cost(cfg, comps, questions, batch, horizon=int(horizon))


def label_agreement(exact: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]
                    ) -> dict[str, Any] | None:
    """How far other labels (``(question, ΔR)`` per decision: :func:`labels_cost`'s ``_labels``) agree with the
    exact ones of the same decisions: ``agreement_y`` — the share of decisions whose ``y = 1[ΔR > 0]`` is the exact
    label's —, ``delta_corr`` — the Pearson correlation of ΔR (None where either is constant) — and
    ``delta_equal_share`` — the share whose ΔR equals the exact one (to 1e-9). None when the decisions differ.

    >>> q = np.array([0, 0, 1])
    >>> label_agreement((q, np.array([0.4, -0.1, -0.6])), (q, np.array([0.4, -0.6, -0.6])))
    {'agreement_y': 1.0, 'delta_corr': 0.866025403784, 'delta_equal_share': 0.6666666666666666}
    """
    (qa, da), (qb, db) = exact, other
    if len(qa) != len(qb) or not np.array_equal(qa, qb) or not len(qa):
        return None
    corr = float(np.corrcoef(da, db)[0, 1]) if da.std() > 0 and db.std() > 0 else None
    return {"agreement_y": float(np.mean((da > 0) == (db > 0))),
            "delta_corr": None if corr is None else round(corr, 12),
            "delta_equal_share": float(np.mean(np.abs(da - db) <= 1e-9))}


def oracle_cost(cfg: Any, comps: Any, questions: list[int], batch: int) -> dict[str, Any]:
    """The cache oracle (the best leaf of each question's decision tree at λ), per question."""
    from types import SimpleNamespace

    from eval.bench.calibration import cache_oracle

    if list(questions) != list(range(len(questions))):
        raise ValueError("oracle_cost measures the first questions of the split: give question indices 0 … n-1")
    with cold_cache(cfg) as (c, path), Meter().running(comps, path) as m:
        runner = SimpleNamespace(env_config=c, cfg=SimpleNamespace(batch_size=batch), components=comps)
        r = cache_oracle(runner, range(len(questions)), LAMBDA, max_leaves=MAX_LEAVES)
    leaves = [e["leaves"] for e in r["episodes"]]
    return m.row(len(questions), "question", leaves=float(np.mean(leaves)), accuracy=r["accuracy"],
                 calls=r["calls_per_question"], leaf_cap_share=float(np.mean([n >= MAX_LEAVES for n in leaves])))


def oracle_labels_cost(cfg: Any, comps: Any, questions: list[int], batch: int) -> dict[str, Any]:
    """The exact oracle's action values at every decision of π₀'s (never's) path, per question (DAgger's labels)."""
    from tqdm.auto import tqdm

    from envs.oracle import oracle_action_values
    from envs.vector import BatchedRetrievalEnv
    from policies.triggers import NeverTrigger
    from train.evaluate import evaluate_policy

    with cold_cache(cfg) as (c, path), Meter().running(comps, path) as m:
        c = c.replace(max_questions=None)
        r = evaluate_policy(NeverTrigger(), c, questions, batch_size=batch, components=comps, return_episodes=True,
                            progress="oracle labels: π₀ episodes")
        states = [(e["question_index"], (0,) * t) for e in r["episodes"] for t in range(int(e["steps"]))]
        venv = BatchedRetrievalEnv(batch, c, components=comps)
        try:
            with tqdm(desc="oracle labels (decision-tree search)", unit="leaf", leave=False) as bar:
                oracle_action_values(venv, states, LAMBDA, max_leaves=MAX_LEAVES, progress=bar)
        finally:
            venv.close()
    return m.row(len(questions), "question", decisions=len(states) / max(1, len(questions)),
                 tokens_per_decision=m.tokens / max(1, len(states)))


class SampledPolicy:
    """A policy network's stochastic policy (what REINFORCE samples with); every decision's observation and action
    go to ``log`` (shared by its copies)."""

    name = "sampled"

    def __init__(self, net: Any, log: list, seed: int = 0):
        import torch

        self.net, self.log, self.seed = net, log, seed
        self.gen = torch.Generator().manual_seed(seed)

    def reset(self, seed: int | None = None) -> None:
        import torch

        self.gen = torch.Generator().manual_seed(self.seed * 1_000_003 + (seed or 0))

    def decide(self, observation: dict, info: dict) -> int:
        import torch

        with torch.no_grad():
            obs = {k: torch.as_tensor(np.asarray(v, dtype=np.float32))[None] for k, v in observation.items()}
            p = torch.softmax(self.net.forward_heads(obs)["retrieve_logits"][0], -1)
        a = int(torch.multinomial(p, 1, generator=self.gen))
        self.log.append(({k: np.asarray(v, dtype=np.float32) for k, v in observation.items()}, a))
        return a


def reinforce_cost(cfg: Any, comps: Any, questions: list[int], batch: int) -> dict[str, Any]:
    """One REINFORCE iteration over ``questions`` (one episode each): sampled episodes, returns-to-go (γ = 1), one
    update with ``train.reinforce.reinforce_loss`` (mean baseline, normalised advantages); per iteration."""
    import torch

    from envs.rollout import run_episodes
    from envs.vector import BatchedRetrievalEnv
    from policies.rl.compat import env_field_sizes
    from policies.rl.net import PolicyNet, PolicySpec
    from train.reinforce import reinforce_loss

    with cold_cache(cfg) as (c, path), Meter().running(comps, path) as m:
        venv = BatchedRetrievalEnv(min(batch, len(questions)), c, components=comps)
        torch.manual_seed(0)
        net = PolicyNet(PolicySpec(fields=env_field_sizes(venv.single_observation_space)))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        log: list = []
        events: list[tuple[int, float]] = []  # (question, reward) per decision, in the order the policy decided
        try:
            for ev in run_episodes(venv.envs, SampledPolicy(net, log), questions):
                events.append((ev.question_index, ev.reward))
        finally:
            venv.close()
        obs = {k: torch.as_tensor(np.stack([o[k] for o, _ in log])) for k in log[0][0]}
        net.update_normalizer(obs)
        heads = net.forward_heads(obs)
        logp_all = torch.log_softmax(heads["retrieve_logits"], -1)
        acts = torch.as_tensor([a for _, a in log])
        loss = reinforce_loss(logp_all.gather(1, acts[:, None])[:, 0], -(logp_all.exp() * logp_all).sum(-1),
                              torch.as_tensor(returns_to_go(events)), heads["value"],
                              baseline="mean", normalize_advantages=True, entropy_coeff=0.01)["total_loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.row(1, "iteration", episodes=len(questions), decisions=len(log))


def returns_to_go(events: list[tuple[int, float]]) -> list[float]:
    """Each decision's return-to-go (γ = 1: the rewards of its episode from it on), in the order of ``events``
    (``(episode, reward)`` per decision, episodes interleaved as a batched rollout yields them).

    >>> returns_to_go([(0, -0.1), (1, 0.0), (0, 1.0), (1, -0.1)])
    [0.9, -0.1, 1.0, -0.1]
    """
    by_ep: dict[int, list[float]] = {}
    for ep, r in events:
        by_ep.setdefault(ep, []).append(r)
    rtg = {ep: list(np.cumsum(rs[::-1])[::-1]) for ep, rs in by_ep.items()}
    seen: dict[int, int] = {}
    out = []
    for ep, _ in events:
        i = seen.get(ep, 0)
        seen[ep] = i + 1
        out.append(round(float(rtg[ep][i]), 12))
    return out


def benchmark_cost(cfg: Any, comps: Any, questions: list[int], batch: int) -> dict[str, Any]:
    """The policy benchmark's fixed-trigger runs on one shared cache, per question."""
    from policies.triggers import AlwaysTrigger, NeverTrigger, RandomTrigger, ThresholdTrigger
    from train.evaluate import evaluate_policy

    triggers = [NeverTrigger(), AlwaysTrigger(), RandomTrigger(0.3, seed=0), ThresholdTrigger("minprob", 0.5, "below")]
    with cold_cache(cfg) as (c, path), Meter().running(comps, path) as m:
        for t in triggers:
            evaluate_policy(t, c, questions, batch_size=batch, components=comps, progress=f"benchmark: {t.name}")
    return m.row(len(questions), "question", methods=len(triggers))


#: cost name -> its function ``(env config, components, question indices, batch) -> row``
COSTS = {"episode": episode_cost, "labels": labels_cost, "labels_horizon": labels_horizon_cost, "oracle": oracle_cost,
         "oracle_labels": oracle_labels_cost, "reinforce": reinforce_cost, "benchmark": benchmark_cost}


# ------------------------------------------------------------------------------------------------ retrieval
def index_cost(kind: str, corpus: Any, out: Path, settings: dict[str, Any] | None) -> dict[str, Any]:
    """Building a ``kind`` index of ``corpus`` under ``out``: wall, CPU, peak RSS above the start, index bytes."""
    from agents.retrievers.index import build_index

    with Meter().running() as m:
        manifest = build_index(kind, corpus, out, settings, overwrite=True)
    return {"n": len(corpus), "unit": "index", "wall_s": m.wall, "cpu_s": m.cpu, "peak_rss_mb": m.peak_rss / 2**20,
            "index_bytes": int(manifest["size_bytes"])}


def search_cost(retriever: Any, queries: list[str], k: int) -> dict[str, Any]:
    """One query at a time (after one warm-up query): mean wall and CPU per query."""
    retriever.search(queries[:1], k=k)
    with Meter().running() as m:
        for q in queries:
            retriever.search([q], k=k)
    return {"n": len(queries), "unit": "query", "wall_s": m.wall / len(queries), "cpu_s": m.cpu / len(queries),
            "peak_rss_mb": m.peak_rss / 2**20}
