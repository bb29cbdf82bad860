"""set_batch proves a batch axis only at two batch sizes above 1 (issue 24, item 1).

tf2onnx turns an NHWC image into NCHW with ``Unsqueeze(axis 0)`` and ``Reshape [-1, 1, 0, 0]``:
the 1 is a channel. At batch 1 it looks just like the batch, and a tracker that took batch 1 as a
witness rewrote it to ``[-1, 4, 0, 0]``, which runs and puts the batch in the channels.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.api import trace_batch
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def nhwc_to_nchw_model(batch):
    """x [batch, 8, 8] -> Unsqueeze(0) [1, batch, 8, 8] -> Reshape [-1, 1, 0, 0] -> Conv (1 -> 2 channels)."""
    weights = np.arange(18, dtype=np.float32).reshape(2, 1, 3, 3) / 10
    nodes = [
        helper.make_node("Unsqueeze", ["x", "zero"], ["x4"], name="unsqueeze"),
        helper.make_node("Reshape", ["x4", "nchw"], ["image"], name="to_nchw"),
        helper.make_node("Conv", ["image", "w"], ["y"], name="conv"),
    ]
    constants = [
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([-1, 1, 0, 0], dtype=np.int64), "nchw"),
        numpy_helper.from_array(weights, "w"),
    ]
    return graph_model(nodes, [tensor_info("x", [batch, 8, 8])], [tensor_info("y", [batch, 2, 6, 6])], constants)


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def per_sample(model, x):
    return np.concatenate([run(model, x[i : i + 1]) for i in range(len(x))])


def test_a_channel_of_one_is_not_proved_the_batch_at_batch_one():
    trace = trace_batch(nhwc_to_nchw_model(1), [("x", 0)], 1, 4)
    assert trace.rewrites == [] and trace.undecided == [] and trace.refusals == []


def test_an_already_dynamic_batch_that_runs_at_the_target_keeps_its_constants():
    original = nhwc_to_nchw_model("unk__6134")
    model = nhwc_to_nchw_model("unk__6134")
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary, result.summary
    assert numpy_helper.to_array(model.graph.initializer[1]).tolist() == [-1, 1, 0, 0]
    x = np.random.default_rng(0).standard_normal((4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), per_sample(original, x), rtol=1e-5, atol=1e-5)


def test_a_static_batch_of_one_rebatches_without_touching_the_channel():
    original = nhwc_to_nchw_model(1)
    model = nhwc_to_nchw_model(1)
    set_batch(model, size=4)
    assert numpy_helper.to_array(model.graph.initializer[1]).tolist() == [-1, 1, 0, 0]
    x = np.random.default_rng(1).standard_normal((4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), per_sample(original, x), rtol=1e-5, atol=1e-5)


def test_a_batch_baked_as_one_is_still_proved_at_two_batches_above_one():
    """The witnesses do not make set_batch timid: a Reshape [1, 64] on a batch-1 export is the batch."""
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["y"], name="flatten")]
    flat = numpy_helper.from_array(np.array([1, 64], dtype=np.int64), "flat")
    model = graph_model(nodes, [tensor_info("x", [1, 8, 8])], [tensor_info("y", [1, 64])], [flat])
    trace = trace_batch(model, [("x", 0)], 1, 4)
    assert [(r.elements, r.reason) for r in trace.rewrites] == [
        (((0, 4),), "Reshape 'flatten': element 0 is the batch (1 -> 4)")
    ]
