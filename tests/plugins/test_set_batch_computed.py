"""A symbolic batch no constant can say (issue 34): a shape that already holds a ``-1`` with the batch
elsewhere (sequence-first attention: ``[T*B, 16]`` back to ``[-1, 1, 16]``). The element is computed
from the batch input's dim at run time instead of being left undecided."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

GENERATED = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "generated" / "torch"


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def sequence_first(opset: int = 17) -> onnx.ModelProto:
    """src [time, 1, 16] -> [time * 1, 16] -> (x 2) -> [-1, 1, 16]: the 1 of the second shape is the batch."""
    nodes = [
        helper.make_node("Reshape", ["src", "flat"], ["rows"], name="flatten"),
        helper.make_node("Mul", ["rows", "two"], ["scaled"], name="scale"),
        helper.make_node("Reshape", ["scaled", "back"], ["out"], name="unflatten"),
    ]
    constants = [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("flat", [-1, 16]), ("back", [-1, 1, 16]))
    ]
    constants.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    inputs, outputs = [tensor_info("src", ["time", 1, 16])], [tensor_info("out", ["time", 1, 16])]
    return graph_model(nodes, inputs, outputs, constants, opset=opset)


def per_sample(model: onnx.ModelProto, src: np.ndarray) -> np.ndarray:
    return np.concatenate([run(model, {"src": src[:, i : i + 1]}) for i in range(src.shape[1])], axis=1)


def test_the_batch_beside_a_minus_one_is_computed_from_the_batch_input() -> None:
    original, patched = sequence_first(), sequence_first()
    result = set_batch(patched, size="N", inputs={"src": 1})
    assert "1 shape constant rewritten" in result.summary, result.summary
    assert any("shape [-1, dim(src, 1), 16]" in line for line in result.details), result.details
    for time, batch in ((4, 3), (9, 2)):
        src = np.random.default_rng(time).standard_normal((time, batch, 16)).astype(np.float32)
        np.testing.assert_array_equal(run(patched, {"src": src}), per_sample(original, src))


def test_an_opset_without_computed_shapes_stays_undecided() -> None:
    result = set_batch(sequence_first(opset=9), size="N", inputs={"src": 1})
    assert any("a symbolic batch there needs a computed shape" in line for line in result.details), result.details


def test_a_dynamo_sequence_first_encoder_runs_at_any_batch_and_time(tmp_path) -> None:
    """torch dynamo's TransformerEncoderLayer(batch_first=False) exported at batch 1 with time dynamic:
    eight Reshapes hold the batch beside a -1 (it was refused at a symbolic batch)."""
    shutil.copy(GENERATED / "seqfirst_encoder_dynamo_dyntime.onnx", tmp_path / "m.onnx")
    original = onnx.load(str(tmp_path / "m.onnx"))
    patched = onnx.load(str(tmp_path / "m.onnx"))
    result = set_batch(patched, size="N", inputs={"src": 1})
    assert "undecided" not in result.summary, result.summary
    for time, batch in ((6, 3), (11, 2)):
        src = np.random.default_rng(batch).standard_normal((time, batch, 16)).astype(np.float32)
        np.testing.assert_allclose(run(patched, {"src": src}), per_sample(original, src), rtol=1e-5, atol=1e-5)


def rows_then_back() -> onnx.ModelProto:
    """x [1, seq, 12] -> rows [seq, 12] -> Reshape to Concat([1], Shape(x)[1:2], [-1]): the batch is
    element 0 beside the sequence, which moves with x's axis 1."""
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["rows"], name="flatten"),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "one", "two"], ["seq"]),
        helper.make_node("Concat", ["batch_one", "seq", "minus_one"], ["back"], axis=0),
        helper.make_node("Reshape", ["rows", "back"], ["y"], name="unflatten"),
    ]
    values = {"flat": [-1, 12], "one": [1], "two": [2], "batch_one": [1], "minus_one": [-1]}
    constants = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in values.items()]
    return graph_model(nodes, [tensor_info("x", [1, "seq", 12])], [tensor_info("y", [1, "seq", 12])], constants)


def test_an_element_that_follows_another_input_dim_is_computed_from_it() -> None:
    original, patched = rows_then_back(), rows_then_back()
    result = set_batch(patched, size="N")
    assert any("shape [dim(x, 0), dim(x, 1), -1]" in line for line in result.details), result.details
    x = np.random.default_rng(3).standard_normal((3, 7, 12)).astype(np.float32)
    expected = np.concatenate([run(original, {"x": x[i : i + 1]}) for i in range(3)])
    np.testing.assert_array_equal(run(patched, {"x": x}), expected)
