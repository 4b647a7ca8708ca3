"""The layer order of the packages, enforced (docs/design.md §2).

    envs.core   the foundation, every module under it: registry, config, io, repro, plugins, data, the micro-world's
        ↑       world files (config, kb, corpus, questions, labels, tokenizer, artifact)
    agents      reasoners, signals, retrievers, query formulation, segmentation, compression
        ↑
    envs        the env, its config, observation tables, tasks, costs, trajectory cache, micro-world build
        ↑
    policies    triggers, RLModules, probes, QueryGen
        ↑
    train       REINFORCE, curricula, warm start, the `python -m train` entry
        ↑
    eval        benchmarks, statistics, reports, the `kairos` CLI
        ↑
    kairos      the public facade (Pipeline, the registries, `kairos answer`): it may import every layer, and
                nothing imports it (the CLI names its command by a registry string)

A module may import its own layer and the ones below it, never one above; no import cycle between modules. Every
import statement counts, lazy ones inside functions included. A lower layer names a plug-in of a higher one only by
a registry string (``Registry.register_path("name", "package.module:Attr")``, as Gymnasium's ``entry_point``).

``python tests/test_layers.py`` prints the counts (upward edges, cycles, edges per package pair).
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "agents", "policies", "train", "eval", "kairos")
LAYERS = ("envs.core", "agents", "envs", "policies", "train", "eval", "kairos")
#: the foundation layer is one folder: every module whose dotted name starts with it
FOUNDATION = "envs.core"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def layer_of(mod: str) -> str:
    if mod == FOUNDATION or mod.startswith(FOUNDATION + "."):
        return FOUNDATION
    return mod.split(".")[0]


def import_edges(mods: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(importer, imported module, line) for every import of a Kairos module, lazy ones included."""
    edges = []
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                # `from pkg import sub` imports the submodule when there is one
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                while t and t not in mods:  # `import a.b.c` where only a.b is ours, etc.
                    t = t.rpartition(".")[0]
                if t and t.split(".")[0] in PACKAGES and t != mod:
                    edges.append((mod, t, node.lineno))
    return sorted(set(edges))


def upward_edges(edges) -> list[tuple[str, str, int]]:
    return [(a, b, ln) for a, b, ln in edges if LAYERS.index(layer_of(b)) > LAYERS.index(layer_of(a))]


def cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = collections.defaultdict(set)
    for a, b, _ in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert all(layer_of(m) in LAYERS for m in modules())
    assert FOUNDATION in modules(), f"the foundation package {FOUNDATION} is missing"
    assert layer_of("envs.core.data.loaders") == FOUNDATION and layer_of("envs.corex") == "envs"


def test_the_only_arrow_back_up_is_envs_to_agents():
    """``envs`` sits above ``agents`` although the foundation under ``agents`` lives in ``envs/core`` (the package
    names are fixed by our users): that is the one import of a folder from a folder beneath it in the tree."""
    pairs = {(layer_of(a), layer_of(b)) for a, b, _ in import_edges(modules())}
    assert not any(a == FOUNDATION and b != FOUNDATION for a, b in pairs), "envs.core imports a layer above it"


def test_importing_the_foundation_imports_no_gymnasium_or_torch():
    import subprocess

    code = ("import sys, envs.core.registry, envs.core.config, envs.core.data, envs.core.microworld.kb; "
            "print(sorted(m for m in ('gymnasium', 'torch', 'agents') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_importing_envs_then_gymnasium_registers_the_ids():
    import subprocess

    code = ("import envs, sys; assert 'gymnasium' not in sys.modules; import gymnasium as gym; "
            "print(sorted(k for k in gym.registry if k.startswith('kairos/')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "kairos/MicroWorld-v0" in out.stdout and "kairos/RetrievalTiming-v0" in out.stdout, out.stdout + out.stderr


def test_nothing_imports_the_facade():
    """``kairos`` is the top: a facade over the other packages, never a dependency of them."""
    into = sorted({a for a, b, _ in import_edges(modules()) if layer_of(b) == "kairos" and layer_of(a) != "kairos"})
    assert not into, f"modules importing the kairos facade: {into}"
    assert "kairos.pipeline" in modules()


def test_importing_kairos_is_fast():
    """``import kairos`` imports no torch, gymnasium or ray (its names load on first use)."""
    import subprocess

    code = ("import sys, kairos; print(sorted(m for m in ('torch', 'gymnasium', 'ray', 'envs', 'eval') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_no_upward_import():
    up = upward_edges(import_edges(modules()))
    assert not up, "imports against the layer order (importer:line -> imported):\n" + "\n".join(
        f"  {a}:{ln} ({layer_of(a)}) -> {b} ({layer_of(b)})" for a, b, ln in up)


def test_no_import_cycle():
    found = cycles(import_edges(modules()))
    assert not found, "import cycles:\n" + "\n".join("  " + " <-> ".join(c) for c in found)


def test_the_scanner_sees_lazy_and_relative_imports(tmp_path):
    # the scanner itself must not pass vacuously: a lazy upward import inside a function is found
    src = ("def f():\n    from eval.stats import bootstrap\n    return bootstrap\n")
    path = ROOT / "envs" / "_layer_probe.py"
    try:
        path.write_text(src)
        up = upward_edges(import_edges(modules()))
        assert ("envs._layer_probe", "eval.stats", 2) in up
    finally:
        path.unlink()


if __name__ == "__main__":
    e = import_edges(modules())
    pairs = collections.Counter((layer_of(a), layer_of(b)) for a, b, _ in e if layer_of(a) != layer_of(b))
    print(f"{len(modules())} modules, {len(e)} import edges")
    for (a, b), n in sorted(pairs.items(), key=lambda kv: (LAYERS.index(kv[0][0]), LAYERS.index(kv[0][1]))):
        arrow = "UP" if LAYERS.index(b) > LAYERS.index(a) else ""
        print(f"  {a:10s} -> {b:10s} {n:4d} {arrow}")
    up = upward_edges(e)
    print(f"upward edges: {len(up)}")
    for a, b, ln in up:
        print(f"  {a}:{ln} -> {b}")
    cyc = cycles(e)
    print(f"cycles: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
