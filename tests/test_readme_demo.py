"""The README's demo transcript is what `patchspec apply specs/scrfd_b32.yaml` prints, run as `make
demo` runs it: the model generated, the spec applied from the project's root. Figures that depend on
the machine (onnx's version, the float rounding of the largest difference, the providers present)
are compared by their form."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from helpers import REPO

README = REPO / "README.md"


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


def normal(line: str) -> str:
    line = re.sub(r"onnx \d+\.\d+\.\d+", "onnx VERSION", line)
    line = re.sub(r"max abs error [0-9.e+-]+", "max abs error FIGURE", line)
    line = re.sub(r"2 case\(s\) on .*? \(optimizations", "2 case(s) on PROVIDERS (optimizations", line)
    line = re.sub(r"; [A-Za-z]+ExecutionProvider: [^;]*", "", line)  # an accelerator's math, where one is present
    return re.sub(r"; skipped [A-Za-z, ]+$", "", line)


def test_the_readme_demo_prints_what_the_readme_shows(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "scrfd_b32.yaml", tmp_path / "specs")
    generator = [sys.executable, str(REPO / "examples" / "scrfd" / "make_scrfd.py"), "models/scrfd_like.onnx"]
    subprocess.run(generator, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [sys.executable, "-m", "patchspec", "apply", "specs/scrfd_b32.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [normal(line) for line in done.stdout.splitlines() if line.strip()]
    assert printed == [normal(line) for line in transcript()], "\n".join(printed)
