"""No module grows into a room that holds several jobs (issue 27): 450 lines at most.

The limit covers what ships and what a contributor reads to learn the code: the package, the
built-in plugins and the benchmarks. Tests are long lists of cases and are left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MOST_LINES = 450
ROOMS = ("patchspec", "plugins", "benchmarks", "examples/plugin-acme/patchspec_acme")


@pytest.mark.parametrize("room", ROOMS)
def test_no_module_is_over_450_lines(room):
    sizes = {
        str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((REPO / room).rglob("*.py"))
        # not a virtual environment a benchmark made (.peers-venv), nor a build's copy
        if not any(part.startswith(".") or part == "build" for part in path.relative_to(REPO).parts)
    }
    assert sizes, f"{room} holds no module: the test would pass on nothing"
    too_big = {path: lines for path, lines in sizes.items() if lines > MOST_LINES}
    assert not too_big, (
        f"split these by job (at most {MOST_LINES} lines each): { {k: too_big[k] for k in sorted(too_big)[:10]} }"
    )
