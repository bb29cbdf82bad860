"""init's case sizes where an input declares an axis symbolic but the model runs at one size there
(RivaGAN's watermark encoder: ``data [batch, wmBits]`` multiplied with 32 channels). Before, init
wrote the default 512 and apply refused the patch with the original's own failure."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.batch.fitting import fitting_shapes


def watermark_model() -> onnx.ModelProto:
    """image [batch, 8] through a Gemm to 8 features, times bits [batch, nbits]: nbits must be 8."""
    weight = numpy_helper.from_array(np.eye(8, dtype=np.float32), "weight")
    nodes = [
        helper.make_node("MatMul", ["image", "weight"], ["features"]),
        helper.make_node("Mul", ["features", "bits"], ["marked"], name="embed"),
    ]
    inputs = [tensor_info("image", ["batch", 8]), tensor_info("bits", ["batch", "nbits"])]
    return graph_model(nodes, inputs, [tensor_info("marked", ["batch", 8])], [weight])


def test_init_finds_the_one_size_a_symbolic_axis_runs_at(tmp_path, run_cli):
    onnx.save(watermark_model(), tmp_path / "m.onnx")
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(tmp_path / "spec.yaml"))
    assert init.exit_code == 0, init.output
    written = (tmp_path / "spec.yaml").read_text()
    assert "bits: [4, 8]" in written, written
    applied = run_cli("apply", str(tmp_path / "spec.yaml"))
    assert applied.exit_code == 0, applied.output


def test_sizes_that_evaluate_are_kept_and_a_disagreement_no_input_sets_gives_none():
    model = watermark_model()
    assert fitting_shapes(model, {"image": [1, 8], "bits": [1, 8]}) is None
    assert fitting_shapes(model, {"image": [1, 8], "bits": [1, 512]}) == {"image": [1, 8], "bits": [1, 8]}
    fixed = graph_model(  # both sides fixed: no symbolic axis can make [3] and [5] agree
        [helper.make_node("Add", ["x", "three"], ["y"])],
        [tensor_info("x", ["batch", 5])],
        [tensor_info("y", None)],
        [numpy_helper.from_array(np.zeros(3, np.float32), "three")],
    )
    assert fitting_shapes(fixed, {"x": [1, 5]}) is None


def test_a_height_that_must_pool_to_one_row_is_found_below_the_default(tmp_path, run_cli):
    """x pooled by 32 on the height and squeezed there: init's default 64 fails; before, init wrote it
    and apply failed with the original's own error."""
    nodes = [
        helper.make_node("AveragePool", ["x"], ["pooled"], kernel_shape=[32, 1], strides=[32, 1]),
        helper.make_node("Squeeze", ["pooled", "axis2"], ["y"], name="drop_height"),
    ]
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis2")
    model = graph_model(nodes, [tensor_info("x", ["N", 3, "h", "w"])], [tensor_info("y", ["N", 3, "w"])], [axis])
    onnx.save(model, tmp_path / "m.onnx")
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(tmp_path / "spec.yaml"))
    assert init.exit_code == 0, init.output
    written = (tmp_path / "spec.yaml").read_text()
    assert "x: [4, 3, 32, " in written, written
    applied = run_cli("apply", str(tmp_path / "spec.yaml"))
    assert applied.exit_code == 0, applied.output


def test_a_case_the_original_itself_fails_at_is_said(tmp_path, run_cli):
    """Rows of 7 from a symbolic length: no size init tries is a multiple of 7. Before, init said nothing
    and apply's run step failed as if the patched model were at fault."""
    nodes = [helper.make_node("Reshape", ["x", "sevens"], ["y"], name="rows_of_7")]
    sevens = numpy_helper.from_array(np.array([-1, 7], np.int64), "sevens")
    model = graph_model(nodes, [tensor_info("x", ["N", "length"])], [tensor_info("y", None)], [sevens])
    onnx.save(model, tmp_path / "m.onnx")
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(tmp_path / "spec.yaml"))
    assert init.exit_code == 0, init.output
    assert "flagged: the original itself fails at the case's sizes (at node 'rows_of_7'" in init.output, init.output
    assert "edit the case to sizes it runs at" in init.output
    onnx.save(watermark_model(), tmp_path / "w.onnx")  # one it runs: no such note
    init = run_cli("init", str(tmp_path / "w.onnx"), "--batch", "4", "--output", str(tmp_path / "w.yaml"))
    assert init.exit_code == 0 and "fails at the case" not in init.output, init.output
