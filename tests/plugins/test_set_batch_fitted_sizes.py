"""An export that declares an axis symbolic and runs at some sizes of it only (RivaGAN's ``wmBits``
runs at 32; PP-OCRv4's recognizer height from 16 to 80). set_batch evaluates other symbolic dims at
128, 256, ...; there these models stop, so nothing after that node was decided and ``--no-verify``
refused them (undecided output). Now set_batch moves that dim to sizes the export evaluates at, says so
under -v, and decides the constants after it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info, write_spec
from patchspec.shapes.annotations import read_dims


def marker() -> onnx.ModelProto:
    """image [batch, 8] times bits [batch, nbits] (nbits must be 8), then a Reshape baked at batch 1;
    bits also come back as they are, declared [batch, nbits]."""
    nodes = [
        helper.make_node("MatMul", ["image", "weight"], ["features"]),
        helper.make_node("Mul", ["features", "bits"], ["marked"], name="embed"),
        helper.make_node("Reshape", ["marked", "rows"], ["y"], name="rows_of_4"),
        helper.make_node("Identity", ["bits"], ["echo"]),
    ]
    constants = [
        numpy_helper.from_array(np.eye(8, dtype=np.float32) * 2, "weight"),
        numpy_helper.from_array(np.array([1, 2, 4], np.int64), "rows"),
    ]
    inputs = [tensor_info("image", ["batch", 8]), tensor_info("bits", ["batch", "nbits"])]
    outputs = [tensor_info("y", ["batch", 2, 4]), tensor_info("echo", ["batch", "nbits"])]
    return graph_model(nodes, inputs, outputs, constants)


def positions() -> onnx.ModelProto:
    """x [batch, length] plus the first ``length`` rows of a table of 64 positions (it runs at any
    length up to 64, not at 128), then a Reshape baked at batch 1."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
        helper.make_node("Slice", ["table", "zero", "shape"], ["used"]),
        helper.make_node("Add", ["x", "used"], ["placed"], name="place"),
        helper.make_node("Reshape", ["placed", "pairs"], ["y"], name="pairs_of"),
    ]
    constants = [
        numpy_helper.from_array(np.arange(64, dtype=np.float32), "table"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1, -1, 2], np.int64), "pairs"),
    ]
    outputs = [tensor_info("y", ["batch", "half", 2])]
    return graph_model(nodes, [tensor_info("x", ["batch", "length"])], outputs, constants)


def _batched(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """set_batch 4 on ``model`` (in place): the original, and the line that says which dim was moved;
    nothing may be undecided, and the one Reshape constant is rewritten."""
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result = set_batch(model, size=4)
    assert "undecided" not in result.summary and "1 shape constant rewritten" in result.summary, result.summary
    return original, next(line for line in result.details if "declared symbolic" in line)


def test_a_dim_that_runs_at_one_size_is_evaluated_there_and_keeps_its_name() -> None:
    model = marker()
    original, note = _batched(model)
    assert "bits[1] ('nbits')" in note and "Mul 'embed'" in note and "evaluated at 8 only" in note, note
    assert read_dims(model.graph.output[1]) == [4, "nbits"]  # the 8 it was evaluated at is not declared
    feeds = {"image": rand(4, 8), "bits": rand(4, 8, seed=1)}
    for got, want in zip(run(model, feeds), per_sample(original, feeds, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_dim_that_runs_below_a_size_is_evaluated_at_two_sizes_that_run() -> None:
    model = positions()
    original, note = _batched(model)
    assert "x[1] ('length')" in note and "evaluated at 64 and 48" in note, note
    feeds = {"x": rand(4, 10)}
    (got,) = run(model, feeds)
    np.testing.assert_allclose(got, per_sample(original, feeds, feeds)[0], rtol=1e-6)


@pytest.mark.parametrize("size", ["4", "N"])
def test_without_verification_the_model_is_written(tmp_path, run_cli, size: str) -> None:
    """Before, the output after the Mul was undecided and --no-verify wrote nothing (exit 4)."""
    onnx.save(marker(), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size}\n")
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "is declared symbolic, but at" in result.output, result.output
    written = onnx.load(tmp_path / "out" / "m.onnx")
    batch = 4 if size == "4" else 3
    feeds = {"image": rand(batch, 8), "bits": rand(batch, 8, seed=1)}
    np.testing.assert_allclose(run(written, feeds)[0], per_sample(marker(), feeds, feeds)[0], rtol=1e-6)


def test_a_stop_where_no_inputs_disagree_tries_no_other_size(monkeypatch) -> None:
    """A custom op (no schema, so no shape) stops the evaluation too; no size of another dim would help,
    so no further evaluation of the model is spent (each walks the whole graph)."""
    from patchspec.shapes.batch import fitting

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Calibrate", ["r"], ["y"], domain="acme")]
    model = graph_model(nodes, [tensor_info("x", ["batch", "length"])], [tensor_info("y", None)])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    evaluated = []
    stop = fitting._stop
    monkeypatch.setattr(fitting, "_stop", lambda m, shapes: evaluated.append(shapes) or stop(m, shapes))
    assert fitting.fit_dim(model, {"x": [1, 128]}, {"length": [("x", 1)]}, shift=64) is None
    assert len(evaluated) == 1
    assert fitting.fit_dim(marker(), {"image": [1, 8], "bits": [1, 384]}, {"nbits": [("bits", 1)]}, shift=64) == (
        fitting.FittedDim("nbits", (("bits", 1),), 384, 8, 8, "Mul 'embed' ([1, 8], [1, 384])")
    )


def pooled_height() -> onnx.ModelProto:
    """PP-OCRv2's recognizer, in short: x [N, 3, h, w] pooled by 32 on the height, which a Squeeze then
    drops (it must be 1 there: h runs from 32 to 63 only), then a Reshape baked at batch 1."""
    nodes = [
        helper.make_node("AveragePool", ["x"], ["pooled"], kernel_shape=[32, 1], strides=[32, 1]),
        helper.make_node("Squeeze", ["pooled", "axis2"], ["rows"], name="drop_height"),
        helper.make_node("Reshape", ["rows", "flat"], ["y"], name="flatten"),
    ]
    constants = [
        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat"),
    ]
    return graph_model(nodes, [tensor_info("x", ["N", 3, "h", "w"])], [tensor_info("y", ["N", None])], constants)


def test_a_stop_at_a_squeeze_tries_smaller_sizes_where_no_inputs_disagree() -> None:
    """Before, nothing disagreed at the Squeeze, so no other height was tried and --no-verify refused."""
    model = pooled_height()
    original, note = _batched(model)
    assert "x[2] ('h') is declared symbolic, but at 128" in note and "Squeeze 'drop_height'" in note, note
    assert "evaluated at 32 and 48" in note, note
    feeds = {"x": rand(4, 3, 32, 10)}
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, feeds)[0], rtol=1e-6)
