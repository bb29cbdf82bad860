"""init writes the tolerance an output needs where the original itself moves between onnxruntime's
optimization levels on the case's random inputs (probe5: a tf2onnx Keras RNN moved by 1.5e-4, init wrote
the defaults, and apply failed with "the reference is unstable" on a right patch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from patchspec.author.original_runs import OriginalRuns
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


def moves_between_levels(path: Path) -> tuple[float, float]:
    """(how far onnxruntime's output moves between 'disabled' and 'all', the output's largest magnitude)
    here. The fusion that makes the spelled-out layer norm move differs by version: onnxruntime 1.32 moves
    it by about 0.2% of the output, 1.18 (make test-oldest) by as much as the output itself."""
    x = np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype(np.float32)
    outputs = []
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, {"x": x})[0])
    difference = float(np.nan_to_num(np.abs(outputs[0] - outputs[1]), nan=np.inf).max())
    return difference, float(np.abs(outputs[0]).max())


def noisy(tmp_path: Path, model: onnx.ModelProto, small: bool = True) -> Path:
    """The model saved, where this onnxruntime moves it as the test needs (a little, or as much as the
    output); else the test is skipped, saying how it moved."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    difference, scale = moves_between_levels(path)
    fits = 1e-4 < difference <= 0.01 * scale if small else difference > 0.01 * scale
    if not fits:
        pytest.skip(f"onnxruntime {ort.__version__} moves this layer norm by {difference:.3g} (output {scale:.3g})")
    return path


def test_an_output_that_moves_between_levels_gets_its_tolerance(tmp_path: Path) -> None:
    noise = own_noise(OriginalRuns(noisy(tmp_path, layer_norm_by_hand(30000.0))), {"x": [4, 8]})
    assert set(noise) == {"y"} and 1e-4 < noise["y"] < 0.1, noise


def test_an_output_that_does_not_move_gets_none(tmp_path: Path) -> None:
    onnx.save(layer_norm_by_hand(0.0), tmp_path / "m.onnx")
    assert own_noise(OriginalRuns(tmp_path / "m.onnx"), {"x": [4, 8]}) == {}


def test_init_writes_it_and_apply_passes(tmp_path: Path, run_cli) -> None:
    noisy(tmp_path, layer_norm_by_hand(30000.0))
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
    assert own_noise(OriginalRuns(noisy(tmp_path, layer_norm_by_hand(3e6), small=False)), {"x": [4, 8]}) == {}


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
    noisy(tmp_path, model)
    spec = tmp_path / "spec.yaml"
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(spec))
    assert init.exit_code == 0, init.output
    text = spec.read_text()
    assert "THE SAMPLES ARE NOT INDEPENDENT" in text and "atol" not in text, text
