"""replace_initializer: named and selected targets, values, computed shapes, shared constants, errors."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.testing import patch_context


def batch_reshape_model(opset=17, shared=False, as_constant_node=False):
    """x [N, 8, 4] -> Reshape to a traced [1, -1, 16]; optionally a second Reshape sharing the constant."""
    shape = np.array([1, -1, 16], np.int64)
    nodes, inits = [], []
    if as_constant_node:
        nodes.append(
            helper.make_node("Constant", [], ["shape"], name="shape_const", value=numpy_helper.from_array(shape))
        )
    else:
        inits.append(numpy_helper.from_array(shape, "shape"))
    nodes.append(helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"))
    outputs = [tensor_info("y", [1, None, 16])]
    if shared:
        nodes.append(helper.make_node("Reshape", ["z", "shape"], ["w"], name="reshape_z"))
        outputs.append(tensor_info("w", [1, None, 16]))
    inputs = [tensor_info("x", ["N", 8, 4])] + ([tensor_info("z", [1, 2, 8])] if shared else [])
    return graph_model(nodes, inputs, outputs, inits, opset=opset)


def apply(tmp_path, run_cli, model, patch_yaml, extra_verify=""):
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n{patch_yaml}"
        f"verify:\n  - check: {{}}\n{extra_verify}",
    )
    result = run_cli("apply", spec)
    patched = onnx.load(tmp_path / "out.onnx") if result.exit_code == 0 else None
    return result, patched


def run(model, **feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


BATCH_FIX = """  - replace_initializer:
      initializer: shape
      shape: ["dim(x, 0)", -1, 16]
"""


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("as_constant_node", [False, True])
def test_batch_following_reshape(tmp_path, run_cli, opset, as_constant_node):
    model = batch_reshape_model(opset, as_constant_node=as_constant_node)
    x = np.arange(3 * 8 * 4, dtype=np.float32).reshape(3, 8, 4)
    assert run(model, x=x)[0].shape == (1, 6, 16)  # the bug: the batch is folded into axis 1
    result, patched = apply(tmp_path, run_cli, model, BATCH_FIX)
    assert result.exit_code == 0, result.output
    (y,) = run(patched, x=x)
    np.testing.assert_array_equal(y, x.reshape(3, -1, 16))
    assert "shape" not in {t.name for t in patched.graph.initializer}
    assert "Constant" not in [n.op_type for n in patched.graph.node]  # the unused constant went away
    assert patched.opset_import[0].version == opset and patched.ir_version == 8
    assert all(n.name for n in patched.graph.node)


def test_shared_constant_only_selected_use_is_rewired(tmp_path, run_cli):
    model = batch_reshape_model(shared=True)
    patch = """  - replace_initializer:
      select: {name: reshape}
      input: 1
      shape: ["dim(x, 0)", -1, 16]
"""
    result, patched = apply(tmp_path, run_cli, model, patch)
    assert result.exit_code == 0, result.output
    nodes = {n.name: n for n in patched.graph.node}
    assert nodes["reshape_z"].input[1] == "shape"  # the other use keeps the constant
    assert nodes["reshape"].input[1] != "shape"
    assert "shape" in {t.name for t in patched.graph.initializer}
    x = np.ones((2, 8, 4), np.float32)
    y, w = run(patched, x=x, z=np.ones((1, 2, 8), np.float32))
    assert y.shape == (2, 2, 16) and w.shape == (1, 1, 16)


def test_shared_constant_value_gets_a_new_initializer(tmp_path, run_cli):
    model = batch_reshape_model(shared=True)
    patch = """  - replace_initializer:
      select: {name: reshape_z}
      input: 1
      value: [1, 1, 16]
"""
    result, patched = apply(tmp_path, run_cli, model, patch)
    assert result.exit_code == 0, result.output
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in patched.graph.initializer}
    assert inits["shape"] == [1, -1, 16]
    new_name = next(n for n in patched.graph.node if n.name == "reshape_z").input[1]
    assert new_name != "shape" and inits[new_name] == [1, 1, 16]


def test_value_replaces_in_place_and_same_value_is_a_no_op(tmp_path, run_cli):
    model = batch_reshape_model()
    result, patched = apply(
        tmp_path, run_cli, model, "  - replace_initializer: {initializer: shape, value: [2, -1, 16]}\n"
    )
    assert result.exit_code == 0, result.output
    assert numpy_helper.to_array(patched.graph.initializer[0]).tolist() == [2, -1, 16]
    result, _ = apply(tmp_path, run_cli, model, "  - replace_initializer: {initializer: shape, value: [1, -1, 16]}\n")
    assert result.exit_code == 0 and "unchanged" in result.stdout


def test_no_op_leaves_bytes_identical():
    from patchspec_plugins.replace_initializer import ReplaceInitializerPatch

    model = batch_reshape_model()
    before = model.SerializeToString()

    params = {"initializer": "shape", "value": [1, -1, 16]}
    result = ReplaceInitializerPatch().apply(model, params, patch_context("replace_initializer", params))
    assert result.modified is False
    assert model.SerializeToString() == before


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ("{initializer: shape, value: [1, 16]}", "expected 3 elements (shape [3]), got 2"),
        ("{initializer: shape, value: [1, -1, 1.5]}", "expected int64 values, got 1.5"),
        ("{initializer: shape, value: [1, 2, 300], dtype: uint8}", "expected uint8 values in [0, 255], got 300"),
        ("{initializer: shap, value: [1, -1, 16]}", "(did you mean 'shape'?)"),
        ("{initializer: y, value: [1, -1, 16]}", "computed by node 'reshape' (Reshape), not a constant"),
        ("{initializer: x, value: [1, -1, 16]}", "is a graph input, not a constant"),
        ("{select: {op_type: Reshape}, input: 0, value: [1]}", "('x') is a graph input"),
        ("{select: {op_type: Reshape}, input: 2, value: [1]}", "input 2 does not exist"),
        ("{initializer: shape, shape: ['dim(X, 0)', -1, 16]}", "dim() reads tensor 'X', which is not in the model"),
        ("{initializer: shape, shape: ['dim(x, 5)', -1, 16]}", "axis 5 is out of range for 'x' of rank 3"),
        ("{select: {op_type: Conv}, input: 1, value: [1]}", "Conv"),
    ],
)
def test_model_side_errors_exit_4(tmp_path, run_cli, patch, fragment):
    result, _ = apply(tmp_path, run_cli, batch_reshape_model(), f"  - replace_initializer: {patch}\n")
    assert result.exit_code == 4, result.output
    assert fragment in result.output
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ("{initializer: shape}", "give either 'value: [...]' or 'shape: [ITEM, ...]'"),
        ("{value: [1]}", "give either 'initializer: NAME' or 'select'"),
        ("{select: {op_type: Reshape}, value: [1]}", "'select' needs 'input: INDEX'"),
        ("{initializer: shape, input: 1, value: [1]}", "'input' goes with 'select'"),
        ("{initializer: shape, shape: [1], dtype: int32}", "'dtype' goes with 'value'"),
        ("{initializer: shape, value: [[1, 2], [3]]}", "rectangular"),
        ("{initializer: shape, value: [1, a]}", "rectangular"),
        ("{initializer: shape, shape: ['1 +']}", "shape.0: col 4: expected an expression after '+'"),
        ("{select: {op_typ: Reshape}, input: 1, value: [1]}", "op_typ"),
    ],
)
def test_spec_errors_exit_2_without_the_model(tmp_path, run_cli, patch, fragment):
    spec = write_spec(
        tmp_path, f"patchspec: 1\nmodel: missing.onnx\noutput: out.onnx\npatches:\n  - replace_initializer: {patch}\n"
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_cycle_is_refused(tmp_path, run_cli):
    model = batch_reshape_model()
    result, _ = apply(
        tmp_path, run_cli, model, "  - replace_initializer: {initializer: shape, shape: ['dim(y, 0)', -1, 16]}\n"
    )
    assert result.exit_code == 4, result.output
    assert "cycle" in result.output


def test_value_schema_has_no_local_refs():
    import json

    from patchspec_plugins.replace_initializer import ReplaceInitializerPatch

    assert "$ref" not in json.dumps(ReplaceInitializerPatch.params_schema)


def test_reshape_inside_a_subgraph(tmp_path, run_cli):
    """select with graph: all reaches a Reshape in an If branch; the new nodes go into that branch."""
    branch_shape = numpy_helper.from_array(np.array([1, -1, 16], np.int64), "branch_shape")
    then_graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "branch_shape"], ["then_y"], name="inner_reshape")],
        "then",
        [],
        [tensor_info("then_y", [None, None, 16])],
        [branch_shape],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "flat"], ["else_y"], name="else_reshape")],
        "else",
        [],
        [tensor_info("else_y", [None, None, 16])],
    )
    flat = numpy_helper.from_array(np.array([-1, 2, 16], np.int64), "flat")
    model = graph_model(
        [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_graph, else_branch=else_graph)],
        [tensor_info("x", ["N", 8, 4]), tensor_info("cond", [], TensorProto.BOOL)],
        [tensor_info("y", [None, None, 16])],
        [flat],
    )
    patch = """  - replace_initializer:
      select: {name: inner_reshape, graph: all}
      input: 1
      shape: ["dim(x, 0)", -1, 16]
"""
    result, patched = apply(tmp_path, run_cli, model, patch)
    assert result.exit_code == 0, result.output
    then_branch = next(a.g for a in patched.graph.node[0].attribute if a.name == "then_branch")
    assert "Shape" in [n.op_type for n in then_branch.node]
    assert "branch_shape" not in {t.name for t in then_branch.initializer}
    (y,) = run(patched, x=np.ones((3, 8, 4), np.float32), cond=np.array(True))
    assert y.shape == (3, 2, 16)


def test_documented_example_runs(tmp_path, run_cli):
    import re

    from helpers import REPO

    text = (REPO / "docs" / "patches" / "replace_initializer.md").read_text()
    (spec_text, python_text) = [body for _, body in re.findall(r"```(yaml|python)\n(.*?)```", text, re.S)][:2]
    cwd = __import__("os").getcwd()
    try:
        __import__("os").chdir(tmp_path)
        exec(python_text, {})
    finally:
        __import__("os").chdir(cwd)
    result = run_cli("apply", write_spec(tmp_path, spec_text))
    assert result.exit_code == 0, result.output


def test_value_for_every_user_of_a_shared_constant_overwrites_it(tmp_path, run_cli):
    model = batch_reshape_model(shared=True)
    patch = "  - replace_initializer: {select: {op_type: Reshape, expect: 2}, input: 1, value: [1, 1, 16]}\n"
    result, patched = apply(tmp_path, run_cli, model, patch)
    assert result.exit_code == 0, result.output
    assert [t.name for t in patched.graph.initializer] == ["shape"]
    assert numpy_helper.to_array(patched.graph.initializer[0]).tolist() == [1, 1, 16]


def test_computed_shape_keeps_the_original_element_type(tmp_path, run_cli):
    """A constant read as int32 (here by Cast -> Reshape) gets the computed shape cast back to int32."""
    shape = numpy_helper.from_array(np.array([1, -1, 16], np.int32), "shape32")
    nodes = [
        helper.make_node("Cast", ["shape32"], ["shape64"], name="to64", to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "shape64"], ["y"], name="reshape"),
    ]
    model = graph_model(nodes, [tensor_info("x", ["N", 8, 4])], [tensor_info("y", [1, None, 16])], [shape])
    result, patched = apply(
        tmp_path, run_cli, model, "  - replace_initializer: {initializer: shape32, shape: ['dim(x, 0)', -1, 16]}\n"
    )
    assert result.exit_code == 0, result.output
    assert run(patched, x=np.ones((2, 8, 4), np.float32))[0].shape == (2, 2, 16)
    result, patched = apply(
        tmp_path, run_cli, model, "  - replace_initializer: {initializer: shape32, shape: [2, -1, 16]}\n"
    )
    assert result.exit_code == 0, result.output
    assert patched.graph.initializer[0].data_type == TensorProto.INT32
