"""Same seed, same numbers on any x86 machine: the CPU kernels' instruction set is pinned to AVX2.

PyTorch and MKL pick their kernels by the CPU they run on (AVX-512 here, AVX2 or older elsewhere), and the kernels
round differently: on this machine the micro-world LM's per-token logprobs summed over 200 chains differ by ~1e-4
between the AVX-512, AVX2 and baseline paths (the greedy texts agree), and a trained policy inherits the drift —
the reason one seed gave the main job a learned − FLARE difference of −0.009 on one machine and −0.015 on another.
Importing ``envs`` (which every Kairos entry point does first) therefore sets, unless already set,

* ``ATEN_CPU_CAPABILITY=avx2`` — PyTorch's vectorised kernels use their AVX2 version on every CPU that has it;
* ``MKL_CBWR=AVX2`` — MKL's conditional numerical reproducibility: the same BLAS results on every CPU with AVX2.

Both are read when the libraries first compute, so they work even if ``torch`` was imported earlier but has not
run. The cost is speed where AVX-512 exists (≈ 10 % on micro-world generation). ``KAIROS_NATIVE_KERNELS=1`` keeps
the native kernels (fastest, reproducible only on the same CPU model). Ray workers started by a Kairos process
inherit the setting; for a cluster started by ``ray start``, export the two variables on every node.
"""

from __future__ import annotations

import os

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


def pin_cpu_kernels() -> dict[str, str]:
    """Set the pinned kernel variables (never overriding ones the user set); returns what is in effect."""
    if os.environ.get("KAIROS_NATIVE_KERNELS") not in (None, "", "0"):
        return {}
    for k, v in PINNED.items():
        os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in PINNED}
