"""Kairos environments, tasks, costs, the trajectory cache and the micro-world task.

Importing this package registers the Gymnasium ids (the env modules themselves load lazily):

* ``kairos/RetrievalTiming-v0`` — configure everything through ``config=``;
* ``kairos/MicroWorld-v0`` — the micro-world preset (micro-world LM, BM25 over its facts; ColBERT with
  ``retriever: colbert`` and a PLAID ``index_path``);
* ``kairos/HotpotQA-v0`` — SmolLM2-135M-Instruct over HotpotQA dev with BM25 over its paragraphs.

The foundation every layer uses (registry, configs, IO, data loaders, the micro-world's world files) lives in
:mod:`envs.core`; importing it must not import gymnasium, so the ids are registered when gymnasium is imported —
at once if it already is, else right after its own import finishes (a one-shot import hook).
"""

import envs.core  # noqa: F401  (pins the CPU kernels first: envs.core.repro)
from envs.gym_ids import register_when_gymnasium_loads as _register

_register()
