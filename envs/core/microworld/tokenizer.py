"""A word-level tokenizer for the micro-world LM (every entity name and template word is one token)."""

from __future__ import annotations

import json
from pathlib import Path

from envs.core.io import write_json

PAD, EOS, UNK, NL = "<pad>", "<eos>", "<unk>", "\n"
SPECIALS = [PAD, EOS, UNK, NL]


class WordTokenizer:
    """Space-separated words to ids; ``"\\n"`` and ``<eos>`` are tokens of their own.

    Example:
        >>> tok = WordTokenizer(["Step", "1", ":"])
        >>> tok.decode(tok.encode("Step 1 :\\nStep"))
        'Step 1 :\\nStep'
    """

    def __init__(self, words: list[str]):
        vocab = SPECIALS + sorted(w for w in set(words) if w not in SPECIALS)
        self.vocab = vocab
        self.index = {w: i for i, w in enumerate(vocab)}
        self.pad_id, self.eos_id, self.unk_id, self.nl_id = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.vocab)

    @staticmethod
    def split(text: str) -> list[str]:
        return [w for w in text.replace("\n", " \n ").split(" ") if w]

    def encode(self, text: str | list[str]) -> list[int]:
        words = self.split(text) if isinstance(text, str) else text
        return [self.index.get(w, self.unk_id) for w in words]

    def decode(self, ids: list[int]) -> str:
        out = []
        for i in ids:
            w = self.vocab[i] if 0 <= i < len(self.vocab) else UNK
            out.append(w)
        return " ".join(out).replace(" \n", "\n").replace("\n ", "\n")

    def save(self, path: str | Path) -> None:
        write_json(path, {"type": "word-level", "vocab": self.vocab})

    @classmethod
    def load(cls, path: str | Path) -> WordTokenizer:
        data = json.loads(Path(path).read_text())
        if data.get("type") != "word-level" or not isinstance(data.get("vocab"), list):
            raise ValueError(f"{path}: not a Kairos word-level tokenizer file")
        tok = cls(data["vocab"])
        if tok.vocab != data["vocab"]:
            raise ValueError(f"{path}: vocabulary is not in canonical order (file edited?)")
        return tok
