"""How much the CPU kernels' instruction set moves the micro-world LM's numbers (docs/results.md, issue 21).

Greedy chains for dev questions 0-199 of the shipped world; prints the texts' hash, the summed token logprobs and
hidden states, and the generation CPU time. Run it under different kernel settings and compare, e.g.::

    KAIROS_NATIVE_KERNELS=1 ATEN_CPU_CAPABILITY=avx512 .venv/bin/python scripts/kernel_drift.py
    KAIROS_NATIVE_KERNELS=1 ATEN_CPU_CAPABILITY=avx2   .venv/bin/python scripts/kernel_drift.py
    KAIROS_NATIVE_KERNELS=1 ATEN_CPU_CAPABILITY=default .venv/bin/python scripts/kernel_drift.py
    .venv/bin/python scripts/kernel_drift.py            # what Kairos pins by default (AVX2, MKL_CBWR=AVX2)
"""

import hashlib
import time

import numpy as np
import torch

from agents.reasoners.base import run_chains
from agents.reasoners.micro import MicroReasoner
from envs.core.microworld.artifact import load_artifact

torch.set_num_threads(1)
world = load_artifact(None)
reasoner = MicroReasoner(world)
questions = [q.text for q in world.questions["dev"][:200]]
t0 = time.process_time()
chains = run_chains(reasoner, questions, max_steps=6)
cpu = time.process_time() - t0
steps = [s for c in chains for s in c]
texts = hashlib.sha256("\n".join(s.text for s in steps).encode()).hexdigest()[:12]
lp = sum(float(np.sum(s.logprobs, dtype=np.float64)) for s in steps if s.logprobs is not None)
hs = sum(float(np.sum(s.hidden_mean, dtype=np.float64)) for s in steps if s.hidden_mean is not None)
print(f"kernels={torch.backends.cpu.get_cpu_capability()} texts={texts} logprob_sum={lp:.10f} "
      f"hidden_sum={hs:.8f} cpu={cpu:.1f}s")
