"""Functions fit on a screen: ``tools/function_size.py`` (run by ``make lint``) fails on one over 50 lines."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "function_size.py"


def _tool():
    spec = importlib.util.spec_from_file_location("function_size", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(name: str, lines: int) -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    return f"def {name}():\n{body}    return 0\n"


def test_a_function_over_the_limit_is_named_by_file_line_and_length(tmp_path):
    source = tmp_path / "long.py"
    method = "class Box:\n    @staticmethod\n" + "".join(f"    {line}\n" for line in _function("fold", 52).splitlines())
    source.write_text(_function("fits", 50) + "\n\n" + _function("too_long", 51) + "\n\n" + method)
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        f"{source}:53: too_long is 51 lines long (limit 50): split it into steps",
        f"{source}:108: Box.fold is 52 lines long (limit 50): split it into steps",
    ], lines


def test_no_function_in_what_ships_is_over_the_limit():
    found = _tool().problems([REPO / name for name in _tool().DEFAULT_PATHS])
    assert not found, "\n".join(found)
