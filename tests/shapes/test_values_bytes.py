"""Byte-sized integer inputs only cast to a float (issue 34, item 4): a uint8 image divided by 255, int8
quantized values. Nothing reads them as an index, a count or a condition, so any values of the type
run: random over its range, not flagged (init asked for a .npy before; a uint8 image divided by 255 was
called a 0/1 mask). A wider integer cast to a float stays flagged: its values may mean something."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values


def scaled(elem_type: int, then: str = "Div") -> object:
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT, name="to_float"),
        helper.make_node(then, ["xf", "scale"], ["y"]),
    ]
    scale = numpy_helper.from_array(np.array(255.0, np.float32), "scale")
    return graph_model(nodes, [tensor_info("x", [1, 3, 4, 4], elem_type)], [tensor_info("y", [1, 3, 4, 4])], [scale])


@pytest.mark.parametrize(("elem_type", "low", "high"), [(TensorProto.UINT8, 0, 256), (TensorProto.INT8, -128, 128)])
def test_a_byte_input_only_cast_to_a_float_takes_any_values_of_its_type(elem_type: int, low: int, high: int) -> None:
    found = input_values(scaled(elem_type), "x", elem_type)
    assert found is not None and not found.flag
    assert found.item == {"low": low, "high": high}
    assert "only cast to a float (Cast 'to_float')" in found.why and "mask" not in found.why


def test_a_byte_input_read_as_an_index_is_not_taken_for_pixels() -> None:
    table = numpy_helper.from_array(np.zeros((10, 4), np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "x"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", [1, 3], TensorProto.UINT8)], [tensor_info("y", [1, 3, 4])], [table])
    found = input_values(model, "x", TensorProto.UINT8)
    assert found is not None and found.item == {"low": 0, "high": 10}, found


def test_a_wider_integer_only_cast_to_a_float_is_still_flagged() -> None:
    found = input_values(scaled(TensorProto.INT32, "Pow"), "x", TensorProto.INT32)
    assert found is not None and found.flag, found
