"""add_input: a new graph input; an existing name is refused (exit 4)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec


def model():
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor_info("x", ["N", 3])],
        [tensor_info("y", ["N", 3])],
        [w],
    )


def apply(tmp_path, run_cli, patch):
    onnx.save(model(), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - add_input: {patch}\n")
    return run_cli("apply", spec)


def test_adds_a_typed_input_with_fixed_and_symbolic_dims(tmp_path, run_cli):
    result = apply(tmp_path, run_cli, "{name: grid_thw, dtype: int64, shape: [images, 3]}")
    assert result.exit_code == 0, result.output
    added = onnx.load(tmp_path / "out.onnx").graph.input[-1]
    assert added.name == "grid_thw"
    assert added.type.tensor_type.elem_type == TensorProto.INT64
    dims = added.type.tensor_type.shape.dim
    assert dims[0].dim_param == "images" and dims[1].dim_value == 3


def test_scalar_input(tmp_path, run_cli):
    result = apply(tmp_path, run_cli, "{name: scale, dtype: float32, shape: []}")
    assert result.exit_code == 0, result.output
    added = onnx.load(tmp_path / "out.onnx").graph.input[-1]
    assert added.type.tensor_type.elem_type == TensorProto.FLOAT and len(added.type.tensor_type.shape.dim) == 0


@pytest.mark.parametrize(
    "name, kind", [("x", "a graph input"), ("w", "an initializer"), ("y", "output of node 'add' (Add)")]
)
def test_existing_name_exits_4(tmp_path, run_cli, name, kind):
    result = apply(tmp_path, run_cli, f"{{name: {name}, dtype: int64, shape: [3]}}")
    assert result.exit_code == 4, result.output
    assert f"'{name}' already exists in the model ({kind})" in result.output
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ("{name: g, dtype: int65, shape: [3]}", "int65"),
        ("{name: g, dtype: int64}", "'shape' is required"),
        ("{name: g, dtype: int64, shape: [-1]}", "-1"),
        ("{name: g, dtype: int64, shape: [3], extra: 1}", "unknown key 'extra'"),
    ],
)
def test_spec_errors_exit_2(tmp_path, run_cli, patch, fragment):
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - add_input: {patch}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert fragment in result.output
