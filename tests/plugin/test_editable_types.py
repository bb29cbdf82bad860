"""A plugin author who installs patchspec editable from a checkout type-checks against it as
docs/plugins.md says: setuptools' default editable install is an import hook, which mypy does not
follow (``Cannot find implementation or library stub for module named "patchspec"``); the install
the page gives (``editable_mode=strict``) is one mypy reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

PLUGIN = REPO / "tests" / "fixtures" / "plugins" / "docs_plugin.py"


def checkout(folder: Path) -> Path:
    """A copy of what an editable install of patchspec reads."""
    folder.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / name, folder / name)
    for name in ("patchspec", "plugins"):
        shutil.copytree(REPO / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def venv_with_editable_patchspec(tmp_path: Path, *options: str) -> Path:
    """A venv with patchspec editable (no dependencies: those come from this run's site-packages, as a
    plain path line, which mypy reads)."""
    source = checkout(tmp_path / "patchspec")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    python = tmp_path / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(source)]
    subprocess.run([*install, *options], check=True, timeout=300, capture_output=True)
    return python


def mypy(python: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable", str(python)]
    return subprocess.run([*command, str(PLUGIN)], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.skipif(sys.platform == "win32", reason="the venv's layout is POSIX's here")
def test_mypy_reads_an_editable_patchspec_installed_as_the_docs_say(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (the lint extra)")
    python = venv_with_editable_patchspec(tmp_path, "--config-settings", "editable_mode=strict")
    done = mypy(python, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout
