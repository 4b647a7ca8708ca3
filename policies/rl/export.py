"""Export a learned policy (plain torch state dict + JSON spec) and wrap it as a :class:`Trigger`.

No Ray needed to load: ``load_policy(dir)`` rebuilds :class:`PolicyNet` from ``spec.json`` and loads
``weights.pt``. ``export_policy(net, dir, heads=("retrieve",))`` writes only the trunk plus the named heads,
so the retrieval trigger and the QueryGen head can be shipped (and swapped) on their own.

Example:
    >>> import tempfile
    >>> from policies.rl.net import PolicyNet, PolicySpec
    >>> net = PolicyNet(PolicySpec(fields={"pulse": 3}, arch="mlp"))
    >>> d = export_policy(net, tempfile.mkdtemp())
    >>> LearnedTrigger.load(d).decide({"pulse": [0.0, 0.0, 0.0]}, {})
    0
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.rl.net import PolicyNet, PolicySpec

_HEAD_PREFIX = {"retrieve": "retrieve_head.", "query": "query_head.", "value": "value_head."}


def export_policy(net: PolicyNet, out_dir: str | Path, heads: tuple[str, ...] = ("retrieve", "query"),
                  extra: dict[str, Any] | None = None, env_config: dict[str, Any] | None = None) -> Path:
    """Write ``spec.json`` and ``weights.pt`` (trunk + the chosen heads) atomically into ``out_dir``.

    ``env_config``: the env config the policy was trained in (an ``EnvConfig`` as a dict), recorded as
    ``spec.json``'s ``env_config`` — the reasoner, signals and query modes its observations come from, which
    ``kairos.Pipeline.from_policy`` rebuilds the env from."""
    bad = [h for h in heads if h not in _HEAD_PREFIX]
    if bad:
        raise ValueError(f"export_policy: unknown head '{bad[0]}' (valid: {', '.join(_HEAD_PREFIX)})")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    dropped = tuple(p for h, p in _HEAD_PREFIX.items() if h not in heads)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items() if not k.startswith(dropped)}
    meta = {"spec": net.spec.to_dict(), "heads": [h for h in heads if h != "query" or net.query_head is not None],
            **(extra or {}), **({"env_config": dict(env_config)} if env_config is not None else {})}
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    torch.save(state, tmp / "weights.pt")
    (tmp / "spec.json").write_text(json.dumps(meta, indent=2))
    if out.exists():
        old = out.with_name(out.name + ".old")
        os.rename(out, old)
        os.rename(tmp, out)
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    else:
        os.rename(tmp, out)
    return out


def policy_fingerprint(path: str | Path) -> str:
    """A short content hash of an exported policy (spec + weights): two exports with the same fingerprint decide
    alike, whatever their paths (benchmarks key their resumable per-question files by it)."""
    import hashlib

    path = Path(path)
    h = hashlib.sha256()
    for f in ("spec.json", "weights.pt"):
        h.update((path / f).read_bytes())
    return h.hexdigest()[:10]


def load_policy(path: str | Path) -> tuple[PolicyNet, dict[str, Any]]:
    """``(net, meta)`` from an exported directory; heads that were not exported keep their fresh init."""
    path = Path(path)
    try:
        meta = json.loads((path / "spec.json").read_text())
        net = PolicyNet(PolicySpec.from_dict(meta["spec"]))
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path / 'spec.json'}: not an exported policy's spec ({type(e).__name__}: {e}); export "
                         "it again (`kairos train` writes <out_dir>/policy_trigger)") from None
    try:
        state = torch.load(path / "weights.pt", map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: weights.pt is missing beside spec.json; export the policy again") from None
    except Exception as e:  # noqa: BLE001 — a truncated or foreign file: torch's own errors vary
        raise ValueError(f"{path / 'weights.pt'}: unreadable policy weights ({type(e).__name__}: {e}); export "
                         "the policy again") from None
    own = net.state_dict()
    resized = [f"{k} (spec.json: {list(own[k].shape)}; weights.pt: {list(v.shape)})" for k, v in state.items()
               if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if resized:
        raise ValueError(f"{path}: weights.pt does not match spec.json: {', '.join(resized[:3])}"
                         f"{' …' if len(resized) > 3 else ''}; the two files come from different exports — export "
                         "the policy again")
    missing, unexpected = net.load_state_dict(state, strict=False)
    if unexpected:
        raise ValueError(f"{path}: weights do not match spec.json (unexpected keys {unexpected[:3]})")
    allowed = tuple(p for h, p in _HEAD_PREFIX.items() if h not in meta["heads"])
    bad = [k for k in missing if not k.startswith(allowed)]
    if bad:
        raise ValueError(f"{path}: weights miss {bad[:3]}")
    net.eval()
    return net, meta


class LearnedTrigger:
    """A learned policy as a greedy :class:`policies.triggers.Trigger`.

    ``decide`` returns ``retrieve`` (0/1), or ``(retrieve, mode)`` when the policy has a query head and
    ``querygen=True`` (the env's QueryGen action space). It retrieves when π(retrieve) > ``threshold``
    (0.5: the greedy policy; a benchmark may calibrate it on dev, as it does a signal's threshold).
    """

    def __init__(self, net: PolicyNet, name: str = "learned", querygen: bool | None = None, threshold: float = 0.5):
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"LearnedTrigger: threshold must be in [0, 1), got {threshold}")
        self.net = net.eval()
        self.name = name
        self.threshold = float(threshold)
        self.querygen = (net.query_head is not None) if querygen is None else querygen
        self.fingerprint: str | None = None  # content hash of the export it was loaded from (policy_fingerprint)
        self.mode_index: list[int] | None = None  # the policy's mode i -> the env's (bind_modes)
        self.env_config: dict[str, Any] | None = None  # the env it was trained in (spec.json's env_config, if any)
        self.path: str | None = None  # the export it was loaded from

    @classmethod
    def load(cls, path: str | Path, name: str | None = None, querygen: bool | None = None,
             threshold: float = 0.5) -> LearnedTrigger:
        net, meta = load_policy(path)
        q = querygen if querygen is not None else ("query" in meta["heads"] and net.query_head is not None)
        t = cls(net, name=name or meta.get("name", Path(path).name), querygen=q, threshold=threshold)
        t.fingerprint = policy_fingerprint(path)
        t.env_config = meta.get("env_config")
        t.path = str(path)
        return t

    def reset(self, seed: int | None = None) -> None:
        return None

    def probs(self, observation: dict[str, Any]) -> tuple[float, np.ndarray]:
        """``(π(retrieve=1), π(mode))`` of one observation (a field it lacks, or of another size, is a
        :class:`~policies.rl.compat.PolicyMismatchError`: see :func:`~policies.rl.compat.check_policy_env`, which
        every loader runs first)."""
        from policies.rl.compat import check_policy_env

        try:
            obs = {k: torch.as_tensor(np.asarray(observation[k], dtype=np.float32)).reshape(1, -1)
                   for k in self.net.names}
        except KeyError:
            check_policy_env(self, {k: np.asarray(v).size for k, v in observation.items()}, {})
            raise
        if any(obs[k].shape[1] != n for k, n in self.net.spec.fields.items()):
            check_policy_env(self, {k: np.asarray(v).size for k, v in observation.items()}, {})
        with torch.no_grad():
            out = self.net.forward_heads(obs)
        return (float(torch.softmax(out["retrieve_logits"], -1)[0, 1]),
                torch.softmax(out["mode_logits"], -1)[0].numpy())

    def bind_modes(self, env_modes: list[str]) -> None:
        """Map the query head's modes (the training env's ``query_modes``, saved in the spec) onto an env's
        ``query_modes``, which may list them in another order; a mode the env lacks is an error."""
        names = list(self.net.spec.query_modes)
        if not self.querygen or not names:  # no head, or an export from before the names were saved: by index
            self.mode_index = None
            return
        missing = [m for m in names if m not in env_modes]
        if missing:
            raise ValueError(f"policy '{self.name}': its query head chooses among {names}, but the env's query_modes "
                             f"{list(env_modes)} lack {missing} (add them to the env config)")
        self.mode_index = [list(env_modes).index(m) for m in names]

    def decide(self, observation: dict[str, Any], info: dict[str, Any]):
        return self.decide_explained(observation, info)[0]

    def decide_explained(self, observation: dict[str, Any], info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(action, details)``: the action ``decide`` returns, with ``probability`` (π(retrieve)), ``threshold``
        and, with a query head, ``mode_probabilities`` (by the policy's mode names)."""
        p, modes = self.probs(observation)
        r = int(p > self.threshold)
        details: dict[str, Any] = {"probability": p, "threshold": self.threshold}
        if self.querygen:
            m = int(np.argmax(modes))
            names = list(self.net.spec.query_modes) or [str(i) for i in range(len(modes))]
            details["mode_probabilities"] = {n: float(x) for n, x in zip(names, modes)}
            return (r, m if self.mode_index is None else self.mode_index[m]), details
        return r, details

    def describe(self) -> str:
        s = self.net.spec
        return f"{self.name}: learned {s.arch} policy (d_model={s.d_model}, query head={self.querygen})"
