"""A dynamic batch the export still bakes in (issue 34, item 6): the model declares ``N`` and runs at
batch 4, but keeps one sample there: a Slice ``x[:1]``, a Resize's ``sizes``, an LSTM whose starting
state is ``ConstantOfShape([1, 1, H])`` (TorchScript's ``torch.zeros(1, x.size(0), H)``). set_batch
decides their constants; a model that does carry the batch is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec import api
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

H = 16


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def sliced() -> onnx.ModelProto:
    bounds = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("st", 0), ("en", 1), ("ax", 0))]
    node = helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"], name="first_rows")
    return graph_model([node], [tensor_info("x", ["N", 6])], [tensor_info("y", ["N", 6])], bounds)


def resized() -> onnx.ModelProto:
    sizes = numpy_helper.from_array(np.array([1, 3, 8, 8], np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest", name="up")
    return graph_model([node], [tensor_info("x", ["N", 3, 4, 4])], [tensor_info("y", ["N", 3, 8, 8])], [sizes])


def lstm_from_zeros() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((1, 4 * H, 8)) * 0.3).astype(np.float32), "W"),
        numpy_helper.from_array((rng.standard_normal((1, 4 * H, H)) * 0.3).astype(np.float32), "R"),
        numpy_helper.from_array(np.array([1, 1, H], np.int64), "state_shape"),
    ]
    zero = numpy_helper.from_array(np.array([0], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["state_shape"], ["h0"], value=zero, name="zeros"),
        helper.make_node("Transpose", ["x"], ["steps"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["steps", "W", "R", "", "", "h0", "h0"], ["", "y", ""], hidden_size=H, name="rnn"),
    ]
    return graph_model(nodes, [tensor_info("x", ["N", 5, 8])], [tensor_info("y", [1, "N", H])], inits)


def per_sample(model: onnx.ModelProto, x: np.ndarray, axis: int = 0) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[i : i + 1]})[0] for i in range(len(x))], axis=axis)


def batched(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    ("make", "shape", "axis", "rewritten"),
    [
        (sliced, (4, 6), 0, "Slice 'first_rows': element 0 is the batch (1 -> end)"),
        (resized, (4, 3, 4, 4), 0, "Resize 'up': element 0 is the batch (1 -> 4)"),
        (lstm_from_zeros, (4, 5, 8), 1, "ConstantOfShape 'zeros': element 1 is the batch (1 -> 4)"),
    ],
    ids=["slice", "resize", "lstm_state"],
)
def test_a_batch_baked_behind_a_dynamic_declaration_is_rewritten(make, shape, axis, rewritten) -> None:
    original = make()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    try:  # as exported: one sample at batch 4, or onnxruntime refuses the state
        assert batched(original, x).shape != per_sample(original, x, axis).shape
    except ort.capi.onnxruntime_pybind11_state.Fail as refused:
        assert "initial_h must have shape" in str(refused)
    patched = make()
    result = set_batch(patched, size=4)
    assert "1 shape constant rewritten" in result.summary, result.summary
    assert any(rewritten in line for line in result.details), result.details
    np.testing.assert_allclose(batched(patched, x), per_sample(original, x, axis), rtol=1e-5, atol=1e-6)


def test_a_recurrent_state_at_a_symbolic_batch_is_undecided_not_written(tmp_path, run_cli) -> None:
    onnx.save(lstm_from_zeros(), str(tmp_path / "m.onnx"))
    (tmp_path / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size: batch}\n"
    )
    result = run_cli("apply", tmp_path / "spec.yaml", "--no-verify", cwd=tmp_path)
    assert result.exit_code == 4, result.output
    assert "ConstantOfShape 'zeros' makes the starting state initial_h of LSTM 'rnn'" in result.output
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_that_carries_the_batch_is_left_as_exported() -> None:
    """Expand's [1, 4, 8] lets the batch through (broadcast): nothing to rewrite."""
    shape = numpy_helper.from_array(np.array([1, 4, 8], np.int64), "shape")
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    model = graph_model([node], [tensor_info("x", ["N", 4, 1])], [tensor_info("y", ["N", 4, 8])], [shape])
    trace = api.trace_batch(model, [("x", 0)], 1, 4, decide=False)
    assert api.not_as_exported(model, trace, {"N"}) == []
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary


def test_not_as_exported_names_the_output_and_the_state() -> None:
    for make, said in ((sliced, "output 'y' declares 'N' on axis 0"), (lstm_from_zeros, "LSTM 'rnn' starts from")):
        model = make()
        trace = api.trace_batch(model, [("x", 0)], 1, 4, decide=False)
        assert any(said in line for line in api.not_as_exported(model, trace, {"N"})), make.__name__


def test_a_shared_sequence_first_shape_is_rewritten_for_every_reshape_that_reads_it() -> None:
    """torch dynamo's attention: Concat(Shape(x)[1:2], [1], [4]) reused by two Reshapes; the batch is
    the 1. The model declares a dynamic batch and runs at batch 1 only."""
    pieces = [const_i64("one", [1]), const_i64("four", [4]), const_i64("start", [0]), const_i64("end", [1])]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),  # [S, N, 4]: sequence first
        helper.make_node("Shape", ["t"], ["shape_t"]),
        helper.make_node("Slice", ["shape_t", "start", "end"], ["seq_len"]),
        helper.make_node("Concat", ["seq_len", "one", "four"], ["target"], axis=0, name="shared_shape"),
        helper.make_node("Reshape", ["t", "target"], ["a"], name="view_a"),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Reshape", ["r", "target"], ["b"], name="view_b"),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0, 2]),
    ]
    model = graph_model(nodes, [tensor_info("x", ["N", 6, 4])], [tensor_info("y", ["N", 6, 4])], pieces)
    original = graph_model(nodes, [tensor_info("x", ["N", 6, 4])], [tensor_info("y", ["N", 6, 4])], pieces)
    result = set_batch(model, size=4)
    assert any("view_a" in line and "view_b" in line for line in result.details), result.details
    x = np.random.default_rng(2).standard_normal((4, 6, 4)).astype(np.float32)
    np.testing.assert_allclose(batched(model, x), per_sample(original, x), rtol=1e-6)


def const_i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)
