"""Token ids that reach an embedding through a negative-index wrap (torch's ``x[ids]`` with negative
ids allowed: ``Where(ids < 0, ids + n, ids)``, or ``Mod(ids + n, n)``) are bounded by the table's rows
(issue 34, item 4), not flagged; tf2onnx writes the Where in arithmetic (a slovorez probe: init asked
for an .npy before)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values

ROWS = 30


def _model(nodes, extra=()):
    table = numpy_helper.from_array(np.ones((ROWS, 4), np.float32), "table")
    consts = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(ROWS, np.int64), "rows"),
        table,
        *extra,
    ]
    gather = helper.make_node("Gather", ["table", "index"], ["y"])
    return graph_model(
        [*nodes, gather],
        [tensor_info("ids", ["N", 5], TensorProto.INT64)],
        [tensor_info("y", ["N", 5, 4])],
        consts,
        opset=13,
    )


WHERE = [
    helper.make_node("Less", ["ids", "zero"], ["negative"]),
    helper.make_node("Add", ["ids", "rows"], ["wrapped"]),
    helper.make_node("Where", ["negative", "wrapped", "ids"], ["index"]),
]
MOD = [helper.make_node("Add", ["ids", "rows"], ["shifted"]), helper.make_node("Mod", ["shifted", "rows"], ["index"])]
#: tf2onnx's SelectV2 in arithmetic (slovorez): Cast(ids < 0) * (ids + n) + Cast(not (ids < 0)) * ids
ARITHMETIC_WHERE = [
    helper.make_node("Less", ["ids", "zero"], ["negative"]),
    helper.make_node("Not", ["negative"], ["kept"]),
    helper.make_node("Cast", ["negative"], ["take_wrapped"], to=TensorProto.INT64),
    helper.make_node("Cast", ["kept"], ["take_ids"], to=TensorProto.INT64),
    helper.make_node("Add", ["ids", "rows"], ["wrapped"]),
    helper.make_node("Mul", ["take_wrapped", "wrapped"], ["wrapped_part"]),
    helper.make_node("Mul", ["ids", "take_ids"], ["ids_part"]),
    helper.make_node("Add", ["wrapped_part", "ids_part"], ["index"]),
]


@pytest.mark.parametrize("nodes", [WHERE, MOD, ARITHMETIC_WHERE], ids=["where", "mod", "arithmetic"])
def test_ids_through_a_wrap_are_bounded_by_the_table(nodes):
    found = input_values(_model(nodes), "ids", TensorProto.INT64)
    assert found is not None and not found.flag, found
    assert found.item == {"low": 0, "high": ROWS} and f"indexes the {ROWS} rows" in found.why


def test_an_unconditional_offset_is_not_a_wrap():
    """ids + 5 then Gather: not a wrap (ids in [0, rows) would index past the table); the offset is
    followed instead, and the ids are bounded so that ids + 5 stays in the table."""
    five = numpy_helper.from_array(np.array(5, np.int64), "five")
    nodes = [helper.make_node("Add", ["ids", "five"], ["index"])]
    found = input_values(_model(nodes, [five]), "ids", TensorProto.INT64)
    assert found is not None and not found.flag and found.item == {"low": 0, "high": ROWS - 5}, found


@pytest.mark.parametrize("nodes", [WHERE, ARITHMETIC_WHERE], ids=["where", "arithmetic"])
def test_the_wrapped_model_runs_at_the_bounds_init_gives(tmp_path, run_cli, nodes):
    onnx.save(_model(nodes), tmp_path / "m.onnx")
    made = run_cli("init", tmp_path / "m.onnx", "--batch", "4", "--output", tmp_path / "spec.yaml")
    assert made.exit_code == 0 and "FLAGGED" not in (tmp_path / "spec.yaml").read_text(), made.output
    assert run_cli("apply", tmp_path / "spec.yaml").exit_code == 0
