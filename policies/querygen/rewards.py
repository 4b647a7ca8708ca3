"""Reward functions for the generative QueryGen, in TRL's style: plain callables
``f(prompts, completions, **columns) -> list[float]`` with a ``__name__`` (TRL logs ``rewards/<name>``).

They follow the cost registry's conventions (:mod:`envs.costs`): a *quality* is a reward, a *cost* is a
non-negative amount, and the trainer subtracts ``λ · cost`` — here through TRL's ``reward_weights``
(``[1.0, -λ_length]``), so the weight is the λ and the function never needs to know it.

* ``retrieval_rr`` — retrieval quality of the query: ``1 / rank`` of the best-ranked gold passage
  (``gold_ids`` column) in the retriever's top ``k`` (0 when none is there; ``k = 3`` by default, the
  env's candidate depth, so the reward is what Recall@3 measures, with a bonus for rank 1).
* ``query_tokens`` — cost: whitespace tokens in the query (the length cost).

Register a new one with :func:`register_reward`; a dotted path ``package.module:factory`` works anywhere a
name does.

Example:
    >>> class ToyRetriever:
    ...     def search(self, queries, k=3):
    ...         return [[type("P", (), {"id": "F1"})()] if "Mira" in q else [] for q in queries]
    >>> rr = make_reward("retrieval_rr", retriever=ToyRetriever())
    >>> rr(["p", "p"], ["Mira 's mother is", "Tovan"], gold_ids=[["F1"], ["F1"]])
    [1.0, 0.0]
    >>> make_reward("query_tokens")(["p"], ["Mira 's mother is"])
    [4.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from envs.core.registry import Registry

#: name -> factory(**kwargs) -> reward callable
REWARDS: Registry[Callable[..., Callable[..., list[float]]]] = Registry("QueryGen reward")


def register_reward(name: str):
    """Decorator: register a reward factory under ``name`` (a name registered twice is an error)."""
    return REWARDS.register(name)


def make_reward(name: str, **kwargs: Any) -> Callable[..., list[float]]:
    """The reward callable ``name`` (registered, or ``package.module:factory``) built with ``kwargs``."""
    fn = REWARDS.make(name, **kwargs)
    if not hasattr(fn, "__name__"):
        fn.__name__ = name.split(":")[-1]
    return fn


def _text(completion: Any) -> str:
    """A completion as text (TRL passes strings for plain prompts, message lists for conversational ones)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def gold_rank(hits: Sequence[Any], gold: Sequence[str]) -> int | None:
    """1-based rank of the first hit whose id is in ``gold`` (``None`` if none is)."""
    gold = set(gold)
    for i, p in enumerate(hits, 1):
        if p.id in gold:
            return i
    return None


class RetrievalRR:
    """``1 / rank`` of the best gold passage in the retriever's top ``k`` for the generated query.

    Args:
        retriever: Anything with ``search(queries, k) -> list[list[passage with .id]]``.
        k: Depth that counts.
    """

    __name__ = "retrieval_rr"

    def __init__(self, retriever, k: int = 3) -> None:
        self.retriever, self.k = retriever, k

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], gold_ids: Sequence[Sequence[str]],
                 **_: Any) -> list[float]:
        from policies.querygen.model import clean_query

        queries = [clean_query(_text(c)) for c in completions]
        out = [0.0] * len(queries)
        live = [i for i, q in enumerate(queries) if q]
        if live:
            results = self.retriever.search([queries[i] for i in live], k=self.k)
            for i, hits in zip(live, results):
                r = gold_rank(hits, gold_ids[i])
                out[i] = 1.0 / r if r else 0.0
        return out


class QueryTokens:
    """Cost: whitespace tokens of the generated query (weight it with ``-λ_length``)."""

    __name__ = "query_tokens"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        from policies.querygen.model import clean_query

        return [float(len(clean_query(_text(c)).split())) for c in completions]


register_reward("retrieval_rr")(lambda retriever=None, k=3, **_: RetrievalRR(retriever, k))
register_reward("query_tokens")(lambda **_: QueryTokens())
