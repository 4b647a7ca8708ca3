"""IRCoT and FLARE as published: method kinds ``ircot`` and ``flare`` (registered in
:data:`eval.bench.methods.METHOD_KINDS`; Single RAG as published is kind ``single`` with ``k``).

**IRCoT** (Trivedi et al., ACL 2023): the question is the first query, retrieved before the first reasoning step;
then each newly written CoT sentence is the query; the K paragraphs of each search that were not collected yet are
added to the paragraphs the reasoner sees (all of them, before the question: IRCoT's prompt), up to a total cap
(15 in the paper), until the answer or a cap on the steps. In the env: retrieve at every step with query mode
``question_or_last_step`` — the decision on step ``i``'s draft retrieves with the last accepted sentence (the
question at step 1) and regenerates step ``i`` with the new paragraphs, which is IRCoT's "retrieve with the last
sentence, then write the next one"; ``passages_per_retrieval = top_k = K``, ``max_evidence_passages`` = the
paragraph cap, ``max_retrievals_per_question`` = the call cap, ``injection: front``. Deviation: each step is
drafted closed-book before it is regenerated, so the discarded drafts count in tokens and seconds (not in calls).

**FLARE-direct** (Jiang et al., EMNLP 2023): when any token of the step has probability below θ (the step's
``minprob``; θ calibrated on dev as for every threshold trigger), retrieve with the step *masked* — every token
with probability below β removed (query mode ``masked:<β>``; β = 0.4, the released code's multi-hop setting) —
and regenerate the step. The masked-query formulation is the one built; the generated-question one is not. It
needs each step's token probabilities: a reasoner that returns none (an OpenAI-compatible server without
logprobs) has the method skipped, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.core.config import ConfigError, helpf
from eval.bench.kinds import ThresholdMethod, with_mode
from eval.bench.methods import KIND_HELP, METHOD_KINDS, MethodSpec, RunContext, Skip, tag

if TYPE_CHECKING:
    from envs.env_config import EnvConfig, EnvOverrides

#: IRCoT's query: the question, then the last accepted sentence
IRCOT_MODE = "question_or_last_step"


def _capped_share(episodes: list[dict]) -> float | None:
    """Share of questions where the call cap refused a retrieval (a decision marked ``capped``)."""
    if not episodes:
        return None
    return float(np.mean([any(d.get("capped") for d in e.get("decisions", [])) for e in episodes]))


def _passages(e: dict) -> int:
    return len({p for d in e.get("decisions", []) for p in d.get("passage_ids") or []})


@METHOD_KINDS.register("ircot")
@dataclass
class IRCoTMethod(MethodSpec):
    """IRCoT as published (see the module docstring): every step retrieves, the question first, then the last
    sentence; the top-K paragraphs of each search accumulate, deduplicated, up to ``max_paragraphs``."""

    kind: str = helpf("ircot", KIND_HELP)
    k: int | None = helpf(None, "K, paragraphs per retrieval: the top-K of each search, those not collected yet are "
                                "added (required; the paper picks K from {2, 4, 6, 8} on dev)", ge=1)
    max_paragraphs: int = helpf(15, "cap on the paragraphs collected in one question (the paper's default: 15)",
                                ge=1)
    max_calls: int = helpf(8, "cap on the retrieval calls of one question (IRCoT stops after 8 reasoning steps in "
                              "the paper; its released code allows 10 sentences). The env's max_steps bounds the "
                              "chain too; the report says how often this cap refused a call", ge=1)
    injection: str = helpf("front", "where the paragraphs go: front (IRCoT's prompt: every paragraph collected so "
                                    "far, then the question, then the chain) | step (before the step they were "
                                    "retrieved for)")

    def validate(self) -> None:
        super().validate()
        if self.k is None:
            raise ConfigError(f"MethodSpec '{self.name}': kind 'ircot' needs 'k', IRCoT's K (paragraphs per "
                              "retrieval; the paper picks it from {2, 4, 6, 8} on dev), e.g. k: 4")
        if self.injection not in ("front", "step"):
            raise ConfigError(f"MethodSpec '{self.name}': injection must be front or step, got '{self.injection}'")
        if self.query_mode:
            raise ConfigError(f"MethodSpec '{self.name}': kind 'ircot' queries with the question, then the last "
                              f"sentence (query mode {IRCOT_MODE}); it takes no query_mode (kind 'always' with "
                              "query_mode retrieves at every step with another query)")

    def run_env(self, base: EnvConfig) -> EnvOverrides:
        """The method's env: IRCoT's query mode, K searched and injected, the paragraph and call caps."""
        return with_mode(self.env, base.with_overrides(self.env), IRCOT_MODE, top_k=self.k,
                         passages_per_retrieval=self.k, max_evidence_passages=self.max_paragraphs,
                         max_retrievals_per_question=self.max_calls, injection=self.injection)

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        from policies.triggers import TRIGGERS

        t = TRIGGERS.make("always")
        t.name = self.name
        return t

    def run(self, ctx: RunContext) -> dict[str, Any]:
        return ctx.runner.run(self.make_trigger(), "test", ctx.test, tag=tag(self.name, IRCOT_MODE, "greedy"),
                              env=self.run_env(ctx.runner.env_config), mode=IRCOT_MODE)

    def report_extras(self, result: dict[str, Any]) -> dict[str, Any]:
        eps = result.get("episodes") or []
        return {"k": self.k, "max_paragraphs": self.max_paragraphs, "max_calls": self.max_calls,
                "call_cap_bound_share": _capped_share(eps),
                "max_steps_truncated_share": float(np.mean([bool(e.get("truncated")) for e in eps])) if eps else None,
                "paragraphs_per_question": float(np.mean([_passages(e) for e in eps])) if eps else None,
                "paragraph_cap_reached_share": (float(np.mean([_passages(e) >= self.max_paragraphs for e in eps]))
                                                if eps else None)}

    def report_notes(self, result: dict[str, Any]) -> list[str]:
        x = self.report_extras(result)
        if x["call_cap_bound_share"] is None:
            return []
        return [f"{self.name}: K = {self.k}, ≤ {self.max_paragraphs} paragraphs, ≤ {self.max_calls} calls per "
                f"question — the call cap refused a retrieval on {x['call_cap_bound_share']:.0%} of the test "
                f"questions (the env's max_steps ended {x['max_steps_truncated_share']:.0%} of the chains first), "
                f"{x['paragraphs_per_question']:.1f} paragraphs collected per question (the paragraph cap reached on "
                f"{x['paragraph_cap_reached_share']:.0%})"]

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        return env_config.with_overrides(self.run_env(env_config)), self.make_trigger(), IRCOT_MODE, False


@METHOD_KINDS.register("flare")
@dataclass
class FlareMethod(MethodSpec):
    """FLARE-direct as published (see the module docstring): θ on ``minprob`` calibrated on dev as every threshold
    trigger is (it runs as one, :class:`~eval.bench.kinds.ThresholdMethod`), the masked step as the query."""

    report_kind = "fixed"
    kind: str = helpf("flare", KIND_HELP)
    beta: float = helpf(0.4, "β: tokens with probability below it are dropped from the query (FLARE's masked "
                             "query; the released code's multi-hop setting is 0.4)", ge=0)
    thresholds: list[float] | None = helpf(None, "the dev sweep grid of θ (null: quantiles of minprob under CoT on "
                                                 "dev)")
    curve: bool = helpf(True, "also sweep the grid on test for the plot's curve (when test_curves is on)")

    def validate(self) -> None:
        super().validate()
        if not self.beta <= 1.0:
            raise ConfigError(f"MethodSpec '{self.name}': beta must be in [0, 1], got {self.beta}")
        if self.query_mode:
            raise ConfigError(f"MethodSpec '{self.name}': kind 'flare' queries with the masked step (query mode "
                              f"{self.mode}); it takes no query_mode (kind 'threshold' with signal minprob queries "
                              "with another mode)")

    @property
    def mode(self) -> str:
        """The masked-query mode of this β (``masked:0.4``)."""
        return f"masked:{self.beta:g}"

    def modes(self, runner: Any) -> list[str | None]:
        return [self.mode]

    def preflight(self, known_signals: set[str], skip_missing_policies: bool) -> None:
        self._threshold(self.env).preflight(known_signals, skip_missing_policies)

    def run_env(self, base: EnvConfig) -> EnvOverrides:
        """The method's env: the masked-query mode added (records then keep each step's token probabilities)."""
        return with_mode(self.env, base.with_overrides(self.env), self.mode)

    def _threshold(self, env: EnvOverrides) -> ThresholdMethod:
        """The threshold trigger FLARE calibrates and runs: minprob below θ, retrieving with the masked step."""
        return ThresholdMethod(name=self.name, env=env, query_mode=self.mode, signal="minprob", direction="below",
                               thresholds=self.thresholds, curve=self.curve)

    def make_trigger(self, threshold: float | None = None, p: float | None = None, seed: int = 0):
        return self._threshold(self.env).make_trigger(threshold=threshold)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        env = self.run_env(ctx.runner.env_config)
        reasoner = ctx.runner._with_overrides(env)[1].reasoner
        if callable(getattr(reasoner, "probe", None)):  # an HTTP backend: ask once whether logprobs come back
            reasoner.probe()
        if not reasoner.capabilities.logprobs:
            raise Skip(f"reasoner '{ctx.runner.env_config.reasoner}' returns no token log-probabilities: FLARE's "
                       "trigger and masked query need them")
        return self._threshold(env).run(ctx)

    def report_extras(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"beta": self.beta}

    def replay(self, env_config: EnvConfig, calib: dict[str, Any]) -> tuple[EnvConfig, Any, str | None, bool]:
        env = self.run_env(env_config)  # as run: the threshold trigger in FLARE's env (the never-fire point too)
        return self._threshold(env).replay(env_config.with_overrides(env), calib)
