"""An export with a dynamic batch traced above batch 1 (hummingbird: a Squeeze without axes that
drops the batch at 1 only). It runs from batch 2 up as it is: set_batch writes it and says where
batch 1 fails; before, it refused ("mixes samples") what runs right at every batch above 1, and until
2026-11-28 it still refused batch 2 itself (the one size it was judged from)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers import graph_model, traced_above_one_model, write_spec


def _run(path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize(("size", "batch"), [("4", 4), ("N", 3), ("2", 2)])
def test_a_model_that_runs_from_batch_2_is_batched_as_it_is(tmp_path, run_cli, size: str, batch: int) -> None:
    onnx.save(traced_above_one_model(), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size}\n")
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "does not run at batch 1: Transpose 'back' cannot take its inputs there ([5])" in result.output
    assert ("like the original, it does not run at batch 1" in result.output) == (size == "N"), result.output
    x = np.random.default_rng(0).normal(size=(batch, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "out" / "m.onnx", x), x.sum(axis=1), rtol=1e-6)


def test_a_per_sample_compare_runs_each_sample_twice_where_one_fails(tmp_path, run_cli) -> None:
    """init writes split_batch and says why; the run verifier gives the original each sample twice
    (before: init compared batch against batch, as the original fails at one sample)."""
    onnx.save(traced_above_one_model(), tmp_path / "m.onnx")
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(tmp_path / "spec.yaml"))
    assert init.exit_code == 0, init.output
    written = (tmp_path / "spec.yaml").read_text()
    assert "split_batch: true" in written and "so each sample runs twice" in written, written
    applied = run_cli("apply", str(tmp_path / "spec.yaml"))
    assert applied.exit_code == 0, applied.output
    assert "run ..................... passed" in applied.output, applied.output


def traced_at_one_model() -> onnx.ModelProto:
    """The same head traced at batch 1 (hummingbird's HistGradientBoosting from one row): the Transpose
    after the Squeeze became an Identity, so at batch 1 it runs and above 1 the Reshape reads the rows
    in the wrong order (samples mixed) with a dynamic batch declared all the same."""
    model = traced_above_one_model()
    back = next(node for node in model.graph.node if node.name == "back")
    back.op_type, back.name = "Identity", "kept"
    del back.attribute[:]
    shape = onnx.helper.make_tensor("rows_of_5", onnx.TensorProto.INT64, [2], [-1, 5])
    model.graph.initializer.append(shape)
    model.graph.node.insert(4, onnx.helper.make_node("Reshape", ["back", "rows_of_5"], ["rows"], name="rows"))
    model.graph.node[5].input[0] = "rows"
    return model


@pytest.mark.parametrize("size", ["4", "N"])
def test_a_model_that_runs_at_batch_1_and_mixes_samples_above_it_is_refused(tmp_path, run_cli, size: str) -> None:
    """Batch 2 is not taken as the reference when the model runs at batch 1: there the Squeeze shows
    that the Reshape reads other rows above it (before the reference was limited to models that fail
    at 1, it wrote this one)."""
    model = traced_at_one_model()
    onnx.checker.check_model(model)
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size}\n")
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 4, result.output
    assert "Reshape 'rows' runs, but mixes samples" in result.output, result.output


def test_indices_squeezed_at_batch_1_keep_their_samples_in_a_gather(tmp_path, run_cli) -> None:
    """classes[argmax(x)]: the indices lose the batch at batch 1 (a Squeeze without axes) but a Gather
    puts them in order, one per sample. Before, set_batch refused it as mixing samples."""
    nodes = [
        onnx.helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=1),
        onnx.helper.make_node("Squeeze", ["best"], ["index"]),
        onnx.helper.make_node("Gather", ["classes", "index"], ["y"], name="label", axis=0),
    ]
    classes = onnx.numpy_helper.from_array(np.array([10, 20, 30], np.int64), "classes")
    inputs = [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["sym", 3])]
    outputs = [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT64, ["sym"])]
    onnx.save(graph_model(nodes, inputs, outputs, [classes], opset=13), tmp_path / "m.onnx")
    for size, batch in (("4", 4), ("N", 3)):
        spec = write_spec(
            tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m{size}.onnx\npatches:\n  - set_batch: {size}\n"
        )
        result = run_cli("apply", spec, "--no-verify")
        assert result.exit_code == 0, result.output
        x = np.random.default_rng(0).normal(size=(batch, 3)).astype(np.float32)
        got = ort.InferenceSession(str(tmp_path / "out" / f"m{size}.onnx"), providers=["CPUExecutionProvider"]).run(
            None, {"x": x}
        )[0]
        np.testing.assert_array_equal(got, np.array([10, 20, 30])[x.argmax(axis=1)])
