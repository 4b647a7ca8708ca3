"""The supervised fit of the policy network on labelled decisions: step 4 of the warm start (:mod:`train.warmstart`),
and of every DAgger round (:mod:`train.dagger`).

The network is the :class:`policies.rl.net.PolicyNet` the RLModule wraps, so REINFORCE continues from it.
:func:`fit_policy` fits the content PCA (only with ``model.content_dim > 0``) and the input statistics on the
labelled observations, then the retrieve head by weighted BCE on the labels ``y = 1[ΔR > 0]``, weights ``|ΔR|``
(+ MSE of the value head on π₀'s reward; + the mode head's weighted cross-entropy on :func:`mode_targets` with
QueryGen labels), and keeps the epoch whose validation gain over π₀ on held-out questions (:func:`decision_gain`)
is the highest.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def decision_gain(p_retrieve: np.ndarray, data: dict[str, Any], idx: np.ndarray, threshold: float = 0.5,
                  mode: np.ndarray | None = None) -> float:
    """Mean per-question reward gained over π₀ by taking the classifier's action at each labelled decision
    (each decision judged alone, the rest π₀): Σ_k ΔR_k·(1[p_k > t] − a_k) / questions. With QueryGen labels
    (``delta_modes``) and the classifier's ``mode`` per decision: Σ_k 1[p_k > t]·ΔR_k,mode_k − a_k·ΔR_k,0 (π₀
    retrieves with the first mode)."""
    dm = data.get("delta_modes")
    dm = np.asarray(data["delta"], dtype=np.float64)[:, None] if dm is None else dm
    act = (p_retrieve[idx] > threshold).astype(np.float64)
    chosen = dm[idx, 0] if mode is None else dm[idx, mode[idx]]
    gain = chosen * act - dm[idx, 0] * data["base_action"][idx]
    return float(gain.sum() / max(1, len(np.unique(data["question"][idx]))))


def mode_targets(delta_modes: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The mode head's target and weight per labelled decision: the best mode's index, weighted by the spread of
    the modes' values there (0 where every mode ties). Where several modes tie for best, the one with the higher
    mean value over the decisions where retrieving pays (``y > 0``; all decisions without ``y``) is the target —
    not the first listed, which would hand every tie to the head's first mode (a generator tied with ``info_need``
    at most decisions and better on average was learned as ``info_need``). Ties of the means: list order.

    Example:
        >>> dm = np.array([[0.9, 0.9, 0.9], [0.9, 0.0, 0.9], [0.0, 0.0, 0.9], [0.9, 0.0, 0.9], [0.9, 0.0, 0.5]])
        >>> target, weight = mode_targets(dm)  # mode 2 ties mode 0 at rows 0, 1, 3 and is better on average
        >>> target.tolist(), [round(float(x), 2) for x in weight]
        ([2, 2, 2, 2, 0], [0.0, 0.9, 0.9, 0.9, 0.9])
    """
    dm = np.asarray(delta_modes, dtype=np.float64)
    pays = dm if y is None or not np.any(np.asarray(y) > 0) else dm[np.asarray(y) > 0]
    mean = pays.mean(axis=0)
    rank = np.empty(len(mean), dtype=np.float64)  # 0 = the highest mean; stable: equal means keep list order
    rank[np.argsort(-mean, kind="stable")] = np.arange(len(mean))
    best = dm >= dm.max(axis=1, keepdims=True) - 1e-12
    target = np.where(best, rank[None, :], np.inf).argmin(axis=1)
    weight = (dm.max(axis=1) - dm.min(axis=1)).astype(np.float32)
    return target.astype(np.int64), weight


def fit_policy(data: dict[str, Any], spec, opts, seed: int = 0, sampler=None):
    """The warm-started :class:`PolicyNet` and its fitting log (see the module docstring; ``opts``: the
    :class:`train.warmstart.WarmStartOptions`); fitted in ``opts.dtype`` (the network, its input statistics and the
    data), returned in float32. ``sampler``: a
    :class:`train.conditioning.CostSampler` — a cost-conditioned policy, each decision's λ drawn afresh every epoch
    (its observed ``costs`` field and its labels follow), validated on one fixed draw."""
    import torch

    if opts.dtype == "float32":
        return _fit_policy(data, spec, opts, seed, sampler)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        wide = {**data, "obs": {k: np.asarray(v, dtype=np.float64) for k, v in data["obs"].items()},
                **{k: np.asarray(data[k], dtype=np.float64) for k in ("y", "w", "base_reward")}}
        net, fit = _fit_policy(wide, spec, opts, seed, sampler)
    finally:
        torch.set_default_dtype(before)
    return net.float(), fit


class _Targets:
    """The fit's targets as tensors — the labels at the labelling λ, or (with a cost sampler) at λ drawn per
    decision: :meth:`redraw` before every epoch (the validation rows keep one fixed draw)."""

    def __init__(self, data: dict[str, Any], obs: dict, sampler, rng: np.random.Generator, val: np.ndarray):
        import torch

        self.data, self.obs, self.sampler, self.with_modes = data, obs, sampler, False
        dm = data.get("delta_modes")
        self.with_modes = dm is not None and dm.shape[1] > 1
        self.val, self.val_weights = val, (sampler.draw(rng, len(val)) if sampler is not None else None)
        self.dtype = torch.get_default_dtype()
        self._set(data)

    def _set(self, labels: dict[str, Any]) -> None:
        import torch

        self.labels = {**self.data, **labels}
        self.y, self.w = (torch.as_tensor(np.asarray(labels[k]), dtype=self.dtype) for k in ("y", "w"))
        self.ret = torch.as_tensor(np.asarray(labels["base_reward"]), dtype=self.dtype)
        if self.with_modes:  # the mode head: the best mode's index, weighted by how much the mode matters there
            mode_y, mode_w = mode_targets(labels["delta_modes"], labels["y"])
            self.mode_y, self.mode_w = torch.as_tensor(mode_y), torch.as_tensor(mode_w, dtype=self.dtype)

    def redraw(self, rng: np.random.Generator) -> None:
        """New λ for every training decision (its ``costs`` field and labels); the validation rows keep theirs."""
        import torch

        from train.conditioning import labels_at

        if self.sampler is None:
            return
        weights = self.sampler.draw(rng, len(self.data["y"]))
        weights[self.val] = self.val_weights
        self._set(labels_at(self.data, weights))
        self.obs["costs"] = torch.as_tensor(self.sampler.features(weights), dtype=self.dtype)


def _fit_policy(data: dict[str, Any], spec, opts, seed: int = 0, sampler=None):
    import torch

    from policies.rl.net import PolicyNet

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    qs = np.unique(data["question"])
    val_q = set(rng.choice(qs, size=max(1, int(round(opts.val_share * len(qs)))), replace=False).tolist())
    is_val = np.array([q in val_q for q in data["question"]])
    tr, va = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    obs = {k: torch.as_tensor(v) for k, v in data["obs"].items() if k in spec.fields}
    if sampler is not None and "costs" not in spec.fields:
        raise ValueError("fit_policy: a cost sampler needs a policy that observes 'costs' (env observe_costs)")
    t = _Targets(data, obs, sampler, rng, va)
    t.redraw(rng)  # the input statistics see the drawn λ
    net = PolicyNet(spec)
    sub = {k: v[torch.as_tensor(tr)] for k, v in obs.items()}
    net.fit_reducers(sub)
    net.update_normalizer(sub)
    dm = data.get("delta_modes")
    if t.with_modes != (net.query_head is not None) or (t.with_modes and dm.shape[1] != spec.n_modes):
        raise ValueError(f"fit_policy: the labels have {1 if dm is None else dm.shape[1]} query mode(s), the policy's "
                         f"query head {spec.n_modes} (label and train with the same env querygen / query_modes)")
    opt = torch.optim.AdamW(net.parameters(), lr=opts.lr, weight_decay=opts.weight_decay)
    best = (-np.inf, None, -1)
    history = []

    def probs(idx: np.ndarray) -> np.ndarray:
        net.eval()
        with torch.no_grad():
            out = net.forward_heads({k: v[torch.as_tensor(idx)] for k, v in obs.items()})
        net.train()
        if t.with_modes:
            mode_all[idx] = out["mode_logits"].argmax(-1).numpy()
        return torch.softmax(out["retrieve_logits"], -1)[:, 1].numpy()

    p_all = np.zeros(len(data["y"]))
    mode_all = np.zeros(len(data["y"]), dtype=np.int64) if t.with_modes else None
    for epoch in range(opts.epochs):
        if epoch:
            t.redraw(rng)
        perm = rng.permutation(tr)
        total = 0.0
        for i in range(0, len(perm), opts.batch_size):
            b = torch.as_tensor(perm[i:i + opts.batch_size])
            out = net.forward_heads({k: v[b] for k, v in obs.items()})
            logit = out["retrieve_logits"][:, 1] - out["retrieve_logits"][:, 0]
            bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, t.y[b], weight=t.w[b], reduction="sum")
            loss = bce / t.w[b].sum().clamp_min(1e-8) + 0.5 * torch.mean((out["value"] - t.ret[b]) ** 2)
            if t.with_modes:
                ce = torch.nn.functional.cross_entropy(out["mode_logits"], t.mode_y[b], reduction="none")
                loss = loss + (ce * t.mode_w[b]).sum() / t.mode_w[b].sum().clamp_min(1e-8)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(b)
        p_all[va] = probs(va)
        g = decision_gain(p_all, t.labels, va, mode=mode_all)
        history.append({"epoch": epoch + 1, "train_loss": total / max(1, len(tr)), "val_gain": g})
        if g > best[0]:
            best = (g, {k: v.detach().clone() for k, v in net.state_dict().items()}, epoch + 1)
    net.load_state_dict(best[1])
    net.eval()
    p_all[tr] = probs(tr)
    p_all[va] = probs(va)
    return net, {"best_epoch": best[2], "val_gain_per_question": best[0],
                 "train_gain_per_question": decision_gain(p_all, t.labels, tr, mode=mode_all), "history": history,
                 "n_train_questions": int(len(qs) - len(val_q)), "n_val_questions": int(len(val_q))}
