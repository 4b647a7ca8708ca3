"""Learned policies (docs/design.md §7): the field-token policy network, its RLlib RLModule, export and the Trigger wrapper.

``policies.rl.net`` and ``policies.rl.export`` are plain torch (no Ray), so an exported policy loads anywhere;
``policies.rl.module`` holds the RLlib ``TorchRLModule`` and its action distribution (imports Ray).

Example:
    >>> from policies.rl.net import PolicyNet, PolicySpec
    >>> net = PolicyNet(PolicySpec(fields={"pulse": 12, "history": 4}, n_modes=1, arch="mlp"))
    >>> sorted(net.forward_heads({"pulse": __import__("torch").zeros(3, 12),
    ...                           "history": __import__("torch").zeros(3, 4)}))
    ['mode_logits', 'retrieve_logits', 'value']
"""

from policies.rl.export import LearnedTrigger, export_policy, load_policy
from policies.rl.net import PolicyNet, PolicySpec

__all__ = ["LearnedTrigger", "PolicyNet", "PolicySpec", "export_policy", "load_policy"]
