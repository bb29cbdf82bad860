"""A small SCRFD-like FPN (strides 8/16/32, nearest Resize up, Add) for selector and lint tests.

Every spatial dim of every annotation is the dim_param ``?``, as in det_10g: the three levels
run at different sizes, so the annotations lie. Import with ``from scrfd_like import fpn_model``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info

CHANNELS = 4


def _conv(name: str, source: str, target: str, c_in: int, c_out: int, stride: int, kernel: int, seed: int):
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(
        rng.standard_normal((c_out, c_in, kernel, kernel)).astype(np.float32) * 0.1, f"{name}.weight"
    )
    node = helper.make_node(
        "Conv",
        [source, weight.name],
        [target],
        name=f"{name}/Conv",
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
    )
    return node, weight


def fpn_model(spatial="?", batch=1, annotate=True, unique=False) -> onnx.ModelProto:
    """input.1 [batch,3,?,?] -> backbone c3/c4/c5 (strides 8/16/32) -> laterals -> top-down FPN.

    ``unique``: every tensor's spatial dims get their own names (what ``rename_dims: {unique: true}``
    should produce). Tensors: ``/lat.{0,1,2}/Conv_output_0`` (laterals), ``/up.{1,0}/Resize_output_0``,
    ``/fpn.{1,0}/Add_output_0``; outputs ``out0`` (stride 8), ``out1`` (16), ``out2`` (32).
    """
    specs = [  # (name, source, target, c_in, c_out, stride, kernel)
        ("/backbone.c3", "input.1", "c3", 3, CHANNELS, 8, 8),
        ("/backbone.c4", "c3", "c4", CHANNELS, CHANNELS, 2, 2),
        ("/backbone.c5", "c4", "c5", CHANNELS, CHANNELS, 2, 2),
        ("/lat.0", "c3", "/lat.0/Conv_output_0", CHANNELS, CHANNELS, 1, 1),
        ("/lat.1", "c4", "/lat.1/Conv_output_0", CHANNELS, CHANNELS, 1, 1),
        ("/lat.2", "c5", "/lat.2/Conv_output_0", CHANNELS, CHANNELS, 1, 1),
    ]
    nodes, weights = [], []
    for seed, args in enumerate(specs):
        node, weight = _conv(*args, seed=seed)
        nodes.append(node)
        weights.append(weight)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "up.scales")
    nodes += [
        helper.make_node(
            "Resize",
            ["/lat.2/Conv_output_0", "", "up.scales"],
            ["/up.1/Resize_output_0"],
            name="/up.1/Resize",
            mode="nearest",
        ),
        helper.make_node(
            "Add", ["/lat.1/Conv_output_0", "/up.1/Resize_output_0"], ["/fpn.1/Add_output_0"], name="/fpn.1/Add"
        ),
        helper.make_node(
            "Resize",
            ["/fpn.1/Add_output_0", "", "up.scales"],
            ["/up.0/Resize_output_0"],
            name="/up.0/Resize",
            mode="nearest",
        ),
        helper.make_node(
            "Add", ["/lat.0/Conv_output_0", "/up.0/Resize_output_0"], ["/fpn.0/Add_output_0"], name="/fpn.0/Add"
        ),
        helper.make_node("Relu", ["/fpn.0/Add_output_0"], ["out0"], name="/head.0/Relu"),
        helper.make_node("Relu", ["/fpn.1/Add_output_0"], ["out1"], name="/head.1/Relu"),
        helper.make_node("Relu", ["/lat.2/Conv_output_0"], ["out2"], name="/head.2/Relu"),
    ]

    def shape(name):
        if unique:
            return [batch, CHANNELS, f"{name}.h", f"{name}.w"]
        return [batch, CHANNELS, spatial, spatial]

    intermediate = [
        "c3",
        "c4",
        "c5",
        "/lat.0/Conv_output_0",
        "/lat.1/Conv_output_0",
        "/lat.2/Conv_output_0",
        "/up.1/Resize_output_0",
        "/fpn.1/Add_output_0",
        "/up.0/Resize_output_0",
        "/fpn.0/Add_output_0",
    ]
    value_info = [tensor_info(name, shape(name)) for name in intermediate] if annotate else []
    outputs = [tensor_info(name, shape(name)) for name in ("out0", "out1", "out2")]
    input_dims = ["H", "W"] if unique else [spatial, spatial]
    return graph_model(
        nodes, [tensor_info("input.1", [batch, 3, *input_dims])], outputs, [*weights, scales], value_info=value_info
    )


def if_model() -> onnx.ModelProto:
    """x [2] -> If(cond) with then: Add(x, one) -> Mul ; else: Neg(x) ; -> Relu -> y."""
    one = numpy_helper.from_array(np.ones(2, dtype=np.float32), "one")
    then_graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "one"], ["t1"], name="then_add"),
            helper.make_node("Mul", ["t1", "t1"], ["then_out"], name="then_mul"),
        ],
        "then",
        [],
        [tensor_info("then_out", [2])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="else_neg")], "else", [], [tensor_info("else_out", [2])]
    )
    nodes = [
        helper.make_node("Identity", ["x"], ["x_id"], name="pre"),
        helper.make_node("If", ["cond"], ["branch"], name="If_0", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Relu", ["branch"], ["y"], name="post"),
        helper.make_node("Sigmoid", ["x_id"], ["z"], name="side"),
    ]
    inputs = [tensor_info("x", [2]), tensor_info("cond", [], TensorProto.BOOL)]
    return graph_model(nodes, inputs, [tensor_info("y", [2]), tensor_info("z", [2])], [one])


def chain_model(length: int) -> onnx.ModelProto:
    """x -> Relu -> Relu -> ... (``length`` nodes named n0..n{length-1}, tensors t0..) -> y."""
    nodes = []
    for i in range(length):
        source = "x" if i == 0 else f"t{i - 1}"
        target = "y" if i == length - 1 else f"t{i}"
        nodes.append(helper.make_node("Relu", [source], [target], name=f"n{i}"))
    return graph_model(nodes, [tensor_info("x", [1])], [tensor_info("y", [1])])
