"""Same seed, same numbers on any x86 machine: importing envs pins the CPU kernels to AVX2 (envs.core.repro)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = ("import torch, envs\n"
        "x = torch.randn(8, 8); (x @ x).sum().item()\n"
        "import os; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'))\n")


def _run(**env) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR",
                                                               "KAIROS_NATIVE_KERNELS")}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120,
                         env={**base, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_import_envs_pins_the_kernels_even_after_torch():
    native = _run(KAIROS_NATIVE_KERNELS="1")
    if native[0] == "DEFAULT":
        pytest.skip("this CPU has no AVX2: the kernels are the baseline ones anyway")
    assert _run() == ["AVX2", "AVX2"]
    assert _run(ATEN_CPU_CAPABILITY="default") == ["DEFAULT", "AVX2"]  # the user's own setting wins
    assert native[1] == "None"
