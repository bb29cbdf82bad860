"""Each sample's first row, picked from rows merged batch first by indices the export folded (issue 34,
item 6): ``x.flatten(0, 1)[torch.arange(B) * T]`` at batch 1 is ``Gather(Flatten(x), [0])`` (TorchScript)
or ``GatherND(Reshape(x, [T, D]), [[0]])`` (dynamo). At batch 4 the model ran and gave sample 0's row
alone: set_batch wrote it so. The indices are counted again, ``arange(B) * T``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.errors import PatchError
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

T, D = 5, 3


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def first_rows(kind: str) -> onnx.ModelProto:
    """x [1, T, D] -> the first of each sample's T rows: "gather" (Flatten, [0]) or "gathernd" (Reshape, [[0]])."""
    if kind == "gather":
        nodes = [
            helper.make_node("Flatten", ["x"], ["rows"], axis=2, name="merge"),
            helper.make_node("Gather", ["rows", "picked"], ["y"], axis=0, name="pick"),
        ]
        picked = numpy_helper.from_array(np.array([0], np.int64), "picked")
        constants = [picked]
    else:
        nodes = [
            helper.make_node("Reshape", ["x", "rows_shape"], ["rows"], name="merge"),
            helper.make_node("GatherND", ["rows", "picked"], ["y"], name="pick"),
        ]
        constants = [
            numpy_helper.from_array(np.array([[0]], np.int64), "picked"),
            numpy_helper.from_array(np.array([T, D], np.int64), "rows_shape"),
        ]
    return graph_model(nodes, [tensor_info("x", [1, T, D])], [tensor_info("y", [1, D])], constants)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("size", [4, "N"])
@pytest.mark.parametrize("kind", ["gather", "gathernd"])
def test_each_samples_first_row_is_picked_at_the_new_batch(kind: str, size: int | str) -> None:
    original, patched = first_rows(kind), first_rows(kind)
    result = set_batch(patched, size=size)
    assert any("pick each sample's first row of the 5 rows per sample" in line for line in result.details), result
    assert "undecided" not in result.summary, result.details
    for batch in (4,) if size == 4 else (3, 6):
        x = np.random.default_rng(batch).standard_normal((batch, T, D)).astype(np.float32)
        alone = np.concatenate([run(original, x[i : i + 1]) for i in range(batch)])
        np.testing.assert_array_equal(run(patched, x), alone)  # before: sample 0's row alone, [1, D]


def test_a_constant_row_of_the_batch_axis_itself_is_still_refused() -> None:
    """One row per sample is the batch axis: x[[0]] picks sample 0 at every batch (``pinned``)."""
    nodes = [helper.make_node("Gather", ["x", "picked"], ["y"], axis=0, name="pick")]
    picked = numpy_helper.from_array(np.array([0], np.int64), "picked")
    model = graph_model(nodes, [tensor_info("x", [1, D])], [tensor_info("y", [1, D])], [picked])
    with pytest.raises(PatchError, match=r"Gather 'pick' picks samples \[0\] of axis 0"):
        set_batch(model, size=4)
