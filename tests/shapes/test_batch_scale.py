"""set_batch's shortcuts for LLM-sized graphs, held to the answers of the long way.

- ``declare_from_trace`` skips the annotations that ONNX's inference already got right (``_Agreement``):
  the model it writes is byte for byte the one the full reconciliation writes.
- a finished trace holds no reference cycle: its evaluation (a Known per tensor and point) is freed when
  the trace is dropped, not at the cyclic collector's next full pass.
- ``squeezed_axis`` finds every squeezed tensor in one pass, and answers as the per-name check did.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import patchspec.shapes.batch.rewrite as batch_rewrite
from helpers import graph_model, tensor_info
from patchspec.shapes.batch.tracker import trace_batch
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def neck_and_squeeze_model(seq: int | str = 8) -> onnx.ModelProto:
    """A baked Reshape, a Resize sized from ``Shape -> Slice -> ReduceProd -> Concat`` (ONNX's inference
    loses its shape there, so that annotation disagrees with the evaluation), and a Squeeze without axes
    that drops a batch of 1 (the rank differs between the batches); ``seq`` symbolic moves another
    input dim."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "baked"], ["flat"]),  # [1, 4 * seq]: bakes the batch
        helper.make_node("Unsqueeze", ["r", "axis3"], ["r4"]),  # [1, 4, seq, 1]
        helper.make_node("Shape", ["r4"], ["r4_shape"]),
        helper.make_node("Slice", ["r4_shape", "start0", "end2"], ["nc"]),
        helper.make_node("Slice", ["r4_shape", "end2", "end4"], ["hw"]),
        helper.make_node("ReduceProd", ["hw"], ["area"], keepdims=1),  # ONNX's data propagation stops here
        helper.make_node("Concat", ["nc", "area", "one"], ["sizes"], axis=0),  # [1, 4, seq, 1]
        helper.make_node("Resize", ["r4", "", "", "sizes"], ["up"], mode="nearest"),
        helper.make_node("ReduceSum", ["up", "axes123"], ["pooled"], keepdims=1),  # [1, 1, 1, 1] at batch 1
        helper.make_node("Squeeze", ["pooled"], ["score"]),  # no axes: drops the batch of 1 too
        helper.make_node("Identity", ["up"], ["up_out"]),  # "up" and "score" are annotated in value_info
        helper.make_node("Neg", ["score"], ["score_out"]),
    ]
    inits = [
        _ints("baked", [1, -1]),
        _ints("axis3", [3]),
        _ints("start0", [0]),
        _ints("end2", [2]),
        _ints("end4", [4]),
        _ints("one", [1]),
        _ints("axes123", [1, 2, 3]),
    ]
    outputs = [tensor_info("flat", None), tensor_info("up_out", None), tensor_info("score_out", None)]
    return graph_model(nodes, [tensor_info("x", [1, 4, seq])], outputs, inits, opset=13)


def _set_batch(model: onnx.ModelProto, size: int | str) -> bytes:
    params = {"size": size}
    SetBatchPatch().apply(model, params, patch_context("set_batch", params))  # type: ignore[arg-type]
    return model.SerializeToString()


@pytest.mark.parametrize("seq", [8, "seq"])
@pytest.mark.parametrize("size", [4, 1])
def test_annotations_skipped_are_the_ones_the_full_reconciliation_leaves(monkeypatch, seq, size):
    """The same bytes with the shortcut and without it, and the shortcut took some annotations and
    left others (so both ways were exercised)."""
    model = neck_and_squeeze_model(seq)
    if size == 1:  # a batch exported dynamic, set to its old size: the old batch's point is the new one
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "B"
    answers: list[bool] = []
    real = batch_rewrite._Agreement.__call__

    def recording(self, info):
        answers.append(real(self, info))
        return answers[-1]

    monkeypatch.setattr(batch_rewrite._Agreement, "__call__", recording)
    fast = _set_batch(onnx.load_from_string(model.SerializeToString()), size)
    monkeypatch.setattr(batch_rewrite._Agreement, "__call__", lambda self, info: False)
    slow = _set_batch(onnx.load_from_string(model.SerializeToString()), size)
    assert fast == slow
    assert True in answers and False in answers, answers


def test_a_symbolic_batch_takes_the_full_reconciliation(monkeypatch):
    made = []
    monkeypatch.setattr(batch_rewrite, "_Agreement", lambda *args: made.append(args))
    _set_batch(neck_and_squeeze_model(), "N")
    assert made == []


def test_a_dropped_trace_frees_its_evaluation_without_the_collector():
    model = neck_and_squeeze_model()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        trace = trace_batch(model, [("x", 0)], 1, 4)
        assert trace.rewrites, "the baked Reshape is decided"
        evaluator = weakref.ref(trace.evaluator)
        del trace
        assert evaluator() is None, "a reference cycle keeps the evaluation alive until a collection"
    finally:
        if was_enabled:
            gc.enable()


def test_squeezed_axis_names_the_tensors_that_lost_the_batch_of_one():
    trace = trace_batch(neck_and_squeeze_model(), [("x", 0)], 1, 4)
    shapes = {name: [known.shape for known in trace.at(name)[:2]] for name in ("pooled", "score")}
    assert shapes == {"pooled": [(1, 1, 1, 1), (4, 1, 1, 1)], "score": [(), (4,)]}
    assert trace.squeezed_names() == {"score", "score_out"}  # and what reads it elementwise
    assert (trace.squeezed_axis("score"), trace.squeezed_axis("pooled"), trace.squeezed_axis("absent")) == (
        0,
        None,
        None,
    )
    assert trace.batch_dim("score", 0) == ("batch", 1)


def test_the_resize_annotation_is_corrected_from_the_evaluation():
    """The premise of the shortcut's False answers: where ONNX's inference loses the batch, the
    declaration written is the evaluation's."""
    model = neck_and_squeeze_model()
    _set_batch(model, 4)
    declared = {info.name: info for info in [*model.graph.value_info, *model.graph.output]}
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in declared["up"].type.tensor_type.shape.dim]
    assert dims == [4, 4, 8, 1]
    assert declared["up"].type.tensor_type.elem_type == TensorProto.FLOAT
