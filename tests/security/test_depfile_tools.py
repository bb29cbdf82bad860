"""The depfile read back by the real tools: a hostile file name a spec reads either reaches Make and
Ninja as exactly that file (touching it rebuilds; nothing runs), or is refused (exit 2) before
anything is written.

A depfile is Makefile text: ``x.npy;touch${IFS}pwned;true`` named in one would make the next ``make``
run ``touch pwned``. Each name here is a ``file:`` input of the spec's run verifier.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.cli import main

#: names Make, Ninja and CMake read back as written once escaped: a space, '#', ':', '$'
ESCAPED = ["a b.npy", "a#b.npy", "a:b.npy", "a$b.npy", "a$$IFS.npy", "modèle.npy"]
#: names with no escape that all of them share: refused
HOSTILE = [
    "x.npy;touch${IFS}pwned;true",
    "a$(touch pwned).npy",
    "x.npy|touch pwned",
    "x=touch pwned.npy",
    "x%.npy",
    "x*.npy",
    "x?.npy",
    "x[1].npy",
    "lib(x).npy",
    "x`touch pwned`.npy",
    "x\\.npy",
    "x'.npy",
    'x".npy',
    "x&.npy",
]


def tool(name: str) -> str | None:
    """The tool beside this Python (the test extra installs ninja there), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


MAKE, NINJA = tool("make"), tool("ninja")


def relu_model() -> onnx.ModelProto:
    return graph_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 4])])


def project(folder: Path, name: str) -> Path:
    """A repository whose spec reads ``name`` as a run case input."""
    (folder / ".git").mkdir(parents=True)
    onnx.save(relu_model(), folder / "m.onnx")
    np.save(folder / "x.npy", np.ones((1, 4), np.float32))
    os.rename(folder / "x.npy", folder / name)
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    text = (
        "patchspec: 1\nmodel: m.onnx\noutput: build/o.onnx\npatches: []\n"
        f'verify:\n  - run: {{cases: [{{inputs: {{x: {{file: "{quoted}"}}}}}}]}}\n'
    )
    return write_spec(folder, text)


def apply_in(folder: Path) -> int:
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return main(["-q", "apply", "spec.yaml", "--depfile", "o.d"])
    finally:
        os.chdir(cwd)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
@pytest.mark.parametrize("name", ESCAPED)
def test_make_reads_an_escaped_name_back_as_that_file(tmp_path: Path, name: str) -> None:
    project(tmp_path, name)
    assert apply_in(tmp_path) == 0
    (tmp_path / "Makefile").write_text("build/o.onnx:\n\ttouch build/o.onnx\n-include o.d\n")
    assert run([str(MAKE), "-q", "build/o.onnx"], tmp_path).returncode == 0  # up to date: every file was found
    time.sleep(0.01)
    later = time.time() + 5
    os.utime(tmp_path / name, (later, later))
    assert run([str(MAKE), "-q", "build/o.onnx"], tmp_path).returncode == 1  # the named file itself is the dependency
    assert run([str(MAKE), "build/o.onnx"], tmp_path).returncode == 0
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(NINJA is None, reason="ninja is not installed (the test extra installs it)")
@pytest.mark.parametrize("name", ESCAPED)
def test_ninja_reads_an_escaped_name_back_as_that_file(tmp_path: Path, name: str) -> None:
    project(tmp_path, name)
    (tmp_path / "build.ninja").write_text(
        f"rule patch\n  command = {sys.executable} -m patchspec -q apply spec.yaml --depfile o.d\n"
        "  depfile = o.d\n  deps = gcc\nbuild build/o.onnx: patch spec.yaml\n"
    )
    assert run([str(NINJA)], tmp_path).returncode == 0
    deps = run([str(NINJA), "-t", "deps", "build/o.onnx"], tmp_path).stdout
    assert f"    {name}\n" in deps, deps
    assert "no work to do" in run([str(NINJA)], tmp_path).stdout
    later = time.time() + 5
    os.utime(tmp_path / name, (later, later))
    assert "no work to do" not in run([str(NINJA), "-n"], tmp_path).stdout
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", HOSTILE)
def test_a_name_without_an_escape_is_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    project(tmp_path, name)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert apply_in(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no build/, no depfile
    if MAKE is not None:  # and a make that includes a depfile nobody wrote runs nothing
        (tmp_path / "Makefile").write_text("all:\n-include o.d\n")
        run([str(MAKE)], tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_an_input_models_data_file_with_a_semicolon_is_refused_for_the_depfile(tmp_path: Path) -> None:
    """The name comes from the model this time (its external data's location), not the spec."""
    from onnx import numpy_helper

    (tmp_path / ".git").mkdir()
    weight = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    model = graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 4])], [weight]
    )
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="w;touch pwned", size_threshold=0)
    write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: build/o.onnx\npatches: []\n")
    assert apply_in(tmp_path) == 2
    assert not (tmp_path / "build").exists() and not (tmp_path / "o.d").exists()
