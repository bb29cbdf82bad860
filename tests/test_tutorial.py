"""docs/from-model-to-spec.md runs as written: every `$ command` of its console blocks, in order, in a
scratch folder that sees the repository's examples and test fixtures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO

TUTORIAL = REPO / "docs" / "from-model-to-spec.md"


def commands() -> list[tuple[str, int]]:
    """(command, expected exit code) for each `$ ` line of the console blocks; `# exits N` sets the code."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                command, _, comment = line[2:].partition("  # ")
                code = re.fullmatch(r"exits (\d+)", comment.strip())
                found.append((command.strip(), int(code.group(1)) if code else 0))
    return found


def test_the_tutorial_has_the_four_cases():
    text = TUTORIAL.read_text(encoding="utf-8")
    listed = [c for c, _ in commands()]
    assert len(re.findall(r"^## \d\. ", text, flags=re.M)) == 4
    for verb in ("patchspec init", "patchspec derive", "patchspec inspect", "--suggest", "patchspec apply"):
        assert any(verb in c for c in listed), verb


def test_the_tutorial_runs_as_written(tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "tests").symlink_to(REPO / "tests")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for command, expected in commands():
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == expected, f"$ {command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
    assert (tmp_path / "build" / "model.dynamic.onnx.data").is_file()  # one place for outputs: the root's build/
    assert not (tmp_path / "tutorial" / "specs" / "build").exists()
