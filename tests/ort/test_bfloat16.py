"""bfloat16 inputs and outputs run, are compared, and a wrong patch of them still fails: onnxruntime's
Python API takes and gives no bfloat16 array, so such sessions run through OrtValues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.ort.bfloat16 import BFLOAT16, run_ort_values, uses_bfloat16

pytestmark = pytest.mark.skipif(
    BFLOAT16.name != "bfloat16", reason="this onnx stores bfloat16 as uint16 (no ml_dtypes)"
)

RunCli = Any


def bf16_model(path: Path, swap: bool = False, batch: int | str = "N") -> Path:
    """x bfloat16 [N, 4] -> y = 2x, bfloat16; ``swap`` exchanges samples 0 and 1 (a wrong patch)."""
    two = onnx.numpy_helper.from_array(np.array(2, np.float32), "two")
    nodes = [
        helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "two"], ["m"]),
        helper.make_node("Cast", ["m"], ["z" if swap else "y"], to=TensorProto.BFLOAT16),
    ]
    inits = [two]
    if swap:
        inits.append(onnx.numpy_helper.from_array(np.array([1, 0, 2, 3], np.int64), "order"))
        nodes.append(helper.make_node("Gather", ["z", "order"], ["y"], axis=0))
    ins = [tensor_info("x", [batch, 4], TensorProto.BFLOAT16)]
    onnx.save(graph_model(nodes, ins, [tensor_info("y", [batch, 4], TensorProto.BFLOAT16)], inits), str(path))
    return path


def spec(folder: Path) -> Path:
    return write_spec(
        folder,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\nverify:\n  - run:\n"
        "      cases:\n        - inputs: {x: [4, 4]}\n      compare: {against: original, split_batch: true}\n",
    )


def test_a_bfloat16_model_is_verified_per_sample(tmp_path: Path, run_cli: RunCli) -> None:
    bf16_model(tmp_path / "m.onnx")
    result = run_cli("apply", spec(tmp_path))
    assert result.exit_code == 0, result.output
    assert "bfloat16 outputs" in result.stdout and (tmp_path / "out" / "m.onnx").is_file()


def test_a_wrong_bfloat16_output_still_fails(tmp_path: Path, run_cli: RunCli) -> None:
    bf16_model(tmp_path / "m.onnx")
    bf16_model(tmp_path / "wrong.onnx", swap=True, batch=4)
    result = run_cli("verify", spec(tmp_path), "--output", str(tmp_path / "wrong.onnx"))
    assert result.exit_code == 1, result.output
    assert "y: FAIL" in result.output


def test_values_cross_onnxruntime_bit_for_bit(tmp_path: Path) -> None:
    session = ort.InferenceSession(str(bf16_model(tmp_path / "m.onnx")), providers=["CPUExecutionProvider"])
    assert uses_bfloat16(session)
    x = np.array([[1.5, -2.0, 3.25, 0.0], [8.0, 0.5, -0.125, 7.0]], np.float32).astype(BFLOAT16)
    (y,) = run_ort_values(session, None, {"x": x}, ort.RunOptions())
    assert y.dtype == BFLOAT16
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32) * 2)
