"""Measure the shape of the package: per folder the longest function and the widest signature, the modules over
500 lines, and how often the integer check `isinstance(x, bool) or not isinstance(x, int)` is written out.

    python scripts/measure_house.py [ROOT ...]      (default: raise_eval models)

Prints one block per package folder. Used for docs/architecture.md's before/after figures (read from the code, not
run); `duplicates --repo raise_eval` gives the repeated-code pairs.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

INT_CHECK = re.compile(r"isinstance\([^)]*,\s*bool\)\s*or\s+not\s+isinstance\([^)]*,\s*int\)")


def _functions(tree: ast.AST):
    """(qualified name, node) of every function and method, nested ones included."""
    stack = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                stack.append((name + ".", child))
            elif isinstance(child, ast.ClassDef):
                stack.append((f"{prefix}{child.name}.", child))
            else:
                stack.append((prefix, child))


def _width(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")]) + (a.vararg is not None) + (a.kwarg is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="*", default=["raise_eval", "models"])
    args = parser.parse_args()
    long_modules = []
    int_checks = defaultdict(int)
    for root in args.roots:
        packages = defaultdict(list)
        for path in sorted(Path(root).rglob("*.py")):
            packages[path.parent].append(path)
        for package, files in sorted(packages.items()):
            longest = (0, "")
            widest = (0, "")
            for path in files:
                text = path.read_text(encoding="utf-8")
                lines = text.count("\n")
                if lines > 500:
                    long_modules.append((lines, str(path)))
                n = len(INT_CHECK.findall(text))
                if n:
                    int_checks[str(path)] += n
                for name, fn in _functions(ast.parse(text)):
                    length = fn.end_lineno - fn.lineno + 1
                    longest = max(longest, (length, f"{path.name}:{name}"))
                    widest = max(widest, (_width(fn), f"{path.name}:{name}"))
            print(f"{package}/ ({len(files)} modules)")
            print(f"  longest function: {longest[1]} ({longest[0]} lines)")
            print(f"  widest signature: {widest[1]} ({widest[0]} parameters)")
    print("modules over 500 lines:", ", ".join(f"{p} ({n})" for n, p in sorted(long_modules, reverse=True)) or "none")
    total = sum(int_checks.values())
    print(f"`isinstance(x, bool) or not isinstance(x, int)` written out {total} times in {len(int_checks)} files")


if __name__ == "__main__":
    main()
