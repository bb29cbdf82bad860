"""An integer input whose elements become a Resize's output sizes (a document unwarper's ``img_size``:
``Resize(grid, sizes=Concat(Shape(grid)[:2], img_size[0], img_size[1]))``): any positive sizes run, so
init gives it sizes of its own, of the length its picked elements need, instead of flagging it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.sizes import SIZE
from patchspec.shapes.values import input_values


def unwarper(size_dim: int | str, also: str | None = None) -> onnx.ModelProto:
    """out = GridSample(image, Resize(points, sizes=[N, 2, size[0], size[1]]) as a grid); ``also``:
    the sizes are read a second way too (a Mul into an output)."""
    nodes = [
        helper.make_node("Gather", ["size", "i0"], ["h"], axis=0),
        helper.make_node("Gather", ["size", "i1"], ["w"], axis=0),
        helper.make_node("Unsqueeze", ["h", "axis0"], ["h_1d"]),
        helper.make_node("Unsqueeze", ["w", "axis0"], ["w_1d"]),
        helper.make_node("Concat", ["h_1d", "w_1d"], ["hw"], axis=0),
        helper.make_node("Shape", ["points"], ["nc"], start=0, end=2),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["points", "", "", "sizes"], ["grid_nchw"], name="upsample"),
        helper.make_node("Transpose", ["grid_nchw"], ["grid"], perm=[0, 2, 3, 1]),
        helper.make_node("GridSample", ["image", "grid"], ["out"], align_corners=1),
    ]
    outputs = [tensor_info("out", ["N", 3, None, None])]
    if also:
        nodes.append(helper.make_node(also, ["size", "size"], ["twice"]))
        outputs.append(tensor_info("twice", None, TensorProto.INT64))
    weights = [
        numpy_helper.from_array(np.array(value, dtype=np.int64), name)
        for name, value in (("i0", 0), ("i1", 1), ("axis0", [0]))
    ]
    inputs = [
        tensor_info("image", ["N", 3, "H", "W"]),
        tensor_info("points", ["N", 2, "h", "w"]),
        tensor_info("size", [size_dim], TensorProto.INT64),
    ]
    return graph_model(nodes, inputs, outputs, weights, opset=16)


@pytest.mark.parametrize("size_dim", ["dim", 2, 3])
def test_a_resizes_sizes_get_sizes_of_the_length_the_graph_picks(size_dim: int | str) -> None:
    found = input_values(unwarper(size_dim), "size", TensorProto.INT64)
    assert found is not None and not found.flag, found
    length = 2 if size_dim == "dim" else size_dim  # a declared length is kept
    assert found.item == {"value": [SIZE] * length}
    assert "output sizes of Resize 'upsample'" in found.why


def test_sizes_read_another_way_too_are_flagged() -> None:
    found = input_values(unwarper("dim", also="Add"), "size", TensorProto.INT64)
    assert found is not None and found.flag, found


def test_init_sizes_the_input_and_the_spec_passes(tmp_path, run_cli) -> None:
    import yaml

    onnx.save(unwarper("dim"), str(tmp_path / "model.onnx"))
    done = run_cli("init", "model.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert done.exit_code == 0, done.output
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    assert spec["patches"][0]["set_batch"]["inputs"] == {"image": 0, "points": 0}, spec["patches"]
    case = spec["verify"][1]["run"]["cases"][0]["inputs"]
    assert case["size"] == {"value": [SIZE, SIZE]}, case
    applied = run_cli("apply", "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output
