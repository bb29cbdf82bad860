"""Fixtures only: the real PP-OCR models and a CLI runner. Helpers are in helpers.py."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ppocr_model_paths
from patchspec.testing import run_cli as kit_run_cli
from simulated_provider import SimulatedGpu, install


@pytest.fixture(scope="session")
def ppocr_models() -> dict[str, Path]:
    models = ppocr_model_paths()
    if len(models) != 3:
        pytest.skip("PP-OCR models not installed: pip install --no-deps rapidocr-onnxruntime==1.4.4 (make test does)")
    return models


@pytest.fixture
def models_outside_the_project(monkeypatch):
    """Real models live in site-packages or the corpus, outside any test's project: the runs name the
    project root (``$PATCHSPEC_ROOT``, as ``--root``), as a user with such a layout would."""
    monkeypatch.setenv("PATCHSPEC_ROOT", "/")


@pytest.fixture(autouse=True)
def _ppocr_models_outside_the_project(request):
    if "ppocr_models" in request.fixturenames:  # the PP-OCR models are in site-packages
        request.getfixturevalue("models_outside_the_project")


@pytest.fixture
def simulated_cuda(monkeypatch) -> SimulatedGpu:
    """CUDAExecutionProvider, simulated on the CPU with TF32's error (tests/simulated_provider.py)."""
    return install(monkeypatch)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def run_cli():
    """Run ``patchspec ARGS`` in-process from ``cwd`` with the test kit's harness (the one a plugin
    author uses); returns exit code, stdout and stderr, and checks every model an apply wrote loads."""

    def run(*args: str, cwd: Path | None = None) -> CliResult:
        code, stdout, stderr = kit_run_cli([str(a) for a in args], cwd=cwd)
        if code == 0:
            _load_written_models(stdout, cwd or Path(os.getcwd()))
        return CliResult(code, stdout, stderr)

    return run


def _load_written_models(stdout: str, cwd: Path) -> None:
    """Every model an apply wrote loads in the onnxruntime the suite runs on (issue 9: onnxruntime 1.32
    refuses a whole model over one annotation without an element type, which onnx's checker passes)."""
    import onnxruntime as ort

    for line in stdout.splitlines():
        if not line.startswith("wrote "):
            continue
        path = Path(line[len("wrote ") :].split(" (")[0].strip())
        path = path if path.is_absolute() else cwd / path
        if path.suffix != ".onnx" or not path.is_file():
            continue
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:
            if "custom op" in str(error).lower() or "No opset import for domain" in str(error):
                continue  # a test's own custom-op model: onnxruntime has no kernel for it by design
            if "NOT_IMPLEMENTED" in str(error):
                continue  # an old op version this onnxruntime has no kernel for: the original fails the same way
            pytest.fail(f"patchspec wrote {path}, which onnxruntime {ort.__version__} refuses: {error}")
