"""The hatchling build hook applies specs while a wheel is built and ships the patched models."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import onnx
import pytest

from patchspec.shapes.annotations import read_dims
from patchspec.testing import make_model

pytest.importorskip("hatchling", reason="hatchling is not installed (the test extra brings it)")

PYPROJECT = """\
[build-system]
requires = ["hatchling", "patchspec"]
build-backend = "hatchling.build"

[project]
name = "detector-models"
version = "1.0"

[tool.hatch.build.targets.wheel]
packages = ["detector_models"]

[tool.hatch.build.hooks.patchspec]
specs = ["specs/b4.yaml"]
"""


@pytest.mark.slow
def test_a_wheel_built_with_the_hook_ships_the_patched_model(tmp_path):
    project = tmp_path / "project"
    (project / "detector_models").mkdir(parents=True)
    (project / "detector_models" / "__init__.py").write_text("")
    (project / "specs").mkdir()
    onnx.save(make_model({"x": (1, 3)}), project / "detector.onnx")
    (project / "specs" / "b4.yaml").write_text(
        "patchspec: 1\nmodel: ../detector.onnx\noutput: ../detector_models/b4.onnx\npatches: [{set_batch: 4}]\n"
    )
    (project / ".gitignore").write_text("detector_models/b4.onnx\n")  # a build artifact, shipped anyway
    (project / "pyproject.toml").write_text(PYPROJECT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "detector_models/b4.onnx" in archive.namelist()
        shipped = onnx.load_from_string(archive.read("detector_models/b4.onnx"))
    assert read_dims(shipped.graph.input[0])[0] == 4


@pytest.mark.slow
def test_a_spec_that_fails_fails_the_build_with_patchspecs_message(tmp_path):
    project = tmp_path / "project"
    (project / "detector_models").mkdir(parents=True)
    (project / "detector_models" / "__init__.py").write_text("")
    (project / "specs").mkdir()
    (project / "specs" / "b4.yaml").write_text(
        "patchspec: 1\nmodel: ../missing.onnx\noutput: ../detector_models/b4.onnx\npatches: []\n"
    )
    (project / "pyproject.toml").write_text(PYPROJECT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "missing.onnx" in done.stdout + done.stderr
    assert not list(tmp_path.glob("dist/*.whl"))  # the build stopped: no wheel
