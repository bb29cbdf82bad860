"""shapes.evaluate and shapes.annotations at scale: what makes a 200,000-node graph cheap, held to the
same answers (weights never read or copied, bodies still found, one inference per distinct node)."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import patchspec.shapes.known as known_module
from helpers import graph_model, tensor_info
from patchspec.model.graph import all_graphs, has_body
from patchspec.shapes.annotations import graph_only_copy
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.kernels import SMALL
from patchspec.shapes.known import Known


def big_constant_model() -> onnx.ModelProto:
    """A weight held in a Constant node (as Paddle2ONNX exports do), read by a MatMul, then a Reshape."""
    weight = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w_value")
    nodes = [
        helper.make_node("Constant", [], ["w"], value=weight),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([1, -1], np.int64))),
        helper.make_node("Reshape", ["h", "shape"], ["y"]),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 64])], [tensor_info("y", [1, 64])])


def test_a_weight_in_a_constant_node_is_never_converted(monkeypatch):
    converted = []
    real = numpy_helper.to_array

    def recording(tensor, *args, **kwargs):
        converted.append(int(np.prod(tensor.dims, dtype=np.int64)))
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(known_module.numpy_helper, "to_array", recording)
    point = {"x": Known(TensorProto.FLOAT, (1, 64))}
    evaluator = ShapeEvaluator(big_constant_model(), [point]).run()
    weight = evaluator.at("w")[0]
    assert (weight.dtype, weight.shape, weight.value) == (TensorProto.FLOAT, (64, 64), None)
    assert evaluator.at("y")[0].shape == (1, 64)
    assert np.array_equal(evaluator.at("shape")[0].value, [1, -1])
    assert converted and max(converted) <= SMALL, f"tensors of {converted} elements were converted"


def test_the_hook_is_called_only_for_the_ops_named():
    seen = []

    def hook(site, inputs):
        seen.append(site.node.op_type)
        return None

    points = [{"x": Known(TensorProto.FLOAT, (1, 64))}, {"x": Known(TensorProto.FLOAT, (8, 64))}]
    ShapeEvaluator(big_constant_model(), points, hook=hook, hook_ops={"Reshape"}).run()
    assert seen == ["Reshape"]
    seen.clear()
    ShapeEvaluator(big_constant_model(), points, hook=hook).run()
    assert seen == ["Constant", "MatMul", "Constant", "Reshape"]


def test_identical_blocks_are_inferred_once_and_each_gets_its_own_answer(monkeypatch):
    """A chain of identical Relus is inferred once per point; a Reshape reading another value is not
    answered from the cache of the first."""
    calls = []
    real = onnx.shape_inference.infer_node_outputs

    def counting(schema, node, *args, **kwargs):
        calls.append(node.op_type)
        return real(schema, node, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_node_outputs", counting)
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(50)]
    nodes += [
        helper.make_node("Reshape", ["t50", "flat"], ["a"]),
        helper.make_node("Reshape", ["t50", "square"], ["b"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([1, 16], np.int64), "flat"),
        numpy_helper.from_array(np.array([4, 4], np.int64), "square"),
    ]
    model = graph_model(nodes, [tensor_info("t0", [1, 16])], [tensor_info("a", [1, 16])], constants)
    points = [{"t0": Known(TensorProto.FLOAT, (1, 16))}, {"t0": Known(TensorProto.FLOAT, (2, 16))}]
    evaluator = ShapeEvaluator(model, points).run()
    assert calls.count("Relu") == 2  # one per point, not one per node
    assert [k.shape for k in evaluator.at("t50")] == [(1, 16), (2, 16)]
    assert evaluator.at("a")[0].shape == (1, 16) and evaluator.at("b")[0].shape == (4, 4)


def test_the_collector_is_paused_during_the_walk_and_restored(monkeypatch):
    states = []

    def hook(site, inputs):
        states.append(gc.isenabled())
        return None

    assert gc.isenabled()
    point = {"x": Known(TensorProto.FLOAT, (1, 64))}
    ShapeEvaluator(big_constant_model(), [point], hook=hook).run()
    assert states and not any(states)
    assert gc.isenabled()

    def failing(site, inputs):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        ShapeEvaluator(big_constant_model(), [point], hook=failing).run()
    assert gc.isenabled()


def if_model() -> onnx.ModelProto:
    def branch(name: str, value: float) -> onnx.GraphProto:
        big = numpy_helper.from_array(np.full((32, 32), value, np.float32), f"{name}_w")
        return helper.make_graph(
            [
                helper.make_node("Constant", [], [f"{name}_c"], value=big),
                helper.make_node("Add", ["x", f"{name}_c"], [f"{name}_y"]),
            ],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [32, 32])],
        )

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0)),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inputs = [tensor_info("x", [32, 32]), tensor_info("cond", [], TensorProto.BOOL)]
    return graph_model(nodes, inputs, [tensor_info("z", [32, 32])])


def test_bodies_are_found_by_op_type_and_by_attribute_in_other_domains():
    model = if_model()
    assert [has_body(node) for node in model.graph.node] == [False, True, False]
    custom = helper.make_node("Fused", ["x"], ["y"], domain="com.example", body=model.graph.node[1].attribute[0].g)
    assert has_body(custom)
    assert not has_body(helper.make_node("Fused", ["x"], ["y"], domain="com.example", alpha=1.0))
    in_attribute_order = [attribute.g.name for attribute in model.graph.node[1].attribute]
    assert sorted(in_attribute_order) == ["else", "then"]
    assert [g.name for g in all_graphs(model.graph)] == [model.graph.name, *in_attribute_order]


def test_the_graph_only_copy_keeps_every_node_in_order_and_stubs_weights_in_bodies():
    model = if_model()
    light = graph_only_copy(model)
    assert [n.op_type for n in light.graph.node] == [n.op_type for n in model.graph.node]
    assert light.graph.node[0] == model.graph.node[0]  # a plain node is copied as it is
    for branch in light.graph.node[1].attribute:
        stub = branch.g.node[0].attribute[0].t
        assert stub.data_location == TensorProto.EXTERNAL and not stub.raw_data and list(stub.dims) == [32, 32]
    assert light.ByteSize() < model.ByteSize() - 2 * 32 * 32 * 4 + 1024
