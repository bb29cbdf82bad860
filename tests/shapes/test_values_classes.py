"""Class ids (issue 34, item 4): ``F.one_hot(labels, C)`` is a OneHot of depth C under TorchScript and
``Equal(labels[..., None], arange(C))`` under dynamo; either bounds the labels to [0, C) instead of
flagging them (init asked for a .npy before)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values

C = 5


def ints(name: str, value: object):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def one_hot(depth: object = C) -> object:
    nodes = [helper.make_node("OneHot", ["labels", "depth", "off_on"], ["y"], name="encode", axis=-1)]
    constants = [ints("depth", depth), ints("off_on", [0, 1])]
    return graph_model(
        nodes, [tensor_info("labels", [1, 3], TensorProto.INT64)], [tensor_info("y", [1, 3, C])], constants
    )


def equal_range(classes: list[int]) -> object:
    nodes = [
        helper.make_node("Unsqueeze", ["labels", "last"], ["column"]),
        helper.make_node("Equal", ["column", "classes"], ["hits"], name="eq"),
        helper.make_node("Cast", ["hits"], ["y"], to=TensorProto.FLOAT),
    ]
    constants = [ints("last", [-1]), ints("classes", classes)]
    outputs = [tensor_info("y", [1, 3, len(classes)])]
    return graph_model(nodes, [tensor_info("labels", [1, 3], TensorProto.INT64)], outputs, constants)


def test_a_one_hot_bounds_its_class_ids_by_its_depth() -> None:
    found = input_values(one_hot(), "labels", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"low": 0, "high": C}
    assert "class ids of OneHot 'encode'" in found.why


@pytest.mark.parametrize(("classes", "low"), [(list(range(C)), 0), ([1, 2, 3], 1)], ids=["from_0", "from_1"])
def test_ids_compared_with_a_range_of_classes_are_bounded_by_it(classes: list[int], low: int) -> None:
    found = input_values(equal_range(classes), "labels", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"low": low, "high": classes[-1] + 1}
    assert "compared with each class id" in found.why


@pytest.mark.parametrize("classes", [[0, 2, 7], [3, 3]], ids=["gaps", "one_value"])
def test_a_comparison_with_values_that_are_no_range_says_nothing(classes: list[int]) -> None:
    found = input_values(equal_range(classes), "labels", TensorProto.INT64)
    assert found is not None and found.flag, found
