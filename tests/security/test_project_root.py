"""Where the project root is: the nearest ``.git``; without one (a source tarball, a Docker build that
leaves .git out), the outermost folder whose pyproject.toml has a ``[tool.patchspec]`` table; else
the spec's folder. The layout is the one a user has: ``specs/`` beside ``models/``."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from helpers import graph_model, tensor_info
from patchspec.spec.confine import project_root

SPEC = "patchspec: 1\nmodel: ../models/m.onnx\noutput: ../build/m.onnx\npatches:\n  - set_batch: 2\n"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """``project/specs/m.yaml`` naming ``../models/m.onnx``, with no .git anywhere above it."""
    monkeypatch.delenv("PATCHSPEC_ROOT", raising=False)
    folder = tmp_path / "project"
    (folder / "models").mkdir(parents=True)
    (folder / "specs").mkdir()
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 4])]
    )
    onnx.save(model, folder / "models" / "m.onnx")
    (folder / "specs" / "m.yaml").write_text(SPEC)
    assert not any((p / ".git").exists() for p in folder.parents)
    return folder


def test_without_git_or_marker_the_root_is_the_specs_folder(project, run_cli):
    result = run_cli("apply", project / "specs" / "m.yaml", "--no-verify")
    assert result.exit_code == 2, result.output
    assert "outside the project root" in result.stderr
    assert not (project / "build").exists()


def test_a_pyproject_with_a_patchspec_table_marks_the_root_without_git(project, run_cli):
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.patchspec]\n')
    result = run_cli("apply", project / "specs" / "m.yaml", "--no-verify")
    assert result.exit_code == 0, result.output
    assert (project / "build" / "m.onnx").is_file()


def test_a_pyproject_without_the_table_marks_nothing(project):
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.ruff]\nline-length = 99\n')
    assert project_root(project / "specs" / "m.yaml") == project / "specs"


def test_the_outermost_marked_folder_wins_so_a_nested_file_cannot_narrow_or_move_it(project):
    (project / "pyproject.toml").write_text("[tool.patchspec]\n")
    (project / "specs" / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")
    assert project_root(project / "specs" / "m.yaml") == project


def test_git_wins_over_any_pyproject(project):
    (project / "pyproject.toml").write_text("[tool.patchspec]\n")
    (project / "specs" / ".git").mkdir()
    assert project_root(project / "specs" / "m.yaml") == project / "specs"


def test_a_pyproject_that_is_a_folder_or_unreadable_marks_nothing(project):
    (project / "pyproject.toml").mkdir()
    (project / "specs" / "pyproject.toml").write_bytes(b"\xff\xfe[tool.patchspec]")
    assert project_root(project / "specs" / "m.yaml") == project / "specs"
