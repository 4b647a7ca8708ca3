"""The foundation layer of Kairos: what every other layer builds on, and nothing that builds on it.

* :mod:`envs.core.registry` — the one ``Registry`` type behind every extension point;
* :mod:`envs.core.config` — typed dataclass configs (``ConfigBase``, ``ConfigError``, YAML loading);
* :mod:`envs.core.io` — crash-safe writes (atomic files, JSON), hashing;
* :mod:`envs.core.repro` — CPU kernels pinned for cross-machine reproducibility (applied on import);
* :mod:`envs.core.data` — QA dataset loaders, corpora and their value types;
* :mod:`envs.core.microworld` — the micro-world's world files (knowledge base, questions, labels, tokenizer,
  the shipped artifact).

Layer order (``tests/test_layers.py``): ``envs.core`` → ``agents`` → ``envs`` → ``policies`` → ``train`` → ``eval``.
Importing ``envs.core`` imports neither gymnasium nor torch.
"""

from envs.core.repro import pin_cpu_kernels as _pin

_pin()  # same seed, same numbers on any x86 machine (see envs.core.repro); before anything computes
