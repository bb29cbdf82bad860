"""An integer input read only as an Expand's shape or a Tile's repeats (onnx's backend model
``test_expand_shape_model2``: ``Expand(X, shape)``): ones of its declared length leave the data as it
is, so init gives them instead of flagging the input and asking for a file."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values


def broadcast(op: str, also: str | None = None) -> onnx.ModelProto:
    """y = op(x, shape) with x [1, 3, 1]; ``also`` reads shape a second way (a Reshape of x by it)."""
    nodes = [helper.make_node(op, ["x", "shape"], ["y"], name="grow")]
    outputs = [tensor_info("y", None)]
    if also:
        nodes.append(helper.make_node(also, ["x", "shape"], ["z"], name="other"))
        outputs.append(tensor_info("z", None))
    rank = 3 if op == "Tile" else 2
    inputs = [tensor_info("x", [1, 3, 1]), tensor_info("shape", [rank], TensorProto.INT64)]
    return graph_model(nodes, inputs, outputs)


@pytest.mark.parametrize(("op", "ones"), [("Expand", [1, 1]), ("Tile", [1, 1, 1])])
def test_a_shape_input_gets_ones_of_its_length(op: str, ones: list[int]) -> None:
    found = input_values(broadcast(op), "shape", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"value": ones}
    assert f"{op} 'grow'" in found.why


def test_a_shape_input_read_another_way_too_is_flagged() -> None:
    """A Reshape by the same input needs its real values: ones would not hold x's elements."""
    found = input_values(broadcast("Expand", also="Reshape"), "shape", TensorProto.INT64)
    assert found is not None and found.flag


def test_init_then_apply_verifies_a_model_fed_its_shape(tmp_path, run_cli) -> None:
    onnx.save(broadcast("Expand"), tmp_path / "m.onnx")
    made = run_cli("init", "m.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert made.exit_code == 0, made.output
    assert "value: [1, 1]" in (tmp_path / "spec.yaml").read_text()
    applied = run_cli("apply", "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output
    assert "passed" in applied.output, applied.output
