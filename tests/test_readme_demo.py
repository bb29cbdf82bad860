"""The README's demo transcript is what `make demo` prints once .venv is built: the two commands make
echoes, each followed by what it prints. What they print is the transcript of the same two commands
in examples/scrfd/README.md, which tests/docs/test_doc_commands.py runs and checks; figures that
depend on the machine (versions, float rounding, the providers present) are compared by their form."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "tests" / "docs"))
from doc_blocks import blocks, normal

README = REPO / "README.md"
EXAMPLE = REPO / "examples" / "scrfd" / "README.md"


def transcript() -> list[str]:
    """The lines the README shows after `$ make demo`, continuation lines joined to the line they wrap."""
    block = re.search(r"```\n\$ make demo\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert block, "README.md has no `$ make demo` block"
    lines: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith(" " * 30) and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.rstrip())
    return lines


def echoed_commands() -> list[str]:
    """The commands `make demo` runs when .venv is up to date, as make echoes them."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.product", "demo"],  # run from make test: no -w lines
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_readme_demo_prints_what_make_demo_prints():
    (example,) = [block for block in blocks(EXAMPLE) if block.runs and len(block.commands) == 2]
    expected = []
    for echoed, command in zip(echoed_commands(), example.commands, strict=True):
        program, *arguments = echoed.split()  # .venv/bin/python: `python` in the example, .venv/bin on PATH
        assert [program.rsplit("/", 1)[-1], *arguments] == command.line.split("#")[0].split(), (echoed, command.line)
        expected += [echoed, *command.shown]
    assert [normal(line) for line in transcript()] == [normal(line) for line in expected], "\n".join(expected)
