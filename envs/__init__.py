"""Kairos environments, tasks, data, costs and the micro-world.

Importing this package registers the Gymnasium ids (the env modules themselves load lazily):

* ``kairos/RetrievalTiming-v0`` — configure everything through ``config=``;
* ``kairos/MicroWorld-v0`` — the micro-world preset (micro-world LM, BM25 over its facts; ColBERT with
  ``retriever: colbert`` and a PLAID ``index_path``);
* ``kairos/HotpotQA-v0`` — SmolLM2-135M-Instruct over HotpotQA dev with BM25 over its paragraphs.
"""

from envs.repro import pin_cpu_kernels as _pin

_pin()  # same seed, same numbers on any x86 machine (see envs.repro); before anything computes

import gymnasium as _gym  # noqa: E402

for _id, _kwargs in (
    ("kairos/RetrievalTiming-v0", {}),
    ("kairos/MicroWorld-v0", {"preset": "microworld"}),
    ("kairos/HotpotQA-v0", {"preset": "hotpotqa"}),
):
    if _id not in _gym.registry:
        _gym.register(id=_id, entry_point="envs.registration:make_env", kwargs=_kwargs,
                      disable_env_checker=True)
