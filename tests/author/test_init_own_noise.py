"""init writes the tolerance an output needs where the original itself moves between onnxruntime's
optimization levels on the case's random inputs (probe5: a tf2onnx Keras RNN moved by 1.5e-4, init wrote
the defaults, and apply failed with "the reference is unstable" on a right patch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.author.own_noise import own_noise


def layer_norm_by_hand(offset: float) -> onnx.ModelProto:
    """A LayerNormalization spelled out (onnxruntime fuses it at 'all'); at a large offset float32's
    cancellation makes the fused and the spelled-out forms differ by about 1e-3."""

    def constant(value, name):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    nodes = [
        helper.make_node("Add", ["x", "offset"], ["h"]),
        helper.make_node("ReduceMean", ["h"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["h", "mean"], ["centered"]),
        helper.make_node("Pow", ["centered", "two"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["variance"], axes=[-1]),
        helper.make_node("Add", ["variance", "eps"], ["stable"]),
        helper.make_node("Sqrt", ["stable"], ["deviation"]),
        helper.make_node("Div", ["centered", "deviation"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    constants = [constant(offset, "offset"), constant(2.0, "two"), constant(1e-12, "eps")]
    constants += [constant(np.ones(8), "gamma"), constant(np.zeros(8), "beta")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])]
    graph = helper.make_graph(nodes, "layer_norm", inputs, outputs, constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_an_output_that_moves_between_levels_gets_its_tolerance(tmp_path: Path) -> None:
    onnx.save(layer_norm_by_hand(30000.0), tmp_path / "m.onnx")
    noise = own_noise(tmp_path / "m.onnx", {"x": [4, 8]})
    assert set(noise) == {"y"} and 1e-4 < noise["y"] < 0.1, noise


def test_an_output_that_does_not_move_gets_none(tmp_path: Path) -> None:
    onnx.save(layer_norm_by_hand(0.0), tmp_path / "m.onnx")
    assert own_noise(tmp_path / "m.onnx", {"x": [4, 8]}) == {}


def test_init_writes_it_and_apply_passes(tmp_path: Path, run_cli) -> None:
    onnx.save(layer_norm_by_hand(30000.0), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(spec))
    assert init.exit_code == 0, init.output
    text = spec.read_text()
    assert "the original itself differs between optimization levels: 'y' atol" in text, text
    assert "y: {atol: " in text, text
    applied = run_cli("apply", str(spec))
    assert applied.exit_code == 0, applied.output


def test_a_difference_as_large_as_the_output_is_no_noise(tmp_path: Path) -> None:
    """Where the original moves by as much as it outputs, any patch would pass under that tolerance:
    none is written (the verifier then says the reference is unstable)."""
    onnx.save(layer_norm_by_hand(3e6), tmp_path / "m.onnx")
    assert own_noise(tmp_path / "m.onnx", {"x": [4, 8]}) == {}


def test_init_writes_none_over_a_coupling(tmp_path: Path, run_cli) -> None:
    """A dynamically quantized T5 decoder (a corpus control): init's tolerance (atol 200) let its per-sample
    compare pass, a silent pass. Where set_batch says the samples are coupled (here a mean over the batch
    beside a noisy layer norm), init writes none."""
    model = layer_norm_by_hand(30000.0)  # y = layer_norm(x) + mean of x over the batch
    model.graph.node[-1].output[0] = "normed_y"
    model.graph.node.extend(
        [
            helper.make_node("ReduceMean", ["x"], ["batch_mean"], axes=[0], name="over_the_batch"),
            helper.make_node("Add", ["normed_y", "batch_mean"], ["y"]),
        ]
    )
    onnx.save(model, tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(spec))
    assert init.exit_code == 0, init.output
    text = spec.read_text()
    assert "THE SAMPLES ARE NOT INDEPENDENT" in text and "atol" not in text, text
