"""``input_rules`` answers as ``input_values`` does for every input, asking it only where it must."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import patchspec.author.init_case as init_case
from helpers import graph_model, tensor_info
from patchspec.author.init_case import FLOATS, input_rules
from patchspec.shapes.values import input_values


def _model():
    """Float inputs read (one only inside an If branch), a float input read by nothing, token ids, a mask."""
    table = numpy_helper.from_array(np.zeros((10, 4), np.float32), "table")
    branch = helper.make_graph([helper.make_node("Identity", ["inner"], ["b"])], "then", [], [tensor_info("b", [1, 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "else", [], [tensor_info("c", [1, 4])])
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("Add", ["x", "past"], ["s"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other),
        helper.make_node("Cast", ["half"], ["h"], to=TensorProto.FLOAT),
    ]
    inputs = [
        tensor_info("x", [1, 4]),
        tensor_info("past", [1, 4]),
        tensor_info("inner", [1, 4], TensorProto.DOUBLE),
        tensor_info("half", [1, 4], TensorProto.FLOAT16),
        tensor_info("unread", [1, 4]),
        tensor_info("ids", [1, 3], TensorProto.INT64),
        tensor_info("flag", [], TensorProto.BOOL),
    ]
    outputs = [tensor_info("y", [1, 4]), tensor_info("emb", [1, 3, 4]), tensor_info("h", [1, 4])]
    return graph_model(nodes, inputs, outputs, [table])


def test_the_rules_are_input_values_for_every_input(monkeypatch):
    model = _model()
    expected = {
        info.name: input_values(model, info.name, info.type.tensor_type.elem_type) for info in model.graph.input
    }
    asked = []
    ask = init_case.input_values

    def counting(model, name, element):
        asked.append(name)
        return ask(model, name, element)

    monkeypatch.setattr(init_case, "input_values", counting)
    assert input_rules(model) == expected
    assert expected["unread"] is not None and expected["x"] is None and expected["inner"] is None
    assert sorted(asked) == ["flag", "ids", "unread"]  # the read floats need no walk of their own


@pytest.mark.parametrize("element", sorted(FLOATS))
def test_every_float_the_graph_reads_is_random_for_input_values_too(element):
    model = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", [2], element)], [tensor_info("y", [2], element)]
    )
    assert input_values(model, "x", element) is None
