"""An integer input read only as an Expand's shape or a Tile's repeats (onnx's backend model
``test_expand_shape_model2``: ``Expand(X, shape)``, output declared ``[1, 3, 3]``): init gives the
values that make the output's declared dims (1 where it declares none) instead of flagging the input
and asking for a file."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values


def broadcast(op: str, out: list[int] | None, also: str | None = None) -> onnx.ModelProto:
    """y = op(x, shape) with x [1, 3, 1], y declared ``out``; ``also`` reads shape a second way."""
    nodes = [helper.make_node(op, ["x", "shape"], ["y"], name="grow")]
    outputs = [tensor_info("y", out)]
    if also:
        nodes.append(helper.make_node(also, ["x", "shape"], ["z"], name="other"))
        outputs.append(tensor_info("z", None))
    rank = 3 if op == "Tile" else 2
    inputs = [tensor_info("x", [1, 3, 1]), tensor_info("shape", [rank], TensorProto.INT64)]
    return graph_model(nodes, inputs, outputs)


@pytest.mark.parametrize(
    ("op", "out", "values"),
    [
        ("Expand", [1, 3, 4], [3, 4]),  # the output's last dims
        ("Expand", ["n", 3, "w"], [3, 1]),  # 1 where the output declares no size
        ("Tile", [1, 3, 2], [1, 1, 2]),  # the output over the input, per axis
    ],
)
def test_a_shape_input_gets_the_values_of_the_declared_output(op: str, out: list, values: list[int]) -> None:
    found = input_values(broadcast(op, out), "shape", TensorProto.INT64)
    assert found is not None and not found.flag
    assert found.item == {"value": values}
    assert f"{op} 'grow'" in found.why


def test_a_shape_input_read_another_way_too_is_flagged() -> None:
    """A Reshape by the same input needs its real values."""
    found = input_values(broadcast("Expand", [1, 3, 3], also="Reshape"), "shape", TensorProto.INT64)
    assert found is not None and found.flag


def test_init_then_apply_verifies_a_model_fed_its_shape(tmp_path, run_cli) -> None:
    onnx.save(broadcast("Expand", [1, 3, 4]), tmp_path / "m.onnx")
    made = run_cli("init", "m.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert made.exit_code == 0, made.output
    assert "value: [3, 4]" in (tmp_path / "spec.yaml").read_text()
    applied = run_cli("apply", "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output
    assert "passed" in applied.output, applied.output
