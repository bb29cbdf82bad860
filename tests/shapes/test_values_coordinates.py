"""Integer inputs that index a computed tensor (issue 34, item 4): ``h[arange(B), lengths - 1]`` reads
``lengths - 1`` as a column of GatherND coordinates, ``h.reshape(-1, D)[ids + 2]`` as Gather indices.
They are bounded by the axis they index (shape inference at the declared sizes), not flagged."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values

T, D = 5, 8


def ints(name: str, value: object):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def last_step(op: str = "Sub", first: str = "lengths") -> object:
    """h = relu(x) [1, T, D]; coordinates Concat([[0]], Unsqueeze(lengths - 1)) into h."""
    second = "one" if first == "lengths" else "lengths"
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node(op, [first, second], ["last"]),
        helper.make_node("Unsqueeze", ["last", "axis1"], ["column"]),
        helper.make_node("Concat", ["zero", "column"], ["coordinates"], axis=1),
        helper.make_node("GatherND", ["h", "coordinates"], ["y"], name="pick"),
    ]
    inputs = [tensor_info("x", [1, T, D]), tensor_info("lengths", [1], TensorProto.INT64)]
    constants = [ints("one", 1), ints("axis1", [1]), ints("zero", [[0]])]
    return graph_model(nodes, inputs, [tensor_info("y", [1, D])], constants)


def test_a_column_of_gathernd_coordinates_is_bounded_by_the_axis_it_indexes() -> None:
    found = input_values(last_step(), "lengths", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"low": 1, "high": T + 1}, found  # lengths - 1 in [0, T)
    assert "axis 1 (size 5) of the data GatherND 'pick' reads" in found.why


def test_a_shifted_gather_index_into_a_computed_tensor_is_bounded() -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "rows_shape"], ["rows"]),
        helper.make_node("Add", ["ids", "two"], ["index"]),
        helper.make_node("Gather", ["rows", "index"], ["y"], axis=0, name="take"),
    ]
    inputs = [tensor_info("x", [1, T, D]), tensor_info("ids", [3], TensorProto.INT64)]
    model = graph_model(nodes, inputs, [tensor_info("y", [3, D])], [ints("rows_shape", [-1, D]), ints("two", 2)])
    found = input_values(model, "ids", TensorProto.INT64)
    assert found is not None and found.item == {"low": 0, "high": T - 2}, found  # ids + 2 in [0, T)


def test_a_value_subtracted_from_a_constant_is_not_bounded_so() -> None:
    """``1 - lengths`` runs the other way: no bound is read from it, the input stays flagged."""
    found = input_values(last_step(first="one"), "lengths", TensorProto.INT64)
    assert found is not None and found.flag, found


def test_lengths_beside_torchscripts_folded_arange_are_bounded() -> None:
    """TorchScript's ``h[arange(B), lengths - 1]`` at batch 1 indexes ``Flatten(h)`` with
    ``lengths - 1 + [0] * T``: the folded ``[0] * T`` shifts nothing at the declared sizes."""
    from pathlib import Path

    import onnx

    generated = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "generated" / "torch"
    found = input_values(onnx.load(generated / "arange_pool_ts.onnx"), "lengths", TensorProto.INT64)
    assert found is not None and found.item == {"low": 1, "high": 6}, found
