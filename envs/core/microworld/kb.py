"""The micro-world knowledge base: entities, facts, fact splits, sentence rendering and parsing.

Every entity name is a single word (one token of the word-level tokenizer). Every fact renders as one
sentence and every sentence parses back to exactly one fact, so generated steps can be checked.

Example:
    >>> from envs.core.microworld.config import WorldConfig
    >>> kb = KnowledgeBase.generate(WorldConfig(seed=0))
    >>> f = kb.facts[0]
    >>> parse_sentence(render_fact(f.subject, f.relation, f.object)) == (f.subject, f.relation, f.object)
    True
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from envs.core.microworld.config import PERSON_RELATIONS, SPLITS, WorldConfig

#: entity type of each relation's (subject, object)
RELATION_TYPES = {
    "mother": ("person", "person"),
    "father": ("person", "person"),
    "spouse": ("person", "person"),
    "birthplace": ("person", "city"),
    "employer": ("person", "company"),
    "headquarters": ("company", "city"),
}

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
_CODAS = ["", "n", "r", "l", "s", "m", "th", "x"]
_CITY_SUFFIX = ["ford", "burg", "ton", "mere", "vale", "haven", "port", "wick"]
_COMPANY_SUFFIX = ["corp", "tek", "ware", "dyne", "co", "labs"]


def _make_names(rng: random.Random, n: int, taken: set[str], suffixes: list[str] | None, syllables: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
        if suffixes:
            word += rng.choice(suffixes)
        word = word.capitalize()
        if word not in taken and len(word) >= 3:
            taken.add(word)
            names.append(word)
    return names


def render_fact(subject: str, relation: str, obj: str) -> str:
    """The one sentence of a fact, space-tokenised (the LM's word-level format)."""
    if relation in PERSON_RELATIONS:
        return f"{subject} 's {relation} is {obj} ."
    if relation == "birthplace":
        return f"{subject} was born in {obj} ."
    if relation == "employer":
        return f"{subject} works for {obj} ."
    if relation == "headquarters":
        return f"{subject} is headquartered in {obj} ."
    raise ValueError(f"unknown relation '{relation}'")


_PATTERNS = [
    (re.compile(r"^(\w+) 's (mother|father|spouse) is (\w+) \.$"), None),
    (re.compile(r"^(\w+) was born in (\w+) \.$"), "birthplace"),
    (re.compile(r"^(\w+) works for (\w+) \.$"), "employer"),
    (re.compile(r"^(\w+) is headquartered in (\w+) \.$"), "headquarters"),
]


def parse_sentence(text: str) -> tuple[str, str, str] | None:
    """Parse a fact sentence back to ``(subject, relation, object)``; ``None`` if it is not one."""
    text = " ".join(text.split())
    for pat, rel in _PATTERNS:
        m = pat.match(text)
        if m:
            if rel is None:
                return m.group(1), m.group(2), m.group(3)
            return m.group(1), rel, m.group(2)
    return None


@dataclass(frozen=True)
class Fact:
    """One true fact of the world, the split it belongs to, and what the LM was trained on."""

    id: str
    subject: str
    relation: str
    object: str
    split: str
    #: MISLEARNED: the consistent false object in the training data; CONFLICTING: the second version
    false_object: str | None = None

    @property
    def sentence(self) -> str:
        return render_fact(self.subject, self.relation, self.object)


class KnowledgeBase:
    """Entities and facts of one seeded world, with lookup by ``(subject, relation)``."""

    def __init__(self, entities: dict[str, list[str]], facts: list[Fact], config: WorldConfig):
        self.entities = entities
        self.facts = facts
        self.config = config
        self._index = {(f.subject, f.relation): f for f in facts}
        self.entity_type = {name: t for t, names in entities.items() for name in names}

    # ------------------------------------------------------------------ generation
    @classmethod
    def generate(cls, config: WorldConfig) -> KnowledgeBase:
        """Generate the world deterministically from ``config.seed``."""
        rng = random.Random(config.seed)
        taken: set[str] = set()
        people = _make_names(rng, config.n_people, taken, None, 2)
        cities = _make_names(rng, config.n_cities, taken, _CITY_SUFFIX, 1)
        companies = _make_names(rng, config.n_companies, taken, _COMPANY_SUFFIX, 1)
        entities = {"person": people, "city": cities, "company": companies}
        rels = set(config.relations)
        triples: list[tuple[str, str, str]] = []
        # spouses: disjoint pairs, both directions (kept together in one split)
        spouse_of: dict[str, str] = {}
        if "spouse" in rels:
            order = people[:]
            rng.shuffle(order)
            for a, b in zip(order[0::2], order[1::2]):
                spouse_of[a], spouse_of[b] = b, a
        for p in people:
            others = [q for q in people if q != p and q != spouse_of.get(p)]
            if "mother" in rels:
                triples.append((p, "mother", rng.choice(others)))
            if "father" in rels:
                triples.append((p, "father", rng.choice(others)))
            if "spouse" in rels and p in spouse_of:
                triples.append((p, "spouse", spouse_of[p]))
            if "birthplace" in rels:
                triples.append((p, "birthplace", rng.choice(cities)))
            if "employer" in rels:
                triples.append((p, "employer", rng.choice(companies)))
        if "headquarters" in rels:
            for c in companies:
                triples.append((c, "headquarters", rng.choice(cities)))
        facts = cls._assign_splits(triples, entities, config, rng)
        return cls(entities, facts, config)

    @staticmethod
    def _assign_splits(triples, entities, config, rng) -> list[Fact]:
        # units: a spouse pair is one unit so both directions share a split
        units: list[list[tuple[str, str, str]]] = []
        seen_pairs: set[frozenset] = set()
        for t in triples:
            if t[1] == "spouse":
                key = frozenset((t[0], t[2]))
                if key in seen_pairs:
                    continue
                seen_pairs.add(key)
                units.append([t, (t[2], "spouse", t[0])])
            else:
                units.append([t])
        rng.shuffle(units)
        n = len(triples)
        want = {
            "evidence_only": round(config.share_evidence_only * n),
            "held_out": round(config.share_held_out * n),
            "mislearned": round(config.share_mislearned * n),
            "conflicting": round(config.share_conflicting * n),
        }
        counts = dict.fromkeys(want, 0)
        facts: list[Fact] = []
        for unit in units:
            split = "known"
            for s in ("evidence_only", "held_out", "mislearned", "conflicting"):
                # false versions need a non-symmetric relation (a false spouse would break symmetry)
                if s in ("mislearned", "conflicting") and unit[0][1] == "spouse":
                    continue
                if counts[s] + len(unit) <= want[s]:
                    split = s
                    break
            if split != "known":
                counts[split] += len(unit)
            for subj, rel, obj in unit:
                false_obj = None
                if split in ("mislearned", "conflicting"):
                    pool = entities[RELATION_TYPES[rel][1]]
                    false_obj = rng.choice([e for e in pool if e not in (obj, subj)])
                facts.append(Fact("", subj, rel, obj, split, false_obj))
        facts.sort(key=lambda f: (f.subject, f.relation))
        return [Fact(f"F{i:04d}", f.subject, f.relation, f.object, f.split, f.false_object)
                for i, f in enumerate(facts)]

    # ------------------------------------------------------------------ lookup
    def get(self, subject: str, relation: str) -> Fact | None:
        """The fact for ``(subject, relation)``, or ``None``."""
        return self._index.get((subject, relation))

    def by_split(self, split: str) -> list[Fact]:
        if split not in SPLITS:
            raise ValueError(f"unknown split '{split}' (valid: {', '.join(SPLITS)})")
        return [f for f in self.facts if f.split == split]

    def split_counts(self) -> dict[str, int]:
        return {s: sum(f.split == s for f in self.facts) for s in SPLITS}

    def vocabulary(self) -> list[str]:
        return [n for names in self.entities.values() for n in names]

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "entities": self.entities, "facts": [asdict(f) for f in self.facts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnowledgeBase:
        config = WorldConfig.from_dict(data["config"])
        facts = [Fact(**f) for f in data["facts"]]
        return cls(data["entities"], facts, config)
