"""set_batch tells where a model uses the batch size as a number (probe4's controls, which --no-verify
wrote without a word): arithmetic with ``x.size(0)`` or ``arange(B)``, and an If on ``x.shape[0] == 1``.
A value that changes with the batch in its shape only (a mask of ones) is no such number."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def constant(values, name, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name)


def with_the_batch(use: str, batch="N"):
    """x [B, 4] combined with a value made from Shape(x)[0]: divided by it, plus arange(B) per row, or
    times a mask of ones of x's shape (per sample)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "zero"], ["b"])]
    if use == "divided":
        nodes += [helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT)]
        nodes += [helper.make_node("Div", ["x", "bf"], ["y"], name="op")]
    elif use == "indexed":
        nodes += [helper.make_node("Range", ["zero", "b", "one"], ["rows"])]
        nodes += [helper.make_node("Unsqueeze", ["rows", "axis1"], ["column"])]
        nodes += [helper.make_node("Cast", ["column"], ["cf"], to=TensorProto.FLOAT)]
        nodes += [helper.make_node("Add", ["x", "cf"], ["y"], name="op")]
    else:
        nodes += [
            helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=helper.make_tensor("v", 1, [1], [1.0]))
        ]
        nodes += [helper.make_node("Mul", ["x", "ones"], ["y"], name="op")]
    constants = [constant(0, "zero"), constant(1, "one"), constant([1], "axis1")]
    return graph_model(nodes, [tensor_info("x", [batch, 4])], [tensor_info("y", [batch, 4])], constants, opset=13)


@pytest.mark.parametrize("use", ["divided", "indexed"])
@pytest.mark.parametrize("size", [4, "B"])
def test_arithmetic_with_the_batch_size_couples(use, size):
    summary = set_batch(with_the_batch(use), size=size).summary
    assert "'op' computes 'x', which carries the batch, with" in summary, summary
    assert "the batch size used as a number" in summary


def test_a_mask_of_ones_shaped_like_the_batch_does_not():
    summary = set_batch(with_the_batch("ones"), size=4).summary
    assert "not independent" not in summary, summary


def branch_on_batch_of_one(batch="N"):
    """y = 2x if x.shape[0] == 1 else x (an If on the batch size)."""
    double = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["twice"])], "then", [], [tensor_info("twice", None)]
    )
    same = helper.make_graph([helper.make_node("Identity", ["x"], ["as_is"])], "else", [], [tensor_info("as_is", None)])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"]),
        helper.make_node("Equal", ["b", "one"], ["alone"]),
        helper.make_node("If", ["alone"], ["y"], name="op", then_branch=double, else_branch=same),
    ]
    inputs = [tensor_info("x", [batch, 4])]
    return graph_model(nodes, inputs, [tensor_info("y", [batch, 4])], [constant(0, "zero"), constant(1, "one")])


@pytest.mark.parametrize("batch", ["N", 1])
def test_an_if_on_the_batch_size_couples(batch):
    summary = set_batch(branch_on_batch_of_one(batch), size=4).summary
    assert "If 'op' takes its then branch at batch 1 and its else branch at batch" in summary, summary


def test_an_if_that_drops_the_batch_axis_at_batch_1_does_not():
    """silero VAD's decoder (torch's RNN cell on unbatched input): If(batch == 1) squeezes the batch axis
    in one branch only; the values are the same. A first form of the If rule refused silero under --no-verify."""
    model = branch_on_batch_of_one()
    squeeze = helper.make_graph(
        [helper.make_node("Squeeze", ["x", "zero_axis"], ["dropped"])], "then", [], [tensor_info("dropped", None)]
    )
    branch = next(a for a in model.graph.node[-1].attribute if a.name == "then_branch")
    branch.g.CopyFrom(squeeze)
    model.graph.initializer.append(constant([0], "zero_axis"))
    model.graph.output[0].type.tensor_type.ClearField("shape")  # a rank that differs by branch
    summary = set_batch(model, size=4).summary
    assert "not independent" not in summary, summary


def test_integer_indices_offset_by_the_sample_do_not():
    """torch's x[arange(B), idx] linearized: idx + arange(B) * 4 indexes each sample's own row of x [B*4]."""
    nodes = [
        helper.make_node("Shape", ["idx"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"]),
        helper.make_node("Range", ["zero", "b", "one"], ["rows"]),
        helper.make_node("Mul", ["rows", "four"], ["starts"]),
        helper.make_node("Add", ["idx", "starts"], ["flat"], name="op"),
        helper.make_node("Reshape", ["x", "all"], ["x_flat"]),
        helper.make_node("Gather", ["x_flat", "flat"], ["y"]),
    ]
    constants = [constant(0, "zero"), constant(1, "one"), constant(4, "four"), constant([-1], "all")]
    inputs = [tensor_info("x", ["N", 4]), tensor_info("idx", ["N"], TensorProto.INT64)]
    model = graph_model(nodes, inputs, [tensor_info("y", ["N"])], constants, opset=13)
    summary = set_batch(model, size=4).summary
    assert "not independent" not in summary, summary
