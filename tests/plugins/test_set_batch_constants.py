"""set_batch's shape constants: which hold the batch and are rewritten, shared ones copied, and what cannot hold the new batch refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from set_batch_kit import assert_declared_shapes_hold, per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims
from scrfd_like import fpn_model


# -- shape constants -------------------------------------------------------------------------------------
def flatten_with_bias_model():
    """x [1,3,2,2] + bias reshaped to [1,3,1,1] (a leading 1 that is NOT a batch), flattened to [1,-1].

    The shape constants are Constant nodes, as in PP-OCR.
    """
    nodes = [
        helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")),
        helper.make_node(
            "Constant", [], ["bias_shape"], value=numpy_helper.from_array(np.array([1, 3, 1, 1], dtype=np.int64), "s")
        ),
        helper.make_node(
            "Constant", [], ["flat"], value=numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "f")
        ),
        helper.make_node("Reshape", ["bias", "bias_shape"], ["bias4"], name="bias_reshape"),
        helper.make_node("Add", ["x", "bias4"], ["xb"]),
        helper.make_node("Reshape", ["xb", "flat"], ["y"], name="flatten"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 3, 2, 2])], [tensor_info("y", [1, 12])])


def test_flatten_constant_rewritten_bias_reshape_left_alone():
    original = flatten_with_bias_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "1 shape constant rewritten" in result.summary and "undecided" not in result.summary
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
        for n in model.graph.node
        if n.op_type == "Constant"
    }
    assert constants["bias_shape"] == [1, 3, 1, 1]
    assert constants["flat"] == [4, -1]
    assert read_dims(model.graph.output[0]) == [4, 12]
    x = rand(4, 3, 2, 2)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


def test_symbolic_batch_writes_copy_dim():
    model = flatten_with_bias_model()
    set_batch(model, size="N")
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
        for n in model.graph.node
        if n.op_type == "Constant"
    }
    assert constants["flat"] == [0, -1]
    assert read_dims(model.graph.output[0]) == ["N", 12]
    assert run(model, {"x": rand(3, 3, 2, 2)})[0].shape == (3, 12)


def shared_shape_model():
    """One initializer [1, 6] reshapes both x (batch) and a weight (no batch)."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape16"], ["xr"], name="x_reshape"),
        helper.make_node("Reshape", ["w", "shape16"], ["wr"], name="w_reshape"),
        helper.make_node("Add", ["xr", "wr"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 6], dtype=np.int64), "shape16"),
        numpy_helper.from_array(np.arange(6, dtype=np.float32), "w"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 2, 3])], [tensor_info("y", [1, 6])], inits)


def test_shared_constant_is_copied_and_only_that_use_rewired():
    original = shared_shape_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3)
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert inits["shape16"] == [1, 6] and inits["shape16_batch_3"] == [3, 6]
    assert [n.input[1] for n in model.graph.node[:2]] == ["shape16_batch_3", "shape16"]
    assert any("shared" in d for d in result.details)
    x = rand(3, 2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


def test_expand_of_old_static_batch_rewritten():
    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "to")
    model = graph_model(
        [helper.make_node("Expand", ["x", "to"], ["y"])],
        [tensor_info("x", [2, 1])],
        [tensor_info("y", [2, 3])],
        [shape],
    )
    result = set_batch(model, size=5)
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [5, 3], result.details
    assert run(model, {"x": rand(5, 1)})[0].shape == (5, 3)


def test_runtime_computed_shape_left_alone():
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero1"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, 2, 3])], [tensor_info("y", [1, 6])], inits)
    before = {t.name: t.SerializeToString() for t in model.graph.initializer}
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary and "undecided" not in result.summary
    assert {t.name: t.SerializeToString() for t in model.graph.initializer} == before
    assert run(model, {"x": rand(4, 2, 3)})[0].shape == (4, 6)


def test_batch_folded_into_an_element_is_the_leading_factor():
    """[1, 2, 3] -> [2, 1, 3]: element 0 is 2 per sample, so 2 x batch at batch 4."""
    shape = numpy_helper.from_array(np.array([2, 1, 3], dtype=np.int64), "odd")
    original = graph_model(
        [helper.make_node("Reshape", ["x", "odd"], ["y"], name="odd_reshape")],
        [tensor_info("x", [1, 2, 3])],
        [tensor_info("y", [2, 1, 3])],
        [shape],
    )
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "1 shape constant rewritten" in result.summary, result.details
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [8, 1, 3]
    x = rand(4, 2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0])
    assert read_dims(model.graph.output[0]) == [8, 1, 3]


def test_unprovable_constant_that_cannot_hold_the_new_batch_is_refused_without_lines_that_fail():
    """Exported at batch 2, [2, 6] -> [3, 4] mixes the two samples: no element is the batch, and at
    batch 4 the 24 elements do not fit [3, 4]. No replace_initializer line would work (["dim(x, 0)", 4]
    holds 16 of them), so none is printed."""
    shape = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "odd")
    model = graph_model(
        [helper.make_node("Reshape", ["x", "odd"], ["y"], name="odd_reshape")],
        [tensor_info("x", [2, 6])],
        [tensor_info("y", [3, 4])],
        [shape],
    )
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=4)
    text = str(caught.value)
    assert "Reshape 'odd_reshape' cannot run at batch 4 with its constant shape [3, 4]" in text
    assert "no element of its shape can be proved to be the batch" in text and "replace_initializer:" not in text
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [3, 4]


def if_outer_scope_model():
    """x [1, 6]; If reads x from the outer scope and reshapes it with constants baked at batch 1."""

    def branch(name, target):
        const = helper.make_node(
            "Constant", [], [f"{name}_shape"], value=numpy_helper.from_array(np.array(target, dtype=np.int64), "v")
        )
        reshape = helper.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_out"], name=f"{name}_reshape")
        return helper.make_graph([const, reshape], name, [], [tensor_info(f"{name}_out", target)])

    nodes = [
        helper.make_node(
            "If", ["cond"], ["y"], then_branch=branch("then", [1, 2, 3]), else_branch=branch("else", [1, 3, 2])
        )
    ]
    return graph_model(
        nodes,
        [tensor_info("x", [1, 6]), tensor_info("cond", [], TensorProto.BOOL)],
        [tensor_info("y", [1, None, None])],
    )


def test_if_branches_reading_outer_scope_are_rewritten():
    original = if_outer_scope_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3, inputs=["x"])
    assert "2 shape constants rewritten" in result.summary, result.details
    x = rand(3, 6)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, ["x"])[0], rtol=1e-6)
        assert_declared_shapes_hold(model, feeds)


# -- the '?'-annotated multi-scale model ----------------------------------------------------------------------
@pytest.mark.parametrize("hw", [(64, 64), (64, 96)])
def test_question_mark_fpn_declares_nothing_false(hw):
    original = fpn_model(spatial="?", batch="?")
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert any("also names axes 2, 3" in d for d in result.details)
    assert read_dims(model.graph.input[0]) == [4, 3, "?", "?"]
    x = rand(4, 3, *hw)
    # the input itself keeps '?' on height and width (set_batch says so): the rest must be true
    assert_declared_shapes_hold(model, {"input.1": x}, ignore_params=("?",))
    reference = fpn_model(spatial=None, batch=None, annotate=False)  # the '?' original cannot run at all
    for got, want in zip(run(model, {"input.1": x}), per_sample(reference, {"input.1": x}, ["input.1"])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
