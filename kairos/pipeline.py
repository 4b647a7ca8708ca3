"""``kairos.Pipeline``: a trained retrieval policy — or any fixed trigger — answering your questions over your
knowledge, with the full trace of every decision.

The pipeline drives the env's own decision loop (:func:`envs.rollout.run_episodes`, which the benchmark's
evaluation runs too) on an ungraded task of your questions (:class:`envs.ungraded.UngradedTask`: no gold answers,
so no quality and a reward of costs alone). Built from

* an exported policy directory (:meth:`Pipeline.from_policy`: it records the env it was trained in — reasoner,
  signals, query modes);
* what a benchmark evaluated (:meth:`Pipeline.from_bench`: the snapshot selected on dev, the calibrated
  threshold and query mode — e.g. the quickstart's ``learned[QueryGen](λ=0.1)`` row);
* any policy or trigger and an env config (``Pipeline(policy, env_config)``: ``"never"``, ``"always"``,
  ``"minprob<0.3"``, a :class:`~policies.triggers.Trigger`, an export directory),

with overrides for the reasoner (``micro``, ``hf``, ``openai`` — any registered backend and its options) and the
knowledge source (a prebuilt index, a corpus file, passages in memory; :func:`envs.ungraded.knowledge_config`).

:meth:`Pipeline.answer` / :meth:`Pipeline.answer_many` return :class:`Answer` objects (plain data:
``Answer.to_dict()`` is JSON); :meth:`Pipeline.stream` yields the same trace step by step as JSON-ready events,
as the loop makes them (what a server streams). Not thread-safe: a server runs one pipeline per worker.

Example:
    >>> p = Pipeline("never", {"reasoner": "micro", "rsus_components": ["ent"]})   # doctest: +SKIP
    >>> a = p.answer("Which city was Teimshox 's mother born in ?")                 # doctest: +SKIP
    >>> a.answer, a.calls, [s.retrieve for s in a.steps]                           # doctest: +SKIP
    ('Kasford', 0, [False, False, False])
    >>> learned = Pipeline.from_policy("runs/quickstart/train/policy_trigger")     # doctest: +SKIP
    >>> learned.answer("Which company does Teimshox 's mother 's father work for ?").to_dict()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: a threshold trigger written inline: ``SIGNAL<τ`` (retrieve below) or ``SIGNAL>τ`` (above)
THRESHOLD_SPEC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*([<>])\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
POLICY_HELP = ("an exported policy directory (spec.json + weights.pt, e.g. runs/quickstart/train/policy_trigger — "
               "`kairos quickstart` or `kairos train --config …` writes one), a trigger name (never, always, single) "
               "or a threshold trigger 'SIGNAL<τ' / 'SIGNAL>τ' (e.g. 'minprob<0.3')")


# ----------------------------------------------------------------------------------------- the trace
@dataclass
class TracePassage:
    """A passage the retriever ranked for a step's query: its id, title, text and score; ``injected``: put in
    front of the regenerated step."""

    id: str
    title: str
    text: str
    score: float
    injected: bool = False


@dataclass
class TraceStep:
    """One decision: the step it was about, what the policy decided and why, what was retrieved, what it cost.

    Attributes:
        index: the decision's number in the episode (1-based).
        step_index: the reasoning step it is about (1-based; a step regenerated and decided again keeps it).
        text: the step as generated (before any evidence for it).
        is_answer: the step is the answer line.
        signals: the step's scalar signals (``info["signals"]``: minprob, ppl, rsus, probe scores …).
        masked_signals: signals the env could not compute at this step.
        action: the action the policy returned (``0``/``1``, or ``[retrieve, mode index]``).
        retrieve: the policy's decision: retrieve (and regenerate the step) or go on.
        capped: a retrieval the env's caps turned into going on (``max_retrievals_per_step`` / ``…_question``).
        retrieved: a retrieval happened.
        probability: π(retrieve) of a learned policy (``None`` for a trigger without one).
        threshold: the threshold the decision compared with (a learned policy's or a signal trigger's).
        details: everything else the policy explained (a trigger's signal value, a QueryGen head's mode
            probabilities).
        query: the retrieval's query.
        query_mode: the query formulation it used (an ``EnvConfig.query_modes`` name).
        passages: the retriever's top-k for the query, best first (``injected`` marks the evidence used).
        regenerated: the step's text after the evidence (``None``: not regenerated).
        refined: SeaKR's self-aware refinement: which step stood (``original`` | ``augmented``; ``None``: off).
        tokens: tokens the decision cost (generated + injected: the regeneration and the next step).
        seconds: the env's measured generation seconds of those (a cached step: as recorded).
        reward: the decision's reward (``−Σ λ·cost``; nothing scores an ungraded answer).
        costs: the decision's raw costs by name.
    """

    index: int
    step_index: int
    text: str
    is_answer: bool
    signals: dict[str, float]
    masked_signals: list[str]
    action: Any
    retrieve: bool
    capped: bool
    retrieved: bool
    probability: float | None
    threshold: float | None
    details: dict[str, Any]
    query: str | None
    query_mode: str | None
    passages: list[TracePassage]
    regenerated: str | None
    refined: str | None
    tokens: int
    seconds: float
    reward: float
    costs: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (non-finite numbers as ``None``)."""
        return _plain(asdict(self))


@dataclass
class Answer:
    """A question's answer and its trace.

    Attributes:
        question: the question as asked.
        question_id: its id (a hash of the text; the trajectory cache keys its steps by it).
        answer: the final answer's content (``None``: no usable answer).
        answer_line: the last line as the reasoner wrote it (e.g. ``Answer : Kasford``).
        answer_status: ``answered`` | ``closed`` (asked for the answer at the end: ``EnvConfig.answer_closing``)
            | ``none``.
        calls: retrieval calls.
        steps: one :class:`TraceStep` per decision.
        tokens: tokens in all (generated + injected).
        seconds: the env's measured generation seconds in all (cached steps: as recorded).
        wall_seconds: wall time until the answer (its batch generates together).
        truncated: the chain reached ``max_steps``.
        cost: ``Σ λ·cost`` of the episode (the env config's λ).
        policy: the policy's name.
        cost_weights: the λ of each cost the episode paid (its budget: ``retrieval_calls``).
        cut_to_window: the question was cut to fit the reasoner's context window (``None``: it was not):
            ``{"field": "question", "from_tokens", "to_tokens", "window"}``; ``question`` is the text it ran on.
    """

    question: str
    question_id: str
    answer: str | None
    answer_line: str | None
    answer_status: str | None
    calls: int
    steps: list[TraceStep] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    wall_seconds: float = 0.0
    truncated: bool = False
    cost: float = 0.0
    policy: str = ""
    cost_weights: dict[str, float] = field(default_factory=dict)
    cut_to_window: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (non-finite numbers as ``None``); :meth:`from_dict` reads it back."""
        return _plain(asdict(self))

    def to_json(self, **kw: Any) -> str:
        """:meth:`to_dict` as strict JSON."""
        return json.dumps(self.to_dict(), allow_nan=False, **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        """The :class:`Answer` of :meth:`to_dict`'s data."""
        steps = [TraceStep(**{**s, "passages": [TracePassage(**p) for p in s["passages"]]}) for s in d["steps"]]
        return cls(**{**d, "steps": steps})


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# ----------------------------------------------------------------------------------------- the budget
#: the cost whose λ is the budget a caller sets at run time (``--lambda``, ``lam=``, a request's ``kairos.lambda``)
BUDGET_COST = "retrieval_calls"
#: the largest budget accepted (a λ above it prices one retrieval above any answer's worth many times over)
MAX_BUDGET = 100.0


def _question_list(questions: Any, where: str) -> list[str]:
    """``questions`` as a list; a bare string (read as one question per character) is a :class:`TypeError` naming
    the call to use."""
    if isinstance(questions, (str, bytes)):
        raise TypeError(f"Pipeline.{where}() takes a list of questions, got a single {type(questions).__name__} "
                        f"(it would be read as one question per character): use answer(question) for one question, "
                        f"or {where}([question])")
    if isinstance(questions, Mapping) or not isinstance(questions, Iterable):
        raise TypeError(f"Pipeline.{where}() takes a list of questions (strings), got {type(questions).__name__} "
                        f"{questions!r:.60}")
    return list(questions)


def check_budget(lam: Any, where: str) -> float:
    """``lam`` as a budget: a finite number in [0, 100]; else an error naming ``where``.

    >>> check_budget(0.2, "lam"), check_budget(1, "lam")
    (0.2, 1.0)
    """
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(float(lam)) \
            or not 0.0 <= float(lam) <= MAX_BUDGET:
        raise ValueError(f"{where}: the budget λ (the price of one retrieval call, in answer quality) must be a "
                         f"number in [0, {MAX_BUDGET:g}], got {lam!r}")
    return float(lam)


def check_threshold(threshold: Any, where: str) -> float | None:
    """``threshold`` as a learned policy's retrieve-probability threshold: ``None`` or a number in [0, 1); else an
    error naming ``where``.

    >>> check_threshold(0.7, "threshold"), check_threshold(None, "threshold")
    (0.7, None)
    """
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) < 1.0:
        raise ValueError(f"{where}: a learned policy's retrieve-probability threshold is a number in [0, 1), got "
                         f"{threshold!r} (a signal trigger's threshold goes in the policy: 'minprob<0.3')")
    return float(threshold)


# ----------------------------------------------------------------------------------------- policies
def load_policy(policy: Any, threshold: float | None = None, name: str | None = None):
    """A policy an env can run (:func:`_load_policy`); ``threshold`` is checked (a number in [0, 1)) and refused for
    a policy that has none (a trigger), never silently ignored.

    Raises:
        ValueError: a threshold out of range or given to a trigger.
    """
    from policies.rl.export import LearnedTrigger

    threshold = check_threshold(threshold, "threshold")
    loaded = _load_policy(policy, threshold, name)
    if threshold is not None and not isinstance(loaded, LearnedTrigger):
        raise ValueError(f"threshold={threshold:g}: the policy '{getattr(loaded, 'name', policy)}' is a trigger, not "
                         "a learned policy, and has no retrieve-probability threshold (a signal trigger's threshold "
                         "goes in the policy: 'minprob<0.3'); leave it out")
    return loaded


def _load_policy(policy: Any, threshold: float | None = None, name: str | None = None):
    """A policy an env can run, from ``policy``: a trigger or learned policy object (as it is), a
    :class:`~policies.rl.net.PolicyNet`, an exported policy directory, a trigger name registered in
    :data:`policies.triggers.TRIGGERS` (``never``, ``always``, ``single``, ``random`` needs ``p``: use the
    object) or ``'SIGNAL<τ'`` / ``'SIGNAL>τ'`` (a :class:`~policies.triggers.ThresholdTrigger`).

    Args:
        threshold: a learned policy's retrieve-probability threshold (default 0.5, the greedy policy).
        name: a display name.

    Raises:
        FileNotFoundError: a path that holds no exported policy (naming what to pass).

    Example:
        >>> load_policy("minprob<0.3").describe()
        'minprob<0.3: retrieve when minprob < 0.3'
        >>> load_policy("always").name
        'Always'
    """
    from policies.rl.export import LearnedTrigger
    from policies.triggers import TRIGGERS

    if isinstance(policy, (str, Path)):
        text = str(policy)
        m = THRESHOLD_SPEC.match(text)
        if not m and re.match(r"^\s*[A-Za-z_][\w.]*\s*[<>]", text) and not Path(text).exists():
            raise ValueError(f"policy {text!r}: a threshold trigger is 'SIGNAL<τ' or 'SIGNAL>τ' with τ a number "
                             "(e.g. 'minprob<0.3')")
        if m and not Path(text).exists():
            t = TRIGGERS.make("threshold", m.group(1), float(m.group(3)), "below" if m.group(2) == "<" else "above",
                              name=name or text.strip())
        elif text in TRIGGERS.names() and not Path(text).exists():
            if text == "oracle":
                raise ValueError(f"policy 'oracle': the label oracle reads gold step labels, which user questions do "
                                 f"not have; give {POLICY_HELP}")
            if text in ("random", "threshold", "fixed_mode"):
                raise ValueError(f"policy '{text}': this trigger takes arguments (pass the trigger object, e.g. "
                                 f"TRIGGERS.make('{text}', …)); or give {POLICY_HELP}")
            t = TRIGGERS.make(text)
        else:
            path = Path(text).expanduser()
            if not (path / "spec.json").is_file():
                what = "a directory without spec.json" if path.is_dir() else "no such directory"
                raise FileNotFoundError(f"no exported policy at {path} ({what}); give {POLICY_HELP}")
            return LearnedTrigger.load(path, name=name, threshold=0.5 if threshold is None else float(threshold))
        return t
    from policies.rl.net import PolicyNet

    if isinstance(policy, PolicyNet):
        return LearnedTrigger(policy, name=name or "learned", threshold=0.5 if threshold is None else float(threshold))
    if not callable(getattr(policy, "decide", None)):
        raise TypeError(f"policy: need a trigger (decide/reset), a PolicyNet or {POLICY_HELP}; got {type(policy)}")
    if threshold is not None and isinstance(policy, LearnedTrigger):
        policy.threshold = float(threshold)
    return policy


def _takes_mode(policy: Any) -> bool:
    """Whether a policy's actions are ``(retrieve, mode)`` (the env then runs with QueryGen actions)."""
    from policies.triggers import FixedModeTrigger

    return isinstance(policy, FixedModeTrigger) or bool(getattr(policy, "querygen", False))


def policy_env_config(path: str | Path) -> dict[str, Any]:
    """The env config an exported policy was trained in: ``spec.json``'s ``env_config``, else (exports written
    before it was recorded) the training run's ``config.json`` next to the export (``<run>/policy``,
    ``<run>/snapshots/iter_N``, ``<run>/warmstart/policy``).

    Raises:
        ValueError: neither is there (naming what to pass).
    """
    path = Path(path)
    if not (path / "spec.json").is_file():  # e.g. from_policy("never"): a trigger has no env of its own
        raise ValueError(f"{str(path)!r} is not an exported policy directory (no {path / 'spec.json'}), so it records "
                         "no env config: give the env yourself — Pipeline.from_policy(…, env_config={...}) or "
                         "Pipeline(policy, env_config) — or the directory `kairos train` exported")
    meta = json.loads((path / "spec.json").read_text())
    if meta.get("env_config"):
        return dict(meta["env_config"])
    for run in (path.parent, path.parent.parent):
        cfg_file = run / "config.json"
        if cfg_file.is_file():
            data = json.loads(cfg_file.read_text())
            if isinstance(data.get("env_config"), dict):
                from train.config import TrainConfig
                from train.run import policy_env_config as train_env

                env = train_env(TrainConfig.from_dict(data, where=str(cfg_file)))
                if env is not None:
                    log.info("%s records no env config: using its run's %s", path, cfg_file)
                    return env
    raise ValueError(f"policy {path} records no env config (exported before spec.json recorded it) and no training "
                     "run's config.json is next to it: pass the env it was trained in — env_config= (CLI: "
                     "--env-config YAML: the training YAML, e.g. configs/train_microworld_rsus_verb_ent.yaml)")


def read_env_config(path: str | Path):
    """The :class:`~envs.env_config.EnvConfig` of a YAML file: a training config's (its ``env_config`` over the preset
    its ``env`` names), a benchmark config's (its ``env``) or an env config itself; errors name the file and key."""
    from envs.core.config import read_yaml_mapping
    from envs.env_config import PRESETS, EnvConfig

    data = read_yaml_mapping(path)
    extra = data.get("plugins") or []  # a training or bench config's top-level plug-ins are its env's too
    def env_of(d): return {**d, "plugins": list(dict.fromkeys([*extra, *(d.get("plugins") or [])]))} if extra else d
    if isinstance(data.get("env_config"), dict):
        preset = data.get("env", "microworld")
        return EnvConfig.from_preset(preset if preset in PRESETS else None, env_of(data["env_config"]),
                                     where=f"{path}.env_config")
    if isinstance(data.get("env"), dict):
        return EnvConfig.from_dict(env_of(data["env"]), where=f"{path}.env")
    return EnvConfig.from_dict(data, where=str(path))


# ----------------------------------------------------------------------------------------- the pipeline
class Pipeline:
    """A policy answering questions over a knowledge source through the env's own decision loop.

    Args:
        policy: see :func:`load_policy` (a learned policy, a trigger object, a directory, ``"never"``,
            ``"minprob<0.3"`` …).
        env_config: the env it runs in (an :class:`~envs.env_config.EnvConfig` or a dict of its fields): reasoner,
            signals, probes, query modes, caps, λ. Default: the learned policy's own (:func:`policy_env_config`),
            else the defaults (the micro-world reasoner). Its task becomes ``questions`` (ungraded); QueryGen
            actions follow the policy.
        knowledge: the knowledge source — an index directory, a corpus file or spec, or passages in memory
            (:func:`envs.ungraded.knowledge_config`); default: the env config's own (the micro-world reasoner:
            its world's facts).
        index: a prebuilt index directory (``knowledge`` is then the corpus it is checked against).
        reasoner: another reasoner backend (``micro``, ``hf``, ``openai``; any registered name) ...
        reasoner_options: ... and its options (e.g. ``{"base_url": …, "model": …}``; with a new backend they
            replace the config's).
        query_mode: retrieve with this query formulation (a trigger's fixed mode; a name in ``query_modes``).
        threshold: a learned policy's retrieve-probability threshold.
        lam: the budget — λ of retrieval calls — a cost-conditioned policy (trained with ``observe_costs``) decides
            for; each call of :meth:`answer` / :meth:`answer_many` / :meth:`stream` may give its own. A policy that
            does not read the budget is an error here (it was trained for one λ: retrain, or leave ``lam`` unset).
        batch_size: questions in flight at once (one batched generation per round).
        cache_path: a trajectory-cache SQLite file (default: in memory) — repeated questions replay from it.

    Raises:
        ValueError: a learned policy whose observation fields this env does not produce (another reasoner's
            hidden sizes, other signals), naming the fields.
    """

    def __init__(self, policy: Any, env_config: Any = None, *, knowledge: Any = None, index: str | Path | None = None,
                 reasoner: str | None = None, reasoner_options: dict[str, Any] | None = None,
                 query_mode: str | None = None, threshold: float | None = None, batch_size: int = 16,
                 cache_path: str | Path | None = None, lam: float | None = None):
        from envs.env_config import EnvConfig
        from envs.ungraded import UngradedTask, knowledge_config, ungraded_components

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"Pipeline: batch_size must be an integer >= 1, got {batch_size!r}")
        policy = load_policy(policy, threshold=threshold)
        if env_config is None:
            env_config = getattr(policy, "env_config", None) or {}
        if not isinstance(env_config, (EnvConfig, Mapping)):
            raise TypeError(f"Pipeline: env_config is a mapping of EnvConfig fields or an EnvConfig, got "
                            f"{type(env_config).__name__} {env_config!r:.60} (a YAML file: "
                            "env_config=kairos.pipeline.read_env_config(path))")
        base = env_config.to_dict() if isinstance(env_config, EnvConfig) else dict(env_config)
        if reasoner is not None and reasoner != base.get("reasoner"):
            base["reasoner"], base["reasoner_options"] = reasoner, {}
        if reasoner_options is not None:
            base["reasoner_options"] = dict(reasoner_options)
        # an application's env: its questions (ungraded), nothing of the training or benchmark run's plumbing
        base.update(task="questions", data_path=None, max_questions=None, fact_holdout={}, split="train",
                    cache_path=None if cache_path is None else str(cache_path), cache_service=None,
                    reasoner_service=None, retriever_service=None)
        config = EnvConfig.from_dict(base, where="Pipeline.env_config")
        if lam is not None:
            config = config.replace(costs={**config.costs, BUDGET_COST: check_budget(lam, "Pipeline(lam=…)")})
        if query_mode is not None:
            from policies.triggers import FixedModeTrigger

            if query_mode not in config.query_modes:
                raise ValueError(f"Pipeline: query_mode '{query_mode}' is not one of the env's query_modes "
                                 f"{list(config.query_modes)}")
            policy = FixedModeTrigger(policy, list(config.query_modes).index(query_mode), query_mode)
        config = config.replace(querygen=_takes_mode(policy))
        config, corpus = knowledge_config(config, knowledge, index)
        self.policy = policy
        self.env_config = config
        self.batch_size = int(batch_size)
        self.task = UngradedTask()
        self.components = ungraded_components(config, self.task, corpus)
        self._venv = None
        self._search_memo: dict[tuple[str, int], list] = {}
        self._check_fits()
        if lam is not None:
            self._check_budget("Pipeline(lam=…)")

    @property
    def reads_budget(self) -> bool:
        """Whether the policy decides for a budget given at run time (a learned policy that observes λ of retrieval
        calls: its training env's ``observe_costs``)."""
        from policies.rl.compat import policy_net

        net = policy_net(self.policy)
        return net is not None and "costs" in net.spec.fields and BUDGET_COST in self.env_config.observe_costs

    @property
    def lam(self) -> float:
        """The default budget: λ of retrieval calls each question pays unless a call gives its own."""
        return float(self.env_config.costs.get(BUDGET_COST, 0.0))

    def _check_budget(self, where: str) -> None:
        if not self.reads_budget:
            name = getattr(self.policy, "name", type(self.policy).__name__)
            raise ValueError(f"{where}: the policy '{name}' does not read a budget — it was trained for one λ (or is "
                             "a fixed trigger), so λ would change the reported cost but no decision. Train a "
                             "cost-conditioned policy (env_config.observe_costs: [retrieval_calls] and a curriculum "
                             "with high: configs/train_microworld_conditioned.yaml), or leave λ unset")

    def _weights(self, n: int, lam: float | list[float | None] | None, where: str) -> dict[int, dict[str, float]]:
        """Per question, the cost weights it pays: ``lam`` (one value, or one per question; ``None``: the default)."""
        lams = list(lam) if isinstance(lam, (list, tuple)) else [lam] * n
        if len(lams) != n:
            raise ValueError(f"{where}: {len(lams)} budgets for {n} questions (give one λ, or one per question)")
        if any(x is not None for x in lams):
            self._check_budget(where)
        base = dict(self.env_config.costs)
        return {i: {**base, BUDGET_COST: self.lam if x is None else check_budget(x, f"{where}[{i}]")}
                for i, x in enumerate(lams)}

    # -------------------------------------------------------------- constructors
    @classmethod
    def from_policy(cls, path: str | Path, *, env_config: Any = None, **kw: Any) -> Pipeline:
        """The exported policy at ``path`` in the env it was trained in (:func:`policy_env_config`; or
        ``env_config``), with the overrides of the constructor (``knowledge``, ``reasoner`` …)."""
        policy = load_policy(path, threshold=kw.pop("threshold", None))
        return cls(policy, env_config if env_config is not None else policy_env_config(path), **kw)

    @classmethod
    def from_bench(cls, out_dir: str | Path, method: str, *, config: str | Path | None = None, **kw: Any) -> Pipeline:
        """Exactly what the benchmark at ``out_dir`` evaluated on test for ``method`` — the snapshot selected on
        dev, the calibrated threshold and query mode, the method's env and λ (:func:`eval.bench.policies.
        evaluated_policy`) — with the constructor's overrides (``knowledge``, ``reasoner`` …; ``batch_size``
        defaults to the benchmark's). Over the benchmark's questions it makes the benchmark's decisions.

        Args:
            config: the benchmark's YAML, for an output directory written before it recorded its config.
        """
        from eval.bench.policies import evaluated_policy

        env_config, trigger, batch_size = evaluated_policy(out_dir, method, config)
        kw.setdefault("batch_size", batch_size)
        return cls(trigger, env_config, **kw)

    def with_policy(self, policy: Any, query_mode: str | None = None, threshold: float | None = None) -> Pipeline:
        """Another policy on this pipeline's reasoner, retriever and cache (nothing is loaded again): compare
        policies on the same questions."""
        from policies.triggers import FixedModeTrigger

        other = object.__new__(Pipeline)
        policy = load_policy(policy, threshold=threshold)
        if query_mode is not None:
            policy = FixedModeTrigger(policy, list(self.env_config.query_modes).index(query_mode), query_mode)
        other.policy, other.batch_size, other.task, other.components = policy, self.batch_size, self.task, \
            self.components
        other.env_config = self.env_config.replace(querygen=_takes_mode(policy))
        other._venv, other._search_memo = None, self._search_memo
        other._check_fits()
        return other

    # -------------------------------------------------------------- answering
    def answer(self, question: str, lam: float | None = None) -> Answer:
        """The answer to one question, with its trace; ``lam``: its budget (a cost-conditioned policy).

        Raises:
            TypeError: ``question`` is not a string (a list of questions: use :meth:`answer_many`).
        """
        if not isinstance(question, str):
            many = isinstance(question, (list, tuple))
            raise TypeError(f"Pipeline.answer() takes one question (a string), got {type(question).__name__}"
                            + ("; for a list of questions use answer_many(questions)" if many else ""))
        return self.answer_many([question], lam=lam)[0]

    def answer_many(self, questions: Iterable[str], lam: float | list[float | None] | None = None) -> list[Answer]:
        """Answers to many questions, in order — ``batch_size`` at a time through the env's batched loop. ``lam``:
        the budget of every question, or one per question (``None``: the pipeline's).

        Raises:
            TypeError: ``questions`` is a single string (it would be read as one question per character): use
                :meth:`answer` for one question.
        """
        out: dict[int, Answer] = {}
        for i, _, ans in self._run(questions, lam, "answer_many"):
            if ans is not None:
                out[i] = ans
        return [out[i] for i in sorted(out)]

    def stream(self, questions: Iterable[str], lam: float | list[float | None] | None = None
               ) -> Iterator[dict[str, Any]]:
        """The trace as it is made, as JSON-ready events: ``{"event": "step", "question_index", "question_id",
        "step": TraceStep.to_dict()}`` after each decision, and ``{"event": "answer", "question_index", "answer":
        Answer.to_dict()}`` when a question is done (what a server streams). ``lam`` as in :meth:`answer_many`.

        Raises:
            TypeError: ``questions`` is a single string: wrap one question in a list (``stream([question])``).
        """
        questions = _question_list(questions, "stream")  # refused at the call, not at the first next()
        return self._events(questions, lam)

    def _events(self, questions: list[str], lam: float | list[float | None] | None) -> Iterator[dict[str, Any]]:
        for i, step, ans in self._run(questions, lam, "stream"):
            yield {"event": "step", "question_index": i, "question_id": self.task.questions[i].id,
                   "step": step.to_dict()}
            if ans is not None:
                yield {"event": "answer", "question_index": i, "answer": ans.to_dict()}

    def _run(self, questions: Iterable[str], lam: float | list[float | None] | None = None, where: str = "answer_many"
             ) -> Iterator[tuple[int, TraceStep, Answer | None]]:
        """``(question index, step, answer when the question is done)`` per decision, from the shared loop (every
        public method answering questions passes here: a bare string is refused, naming the call to use)."""
        from envs.rollout import run_episodes

        questions = _question_list(questions, where)
        weights = self._weights(len(questions), lam, "Pipeline.answer(lam=…)")  # checked before any work
        self.task.set_questions(questions)
        n = len(self.task.questions)
        if not n:
            return
        cuts = self._fit_to_window()
        steps: dict[int, list[TraceStep]] = {}
        for ev in run_episodes(self.venv.envs, self.policy, list(range(n)), cost_weights=weights):
            step = self._trace_step(ev)
            steps.setdefault(ev.question_index, []).append(step)
            ans = self._answer(ev, steps.pop(ev.question_index), cuts.get(ev.question_index)) if ev.done else None
            yield ev.question_index, step, ans

    def _fit_to_window(self) -> dict[int, dict[str, Any]]:
        """The task's questions too long for the reasoner's context window cut to fit
        (:func:`agents.reasoners.base.fit_question`), each cut a warning: ``{question index: its note}``."""
        from agents.reasoners.base import fit_question

        texts, cuts = [], {}
        for i, q in enumerate(self.task.questions):
            text, note = fit_question(self.components.reasoner, q.text)
            texts.append(text)
            if note:
                cuts[i] = note
                log.warning("question %d cut to fit the reasoner's context window of %d tokens: %d → %d tokens", i,
                            note["window"], note["from_tokens"], note["to_tokens"])
        if cuts:
            self.task.set_questions(texts)
        return cuts

    @property
    def venv(self):
        """The env copies (built on first use; ``batch_size`` of them sharing the components)."""
        if self._venv is None:
            from envs.vector import BatchedRetrievalEnv

            self._venv = BatchedRetrievalEnv(self.batch_size, self.env_config, components=self.components)
        return self._venv

    # -------------------------------------------------------------- the trace
    def _trace_step(self, ev) -> TraceStep:
        info, nxt, d = ev.info, ev.next_info, dict(ev.details)
        a = ev.action
        retrieve, mode = (int(a[0]), int(a[1])) if isinstance(a, (tuple, list)) else (int(a), 0)
        capped = bool(nxt.get("capped"))
        retrieved = bool(retrieve) and not capped
        query = nxt.get("query") if retrieved else None
        passages = []
        if query is not None:
            injected = set(nxt.get("passage_ids") or [])
            passages = [TracePassage(p.id, p.title, p.text, float(p.score), p.id in injected)
                        for p in self._search(query)]
        return TraceStep(
            index=ev.decision, step_index=int(info["step_index"]), text=info["step_text"],
            is_answer=bool(info["is_answer"]), signals=dict(info.get("signals") or {}),
            masked_signals=list(info.get("masked_signals") or []), action=_plain(a), retrieve=bool(retrieve),
            capped=capped, retrieved=retrieved, probability=d.pop("probability", None),
            threshold=d.pop("threshold", None), details=_plain(d), query=query,
            query_mode=self.env_config.query_modes[mode] if retrieved else None, passages=passages,
            regenerated=nxt.get("regenerated_step") if retrieved else None, refined=nxt.get("refined"),
            tokens=int(nxt.get("tokens", 0)) - int(info.get("tokens", 0)),
            seconds=round(float(nxt.get("seconds", 0.0)) - float(info.get("seconds", 0.0)), 6),
            reward=float(ev.reward), costs=dict(nxt.get("costs") or {}))

    def _answer(self, ev, steps: list[TraceStep], cut: dict[str, Any] | None = None) -> Answer:
        info = ev.next_info
        q = self.task.questions[ev.question_index]
        return Answer(question=q.text, question_id=q.id, answer=info.get("answer_content"),
                      answer_line=info.get("answer"), answer_status=info.get("answer_status"),
                      calls=int(info["retrievals"]), steps=steps, tokens=int(info.get("tokens", 0)),
                      seconds=float(info.get("seconds", 0.0)), wall_seconds=round(ev.wall_seconds, 6),
                      truncated=bool(ev.truncated and not ev.terminated), cost=-float(ev.episode_return),
                      policy=str(getattr(self.policy, "name", type(self.policy).__name__)),
                      cost_weights=dict(info.get("cost_weights") or {}), cut_to_window=cut)

    def _search(self, query: str) -> list:
        """The retriever's top-k for a query (the env keeps ids only; the ranking is deterministic, so this is the
        list the env chose from). Memoised."""
        k = self.env_config.top_k
        key = (query, k)
        if key not in self._search_memo:
            if len(self._search_memo) > 4096:
                self._search_memo.clear()
            self._search_memo[key] = self.components.retriever.search([query], k=k)[0]
        return self._search_memo[key]

    def _check_fits(self) -> None:
        """A learned policy reads observation fields of fixed sizes and may choose among named query modes: this
        env must produce each of them (:func:`policies.rl.compat.check_policy_env`, the check every loader runs)."""
        from policies.rl.compat import check_policy_env, policy_net

        if policy_net(self.policy) is None:
            return
        check_policy_env(self.policy, self.venv.single_observation_space, self.env_config, where="kairos.Pipeline")

    def describe(self) -> dict[str, Any]:
        """What runs: the policy, reasoner, retriever and its corpus, signals and query modes."""
        c = self.components
        return {"policy": getattr(self.policy, "describe", lambda: str(self.policy))(),
                "reasoner": self.env_config.reasoner, "retriever": self.env_config.retriever,
                "index": self.env_config.index_path, "passages": len(c.retriever),
                "signals": list(self.env_config.signals), "query_modes": list(self.env_config.query_modes),
                "querygen": self.env_config.querygen, "costs": dict(self.env_config.costs)}

    def close(self) -> None:
        """Close the env copies (and the trajectory cache)."""
        if self._venv is not None:
            self._venv.close()
            self._venv = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["BUDGET_COST", "Answer", "Pipeline", "check_budget", "TracePassage", "TraceStep", "load_policy", "policy_env_config", "read_env_config"]
