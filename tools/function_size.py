"""Fail on any function longer than 50 lines, from its ``def`` (decorators excluded) to its last line.

ruff has no rule for a function's length, so ``make lint`` runs this script. A function that is
too long is named by file:line, with its length and the limit::

    patchspec/commands/derive.py:41: derive_command is 68 lines long (limit 50): split it into steps

Usage: ``python tools/function_size.py [PATH ...]``. By default it reads what ships and what plugin
authors copy: ``patchspec/``, ``plugins/``, ``examples/plugin-acme/`` and ``tools/`` (model builders
under ``examples/``, ``benchmarks/`` and ``tests/`` are scripts and fixtures, not read).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

LIMIT = 50
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("patchspec", "plugins", "examples/plugin-acme", "tools")
#: functions being shortened elsewhere (issue 36, item 1): file -> function names; the lead removes
#: an entry once its function is under the limit on main


def long_functions(path: Path, limit: int = LIMIT) -> Iterator[tuple[int, str, int]]:
    """(line of the ``def``, qualified name, length) of every function in ``path`` over ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    yield from _walk(tree, "", limit)


def _walk(node: ast.AST, prefix: str, limit: int) -> Iterator[tuple[int, str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            length = (child.end_lineno or child.lineno) - child.lineno + 1
            if length > limit:
                yield child.lineno, name, length
            yield from _walk(child, f"{name}.", limit)
        elif isinstance(child, ast.ClassDef):
            yield from _walk(child, f"{prefix}{child.name}.", limit)
        else:
            yield from _walk(child, prefix, limit)


def problems(paths: list[Path], limit: int = LIMIT) -> list[str]:
    """One message per function over ``limit`` lines in the ``.py`` files under ``paths``."""
    found = []
    for path in sorted(file for given in paths for file in ([given] if given.is_file() else given.rglob("*.py"))):
        shown = path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else str(path)
        for line, name, length in long_functions(path, limit):
            found.append(f"{shown}:{line}: {name} is {length} lines long (limit {limit}): split it into steps")
    return found


def main(argv: list[str]) -> int:
    paths = [Path(arg) for arg in argv] or [ROOT / name for name in DEFAULT_PATHS]
    found = problems(paths)
    for message in found:
        print(message)
    if found:
        print(f"{len(found)} function(s) over {LIMIT} lines (tools/function_size.py)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
