"""The micro-world artifact: KB, question splits, tokenizer, LM weights, config and metrics on disk.

Layout of an artifact directory (format version :data:`FORMAT_VERSION`)::

    manifest.json      format version, sha256 of every file, build info
    build_config.json  the BuildConfig it was built from
    kb.json            entities and facts (with splits and false versions)
    questions.json     train / dev / test question ids
    tokenizer.json     word-level vocabulary
    model/             transformers config.json + model.safetensors
    metrics.json       competence metrics measured after the build (optional)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.io import sha256_file, write_json
from envs.core.microworld.config import BuildConfig
from envs.core.microworld.kb import KnowledgeBase
from envs.core.microworld.questions import Question

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DEFAULT_ARTIFACT = Path(__file__).resolve().parent / "artifacts" / "default"


class ArtifactError(ValueError):
    """A micro-world artifact is missing, incomplete, corrupt or of another format version."""


@dataclass
class MicroWorld:
    """A loaded (or freshly built) micro-world."""

    kb: KnowledgeBase
    questions: dict[str, list[Question]]
    tokenizer: Any
    model: Any
    config: BuildConfig
    train_info: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    metrics: dict[str, Any] | None = None

    def corpus(self, distractors: list[tuple[str, str]] | None = None):
        """Every true fact sentence as a passage (id = fact id), plus optional ``(title, text)`` distractors."""
        from envs.core.microworld.corpus import fact_corpus

        return fact_corpus(self.kb, distractors)


def default_artifact_path() -> Path:
    """``$KAIROS_MICROWORLD`` if set, else the artifact shipped inside the package."""
    env = os.environ.get("KAIROS_MICROWORLD")
    return Path(env) if env else DEFAULT_ARTIFACT


def save_artifact(world: MicroWorld, out_dir: str | Path, metrics: dict[str, Any] | None = None) -> Path:
    """Write the artifact (every file atomically, the manifest last)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    (out / "model").mkdir(parents=True, exist_ok=True)
    write_json(out / "build_config.json", world.config.to_dict())
    write_json(out / "kb.json", world.kb.to_dict())
    write_json(out / "questions.json", {k: [q.id for q in v] for k, v in world.questions.items()})
    world.tokenizer.save(out / "tokenizer.json")
    cfg_dict = world.model.config.to_dict()
    write_json(out / "model" / "config.json", cfg_dict)
    state = {k: v.detach().contiguous() for k, v in world.model.state_dict().items() if k != "lm_head.weight"}
    tmp = out / "model" / ".model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / "model" / "model.safetensors")
    if metrics is not None:
        write_json(out / "metrics.json", metrics)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name not in ("manifest.json", "checkpoint.pt")
                   and not p.name.startswith("."))
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": world.config.name,
        "train": world.train_info,
        "files": {str(p.relative_to(out)): sha256_file(p) for p in files},
    }
    write_json(out / "manifest.json", manifest)
    world.path = out
    return out


def verify_artifact(path: str | Path, checksums: bool = True) -> dict[str, Any]:
    """The manifest of the artifact at ``path`` after checking its format and that every listed file exists and
    (``checksums``) has the SHA-256 the build recorded; an :class:`ArtifactError` names what is wrong."""
    path = Path(path)
    man_path = path / "manifest.json"
    if not man_path.is_file():
        raise ArtifactError(f"no micro-world artifact at {path} (missing manifest.json); "
                            f"build one with `kairos microworld build --out {path}`")
    try:
        manifest = json.loads(man_path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{man_path}: corrupt manifest ({e})") from e
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{man_path}: format version {manifest.get('format_version')} "
                            f"(this Kairos reads {FORMAT_VERSION}); rebuild with `kairos microworld build`")
    for rel, digest in manifest.get("files", {}).items():
        f = path / rel
        if not f.is_file():
            raise ArtifactError(f"{path}: file '{rel}' listed in the manifest is missing")
        if checksums and sha256_file(f) != digest:
            raise ArtifactError(f"{f}: checksum mismatch (corrupt or edited); rebuild the artifact")
    return manifest


def load_artifact(path: str | Path | None = None, verify: bool = True, threads: int | None = 1,
                  with_model: bool = True) -> MicroWorld:
    """Load a micro-world artifact; a missing or corrupt one is an :class:`ArtifactError` saying what to do.

    Args:
        path: artifact directory (default: :func:`default_artifact_path`).
        verify: check every file's sha256 against the manifest.
        threads: ``torch.set_num_threads`` for inference (1 is fastest on small shared machines).
        with_model: load the LM's weights; ``False``: the model is built on the meta device (its config, no
            weights, no memory) — for a process whose reasoner is served elsewhere (``EnvConfig.reasoner_service``).
    """
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from envs.core.microworld.tokenizer import WordTokenizer

    path = Path(path) if path is not None else default_artifact_path()
    manifest = verify_artifact(path, checksums=verify)
    try:
        cfg = BuildConfig.from_dict(json.loads((path / "build_config.json").read_text()))
        kb = KnowledgeBase.from_dict(json.loads((path / "kb.json").read_text()))
        qids = json.loads((path / "questions.json").read_text())
        tok = WordTokenizer.load(path / "tokenizer.json")
        mcfg = LlamaConfig.from_dict(json.loads((path / "model" / "config.json").read_text()))
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: corrupt artifact ({type(e).__name__}: {e})") from e
    if mcfg.vocab_size != len(tok):
        raise ArtifactError(f"{path}: tokenizer.json has {len(tok)} words but model/config.json expects vocab_size "
                            f"{mcfg.vocab_size}: the two come from different builds; rebuild the artifact "
                            f"(`kairos microworld build --out {path}`)")
    check_world(path, kb, qids, tok)
    if threads:
        torch.set_num_threads(threads)
    mcfg._attn_implementation = "sdpa"
    if not with_model:
        with torch.device("meta"):
            model = LlamaForCausalLM(mcfg)
        questions = {k: [_parse_qid(q) for q in v] for k, v in qids.items()}
        return MicroWorld(kb=kb, questions=questions, tokenizer=tok, model=model.eval(), config=cfg,
                          train_info=manifest.get("train", {}), path=path, metrics=None)
    model = LlamaForCausalLM(mcfg)
    state = load_file(str(path / "model" / "model.safetensors"))
    own = model.state_dict()
    resized = [f"{k} (config.json: {list(own[k].shape)}; weights: {list(v.shape)})" for k, v in state.items()
               if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if resized:
        raise ArtifactError(f"{path}: model/model.safetensors does not match model/config.json: "
                            f"{'; '.join(resized[:3])}; rebuild the artifact (`kairos microworld build --out {path}`)")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise ArtifactError(f"{path}: weights do not match the model config (missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]})")
    model.tie_weights()
    model.eval()
    questions = {k: [_parse_qid(q) for q in v] for k, v in qids.items()}
    metrics = None
    if (path / "metrics.json").is_file():
        metrics = json.loads((path / "metrics.json").read_text())
    return MicroWorld(kb=kb, questions=questions, tokenizer=tok, model=model, config=cfg,
                      train_info=manifest.get("train", {}), path=path, metrics=metrics)


def check_world(path: Path, kb: KnowledgeBase, qids: dict[str, list[str]], tok: Any) -> None:
    """The artifact's parts against each other: every word of the KB's entities and fact sentences and of the
    questions is a tokenizer word (an unknown one would read as ``<unk>``), and every question starts at a KB entity
    and follows KB relations. An :class:`ArtifactError` names the files, an example and the fix."""
    from envs.core.microworld.kb import render_fact

    fix = f"the files come from different builds; rebuild the artifact (`kairos microworld build --out {path}`)"
    known = set(tok.vocab)
    words = {w for names in kb.entities.values() for n in names for w in tok.split(n)}
    for f in kb.facts:
        words.update(tok.split(render_fact(f.subject, f.relation, f.object)))
    unknown = sorted(w for w in words if w not in known)
    if unknown:
        raise ArtifactError(f"{path}: kb.json uses {len(unknown)} word(s) tokenizer.json does not know (e.g. "
                            f"{', '.join(repr(w) for w in unknown[:3])}); {fix}")
    relations = {f.relation for f in kb.facts}
    paths: dict[tuple[str, ...], str] = {}
    for split, ids in qids.items():
        for qid in ids:
            try:
                q = _parse_qid(qid)
            except ValueError:
                raise ArtifactError(f"{path}: questions.json['{split}'] holds a malformed question id {qid!r} "
                                    f"(HEAD/rel.rel…); {fix}") from None
            bad = [r for r in q.path if r not in relations]
            if q.head not in kb.entity_type or bad:
                what = f"relation '{bad[0]}'" if bad else f"entity '{q.head}'"
                raise ArtifactError(f"{path}: questions.json['{split}'] question '{qid}' names {what}, which "
                                    f"kb.json does not have; {fix}")
            paths.setdefault(q.path, qid)
    for qid in paths.values():  # one question per relation path: the templates' words
        unknown = [w for w in tok.split(_parse_qid(qid).text) if w not in known]
        if unknown:
            raise ArtifactError(f"{path}: question '{qid}' reads words tokenizer.json does not know "
                                f"({', '.join(repr(w) for w in unknown[:3])}); {fix}")


def _parse_qid(qid: str) -> Question:
    head, path = qid.split("/", 1)
    return Question(head, tuple(path.split(".")))


def artifact_fingerprint(path: str | Path) -> str:
    """16 hex digits identifying an artifact's model and world: the hash of its manifest's file digests,
    without ``metrics.json`` (measuring an artifact after the build must not orphan its probes and caches)."""
    man = Path(path) / "manifest.json"
    if not man.is_file():
        raise FileNotFoundError(f"no micro-world artifact at {path} (missing manifest.json)")
    files = {k: v for k, v in json.loads(man.read_text()).get("files", {}).items() if k != "metrics.json"}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def world_model_id(world) -> str:
    """``microworld:<name>@<fingerprint>`` — the model id probes are saved with."""
    if world.path is None:
        raise ValueError("the micro-world has no path (save it first); its fingerprint is undefined")
    return f"microworld:{world.config.name}@{artifact_fingerprint(world.path)}"
