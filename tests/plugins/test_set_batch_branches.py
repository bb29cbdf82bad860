"""Branches taken by batch size, and samples mixed after a Squeeze that dropped the batch."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims


# -- branches taken by batch size, and samples mixed after a squeeze ------------------------------------------
def unbatched_branch_model():
    """PyTorch's unbatched-input handling: If batch == 1, Squeeze the batch away (then_branch), else keep it."""
    then_branch = helper.make_graph(
        [helper.make_node("Squeeze", ["h", "axes0"], ["squeezed"], name="drop_batch")],
        "then",
        [],
        [tensor_info("squeezed", None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["kept"])], "else", [], [tensor_info("kept", None)]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Shape", ["h"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Equal", ["batch", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], name="unbatched", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Sigmoid", ["y"], ["out"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 8])], [tensor_info("out", None)], constants)


def test_a_branch_the_new_batch_does_not_take_is_not_reported():
    model = unbatched_branch_model()
    result = set_batch(model, size="N")
    assert "undecided" not in result.summary, result.details
    for batch in (4, 1):
        x = rand(batch, 8)
        want = 1 / (1 + np.exp(-np.maximum(x, 0)))
        np.testing.assert_allclose(run(model, {"x": x})[0], want if batch > 1 else want[0], rtol=1e-6)


def test_a_conflict_inside_a_branch_names_the_if():
    model = unbatched_branch_model()
    model.graph.node[3].op_type = "GreaterOrEqual"  # batch >= 1: the squeezing branch is taken at every batch
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=4)
    assert "Squeeze 'drop_batch' (in If 'unbatched' then_branch) cannot run at batch 4" in str(caught.value)


def squeeze_then_slice_model(head=4):
    """[1, head] -> squeeze() -> [head] at batch 1; then Slice on axis 0, which is the batch at batch N."""
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"], name="squeeze_all"),
        helper.make_node("Sigmoid", ["s"], ["p"]),
        helper.make_node("Slice", ["p", "starts", "ends", "axes"], ["first"], name="first_two"),
    ]
    constants = [
        numpy_helper.from_array(np.array([v], dtype=np.int64), n) for n, v in (("starts", 0), ("ends", 2), ("axes", 0))
    ]
    return graph_model(
        nodes, [tensor_info("x", [1, head])], [tensor_info("p", [head]), tensor_info("first", [2])], constants
    )


def test_an_axis_counting_op_after_a_squeeze_that_dropped_the_batch_is_refused():
    model = squeeze_then_slice_model()
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=3)
    first = str(caught.value).splitlines()[0]
    assert "Slice 'first_two' runs, but mixes samples, at batch 3" in first and "Squeeze 'squeeze_all'" in first


def test_squeezed_output_without_axis_counting_ops_is_not_undecided():
    model = squeeze_then_slice_model()
    del model.graph.node[2]
    del model.graph.output[1]
    result = set_batch(model, size="N")
    assert "undecided" not in result.summary and read_dims(model.graph.output[0]) == ["N", 4]
    assert "1 Squeeze given axes" in result.summary, result.summary
    for batch in (3, 1):  # the declared rank holds at every batch, batch 1 included
        x = rand(batch, 4)
        np.testing.assert_allclose(run(model, {"x": x})[0], 1 / (1 + np.exp(-x)), rtol=1e-6)
