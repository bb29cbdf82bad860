"""What is not the batch is never touched: attention heads, a sequence of one, a constant a Loop tiles;
and a batch folded behind the sequence is split out again."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from set_batch_kit import assert_declared_shapes_hold, const, per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info


# -- what is not the batch is never touched ---------------------------------------------------------------------
def attention_model():
    """A traced multi-head attention at batch 1: heads (12) and head size (4) must stay, the batch folds in."""
    nodes = [
        helper.make_node("Reshape", ["x", "split_heads"], ["h"], name="split_heads"),
        helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ht", "fold"], ["folded"], name="fold_batch_heads"),
        helper.make_node("MatMul", ["folded", "w"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "folded"], ["mixed"]),
        helper.make_node("Reshape", ["mixed", "unfold"], ["uh"], name="unfold_heads"),
        helper.make_node("Transpose", ["uh"], ["ut"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ut", "merge"], ["y"], name="merge_heads"),
    ]
    inits = [
        const("split_heads", [1, 5, 12, 4]),
        const("fold", [12, 5, 4]),
        const("unfold", [1, 12, 5, 4]),
        const("merge", [1, 5, 48]),
        numpy_helper.from_array(rand(4, 5, seed=3), "w"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 5, 48])], [tensor_info("y", [1, 5, 48])], inits)


@pytest.mark.parametrize("size", [3, "N"])
def test_attention_head_constants_stay_and_the_batch_folds_in(size):
    original = attention_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert "4 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    if size == 3:
        assert inits["split_heads"] == [3, 5, 12, 4] and inits["fold"] == [36, 5, 4]
        assert inits["unfold"] == [3, 12, 5, 4] and inits["merge"] == [3, 5, 48]
    else:
        assert inits["split_heads"] == [-1, 5, 12, 4] and inits["fold"] == [-1, 5, 4]
    x = rand(3, 5, 48)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-5)
    assert_declared_shapes_hold(model, {"x": x})


def test_a_sequence_length_of_one_is_not_the_batch():
    """x [1, 1, 64] (batch 1, one token) -> [1, 1, 8, 8]: element 0 is the batch, element 1 the token."""
    original = graph_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
        [tensor_info("x", [1, 1, 64])],
        [tensor_info("y", [1, 1, 8, 8])],
        [const("s", [1, 1, 8, 8])],
    )
    model = onnx.ModelProto()
    model.CopyFrom(original)
    set_batch(model, size=4)
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [4, 1, 8, 8]
    seq_first = graph_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
        [tensor_info("x", [1, 1, 64])],
        [tensor_info("y", [1, 1, 8, 8])],
        [const("s", [1, 1, 8, 8])],
    )
    set_batch(seq_first, size=4, inputs={"x": 1})
    assert numpy_helper.to_array(seq_first.graph.initializer[0]).tolist() == [1, 4, 8, 8]


def test_loop_body_constant_tiled_by_the_batch_is_left_alone():
    """The body builds [1, k, 1] from the iteration number; the batch comes in by Tile outside the Loop."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["fi", "token_shape"], ["token"], name="body_reshape"),
        ],
        "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL)],
        [tensor_info("cond_out", [], TensorProto.BOOL), tensor_info("token", [1, 1, 1])],
        [const("token_shape", [1, -1, 1])],
    )
    nodes = [
        helper.make_node("Loop", ["trips", "go"], ["tokens"], body=body),  # [3, 1, 1, 1]
        helper.make_node("Reshape", ["tokens", "flat"], ["t3"], name="to_row"),  # [1, 3, 1]
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Concat", ["b1", "one", "one"], ["reps"], axis=0),
        helper.make_node("Tile", ["t3", "reps"], ["tiled"]),
        helper.make_node("Add", ["x", "tiled"], ["y"]),
    ]
    inits = [
        const("trips", 3),
        numpy_helper.from_array(np.array(True), "go"),
        const("flat", [1, -1, 1]),
        const("zero", 0),
        const("axes0", [0]),
        const("one", [1]),
    ]
    original = graph_model(nodes, [tensor_info("x", [1, 3, 2])], [tensor_info("y", [1, 3, 2])], inits)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    x = rand(4, 3, 2)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


# -- a batch folded behind the sequence (PyTorch attention, sequence first) --------------------------------
def sequence_first_projection():
    """[B, 30, 32] -> [30, B, 32] -> Reshape [-1, 32] -> Gemm -> Reshape [30, 1, 32] -> [B, 30, 32].

    The first Reshape folds the batch behind the 30 positions ([30*B, 32]: each row one sample's);
    its -1 is right at any batch. The second splits the rows out again: its element 1 is the batch.
    Calling element 1 of [-1, 32] "the batch" (32 -> 128) moved the batch into the features.
    """
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t", "flat"], ["rows"], name="fold"),
        helper.make_node("Gemm", ["rows", "w", "b"], ["projected"], transB=1),
        helper.make_node("Reshape", ["projected", "back"], ["u"], name="unfold"),
        helper.make_node("Transpose", ["u"], ["y"], perm=[1, 0, 2]),
    ]
    constants = [
        numpy_helper.from_array(np.array([-1, 32], np.int64), "flat"),
        numpy_helper.from_array(np.array([30, 1, 32], np.int64), "back"),
        numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 30, 32])], [tensor_info("y", [1, 30, 32])], constants)


@pytest.mark.parametrize("size", [4, "N"])
def test_a_batch_folded_behind_the_sequence_is_left_there_and_split_out_again(size):
    original = sequence_first_projection()
    model = sequence_first_projection()
    result = set_batch(model, size=size)
    lines = "\n".join(result.details)
    assert "'fold'" not in lines, lines  # [-1, 32] is right at any batch
    assert "Reshape 'unfold': element 1 is the batch" in lines, lines
    feeds = {"x": rand(4, 30, 32)}
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, ["x"])[0], rtol=1e-5, atol=1e-5)
