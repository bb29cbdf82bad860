"""Keras RNNs that tf2onnx exported at a static batch 1, as apps ship them (``transposes`` and Loop states):

- the time-major transpose of a batch of 1 is written as a Reshape (``[1, 7, 5]`` to ``[7, 1, 5]``);
  rewriting its batch element folded the batch into time and the Loop read sample 0's steps. It is
  now the Transpose it is at batch 1;
- a Reshape after the Loop that reads its time-major steps (``[7, 1, 6]`` to ``[7, 6]``) had the
  transpose back to the batch first folded into it: it now gets that Transpose before it;
- the Loop's starting state is a constant of one sample (``[1, 6]``): where the body needs the batch
  there (a Gemm whose bias follows the batch, which onnxruntime refuses) it is repeated to the batch.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info, write_spec
from patchspec.shapes.batch.transposes import MARK


def loop_body(state: list[int], step: str) -> onnx.GraphProto:
    """A Loop body that reads step ``i`` of ``steps`` and makes the next state from it with ``step``
    ("Add": state + row; "Gemm": row @ w + state @ u as Gemm's C, as tf2onnx writes a SimpleRNN);
    the state is also a scan output."""
    nodes = [helper.make_node("Gather", ["steps", "i"], ["row"], axis=0)]
    if step == "Add":
        nodes.append(helper.make_node("Add", ["state", "row"], ["next"]))
    else:
        nodes.append(helper.make_node("Gemm", ["row", "w_in", "bias"], ["projected"]))
        nodes.append(helper.make_node("Gemm", ["state", "u", "projected"], ["next"]))
    nodes += [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Identity", ["next"], ["scan"])]
    return helper.make_graph(
        nodes,
        "step",
        [
            tensor_info("i", [], onnx.TensorProto.INT64),
            tensor_info("cond", [], onnx.TensorProto.BOOL),
            tensor_info("state", state),
        ],
        [tensor_info("cond_out", [], onnx.TensorProto.BOOL), tensor_info("next", state), tensor_info("scan", state)],
    )


def time_major_loop(width: tuple[int, ...] = (5,), step: str = "Add", per_step: bool = False) -> onnx.ModelProto:
    """tf2onnx's Keras RNN at a static batch of 1: the transpose [1, 7, 5] -> [7, 1, 5] written as a
    Reshape (the same bytes at batch 1), then a Loop of 7 steps from a zero constant state [1, 5]; a
    MatMul makes y [1, 2] from the last state. With ``width`` (1, 5) the data has a second axis of 1:
    [1, 7, 1, 5] to [7, 1, 1, 5]. With ``per_step`` y is [1, 7, 2] from every step, as a Dense after
    ``return_sequences=True``: Reshape [7, 5], MatMul, Reshape [1, 7, 2]."""
    state = [1, *width]
    outputs = ["summed", "steps_out"]
    nodes = [
        helper.make_node("Reshape", ["x", "time_major"], ["steps"], name="transpose"),
        helper.make_node("Loop", ["count", "", "zeros"], outputs, name="rnn", body=loop_body(state, step)),
    ]
    if per_step:
        nodes += [
            helper.make_node("Reshape", ["steps_out", "rows"], ["flat"], name="rows"),
            helper.make_node("MatMul", ["flat", "w"], ["dense"]),
            helper.make_node("Reshape", ["dense", "back"], ["y"], name="back"),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["summed", "w"], ["y"]))
    rng = np.random.default_rng(1)
    constants = [
        numpy_helper.from_array(np.array([7, 1, *width], np.int64), "time_major"),
        numpy_helper.from_array(np.array(7, np.int64), "count"),
        numpy_helper.from_array(np.zeros(state, np.float32), "zeros"),
        numpy_helper.from_array(rng.standard_normal((5, 2)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((5, 5)).astype(np.float32), "w_in"),
        numpy_helper.from_array(rng.standard_normal((5, 5)).astype(np.float32), "u"),
        numpy_helper.from_array(np.zeros(5, np.float32), "bias"),
        numpy_helper.from_array(np.array([7, 5], np.int64), "rows"),
        numpy_helper.from_array(np.array([1, 7, 2], np.int64), "back"),
    ]
    y = [1, 7, 2] if per_step else [*state[:-1], 2]
    return graph_model(nodes, [tensor_info("x", [1, 7, *width])], [tensor_info("y", y)], constants)


def batched(original: onnx.ModelProto, size: int | str) -> tuple[onnx.ModelProto, list[str], str]:
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    return model, list(result.details), result.summary


def assert_per_sample(original: onnx.ModelProto, model: onnx.ModelProto) -> None:
    x = rand(4, 7, 5)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [4, "N"])
def test_a_reshape_that_is_a_transpose_at_batch_1_becomes_that_transpose(size: int | str) -> None:
    original = time_major_loop()
    model, details, summary = batched(original, size)
    assert "1 Reshape changed to keep samples apart" in summary, summary
    first = model.graph.node[0]
    assert (first.op_type, first.doc_string) == ("Transpose", MARK)
    assert any("by a Transpose (perm [1, 0, 2])" in line for line in details), details
    assert_per_sample(original, model)


@pytest.mark.parametrize("size", [4, "N"])
def test_a_reshape_of_the_steps_gets_the_transpose_back_it_had_folded(size: int | str) -> None:
    """[7, 1, 5] -> [7, 5]: at batch 1 the steps of the one sample; at batch 4 it reads [7, 4, 5], whose
    rows are time-major. Before, [7, 5] became [28, 5] and the Reshape to [4, 7, 2] mixed the samples."""
    original = time_major_loop(per_step=True)
    model, details, _ = batched(original, size)
    assert any("gave Reshape 'rows' a Transpose before it (perm [1, 0, 2])" in line for line in details), details
    assert_per_sample(original, model)


@pytest.mark.parametrize("size", [4, "N"])
def test_a_constant_loop_state_the_body_needs_batched_is_repeated(size: int | str) -> None:
    """The state's Gemm has C [4, 5] from the steps, and A [1, 5]: onnxruntime refuses a C larger than
    the output (onnx's inference said [1, 5]); the zero state is now tiled to the batch."""
    original = time_major_loop(step="Gemm")
    model, details, _ = batched(original, size)
    assert any(
        "the starting value 'zeros' that Loop 'rnn' carries holds one sample's state" in line for line in details
    )
    assert_per_sample(original, model)


def test_a_batch_no_output_follows_is_refused(tmp_path, run_cli) -> None:
    """With a second axis of 1 in the data no permutation is sure: the batch folds into time and no
    output follows it, which is refused, naming the Reshape."""
    onnx.save(time_major_loop((1, 5)), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 4, result.output
    assert "no output follows the batch: 'y' [1, 1, 2] keeps its shape at every batch" in result.output
    assert "Reshape 'transpose' ([1, 7, 1, 5] to [7, 1, 1, 5]) moves the batch's axis at batch 1" in result.output
