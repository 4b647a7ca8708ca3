"""RSUS (docs/design.md §4): RSUS = w_verb·U_verb + w_ent·U_ent + w_cons·U_cons (default 0.40 / 0.35 / 0.25).

* **U_verb** = 1 − c/100 where ``c`` is the model's answer to :data:`CONFIDENCE_PROMPT`
  (:class:`VerbalConfidence` wraps any ``ask`` callable). For models that cannot answer, any callable
  ``(step, state) -> U_verb`` works — the learned proxy (``policies.probes.RSUSProxy``) is one; it reads
  :func:`surface_features` (+ a sentence embedding when given).
* **U_ent**: entities of the step (:func:`extract_entities`) → for each, the BM25 scores of its top-``k``
  corpus hits (``k = 100``; any :class:`ScoreSource`, e.g. :class:`BM25Scores` over a list of strings)
  → normalised to a distribution → entropy / log(k) (``k`` clipped to the corpus size) → mean over
  entities. In [0, 1]: 1 = the mass is spread evenly (nothing specific is known about the entity), or no
  hit has a positive score. A step without entities queries with its whole content.
* **U_cons**: ``n_samples = 3`` sampled alternatives of the step (strings) → 1 − mean pairwise agreement.
  Agreement of two steps (header ``Step k :`` stripped, lower-cased, word tokens ``\\w+``):
  ``jaccard`` (default) = |A ∩ B| / |A ∪ B| of their token *sets* (1 if both are empty);
  ``exact`` = 1 if the token sequences are equal, else 0.
  With ``cons_only_at_markers`` U_cons is computed only at steps containing a discourse marker
  (:data:`DISCOURSE_MARKERS`: so, therefore, thus, hence, because, which means, …).

A component that cannot be computed (no confidence source, no corpus, no samples, or U_cons skipped at a
step without a marker) is left out and the remaining weights are renormalised to sum to 1; the signal
vector is ``[RSUS, U_verb, U_ent, U_cons, has_verb, has_ent, has_cons]``: a missing component's value is 0 and
its flag 0, so nothing downstream mistakes it for a real 0 (the env lists it in ``info["masked_signals"]``).

Example:
    >>> round(u_cons(["Step 2 : A 's mother is B .", "A 's mother is B .", "A 's mother is C ."]), 4)
    0.2222
    >>> rsus = RSUS(corpus=["Mira 's father is Tovan .", "Tovan was born in Kasford ."],
    ...             u_verb=lambda step, state: 0.5, config=RSUSConfig(w_cons=0.0))
    >>> from agents.reasoners.base import Step
    >>> [round(float(x), 3) for x in rsus(Step(1, "", "Mira 's father is Tovan .", False))]
    [0.5, 0.5, 0.5, 0.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal
from envs.core.config import ConfigBase, ConfigError, helpf

CONFIDENCE_PROMPT = "Rate your confidence that the current conclusion is factually correct (0-100)"

DISCOURSE_MARKERS = ("so", "therefore", "thus", "hence", "because", "which means", "consequently",
                     "as a result", "it follows", "this means", "since")

HEDGE_WORDS = frozenset({
    "maybe", "perhaps", "possibly", "probably", "likely", "unlikely", "might", "may", "could", "seems",
    "seem", "appears", "apparently", "guess", "think", "believe", "unsure", "uncertain", "approximately",
    "roughly", "suppose", "presumably", "reportedly", "allegedly", "unclear", "somewhat", "possible",
})

#: capitalised words that start sentences or steps rather than name an entity
_NOT_ENTITIES = frozenset({
    "The", "A", "An", "This", "That", "These", "Those", "It", "He", "She", "They", "We", "I", "You", "His",
    "Her", "Their", "Its", "So", "Therefore", "Thus", "Hence", "Because", "Since", "If", "In", "On", "At",
    "As", "And", "But", "Or", "Then", "Step", "Answer", "Evidence", "Question", "Who", "Where", "Which",
    "What", "When", "How", "Why", "Yes", "No", "Maybe", "Perhaps", "First", "Next", "Finally",
})

SURFACE_FEATURES = ("hedges", "entities", "words", "discourse_marker", "numbers")

#: what a U_verb proxy may read: ``surface`` features alone, or with the step's all-MiniLM-L6-v2 sentence embedding
#: (``surface+minilm``: the paper's "SBERT + surface features")
PROXY_FEATURES = ("surface", "surface+minilm")

_HEADER = re.compile(r"^\s*(?:Step\s*\d+|Answer|Evidence|Question)\s*:\s*", re.IGNORECASE)
_ENTITY = re.compile(r"\b[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")
_MARKERS = re.compile(r"\b(?:" + "|".join(re.escape(m) for m in DISCOURSE_MARKERS) + r")\b")
_WORD = re.compile(r"\w+")


def strip_header(text: str) -> str:
    """The step without its line header (``Step 3 :``, ``Answer :``)."""
    return _HEADER.sub("", text, count=1).strip()


def extract_entities(text: str) -> list[str]:
    """Capitalised spans of the step (order-preserving, unique), minus sentence-starting function words.

    Example:
        >>> extract_entities("Step 1 : Mira 's father is Tovan Kel , so he lives in Kasford .")
        ['Mira', 'Tovan Kel', 'Kasford']
    """
    out: list[str] = []
    for m in _ENTITY.finditer(strip_header(text)):
        words = [w for w in m.group(0).split() if w not in _NOT_ENTITIES]
        span = " ".join(words)
        if span and span not in out:
            out.append(span)
    return out


def has_discourse_marker(text: str) -> bool:
    """Whether the step contains a discourse marker (so, therefore, thus, hence, because, which means, …)."""
    return _MARKERS.search(strip_header(text).lower()) is not None


def surface_features(text: str) -> np.ndarray:
    """``[hedge words, entities, words, has discourse marker, numbers]`` of a step (see :data:`SURFACE_FEATURES`)."""
    body = strip_header(text)
    words = _WORD.findall(body.lower())
    return np.array([sum(w in HEDGE_WORDS for w in words), len(extract_entities(body)), len(words),
                     float(has_discourse_marker(body)), sum(w.isdigit() for w in words)], dtype=np.float32)


def proxy_features(texts: Sequence[str], embeddings: np.ndarray | None = None) -> np.ndarray:
    """``[N, 5 (+ e)]``: :data:`~agents.signals.rsus.SURFACE_FEATURES` of each text (+ its embedding)."""
    X = np.stack([surface_features(t) for t in texts]) if len(texts) else np.zeros((0, len(SURFACE_FEATURES)))
    if embeddings is not None:
        E = np.asarray(embeddings, dtype=np.float32)
        if E.shape[0] != X.shape[0]:
            raise ValueError(f"{X.shape[0]} texts but {E.shape[0]} embeddings")
        X = np.concatenate([X, E.reshape(E.shape[0], -1)], axis=1)
    return X.astype(np.float32)


# ---------------------------------------------------------------------------------------------- U_verb
#: what a reply may echo that is not its confidence: a step or answer header's index (``Step 2:``, the model going
#: on with its chain) and the scale of the question (``0-100``, ``0 to 100``)
_NOT_CONFIDENCE = re.compile(r"\b(?:step|answer)\s*\d+\s*:?|\b0\s*(?:-|–|to)\s*100\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def confidence_match(text: str) -> re.Match | None:
    """Where the confidence of a reply is: the first number that is not a step index (``Step 2:``) or the question's
    scale (``0-100``); ``None`` when there is none (see :func:`parse_confidence`)."""
    masked = _NOT_CONFIDENCE.sub(lambda m: " " * len(m.group(0)), text or "")
    return _NUMBER.search(masked)


def parse_confidence(text: str) -> float | None:
    """The confidence a reply states: its first number that is not a step index or the scale, if it lies in [0, 100],
    else ``None`` (never a made-up value).

    Example:
        >>> parse_confidence("I'd say about 85%."), parse_confidence("Step 2: so the answer is 80"), parse_confidence("none")
        (85.0, 80.0, None)
        >>> parse_confidence("On a scale of 0-100: 90"), parse_confidence("250")
        (90.0, None)
    """
    m = confidence_match(text)
    if m is None:
        return None
    c = float(m.group(0))
    return c if 0.0 <= c <= 100.0 else None


class VerbalConfidence:
    """U_verb = 1 − c/100 from asking the reasoner :data:`CONFIDENCE_PROMPT`.

    Args:
        ask: ``(step, state, prompt) -> reply text`` (backend-specific: continue the chat after the step).
    """

    def __init__(self, ask: Callable[[Step, Any, str], str], prompt: str = CONFIDENCE_PROMPT):
        self.ask, self.prompt = ask, prompt

    def __call__(self, step: Step, state: Any = None) -> float:
        c = parse_confidence(self.ask(step, state, self.prompt))
        if c is None:
            raise SignalUnavailable(f"step {step.index}: no confidence in 0-100 in the model's reply")
        return 1.0 - c / 100.0


# ---------------------------------------------------------------------------------------------- U_ent
class ScoreSource(Protocol):
    """Anything that returns the top-``k`` retrieval scores of a query (descending, length ≤ k)."""

    def scores(self, query: str, k: int) -> np.ndarray:
        raise NotImplementedError


class BM25Scores:
    """BM25 (``bm25s``) over a list of passage strings; per-query scores are memoised.

    Example:
        >>> src = BM25Scores(["Mira 's father is Tovan .", "Tovan was born in Kasford ."])
        >>> src.scores("Tovan", 2).round(3).tolist()
        [0.073, 0.073]
    """

    def __init__(self, corpus: Sequence[str], stopwords: str | None = "en", k1: float = 1.5, b: float = 0.75):
        import bm25s

        if not corpus:
            raise ValueError("BM25Scores needs a non-empty corpus")
        self._bm25s = bm25s
        self.stopwords = stopwords
        self.n = len(corpus)
        self.retriever = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize(list(corpus), stopwords=stopwords, show_progress=False)
        if not any(len(ids) for ids in tokens.ids):  # bm25s would fail: "max() arg is an empty sequence"
            raise ValueError(f"RSUS entity uncertainty (U_ent): none of the corpus's {self.n} passages has a word "
                             "BM25 can index (each is empty, or only stop words): give passages with text")
        self.retriever.index(tokens, show_progress=False)
        self._memo: dict[tuple[str, int], np.ndarray] = {}

    def __len__(self) -> int:
        return self.n

    def scores(self, query: str, k: int) -> np.ndarray:
        kk = min(k, self.n)
        key = (query, kk)
        if key not in self._memo:
            toks = self._bm25s.tokenize([query], stopwords=self.stopwords, return_ids=False,
                                        show_progress=False)[0]
            if not toks:
                out = np.zeros(kk, dtype=np.float64)
            else:
                all_scores = np.asarray(self.retriever.get_scores(toks), dtype=np.float64)
                out = -np.sort(-np.partition(all_scores, self.n - kk)[self.n - kk:]) if kk < self.n \
                    else -np.sort(-all_scores)
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = out
        return self._memo[key]


def score_entropy(scores: np.ndarray, k: int) -> float:
    """Entropy of the scores normalised to a distribution, divided by log(k); 1.0 if no score is positive."""
    s = np.clip(np.asarray(scores, dtype=np.float64), 0.0, None)
    total = s.sum()
    if total <= 0 or k <= 1:
        return 1.0 if total <= 0 else 0.0
    p = s[s > 0] / total
    return float(min(1.0, -(p * np.log(p)).sum() / math.log(k)))


def u_ent(text: str, source: ScoreSource, k: int = 100,
          entities_fn: Callable[[str], list[str]] = extract_entities) -> float:
    """Mean over the step's entities of :func:`score_entropy` of their top-``k`` BM25 scores."""
    body = strip_header(text)
    queries = entities_fn(body) or ([body] if body else [])
    if not queries:
        raise SignalUnavailable("U_ent: empty step")
    k_eff = min(k, len(source)) if hasattr(source, "__len__") else k
    return float(np.mean([score_entropy(source.scores(q, k), k_eff) for q in queries]))


# ---------------------------------------------------------------------------------------------- U_cons
def _norm_tokens(text: str) -> list[str]:
    return _WORD.findall(strip_header(text).lower())


def agreement(a: str, b: str, mode: str = "jaccard") -> float:
    """Agreement of two step texts: token-set ``jaccard`` or ``exact`` match of normalised tokens."""
    ta, tb = _norm_tokens(a), _norm_tokens(b)
    if mode == "exact":
        return float(ta == tb)
    if mode == "jaccard":
        sa, sb = set(ta), set(tb)
        return 1.0 if not sa and not sb else len(sa & sb) / len(sa | sb)
    raise ValueError(f"unknown agreement '{mode}' (valid: jaccard, exact)")


def u_cons(alternatives: Sequence[str], mode: str = "jaccard") -> float:
    """1 − mean pairwise :func:`agreement` of the sampled alternatives (needs at least two)."""
    if len(alternatives) < 2:
        raise SignalUnavailable(f"U_cons needs at least 2 alternatives, got {len(alternatives)}")
    return 1.0 - float(np.mean([agreement(a, b, mode) for a, b in itertools.combinations(alternatives, 2)]))


# ---------------------------------------------------------------------------------------------- RSUS
@dataclass
class RSUSConfig(ConfigBase):
    """Weights and options of RSUS."""

    w_verb: float = helpf(0.40, "weight of U_verb (verbalised or proxy uncertainty)")
    w_ent: float = helpf(0.35, "weight of U_ent (entity retrieval entropy)")
    w_cons: float = helpf(0.25, "weight of U_cons (disagreement of sampled alternatives)")
    bm25_k: int = helpf(100, "corpus hits per entity for U_ent")
    n_samples: int = helpf(3, "sampled alternatives for U_cons")
    agreement: str = helpf("jaccard", "agreement of two alternatives: jaccard (token sets) | exact")
    cons_only_at_markers: bool = helpf(False, "compute U_cons only at steps with a discourse marker (faster)")
    seed: int = helpf(0, "sampling seed of U_cons (the step index is added)")

    def validate(self) -> None:
        if min(self.w_verb, self.w_ent, self.w_cons) < 0 or self.w_verb + self.w_ent + self.w_cons <= 0:
            raise ConfigError("RSUSConfig: weights must be >= 0 with a positive sum")
        if self.agreement not in ("jaccard", "exact"):
            raise ConfigError(f"RSUSConfig: unknown agreement '{self.agreement}' (valid: jaccard, exact)")


@register_signal("rsus", group="rsus", scalars={"rsus": 0, "u_verb": 1, "u_ent": 2, "u_cons": 3},
                 scalar_labels={"u_verb": ("U_verb", 1), "u_ent": ("U_ent", 1), "u_cons": ("U_cons", 1)})
class RSUS(SignalBase):
    """RSUS, its components and their availability, ``[RSUS, U_verb, U_ent, U_cons, has_verb, has_ent, has_cons]``,
    each in [0, 1] (see the module docstring).

    Args:
        config: weights and options.
        u_verb: ``(step, state) -> U_verb`` (:class:`VerbalConfidence` or a learned proxy); without it
            ``step.meta["verbal_confidence"]`` (c in 0–100) is used when present.
        scorer: a :class:`ScoreSource` for U_ent, or ``corpus`` (list of strings) to build BM25 over.
        alternatives: ``(step, state) -> list[str]``; else ``step.meta["alternatives"]``; else
            ``reasoner.sample_alternatives(state, n_samples, seed + step.index)``.
        entities_fn: entity extractor.
    """

    label = "RSUS"
    dim = 7
    bounds = (0.0, 1.0)
    error_direction = 1

    def __init__(self, config: RSUSConfig | None = None, u_verb: Callable[[Step, Any], float] | None = None,
                 scorer: ScoreSource | None = None, corpus: Sequence[str] | None = None,
                 alternatives: Callable[[Step, Any], list[str]] | None = None, reasoner: Any = None,
                 entities_fn: Callable[[str], list[str]] = extract_entities):
        self.config = config or RSUSConfig()
        self.u_verb_fn = u_verb
        self.scorer = scorer if scorer is not None else (BM25Scores(corpus) if corpus else None)
        self.alternatives_fn = alternatives
        self.reasoner = reasoner
        self.entities_fn = entities_fn
        self.requires = ("sampling",) if self.config.w_cons > 0 else ()

    def components(self, step: Step, state: Any = None) -> dict[str, float | None]:
        """``{"verb": …, "ent": …, "cons": …}``; ``None`` for a component that cannot be computed."""
        cfg = self.config
        out: dict[str, float | None] = {"verb": None, "ent": None, "cons": None}
        if cfg.w_verb > 0:
            if self.u_verb_fn is not None:
                out["verb"] = _try(lambda: float(self.u_verb_fn(step, state)))
            elif step.meta.get("verbal_confidence") is not None:
                out["verb"] = 1.0 - float(step.meta["verbal_confidence"]) / 100.0
        if cfg.w_ent > 0 and self.scorer is not None:
            out["ent"] = _try(lambda: u_ent(step.content, self.scorer, cfg.bm25_k, self.entities_fn))
        if self.scores_cons(step):
            alts = self._alternatives(step, state)
            if alts is not None:
                out["cons"] = _try(lambda: u_cons(alts, cfg.agreement))
        return out

    def scores_cons(self, step: Step) -> bool:
        """Whether U_cons is computed at ``step``: weighted, and not gated out (``cons_only_at_markers`` and no
        discourse marker in the step) — where samples are drawn (the env draws them ahead:
        :meth:`envs.components.Components.precompute`)."""
        cfg = self.config
        return cfg.w_cons > 0 and (not cfg.cons_only_at_markers or has_discourse_marker(step.content))

    def _alternatives(self, step: Step, state: Any) -> list[str] | None:
        if self.alternatives_fn is not None:
            return self.alternatives_fn(step, state)
        if step.meta.get("alternatives") is not None:
            return list(step.meta["alternatives"])
        if self.reasoner is not None and state is not None:
            return self.draw_alternatives(step, state)
        return None

    def draw_alternatives(self, step: Step, state: Any) -> list[str]:
        """The reasoner's ``n_samples`` alternatives of ``step`` from ``state`` (seeded ``seed + step.index``): the
        call RSUS makes when it samples itself, and the env's precompute makes ahead of it."""
        return self.reasoner.sample_alternatives(state, self.config.n_samples, seed=self.config.seed + step.index)

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        c = self.components(step, state)
        w = {"verb": self.config.w_verb, "ent": self.config.w_ent, "cons": self.config.w_cons}
        have = [k for k, v in c.items() if v is not None and w[k] > 0]
        if not have:
            raise SignalUnavailable(f"step {step.index}: no RSUS component could be computed")
        total = sum(w[k] for k in have)
        score = sum(w[k] * c[k] for k in have) / total  # type: ignore[operator]
        parts = ("verb", "ent", "cons")
        return np.array([score] + [c[k] if c[k] is not None else 0.0 for k in parts]
                        + [float(c[k] is not None) for k in parts], dtype=np.float32)


def _try(fn: Callable[[], float]) -> float | None:
    try:
        return fn()
    except SignalUnavailable:
        return None


def rsus_score(components: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """RSUS of many steps at once, as :class:`RSUS` computes it for one: the weighted mean of the components a step
    has (NaN = cannot be computed; a component of weight 0 is left out), NaN where it has none.

    Args:
        components: ``[N, 3]`` (U_verb, U_ent, U_cons), NaN where missing.
        weights: ``(w_verb, w_ent, w_cons)``.

    Example:
        >>> rsus_score(np.array([[0.2, 0.6, np.nan], [np.nan, np.nan, np.nan]]), PAPER_WEIGHTS).round(4).tolist()
        [0.3867, nan]
    """
    X = np.asarray(components, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    A = ~np.isnan(X) & (w > 0)
    den = A @ w
    num = np.where(A, X, 0.0) @ w
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def fit_weights(components: np.ndarray, target: np.ndarray, step: float = 0.05, available: np.ndarray | None = None,
                use: Sequence[str] = ("verb", "ent", "cons")) -> tuple[float, float, float]:
    """Grid search over the weight simplex maximising the Pearson correlation of RSUS with ``target``.

    Args:
        components: ``[N, 3]`` (U_verb, U_ent, U_cons) per step.
        target: ``[N]`` retrieval benefit (docs/design.md §6) or error labels.
        step: grid resolution.
        available: ``[N, 3]`` 0/1 availability of each component; RSUS is then, as the signal computes it, the
            weighted mean over the components available at a step (steps with none are left out).
        use: the components that may get weight (the others are fixed at 0).

    Example:
        >>> X = np.array([[0.0, 0.1, 0.9], [0.0, 0.9, 0.2], [0.0, 0.5, 0.5], [0.0, 0.2, 0.1]])
        >>> fit_weights(X, np.array([1.0, 0.0, 0.5, 0.0]), step=0.25, use=("ent", "cons"))
        (0.0, 0.0, 1.0)
    """
    X = np.asarray(components, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    A = np.ones_like(X) if available is None else np.asarray(available, dtype=np.float64)
    names = ("verb", "ent", "cons")
    n = int(round(1 / step))
    best, best_w = -math.inf, PAPER_WEIGHTS
    for i in range(n + 1):
        for j in range(n + 1 - i):
            w = np.array([i, j, n - i - j]) / n
            if any(w[k] > 0 and names[k] not in use for k in range(3)):
                continue
            den = A @ w
            ok = den > 0
            if ok.sum() < 2:
                continue
            s = ((X * A) @ w)[ok] / den[ok]
            if s.std() == 0 or y[ok].std() == 0:
                continue
            r = float(np.corrcoef(s, y[ok])[0, 1])
            if r > best:
                best, best_w = r, (float(w[0]), float(w[1]), float(w[2]))
    return best_w


def rsus_correlation(components: np.ndarray, target: np.ndarray, weights: Sequence[float],
                     available: np.ndarray | None = None) -> float:
    """Pearson correlation of RSUS (weighted mean over the available components) with ``target``."""
    X = np.asarray(components, dtype=np.float64)
    A = np.ones_like(X) if available is None else np.asarray(available, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    den = A @ w
    ok = den > 0
    s = ((X * A) @ w)[ok] / den[ok]
    y = np.asarray(target, dtype=np.float64)[ok]
    return float(np.corrcoef(s, y)[0, 1]) if s.size > 1 and s.std() > 0 and y.std() > 0 else math.nan


# ------------------------------------------------------------------------------------- weight sets by name
#: the format of a saved RSUS weight set
WEIGHTS_FORMAT = "kairos-rsus-weights/1"
#: docs/design.md §4's default weights (the paper's)
PAPER_WEIGHTS = (0.40, 0.35, 0.25)


def rsus_weights_dir() -> Path:
    """Where weight sets are saved and found by name: ``$KAIROS_RSUS_WEIGHTS`` (default ``runs/rsus_weights``)."""
    return Path(os.environ.get("KAIROS_RSUS_WEIGHTS", "runs/rsus_weights"))


def save_rsus_weights(name: str, weights: Sequence[float], info: dict[str, Any] | None = None,
                      folder: str | Path | None = None) -> Path:
    """Save a fitted weight set as ``<folder>/<name>.json`` (atomically); returns the path."""
    from envs.core.io import write_json

    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == "paper":
        raise ValueError(f"RSUS weight-set name '{name}' must be letters, digits, '_', '.', '-' (and not 'paper')")
    w = [float(x) for x in weights]
    if len(w) != 3 or min(w) < 0 or sum(w) <= 0:
        raise ValueError(f"RSUS weights must be 3 numbers >= 0 with a positive sum, got {w}")
    path = Path(folder or rsus_weights_dir()) / f"{name}.json"
    write_json(path, {"format": WEIGHTS_FORMAT, "name": name,
                      "weights": {"verb": w[0], "ent": w[1], "cons": w[2]}, **(info or {})})
    return path


def load_rsus_weights(spec: str, folder: str | Path | None = None) -> tuple[float, float, float]:
    """``(w_verb, w_ent, w_cons)`` of a weight set: ``paper`` (docs/design.md §4's 0.40 / 0.35 / 0.25), a saved name
    (``<folder>/<name>.json``, see :func:`rsus_weights_dir`) or a path to such a file."""
    if spec == "paper":
        return PAPER_WEIGHTS
    path = Path(spec) if spec.endswith(".json") or os.sep in spec else Path(folder or rsus_weights_dir()) / f"{spec}.json"
    if not path.is_file():
        raise FileNotFoundError(f"RSUS weight set '{spec}': no file {path} (fit one with `kairos train rsus-weights "
                                f"--name {spec} …`, or use 'paper')")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != WEIGHTS_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {WEIGHTS_FORMAT!r}")
        w = tuple(float(data["weights"][k]) for k in ("verb", "ent", "cons"))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an RSUS weight set ({e})") from e
    return w  # type: ignore[return-value]
