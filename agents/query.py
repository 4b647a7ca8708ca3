"""Query formulation: the named ways of turning a reasoning step into a retrieval query (QueryGen's modes).

Every mode is a plain callable ``(step_text, question, context) -> str`` registered by name in
:data:`QUERY_MODES`; a dotted path ``package.module:function`` works anywhere a name does. A policy picks a
mode by name or by its index in :attr:`QueryGenerator.modes`.

Built-in modes (:data:`DEFAULT_MODES` is the QueryGen action set, in this order):

- ``step``: the step text without its ``Step i :`` prefix.
- ``content_words``: the step's content words, PUlSE protocol: nouns, proper nouns, numbers, adjectives,
  verbs and adverbs. Tagged with TextBlob's ``PatternTagger`` (a Brill-style tagger whose lexicon ships in
  the ``textblob`` wheel: no download) when ``textblob`` is installed. Penn tags do not separate
  auxiliaries from verbs, so forms of *be / have / do* are dropped to match the UPOS ``VERB`` (not ``AUX``)
  class, and ``not`` is dropped (UPOS ``PART``). Without ``textblob`` a stop-list filter is used instead
  (drops function words -- determiners, pronouns, prepositions, conjunctions, auxiliaries, wh-words --
  and punctuation, keeps everything else): it keeps some words a tagger would drop (e.g. interjections)
  and cannot tell a verb from a noun, which the POS filter never needs to. :func:`tagger_name` says which
  one is active.
- ``question_step``: the question followed by the step.
- ``info_need``: an information-need question built from the step's entity and relation,
  ``What is [entity]'s [relation]?`` (micro-world steps parse exactly: ``Mira 's mother is Tovan .`` ->
  ``What is Mira 's mother ?``; other text uses the heuristics of :func:`entity_relation`).
- ``question`` (registered, not in the default set): the question alone (the Single-RAG query).
- ``question_or_last_step`` (registered, not in the default set): IRCoT's query — the question before the first
  step is accepted, then the last accepted step (the newest sentence of the chain). Retrieving with it on step
  ``i``'s draft and regenerating step ``i`` is IRCoT's "retrieve with the last sentence, then write the next one".
- ``masked:<β>`` (a factory, not in the default set): FLARE's masked query — the step with every token whose
  probability is below ``β`` removed (``masked:0.4``; the env keeps each step's token probabilities for it).
- ``qfs`` (registered, not in the default set): DRAGIN's query formulation by self-attention — the env computes
  it from the reasoner's attention (:func:`agents.signals.attention.qfs_terms`) and passes it in the context.

A mode that produces an empty string falls back to the ``step`` query.

Example:
    >>> gen = QueryGenerator()
    >>> gen.modes
    ['step', 'content_words', 'question_step', 'info_need']
    >>> gen("Step 1 : Mira 's mother is Tovan .", "Who is Mira 's mother ?", "info_need")
    "What is Mira 's mother ?"
    >>> gen("Step 1 : Mira 's mother is Tovan .", "Who is Mira 's mother ?", 2)
    "Who is Mira 's mother ? Mira 's mother is Tovan ."
    >>> @register_query_mode("shout")
    ... def shout(step_text, question, context): return step_text.upper()
    >>> QueryGenerator(["shout"])("abc", None, "shout")
    'ABC'
    >>> _ = QUERY_MODES.unregister("shout")
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envs.core.registry import Registry, import_dotted

QueryFn = Callable[[str, "str | None", "Mapping[str, Any] | None"], str]

#: mode name -> ``fn(step_text, question, context) -> query``
QUERY_MODES: Registry[QueryFn] = Registry("query mode")

#: the QueryGen action set, in action-index order
DEFAULT_MODES: tuple[str, ...] = ("step", "content_words", "question_step", "info_need")


def register_query_mode(name: str) -> Callable[[QueryFn], QueryFn]:
    """Decorator: register ``fn`` as query mode ``name`` (a name registered twice is an error)."""
    return QUERY_MODES.register(name)


#: name prefix -> "module:factory" turning the rest of the name into a query callable (resolved by string: the
#: generative QueryGen lives in the policies layer above this one)
MODE_FACTORIES: dict[str, str] = {"gen": "policies.querygen.model:query_mode_from_checkpoint",
                                   "masked": "agents.query:masked_query_mode"}


def get_query_mode(name: str) -> QueryFn:
    """The mode registered as ``name``; ``gen:<checkpoint>`` (a trained generative QueryGen, see
    :mod:`policies.querygen`); ``masked:<β>`` (FLARE's masked query, :func:`masked_query_mode`); or the callable at
    dotted path ``package.module:function``."""
    prefix, _, arg = name.partition(":")
    if prefix in MODE_FACTORIES and arg:
        return import_dotted(MODE_FACTORIES[prefix], "query mode factory")(arg)
    return QUERY_MODES.get(name)


# --------------------------------------------------------------------------------------------- text utils

_STEP_PREFIX = re.compile(r"^\s*(?:step\s*\d+\s*[:.)]\s*|answer\s*:\s*)", re.IGNORECASE)
_TOKEN = re.compile(r"['’]s\b|\w+(?:(?:[-.]|['’](?!s\b))\w+)*|[^\w\s]")

#: function words dropped by the fallback content-word filter (and auxiliaries dropped after tagging)
AUXILIARIES = frozenset("""am is are was were be been being 's 're 'm have has had having do does did doing
""".split())
FUNCTION_WORDS = AUXILIARIES | frozenset("""a an the this that these those some any each every no all both
either neither such what which who whom whose where when why how whether i me my mine myself you your yours
yourself he him his himself she her hers herself it its itself we us our ours ourselves they them their
theirs themselves of in on at by for with without from to into onto upon about above below over under
between among through during before after since until till against toward towards within across along
around beyond via per than as and or but nor so yet if then else because while although though unless
not n't no can could may might must shall should will would ought also too very just only s step answer
""".split())


def mode_identity(name: str) -> str:
    """What a cache namespace must record about a mode: its name, plus the weights' fingerprint for a
    ``gen:`` checkpoint (retraining into the same folder must not reuse old trajectories)."""
    if name.startswith("gen:"):
        return f"gen@{getattr(get_query_mode(name), 'fingerprint', 'unknown')}"
    return name


def clean_step(step_text: str) -> str:
    """The step without a leading ``Step i :`` / ``Answer :`` marker, whitespace collapsed."""
    return " ".join(_STEP_PREFIX.sub("", step_text, count=1).split())


def words(text: str) -> list[str]:
    """Word and punctuation tokens (``'s`` separate, hyphenated words and abbreviations kept whole)."""
    return _TOKEN.findall(text)


@functools.cache
def _pattern_tagger() -> Any:
    try:
        from textblob.en.taggers import PatternTagger
    except ImportError:
        return None
    return PatternTagger()


def tagger_name() -> str:
    """``"pattern"`` (TextBlob PatternTagger, offline lexicon) or ``"stoplist"`` (the fallback filter)."""
    return "pattern" if _pattern_tagger() is not None else "stoplist"


def pos_tag(text: str) -> list[tuple[str, str]] | None:
    """Penn Treebank tags of ``text``'s tokens, or ``None`` when no tagger is installed."""
    tagger = _pattern_tagger()
    if tagger is None:
        return None
    return [(w, t) for w, t in tagger.tag(text)]


_CONTENT_TAGS = ("NN", "CD", "JJ", "VB", "RB", "FW")


def content_words(text: str) -> list[str]:
    """Content words of ``text`` in order, case-insensitively de-duplicated (see the module docstring)."""
    tagged = pos_tag(text)
    if tagged is not None:
        kept = [w for w, t in tagged
                if t.startswith(_CONTENT_TAGS) and w.lower() not in AUXILIARIES and w.lower() not in ("not", "n't")
                and re.search(r"\w", w)]
    else:
        kept = [w for w in words(text) if re.search(r"\w", w) and w.lower() not in FUNCTION_WORDS]
    seen: set[str] = set()
    out = []
    for w in kept:
        if w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return out


# ------------------------------------------------------------------------------------ entities, relations

#: verb phrases that name a relation (micro-world relations, plus a few common biography ones)
VERB_RELATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bborn in\b", re.I), "birthplace"),
    (re.compile(r"\bborn on\b", re.I), "birth date"),
    (re.compile(r"\b(?:works?|worked|working) for\b", re.I), "employer"),
    (re.compile(r"\bheadquartered in\b", re.I), "headquarters"),
    (re.compile(r"\bdied in\b", re.I), "place of death"),
    (re.compile(r"\bmarried\b", re.I), "spouse"),
)


def _microworld_parse(text: str) -> tuple[str, str, str] | None:
    from envs.core.microworld.kb import parse_sentence

    return parse_sentence(text)


def extract_entities(text: str) -> list[str]:
    """Named entities of ``text`` in order of appearance (de-duplicated).

    Micro-world fact sentences give their subject and object. Otherwise: runs of proper nouns (tagger), or
    runs of capitalised words that are not function words (fallback). Numbers are not entities.

    Example:
        >>> extract_entities("Mira 's mother is Tovan .")
        ['Mira', 'Tovan']
    """
    parsed = _microworld_parse(text)
    if parsed is not None:
        return list(dict.fromkeys([parsed[0], parsed[2]]))
    spans: list[str] = []
    tagged = pos_tag(text)
    if tagged is not None:
        cur: list[str] = []
        for w, t in [*tagged, ("", "")]:
            if t in ("NNP", "NNPS") and re.search(r"\w", w):
                cur.append(w)
            else:
                if cur:
                    spans.append(" ".join(cur))
                cur = []
    else:
        cur = []
        for w in [*words(text), ""]:
            if w[:1].isupper() and w.lower() not in FUNCTION_WORDS:
                cur.append(w)
            else:
                if cur:
                    spans.append(" ".join(cur))
                cur = []
    return list(dict.fromkeys(s for s in spans if s.lower() not in FUNCTION_WORDS))


def relation_words(text: str, exclude: Sequence[str] = ()) -> list[str]:
    """Words that may name a relation: relation verb phrases mapped to nouns, then common nouns.

    Example:
        >>> relation_words("Where was Mira 's father born ?")
        ['birthplace', 'father']
    """
    out = [rel for pat, rel in VERB_RELATIONS if pat.search(text)]
    if re.search(r"\bborn\b", text, re.I) and "birthplace" not in out and "birth date" not in out:
        out.append("birthplace")
    skip = {w.lower() for e in exclude for w in e.split()}
    tagged = pos_tag(text)
    if tagged is not None:
        nouns = [w for w, t in tagged if t in ("NN", "NNS") and re.search(r"\w", w)]
    else:
        nouns = [w for w in words(text) if re.search(r"\w", w) and w.lower() not in FUNCTION_WORDS
                 and not w[:1].isupper() and not w.isdigit()]
    out += [w.lower() for w in nouns if w.lower() not in skip and w.lower() not in FUNCTION_WORDS]
    return list(dict.fromkeys(out))


def entity_relation(step_text: str) -> tuple[str | None, str | None]:
    """The (entity, relation) a step is about.

    Rules, first match wins: a micro-world fact sentence; ``X 's R`` (possessive); ``the R of X``; a relation
    verb phrase (``born in`` -> birthplace, ``works for`` -> employer, ...) with the first entity; the first
    entity with the first common noun outside it. Either part may be ``None``.
    """
    text = clean_step(step_text)
    parsed = _microworld_parse(text)
    if parsed is not None:
        return parsed[0], parsed[1]
    entities = extract_entities(text)
    for ent in entities:
        m = re.search(re.escape(ent) + r"\s*['’]s\s+((?:[a-z][\w-]*\s+){0,2}?[a-z][\w-]*)\b", text)
        if m:
            rel_words = [w for w in m.group(1).split() if w.lower() not in FUNCTION_WORDS]
            if rel_words:
                return ent, " ".join(rel_words)
    m = re.search(r"\b[Tt]he\s+([a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s+of\s+(?:the\s+)?"
                  r"([A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*)", text)
    if m and m.group(1).split()[-1].lower() not in FUNCTION_WORDS:
        return m.group(2), m.group(1)
    entity = entities[0] if entities else None
    rels = relation_words(text, exclude=entities)
    return entity, (rels[0] if rels else None)


def info_need_query(entity: str, relation: str | None, microworld: bool = False) -> str:
    """``What is [entity]'s [relation]?`` (micro-world spacing when ``microworld``); ``What is [entity]?``."""
    if microworld:
        return f"What is {entity} 's {relation} ?" if relation else f"What is {entity} ?"
    return f"What is {entity}'s {relation}?" if relation else f"What is {entity}?"


# ------------------------------------------------------------------------------------------------- modes


@register_query_mode("step")
def step_query(step_text: str, question: str | None = None, context: Mapping[str, Any] | None = None) -> str:
    """The step text itself (prefix removed)."""
    return clean_step(step_text)


@register_query_mode("content_words")
def content_words_query(step_text: str, question: str | None = None,
                        context: Mapping[str, Any] | None = None) -> str:
    """The step's content words (POS filter; see the module docstring)."""
    return " ".join(content_words(clean_step(step_text)))


@register_query_mode("question_step")
def question_step_query(step_text: str, question: str | None = None,
                        context: Mapping[str, Any] | None = None) -> str:
    """The question, then the step."""
    return " ".join(x for x in ((question or "").strip(), clean_step(step_text)) if x)


@register_query_mode("info_need")
def info_need_mode(step_text: str, question: str | None = None, context: Mapping[str, Any] | None = None) -> str:
    """``What is [entity]'s [relation]?`` from the step (``context`` may give ``entity`` / ``relation``)."""
    ctx = context or {}
    text = clean_step(step_text)
    entity, relation = entity_relation(text)
    entity, relation = ctx.get("entity", entity), ctx.get("relation", relation)
    if not entity:
        return ""
    return info_need_query(entity, relation, microworld=_microworld_parse(text) is not None)


@register_query_mode("qfs")
def qfs_mode(step_text: str, question: str | None = None, context: Mapping[str, Any] | None = None) -> str:
    """DRAGIN's QFS: the attention-weighted content words of the question and the text so far
    (:func:`agents.signals.attention.qfs_terms`), which the env computes from the reasoner's attention and passes
    as ``context["qfs"]``."""
    if not context or "qfs" not in context:
        raise ValueError("query mode 'qfs' reads the reasoner's attention: the env computes it (context['qfs']); "
                         "a reasoner without attention weights cannot use it")
    return str(context["qfs"])


@register_query_mode("question")
def question_query(step_text: str, question: str | None = None, context: Mapping[str, Any] | None = None) -> str:
    """The question alone (what Single RAG retrieves with)."""
    return (question or "").strip()


@register_query_mode("question_or_last_step")
def question_or_last_step_query(step_text: str, question: str | None = None,
                                context: Mapping[str, Any] | None = None) -> str:
    """IRCoT's query: the question while no step is accepted, then the last accepted step (``context`` gives
    ``prior_steps``, the accepted steps in order — the env passes them; without them it is the question)."""
    prior = list((context or {}).get("prior_steps") or [])
    last = clean_step(prior[-1]) if prior else ""
    return last or (question or "").strip()


#: the prefix of FLARE's masked query mode (``masked:<β>``)
MASKED_PREFIX = "masked"


def masked_query(token_probs: Sequence[tuple[str, float]], beta: float) -> str:
    """The step's tokens with every token of probability below ``beta`` removed, joined (FLARE's masked query;
    FLARE's released code keeps a token when its probability exceeds β: the two differ only at equality).

    Example:
        >>> masked_query([(" Mira", 0.9), (" 's", 0.95), (" mother", 0.6), (" is", 0.9), (" Tovan", 0.1),
        ...               (" .", 0.8)], 0.4)
        "Mira 's mother is ."
    """
    return " ".join("".join(p for p, q in token_probs if q >= beta).split())


def masked_query_mode(arg: str) -> QueryFn:
    """The query mode ``masked:<β>``: :func:`masked_query` of the step's token probabilities, which the env passes
    as ``context["token_probs"]`` (it keeps them in each step's record when a ``masked:`` mode is in its
    ``query_modes``). A step whose every token is below β asks with the question (FLARE's released code then
    falls back to the input as its query). A step without token probabilities is an error, never another query.

    Example:
        >>> fn = masked_query_mode("0.5")
        >>> fn("Step 1 : A is B .", "Q ?", {"token_probs": [(" A", 0.9), (" is", 0.9), (" B", 0.2), (" .", 0.7)]})
        'A is .'
    """
    try:
        beta = float(arg)
    except ValueError:
        raise ValueError(f"query mode '{MASKED_PREFIX}:{arg}': β must be a number in [0, 1] (e.g. "
                         f"'{MASKED_PREFIX}:0.4')") from None
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"query mode '{MASKED_PREFIX}:{arg}': β must be in [0, 1], got {beta}")

    def masked(step_text: str, question: str | None = None, context: Mapping[str, Any] | None = None) -> str:
        probs = (context or {}).get("token_probs")
        if probs is None:
            raise ValueError(f"query mode '{MASKED_PREFIX}:{arg}' (FLARE's masked query) reads the step's token "
                             f"probabilities, and this step has none ({step_text!r}): the env keeps them only with "
                             "the mode in its query_modes, from a reasoner that returns token log-probabilities")
        return masked_query(probs, beta) or (question or "").strip()

    masked.beta = beta  # type: ignore[attr-defined]
    return masked


def needs_token_probs(modes: Sequence[str]) -> bool:
    """Whether a query mode of ``modes`` reads the step's token probabilities (FLARE's ``masked:<β>``)."""
    return any(str(m).partition(":")[0] == MASKED_PREFIX for m in modes)


# -------------------------------------------------------------------------------------------- generator


class QueryGenerator:
    """Builds the query for a step in a chosen mode (docs/design.md §3: ``(step, state, mode) -> str``).

    Args:
        modes: Mode names (or dotted paths) this generator offers; their order is the action index.
    """

    def __init__(self, modes: Sequence[str] = DEFAULT_MODES) -> None:
        self.modes = list(modes)
        self._fns = [get_query_mode(m) for m in self.modes]

    def __len__(self) -> int:
        return len(self.modes)

    def __call__(self, step: Any, state: Any = None, mode: str | int = "step") -> str:
        """The query for ``step`` in ``mode``.

        Args:
            step: The step text, or an object with ``.text``.
            state: The question (str), a mapping with ``question`` (and optional ``context``), or an object
                with ``.question`` (and optional ``.context``).
            mode: A mode name, or an index into :attr:`modes`.
        """
        step_text = step if isinstance(step, str) else str(getattr(step, "text", step))
        question, context = _question_context(state)
        if isinstance(mode, int):
            fn = self._fns[mode]
        else:
            fn = self._fns[self.modes.index(mode)] if mode in self.modes else get_query_mode(mode)
        query = fn(step_text, question, context).strip()
        return query or clean_step(step_text)

    def all(self, step: Any, state: Any = None) -> dict[str, str]:
        """The query of every mode of this generator."""
        return {m: self(step, state, i) for i, m in enumerate(self.modes)}


def _question_context(state: Any) -> tuple[str | None, Mapping[str, Any] | None]:
    if state is None or isinstance(state, str):
        return state, None
    if isinstance(state, Mapping):
        question, context = state.get("question"), state.get("context")
    else:
        question, context = getattr(state, "question", None), getattr(state, "context", None)
    return (question if isinstance(question, str) else None,
            context if isinstance(context, Mapping) else None)
