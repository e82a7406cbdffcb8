"""Import cycles and layering breaches between raise-eval's modules, read from the source with `ast` (nothing is
imported).

    python scripts/import_cycles.py

Every `import` and `from ... import` is counted, at module level and inside functions alike (a function-level import
hides a cycle from Python's loader, not from the design). `from pkg import name` is an edge to `pkg.name` when that is
a module, else to `pkg` (its `__init__`). models/ is read as `raise_eval.models` (setup.py's package_dir). Prints each
cycle (a strongly connected component of more than one module) with the edges inside it, then the layering rules of
docs/architecture.md that are broken; exits 1 when there is either.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# docs/architecture.md: "The algorithm core (annealing, schedules, exact, estimators, kernels, paths) imports
# nothing above it."
CORE = ("annealing", "step_programs", "schedules", "exact", "exact_mixed", "estimators", "kernels", "paths")
ABOVE_CORE = (
    "evaluation",
    "certification",
    "bidirectional",
    "trajectory",
    "io",
    "render",
    "cli",
    "integrations",
    "runtime",
)
# models/__init__.py: "May import torch, numpy and raise_eval.models itself only." These are the imports of the rest of
# raise_eval that models/ must not make; the test names which are still allowed.
MODELS_FORBIDDEN = ("io", "estimators", "native")

Graph = dict[str, set[str]]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for raise_eval/ and models/ (as raise_eval.models)."""
    modules = {}
    for base, package in ((root / "raise_eval", "raise_eval"), (root / "models", "raise_eval.models")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package] + parts)] = path
    return modules


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imported(node: ast.AST, module: str, path: Path, known: set[str]) -> Iterable[str]:
    """The known modules one import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if not isinstance(node, ast.ImportFrom):
        return
    if node.level:
        base = _package_of(module, path)
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    for alias in node.names:
        candidate = f"{source}.{alias.name}"
        yield candidate if candidate in known else source


def _resolve(name: str, known: set[str]) -> str:
    """`import a.b.c` of a name that is not a module (an attribute path) -> its longest module prefix."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def import_graph(root: Path = ROOT) -> Graph:
    """module -> the raise_eval modules it imports anywhere in its source (itself excluded)."""
    files = module_files(root)
    known = set(files)
    graph: Graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for node in ast.walk(tree):
            for name in _imported(node, module, path, known):
                resolved = _resolve(name, known)
                if resolved and resolved != module:
                    targets.add(resolved)
        graph[module] = targets
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each sorted, the
    list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layering_breaches(graph: Graph) -> list[tuple[str, str, str]]:
    """(rule, importer, imported) for every import against docs/architecture.md's layering, sorted."""
    breaches = []
    for module, targets in graph.items():
        for target in targets:
            if _is_in(module, "raise_eval.models"):
                for name in MODELS_FORBIDDEN:
                    if _is_in(target, f"raise_eval.{name}"):
                        breaches.append((f"models/ imports raise_eval.{name}", module, target))
            elif any(_is_in(module, f"raise_eval.{name}") for name in CORE):
                for name in ABOVE_CORE:
                    if _is_in(target, f"raise_eval.{name}"):
                        breaches.append((f"the core imports raise_eval.{name}", module, target))
    return sorted(breaches)


def describe(graph: Graph) -> str:
    found = cycles(graph)
    lines = [f"{len(found)} import cycles, {sum(len(c) for c in found)} modules"]
    for component in found:
        members = set(component)
        lines.append("cycle: " + ", ".join(component))
        for module in component:
            for target in sorted(graph[module] & members):
                lines.append(f"    {module} -> {target}")
    breaches = layering_breaches(graph)
    lines.append(f"{len(breaches)} layering breaches")
    for rule, module, target in breaches:
        lines.append(f"{rule}: {module} -> {target}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this script's)")
    args = parser.parse_args(argv)
    graph = import_graph(args.root)
    print(describe(graph))
    return 1 if cycles(graph) or layering_breaches(graph) else 0


if __name__ == "__main__":
    sys.exit(main())
