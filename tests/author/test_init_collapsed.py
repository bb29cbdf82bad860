"""init refuses a model whose every output folds the whole batch axis into one result (madmom's key CNN:
axis 0 is time, pooled into one key). Before, once set_batch told the pooling as a coupling, init wrote a
batch-against-batch compare that passed, and apply wrote a model that is no batch of samples."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def test_a_batch_folded_into_every_output_is_refused(tmp_path: Path, run_cli) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["y"], axes=[0], keepdims=0, name="over_time"),
    ]
    graph = helper.make_graph(
        nodes,
        "collapsed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    result = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(spec))
    assert result.exit_code == 4, result.output
    assert "no output keeps the batch, and set_batch finds its samples coupled (ReduceMean 'over_time'" in result.output
    assert not spec.exists()


def test_a_coupled_model_whose_output_keeps_the_batch_still_gets_a_spec(tmp_path: Path, run_cli) -> None:
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=0, name="across")]
    graph = helper.make_graph(
        nodes,
        "coupled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    result = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(spec))
    assert result.exit_code == 0, result.output
    assert "THE SAMPLES ARE NOT INDEPENDENT" in spec.read_text()
