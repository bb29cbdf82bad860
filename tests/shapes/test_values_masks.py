"""Integer inputs a torch export reads in ways init met in the wild: a mask reached through an
Unsqueeze (``mask[:, None, :].float()``) or compared with 0 (``masked_fill(mask == 0, ...)``), ids a
Concat joins with a start token before the embedding, indices expanded for ``torch.gather``. Each is
given the values the graph says instead of being flagged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values

T, D, V = 6, 4, 20


def ints(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def masked(form: str) -> onnx.ModelProto:
    """x [1, T] and mask [1, T]: ``mask[:, None].float() * x``, or ``where(mask == 0, 0, x)``."""
    inputs = [tensor_info("x", [1, T]), tensor_info("mask", [1, T], TensorProto.INT64)]
    constants = [ints("axis", [1]), numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    if form == "unsqueezed":
        nodes = [
            helper.make_node("Unsqueeze", ["mask", "axis"], ["m3"]),
            helper.make_node("Cast", ["m3"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["mf", "x"], ["y"]),
        ]
        out = [1, 1, T]
    else:
        constants.append(ints("off", 0))
        nodes = [
            helper.make_node("Equal", ["mask", "off"], ["hole"]),
            helper.make_node("Where", ["hole", "zero", "x"], ["y"]),
        ]
        out = [1, T]
    return graph_model(nodes, inputs, [tensor_info("y", out)], constants)


@pytest.mark.parametrize("form", ["unsqueezed", "compared"])
def test_a_mask_is_zeros_and_ones(form: str) -> None:
    found = input_values(masked(form), "mask", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"low": 0, "high": 2}, found


def test_a_mask_compared_with_another_number_is_not_a_mask() -> None:
    model = masked("compared")
    model.graph.initializer[-1].CopyFrom(ints("off", 7))
    found = input_values(model, "mask", TensorProto.INT64)
    assert found is None or found.item != {"low": 0, "high": 2}


def test_ids_joined_with_a_start_token_are_bounded_by_the_table() -> None:
    nodes = [
        helper.make_node("Concat", ["start", "ids"], ["joined"], axis=1),
        helper.make_node("Gather", ["table", "joined"], ["y"], axis=0, name="embed"),
    ]
    table = numpy_helper.from_array(np.ones((V, D), np.float32), "table")
    model = graph_model(
        nodes,
        [tensor_info("ids", [1, T], TensorProto.INT64)],
        [tensor_info("y", [1, T + 1, D])],
        [ints("start", [[2]]), table],
    )
    found = input_values(model, "ids", TensorProto.INT64)
    assert found is not None and found.item == {"low": 0, "high": V}, found


def test_indices_expanded_for_gather_elements_are_bounded_by_the_axis() -> None:
    """``torch.gather(h, 1, idx.view(B, 1, 1).expand(B, 1, D))``: idx < T."""
    nodes = [
        helper.make_node("Reshape", ["idx", "column"], ["i3"]),
        helper.make_node("Expand", ["i3", "wide"], ["ie"]),
        helper.make_node("GatherElements", ["h", "ie"], ["y"], axis=1, name="pick"),
    ]
    model = graph_model(
        nodes,
        [tensor_info("h", [1, T, D]), tensor_info("idx", [1], TensorProto.INT64)],
        [tensor_info("y", [1, 1, D])],
        [ints("column", [1, 1, 1]), ints("wide", [1, 1, D])],
    )
    found = input_values(model, "idx", TensorProto.INT64)
    assert found is not None and found.item == {"low": 0, "high": T}, found
