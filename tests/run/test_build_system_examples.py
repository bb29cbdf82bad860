"""examples/build-systems, run as a user would: make, ninja and cmake build the patched model, the
second run does nothing, and touching the input's data file (or deleting the output's) rebuilds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from patchspec.shapes.annotations import read_dims

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "build-systems"
BIN = Path(sys.executable).parent


def run(args, cwd) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(map(str, args))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture
def example(tmp_path):
    folder = tmp_path / "build-systems"
    shutil.copytree(
        EXAMPLE, folder, ignore=shutil.ignore_patterns("build", "models", "cmake-build", "bazel", "bazel-*")
    )
    (folder / ".git").mkdir()  # a checkout: its top is the project root (docs/security.md)
    run([sys.executable, "make_model.py"], folder)
    return folder


def touch_later(path: Path) -> None:
    later = time.time() + 5
    os.utime(path, (later, later))


def assert_batch_4(path: Path) -> None:
    assert read_dims(onnx.load(str(path), load_external_data=False).graph.input[0]) == [4, 64]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make(example):
    run(["make"], example)
    assert_batch_4(example / "build" / "add_b4.onnx")
    assert "Nothing to be done" in run(["make"], example) or "up to date" in run(["make"], example)
    touch_later(example / "models" / "add.onnx.data")
    assert "patchspec" in run(["make", "--trace"], example)
    # the touch changed no content: patchspec said up to date and dated the output, so the build settles
    assert subprocess.run(["make", "-q"], cwd=example, check=False).returncode == 0
    assert "patchspec" not in run(["make", "--trace"], example)
    (example / "build" / "add_b4.onnx.data").unlink()
    run(["make"], example)
    assert (example / "build" / "add_b4.onnx.data").is_file()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
def test_ninja(example):
    run(["ninja"], example)
    assert_batch_4(example / "build" / "add_b4.onnx")
    assert "no work to do" in run(["ninja"], example)
    touch_later(example / "models" / "add.onnx.data")
    assert "patchspec" in run(["ninja"], example)
    assert "no work to do" in run(["ninja"], example)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("ninja") is None, reason="cmake or ninja is not installed"
)
def test_cmake(example):
    build = example / "cmake-build"
    run(["cmake", "-G", "Ninja", "-S", str(example), "-B", str(build)], example)
    run(["cmake", "--build", str(build)], example)
    assert_batch_4(build / "add_b4.onnx")
    assert "no work to do" in run(["cmake", "--build", str(build)], example)
