"""Native code only by the caller's opt-in (issue 25, item 3).

A custom-op library's constructor runs when onnxruntime loads it. The library built here writes a
marker file from its constructor, so each test sees whether any code of the spec's ran at all. A
spec that names one is refused with exit 2, naming the setting, unless the person running patchspec
passed ``--allow-native-code`` or the project's pyproject.toml allows it; the spec cannot allow it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import helper

from helpers import graph_model, tensor_info, write_spec

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]

CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *marker = getenv("PATCHSPEC_TEST_MARKER");
    FILE *f = fopen(marker ? marker : "/dev/null", "w");
    if (f) { fputs("native code ran", f); fclose(f); }
}
void *RegisterCustomOps(void *options, const void *api) { return NULL; }  /* registers nothing: success */
"""


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared library whose constructor writes the file ``$PATCHSPEC_TEST_MARKER``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the planted library")
    source = tmp_path / "planted.c"
    source.write_text(CONSTRUCTOR)
    built = tmp_path / "build" / "libplanted.so"
    built.parent.mkdir()
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    monkeypatch.setenv("PATCHSPEC_TEST_MARKER", str(tmp_path / "marker"))
    return built


def repo(tmp_path: Path, library_path: str) -> Path:
    """``tmp/repo`` (a git repository) with a model and a spec whose run verifier names ``library_path``."""
    folder = tmp_path / "repo"
    (folder / ".git").mkdir(parents=True)
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 4])]
    )
    onnx.save(model, folder / "m.onnx")
    verify = f"verify:\n  - run:\n      custom_op_libraries: ['{library_path}']\n"
    spec: Path = write_spec(folder, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n" + verify)
    return spec


def ran(tmp_path: Path) -> bool:
    return (tmp_path / "marker").exists()


def test_a_library_in_the_repository_is_refused_without_the_opt_in(
    tmp_path: Path, library: Path, run_cli: RunCli
) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert "--allow-native-code" in result.output and "allow-native-code = true" in result.output
    assert "libs/libplanted.so" in result.output
    assert not ran(tmp_path) and not (spec.parent / "out").exists()


@pytest.mark.parametrize("where", ["parent", "absolute"])
def test_a_library_outside_by_dotdot_or_absolute_path_is_refused_too(
    tmp_path: Path, library: Path, run_cli: RunCli, where: str
) -> None:
    path = "../build/libplanted.so" if where == "parent" else str(library)
    spec = repo(tmp_path, path)
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert not ran(tmp_path)


def test_the_opt_in_on_the_command_line_loads_it(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    result = run_cli("apply", spec, "--allow-native-code")
    assert result.exit_code == 0, result.output
    assert ran(tmp_path)


def test_the_opt_in_does_not_outlive_its_run(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    assert run_cli("apply", spec, "--allow-native-code").exit_code == 0
    (tmp_path / "marker").unlink()
    result = run_cli("apply", spec, "--force")  # the same process, without the option
    assert result.exit_code == 2, result.output
    assert not ran(tmp_path)


def test_the_project_settings_allow_it(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    (spec.parent / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.patchspec]\nallow-native-code = true\n')
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert ran(tmp_path)


def test_settings_below_the_project_root_do_not_count(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    """A pull request may add a pyproject.toml beside its spec: only the root's counts."""
    folder = repo(tmp_path, "libs/libplanted.so").parent
    nested = folder / "models"
    nested.mkdir()
    (nested / "libs").mkdir()
    shutil.copy(library, nested / "libs" / "libplanted.so")
    shutil.copy(folder / "m.onnx", nested / "m.onnx")
    spec = shutil.copy(folder / "spec.yaml", nested / "spec.yaml")
    (nested / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert not ran(tmp_path)


def test_the_spec_cannot_allow_it_itself(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    spec.write_text(spec.read_text().replace("  - run:\n", "  - run:\n      allow_native_code: true\n"))
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert "allow_native_code" in result.output
    assert not ran(tmp_path)


def test_verify_takes_the_opt_in_too(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    assert run_cli("apply", spec, "--allow-native-code").exit_code == 0
    (tmp_path / "marker").unlink()
    refused = run_cli("verify", spec)
    assert refused.exit_code == 2, refused.output
    assert "--allow-native-code" in refused.output and not ran(tmp_path)
    assert run_cli("verify", spec, "--allow-native-code").exit_code == 0
    assert ran(tmp_path)


def test_the_settings_of_the_root_the_caller_names_count(tmp_path: Path, library: Path, run_cli: RunCli) -> None:
    """--root names the project root: its pyproject.toml is the project's settings."""
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    (tmp_path / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")
    assert run_cli("apply", spec).exit_code == 2  # the repository's own root has no such setting
    result = run_cli("apply", spec, "--root", tmp_path)
    assert result.exit_code == 0, result.output
    assert ran(tmp_path)


def test_a_git_file_and_settings_a_pull_request_adds_in_a_subfolder_do_not_count(
    tmp_path: Path, library: Path, run_cli: RunCli
) -> None:
    """Issue 32: a `.git` file (as a submodule has) in a subfolder made that subfolder a root of its
    own, and the pyproject.toml beside it allowed native code. The outermost repository decides."""
    folder = repo(tmp_path, "libs/libplanted.so").parent
    nested = folder / "models"
    (nested / "libs").mkdir(parents=True)
    shutil.copy(library, nested / "libs" / "libplanted.so")
    shutil.copy(folder / "m.onnx", nested / "m.onnx")
    spec = shutil.copy(folder / "spec.yaml", nested / "spec.yaml")
    (nested / ".git").write_text("gitdir: ../.git/modules/models\n")
    (nested / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert str(folder / "pyproject.toml") in result.output  # the hint names the file that does count
    assert not ran(tmp_path)
    (folder / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")
    assert run_cli("apply", spec).exit_code == 0
    assert ran(tmp_path)


def test_the_callers_environment_allows_it(
    tmp_path: Path, library: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = repo(tmp_path, "libs/libplanted.so")
    (spec.parent / "libs").mkdir()
    shutil.copy(library, spec.parent / "libs" / "libplanted.so")
    monkeypatch.setenv("PATCHSPEC_ALLOW_NATIVE_CODE", "1")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert ran(tmp_path)
