"""The hatchling build hook applies specs while a wheel is built and ships the patched models: the
outputs only (none of patchspec's bookkeeping), the same bytes wherever and whenever it is built."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import onnx
import pytest

from helpers import REPO
from patchspec.shapes.annotations import read_dims
from patchspec.testing import make_model

pytest.importorskip("hatchling", reason="hatchling is not installed (the test extra brings it)")

PYPROJECT = """\
[build-system]
requires = [{requires}]
build-backend = "hatchling.build"

[project]
name = "detector-models"
version = "1.0"

[tool.hatch.build.targets.wheel]
packages = ["detector_models"]

[tool.hatch.build.hooks.patchspec]
specs = ["specs/b4.yaml"]
"""
SPEC = "patchspec: 1\nmodel: ../detector.onnx\noutput: ../detector_models/b4.onnx\npatches: [{set_batch: 4}]\n"
SHIPPED = {
    "detector_models/__init__.py",
    "detector_models/b4.onnx",
    "detector_models-1.0.dist-info/METADATA",
    "detector_models-1.0.dist-info/WHEEL",
    "detector_models-1.0.dist-info/RECORD",
}
EPOCH = 1700000000  # 2023-11-14 22:13:20 UTC


def make_project(folder: Path, spec: str = SPEC, requires: str = '"hatchling", "patchspec"') -> Path:
    """A clean checkout of a project that ships a patched model: nothing built yet."""
    (folder / ".git").mkdir(parents=True)  # a checkout: its top is the project root
    (folder / "detector_models").mkdir()
    (folder / "detector_models" / "__init__.py").write_text("")
    (folder / "specs").mkdir()
    onnx.save(make_model({"x": (1, 3)}), folder / "detector.onnx")
    (folder / "specs" / "b4.yaml").write_text(spec)
    (folder / ".gitignore").write_text("detector_models/b4.onnx\n")  # a build artifact, shipped anyway
    (folder / "pyproject.toml").write_text(PYPROJECT.format(requires=requires))
    return folder


def pip_wheel(project: Path, dist: Path, *options: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)}
    command = [sys.executable, "-m", "pip", "wheel", *options, "--no-deps", "-q", "-w", str(dist), str(project)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done


def build(project: Path, dist: Path) -> Path:
    """The wheel pip builds in an environment that has patchspec and hatchling (no isolation)."""
    pip_wheel(project, dist, "--no-build-isolation")
    (wheel,) = dist.glob("*.whl")
    return wheel


def test_the_hook_leaves_patchspecs_own_files_out_of_every_target():
    from patchspec.hatch_hook import leave_out_bookkeeping

    class Config:  # hatchling's BuilderConfig, as far as the hook touches it
        def include_path(self, relative_path: str, *, explicit: bool = False, is_package: bool = True) -> bool:
            return not relative_path.endswith(".tmp")

    config = Config()
    leave_out_bookkeeping(config)
    ours = (".patchspec.lock", "pkg/.patchspec.lock", "pkg/.b4.onnx.patchspec-cache.json", "pkg/.patchspec-x1/b4.onnx")
    for path in ours:
        assert not config.include_path(path, explicit=True), path  # not even from a force-included folder
    for theirs in ("pkg/b4.onnx", "pkg/b4.onnx.data", "pkg/__init__.py", "patchspec.lock"):
        assert config.include_path(theirs, is_package=False), theirs
    assert not config.include_path("pkg/notes.tmp")  # the project's own choices still hold


@pytest.mark.slow
def test_a_wheel_ships_the_patched_model_and_nothing_of_patchspecs_bookkeeping(tmp_path):
    project = make_project(tmp_path / "project")
    pyproject = project / "pyproject.toml"  # the output's folder as artifacts: git-ignored files ship too
    pyproject.write_text(
        pyproject.read_text().replace(
            'packages = ["detector_models"]', 'packages = ["detector_models"]\nartifacts = ["detector_models/"]'
        )
    )
    wheel = build(project, tmp_path / "dist")
    bookkeeping = [p.name for p in (project / "detector_models").iterdir() if p.name.startswith(".")]
    assert ".patchspec.lock" in bookkeeping and ".b4.onnx.patchspec-cache.json" in bookkeeping  # beside it, but
    with zipfile.ZipFile(wheel) as archive:
        assert set(archive.namelist()) == SHIPPED  # not in the wheel
        shipped = onnx.load_from_string(archive.read("detector_models/b4.onnx"))
        assert str(tmp_path).encode() not in archive.read("detector_models/b4.onnx")
    assert read_dims(shipped.graph.input[0])[0] == 4


@pytest.mark.slow
def test_wheels_built_at_two_paths_at_two_times_are_the_same_bytes(tmp_path):
    first = build(make_project(tmp_path / "a" / "project"), tmp_path / "dist-a")
    time.sleep(1.1)  # a zip records seconds (in pairs): a later build, other mtimes and inodes
    second = build(make_project(tmp_path / "elsewhere" / "b" / "project"), tmp_path / "dist-b")
    assert first.read_bytes() == second.read_bytes()
    again = build(tmp_path / "a" / "project", tmp_path / "dist-again")  # up to date: the no-op
    assert again.read_bytes() == first.read_bytes()
    with zipfile.ZipFile(first) as archive:  # hatchling's times come from SOURCE_DATE_EPOCH
        assert {info.date_time for info in archive.infolist()} == {time.gmtime(EPOCH)[:6]}


@pytest.mark.slow
def test_the_sdist_holds_the_sources_and_its_wheel_is_the_same_bytes(tmp_path):
    """`python -m build` builds the sdist, then the wheel from it (no .git there)."""
    project = make_project(tmp_path / "project")
    wheel = build(project, tmp_path / "dist")  # leaves the output and patchspec's files in the project
    code = "import sys; from hatchling.build import build_sdist; print(build_sdist(sys.argv[1]))"
    sdist = tmp_path / "sdist"
    done = subprocess.run([sys.executable, "-c", code, str(sdist)], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shutil.unpack_archive(next(sdist.glob("*.tar.gz")), tmp_path / "unpacked")
    unpacked = tmp_path / "unpacked" / "detector_models-1.0"
    held = {p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*") if p.is_file()}
    assert held == {
        ".gitignore",
        "PKG-INFO",
        "pyproject.toml",
        "detector.onnx",
        "specs/b4.yaml",
        "detector_models/__init__.py",
    }
    assert build(unpacked, tmp_path / "dist-from-sdist").read_bytes() == wheel.read_bytes()


@pytest.mark.slow
def test_the_documented_build_requires_a_patchspec_wheel_and_builds_in_isolation(tmp_path):
    """As docs/build-systems.md shows: `requires` names patchspec's wheel and pip makes the isolated
    build environment (from the package index pip is configured with; skipped where it has none)."""
    source = tmp_path / "patchspec-source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheels"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (patchspec_wheel,) = (tmp_path / "wheels").glob("patchspec-*.whl")
    hatchling = importlib.metadata.version("hatchling")  # the same backend as below: the same bytes
    requires = f'"hatchling=={hatchling}", "patchspec @ {patchspec_wheel.as_uri()}"'
    isolated = make_project(tmp_path / "isolated", requires=requires)
    done = pip_wheel(isolated, tmp_path / "dist-isolated", check=False)
    if "No matching distribution found" in done.stderr or "Could not find a version" in done.stderr:
        pytest.skip(f"pip cannot install the build requirements here (offline): {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist-isolated").glob("*.whl")
    assert wheel.read_bytes() == build(make_project(tmp_path / "here"), tmp_path / "dist-here").read_bytes()


@pytest.mark.slow
def test_a_spec_that_fails_fails_the_build_with_patchspecs_message(tmp_path):
    project = make_project(tmp_path / "project", spec=SPEC.replace("../detector.onnx", "../missing.onnx"))
    done = pip_wheel(project, tmp_path / "dist", "--no-build-isolation", check=False)
    assert done.returncode != 0 and "missing.onnx" in done.stdout + done.stderr
    assert not list(tmp_path.glob("dist/*.whl"))  # the build stopped: no wheel
