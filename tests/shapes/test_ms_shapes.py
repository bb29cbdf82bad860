"""Output shapes of onnxruntime's contrib ops (com.microsoft), which ONNX's inference does not know:
a statically quantized model (QOperator) ends in a QGemm, and set_batch lost the batch there."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.known import Known
from patchspec.shapes.ms_shapes import ms_outputs
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

QUANTIZED = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "generated" / "onnxruntime-quantization"
U8 = TensorProto.UINT8


def node(op: str, count: int, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, [f"i{k}" for k in range(count)], ["y"], domain="com.microsoft", **attrs)


def scalar(dtype: int = TensorProto.FLOAT) -> Known:
    return Known(dtype, ())


def shapes(found: list[Known] | None) -> list[tuple[int, object]] | None:
    return None if found is None else [(known.dtype, known.shape) for known in found]


def test_qgemm_is_a_gemm_typed_by_its_zero_point() -> None:
    inputs = [Known(U8, (4, 16)), scalar(), scalar(U8), Known(U8, (5, 16)), scalar(), scalar(U8), Known(6, (5,))]
    inputs += [scalar(), scalar(U8)]
    assert shapes(ms_outputs(node("QGemm", 9, transB=1), inputs)) == [(U8, (4, 5))]
    assert ms_outputs(node("QGemm", 9), inputs) is None  # [4, 16] x [5, 16] without transB: no shape


def test_quantized_broadcast_and_concat() -> None:
    add = [Known(U8, (4, 3, 8, 8)), scalar(), scalar(U8), Known(U8, (1, 3, 1, 1)), scalar(), scalar(U8)]
    assert shapes(ms_outputs(node("QLinearAdd", 8), [*add, scalar(), scalar(U8)])) == [(U8, (4, 3, 8, 8))]
    parts = [
        scalar(),
        scalar(U8),
        Known(U8, (4, 3, 8)),
        scalar(),
        scalar(U8),
        Known(U8, (4, 5, 8)),
        scalar(),
        scalar(U8),
    ]
    assert shapes(ms_outputs(node("QLinearConcat", 8, axis=1), parts)) == [(U8, (4, 8, 8))]


def test_an_unknown_contrib_op_says_nothing() -> None:
    assert ms_outputs(node("Attention", 3), [Known(1, (4, 8, 16))]) is None


def test_a_statically_quantized_model_rebatches_without_an_undecided_output(tmp_path) -> None:
    shutil.copy(QUANTIZED / "cnn_static_qlinear.onnx", tmp_path / "m.onnx")
    original, patched = onnx.load(str(tmp_path / "m.onnx")), onnx.load(str(tmp_path / "m.onnx"))
    params = {"size": 4}
    result = SetBatchPatch().apply(patched, params, patch_context("set_batch", params))
    assert "undecided" not in result.summary, result.summary
    assert read_dims(patched.graph.output[0]) == [4, 5]
    x = np.random.default_rng(0).standard_normal((4, *[int(d) for d in read_dims(original.graph.input[0])[1:]]))
    x = x.astype(np.float32)

    def run(model: onnx.ModelProto, feed: np.ndarray) -> np.ndarray:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, {original.graph.input[0].name: feed})[0]

    np.testing.assert_array_equal(run(patched, x), np.concatenate([run(original, x[i : i + 1]) for i in range(4)]))
