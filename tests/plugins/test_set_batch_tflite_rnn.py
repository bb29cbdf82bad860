"""Keras RNNs converted to TFLite, then to ONNX by tf2onnx's ``from_tflite``, at their static batch 1:

- the Loop's trip count is INT64_MAX, a bound: the body stops it by comparing a counter it carries
  with the steps (``i + 1 < 7``). Its scan output stacks one step each, so its first axis was unknown
  and the Reshape back to batch-major after it could not be decided. The evaluator now runs such a
  counting condition (``shapes/loop_trips``);
- each step is written as ``[1, 1, H]`` and squeezed on axis 0: of the two axes of 1 the batch is the
  one the Squeeze keeps (``Folds.placed``), not the first;
- an RNN that returns its last state carries a list of one step ``[1, 1, H]`` out of the Loop and slices
  its last element: the batch is again the axis the Slice does not keep (``singles``), and the list's
  starting value is repeated to the batch on that axis;
- an LSTM's recurrent product ``[1, 4H]`` is reshaped to ``[4H]`` (the batch's axis of 1 dropped) and
  added as a Gemm's C: it becomes an Identity, so each sample keeps its own row.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.shapes.known import Known
from patchspec.shapes.loop_trips import MOST_TRIPS, loop_trips

STEPS, H = 7, 5
INT64_MAX = np.iinfo(np.int64).max


def counting_body(limit: str = "limit") -> onnx.GraphProto:
    """Step ``i`` of ``steps`` added to the state, written as [1, 1, H] and squeezed on axis 0 (the scan
    output); the carried counter goes up by one and the condition is ``counter + 1 < limit``."""
    nodes = [
        helper.make_node("Gather", ["steps", "counter"], ["row"], axis=0),
        helper.make_node("Add", ["state", "row"], ["next"]),
        helper.make_node("Reshape", ["next", "one_step"], ["step"], name="item"),
        helper.make_node("Squeeze", ["step", "axis0"], ["scan"], name="unitem"),
        helper.make_node("Add", ["counter", "one"], ["counter_next"]),
        helper.make_node("Less", ["counter_next", limit], ["cond_out"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([1, 1, H], np.int64), "one_step"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    inputs = [
        tensor_info("i", [], onnx.TensorProto.INT64),
        tensor_info("cond", [], onnx.TensorProto.BOOL),
        tensor_info("counter", [], onnx.TensorProto.INT64),
        tensor_info("state", [1, H]),
    ]
    outputs = [
        tensor_info("cond_out", [], onnx.TensorProto.BOOL),
        tensor_info("counter_next", [], onnx.TensorProto.INT64),
        tensor_info("next", [1, H]),
        tensor_info("scan", [1, H]),
    ]
    return helper.make_graph(nodes, "step", inputs, outputs, constants)


def tflite_rnn(conv1d: bool = False) -> onnx.ModelProto:
    """x [1, 7, 5] -> Reshape [7, 1, 5] (the time-major transpose at batch 1) -> the counting Loop ->
    its steps [7, 1, 5] -> Reshape [1, 7, 5] (batch-major again) -> y. With ``conv1d`` x is [1, 1, 7, 5],
    as TFLite's Conv1D leaves it (NHWC, a height of 1), and the same Reshape drops that 1 too."""
    nodes = [
        helper.make_node("Reshape", ["x", "time_major"], ["steps"], name="transpose"),
        helper.make_node(
            "Loop", ["bound", "", "zero", "zeros"], ["count", "last", "steps_out"], name="rnn", body=counting_body()
        ),
        helper.make_node("Reshape", ["steps_out", "batch_major"], ["y"], name="transpose_back"),
    ]
    constants = [
        numpy_helper.from_array(np.array([STEPS, 1, H], np.int64), "time_major"),
        numpy_helper.from_array(np.array([1, STEPS, H], np.int64), "batch_major"),
        numpy_helper.from_array(np.array(INT64_MAX, np.int64), "bound"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(STEPS, np.int64), "limit"),
        numpy_helper.from_array(np.zeros([1, H], np.float32), "zeros"),
    ]
    x = [1, 1, STEPS, H] if conv1d else [1, STEPS, H]
    return graph_model(nodes, [tensor_info("x", x)], [tensor_info("y", [1, STEPS, H])], constants)


@pytest.mark.parametrize("size", [4, "N"])
@pytest.mark.parametrize("conv1d", [False, True])
def test_a_tflite_rnn_is_batched_sample_by_sample(size: int | str, conv1d: bool) -> None:
    """With ``conv1d`` the data [1, 1, 7, 5] has a second axis of 1: it gets a Transpose before the Reshape
    that puts the batch where the Reshape's one 1 is ([1, 7, 1, 5]); before, it was refused."""
    original = tflite_rnn(conv1d)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert "Reshapes changed to keep samples apart" in result.summary, result.summary
    assert (
        any("gave Reshape 'transpose' a Transpose before it (perm [1, 2, 0, 3])" in line for line in result.details)
        == conv1d
    )
    x = rand(4, 1, STEPS, H) if conv1d else rand(4, STEPS, H)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-5, atol=1e-6)


def last_state_body() -> onnx.GraphProto:
    """One LSTM-like step as TFLite writes it: the recurrent product [1, H] reshaped to [H] and added as the
    Gemm's C; the next state is also written [1, 1, H] as the carried list of the last step."""
    nodes = [
        helper.make_node("Gather", ["steps", "counter"], ["row"], axis=0),
        helper.make_node("MatMul", ["state", "r"], ["recurrent"]),
        helper.make_node("Reshape", ["recurrent", "flat"], ["recurrent_flat"], name="drop_batch"),
        helper.make_node("Gemm", ["row", "w", "recurrent_flat"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["next"]),
        helper.make_node("Reshape", ["next", "one_step"], ["item"], name="item"),
        helper.make_node("Add", ["counter", "one"], ["counter_next"]),
        helper.make_node("Less", ["counter_next", "limit"], ["cond_out"]),
    ]
    rng = np.random.default_rng(2)
    constants = [
        numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32), "r"),
        numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([H], np.int64), "flat"),
        numpy_helper.from_array(np.array([1, 1, H], np.int64), "one_step"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    inputs = [
        tensor_info("i", [], onnx.TensorProto.INT64),
        tensor_info("cond", [], onnx.TensorProto.BOOL),
        tensor_info("counter", [], onnx.TensorProto.INT64),
        tensor_info("state", [1, H]),
        tensor_info("last", [1, 1, H]),
    ]
    outputs = [
        tensor_info("cond_out", [], onnx.TensorProto.BOOL),
        tensor_info("counter_next", [], onnx.TensorProto.INT64),
        tensor_info("next", [1, H]),
        tensor_info("item", [1, 1, H]),
    ]
    return helper.make_graph(nodes, "step", inputs, outputs, constants)


def tflite_last_state() -> onnx.ModelProto:
    """x [1, 7, 5] -> Reshape [7, 1, 5] -> the Loop -> its carried list [1, 1, 5], sliced [-1:] and squeezed
    on axis 0 -> y [1, 5]."""
    nodes = [
        helper.make_node("Reshape", ["x", "time_major"], ["steps"], name="transpose"),
        helper.make_node(
            "Loop",
            ["bound", "", "zero", "zeros", "empty_list"],
            ["count", "state_out", "list_out"],
            name="rnn",
            body=last_state_body(),
        ),
        helper.make_node("Slice", ["list_out", "starts", "ends", "axes"], ["last_step"], name="last"),
        helper.make_node("Squeeze", ["last_step", "axis0"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([STEPS, 1, H], np.int64), "time_major"),
        numpy_helper.from_array(np.array(INT64_MAX, np.int64), "bound"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(STEPS, np.int64), "limit"),
        numpy_helper.from_array(np.zeros([1, H], np.float32), "zeros"),
        numpy_helper.from_array(np.zeros([1, 1, H], np.float32), "empty_list"),
        numpy_helper.from_array(np.array([-1, 0, 0], np.int64), "starts"),
        numpy_helper.from_array(np.array([2**31 - 1] * 3, np.int64), "ends"),
        numpy_helper.from_array(np.array([0, 1, 2], np.int64), "axes"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, STEPS, H])], [tensor_info("y", [1, H])], constants)


@pytest.mark.parametrize("size", [4, "N"])
def test_an_rnn_that_returns_its_last_state_is_batched_sample_by_sample(size: int | str) -> None:
    original = tflite_last_state()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert any("replaced Reshape 'drop_batch' (shape 'flat') by an Identity" in line for line in result.details)
    x = rand(4, STEPS, H)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-5, atol=1e-5)


def knowns(*values: object) -> list[Known]:
    return [Known(onnx.TensorProto.INT64, (), None if v is None else np.asarray(v)) for v in values]


@pytest.mark.parametrize(
    ("bound", "condition", "limit", "trips"),
    [
        (INT64_MAX, True, STEPS, STEPS),  # the last step makes counter + 1 < 7 false
        (3, True, STEPS, 3),  # the bound stops it first
        (INT64_MAX, False, STEPS, 0),  # never entered
        (INT64_MAX, True, None, None),  # a limit not known: not counted
        (INT64_MAX, True, MOST_TRIPS + 10, None),  # longer than it is run here
    ],
)
def test_a_counting_condition_gives_the_trips(
    bound: int, condition: bool, limit: int | None, trips: int | None
) -> None:
    names = ["bound", "cond", "zero", "zeros"]
    given = [*knowns(bound), Known(onnx.TensorProto.BOOL, (), np.array(condition)), *knowns(0), Known(1, (1, H))]
    scope = {"limit": knowns(limit)}
    assert loop_trips(counting_body(), (names, given), (scope, 0), 17) == trips


def test_a_reshape_that_drops_a_1_after_the_batch_gets_no_transpose() -> None:
    """YOLOv8's DFL: a conv's [1, 1, 4, 2100] made [1, 4, 2100] keeps the batch before the same dims; a
    first form of the Conv1D rule put it behind the dropped 1 and the head's Slice read 28 rows at batch 7."""
    nodes = [
        helper.make_node("Reshape", ["x", "three_d"], ["boxes"], name="dfl"),
        helper.make_node("Slice", ["boxes", "start", "end", "axis1"], ["y"], name="xy"),
    ]
    constants = [
        numpy_helper.from_array(np.array([1, 4, 6], np.int64), "three_d"),
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([2], np.int64), "end"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    original = graph_model(nodes, [tensor_info("x", [1, 1, 4, 6])], [tensor_info("y", [1, 2, 6])], constants)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert not any("Transpose" in line for line in result.details), result.details
    x = rand(4, 1, 4, 6)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0])


def test_a_padding_mask_merged_with_the_heads_gets_no_transpose() -> None:
    """torch's attention with a key_padding_mask at batch 1: the mask [1, 1, 1, T] expanded to the heads
    [1, 2, 1, T] and reshaped to [2, 1, T] (batch x heads): its 1 is no batch, and a walk that refuses
    nothing takes no guess at it. A first form of the Conv1D rule made it a Transpose and refused."""
    nodes = [
        helper.make_node("Reshape", ["scores", "merged"], ["per_head"]),  # [B, 2, 3, 5] -> [B*2, 3, 5]
        helper.make_node("Reshape", ["mask", "b111"], ["mask4"]),  # [B, 5] -> [B, 1, 1, 5]
        helper.make_node("Expand", ["mask4", "heads"], ["mask_heads"]),  # [B, 2, 1, 5]
        helper.make_node("Reshape", ["mask_heads", "merged_mask"], ["mask3"], name="mask_merge"),  # [B*2, 1, 5]
        helper.make_node("Add", ["per_head", "mask3"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("Reshape", ["p", "out"], ["y"]),  # [B, 2, 3, 5]
    ]
    constants = [
        numpy_helper.from_array(np.array(value, np.int64), name)
        for name, value in (
            ("merged", [2, 3, 5]),
            ("b111", [1, 1, 1, 5]),
            ("heads", [1, 2, 1, 1]),
            ("merged_mask", [2, 1, 5]),
            ("out", [1, 2, 3, 5]),
        )
    ]
    inputs = [tensor_info("scores", [1, 2, 3, 5]), tensor_info("mask", [1, 5])]
    original = graph_model(nodes, inputs, [tensor_info("y", [1, 2, 3, 5])], constants)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert not any("Transpose" in line for line in result.details), result.details
    feeds = {"scores": rand(4, 2, 3, 5), "mask": rand(4, 5, seed=1)}
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, list(feeds))[0], rtol=1e-6)
