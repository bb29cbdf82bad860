"""Constants that pin the batch to the exported samples prove a model is not batchable (issue 24, item 5).

A streaming enhancer updates its cache with ScatterND through constant coordinates that address
sample 0, and its GRUs start from a constant ``initial_h [2, 1, 4]``. Nothing set_batch could
rewrite makes either batch: it refuses (exit 4), naming the node, instead of writing a model that
onnxruntime cannot run at the new batch.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import PatchError
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def cache_update_model(batch=1):
    """cache [batch, 3, 4] gets x [batch, 4] written at (0, 2) through constant indices."""
    nodes = [helper.make_node("ScatterND", ["cache", "where", "x"], ["new_cache"], name="cache_update")]
    where = numpy_helper.from_array(np.array([[0, 2]], dtype=np.int64), "where")
    return graph_model(
        nodes,
        [tensor_info("cache", [batch, 3, 4]), tensor_info("x", [batch, 4])],
        [tensor_info("new_cache", [batch, 3, 4])],
        [where],
    )


def gru_model(batch=1, hidden=4, expanded=False):
    """x [batch, 5, 3] -> time-major -> a bidirectional GRU from the constant state h0 [2, 1, hidden];
    ``expanded``: TorchScript's ``h0.expand(-1, x.size(0), -1)`` of a parameter, traced at batch 1 (an
    Expand of constants)."""
    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(rng.standard_normal((2, 3 * hidden, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((2, 3 * hidden, hidden)).astype(np.float32), "R"),
        numpy_helper.from_array(np.zeros((2, 1, hidden), np.float32) + 0.5, "h0"),
    ]
    state = "h0"
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])]
    if expanded:
        constants.append(numpy_helper.from_array(np.array([1, 1, 1], np.int64), "ones"))
        nodes.append(helper.make_node("Expand", ["h0", "ones"], ["h0_expanded"], name="expand_h0"))
        state = "h0_expanded"
    nodes.append(
        helper.make_node(
            "GRU", ["xt", "W", "R", "", "", state], ["", "h"], name="gru", hidden_size=hidden, direction="bidirectional"
        )
    )
    return graph_model(nodes, [tensor_info("x", [batch, 5, 3])], [tensor_info("h", [2, batch, hidden])], constants)


@pytest.mark.parametrize("batch", [1, "N"])
def test_a_cache_written_through_constant_coordinates_of_sample_zero_is_refused(batch):
    with pytest.raises(PatchError) as caught:
        set_batch(cache_update_model(batch), size=4, inputs=["cache", "x"])
    text = str(caught.value)
    assert "ScatterND 'cache_update' writes through constant indices 'where' that address samples [0] of axis 0" in text
    assert "not batchable" in text and "nothing is written" in text


@pytest.mark.parametrize("expanded", [False, True], ids=["constant", "expand_of_constants"])
@pytest.mark.parametrize("batch", [1, "N"])
def test_a_constant_state_of_one_sample_is_repeated_to_the_batch(batch, expanded):
    """Every sample starts from the same constant h0 (dynamo folds torch.zeros(2, B, H) at batch 1 so,
    TorchScript keeps a parameter's expand as an Expand of constants): repeated by a Tile, each sample
    runs as it did alone. Before, the Expand's state was written as it was and onnxruntime refused it."""
    original, patched = gru_model(batch, expanded=expanded), gru_model(batch, expanded=expanded)
    result = set_batch(patched, size=4)
    assert "1 input repeated to the batch" in result.summary, result.summary
    x = np.random.default_rng(2).standard_normal((4, 5, 3)).astype(np.float32)
    alone = np.concatenate([ort_run(original, {"x": x[i : i + 1]}) for i in range(4)], axis=1)
    np.testing.assert_allclose(ort_run(patched, {"x": x}), alone, rtol=1e-5, atol=1e-6)


def test_a_constant_state_at_a_symbolic_batch_is_repeated_by_the_batch_at_run_time():
    original, patched = gru_model(), gru_model()
    result = set_batch(patched, size="M")
    assert any("repeated dim(x, 0) times" in line for line in result.details), result.details
    for batch in (3, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 5, 3)).astype(np.float32)
        alone = np.concatenate([ort_run(original, {"x": x[i : i + 1]}) for i in range(batch)], axis=1)
        np.testing.assert_allclose(ort_run(patched, {"x": x}), alone, rtol=1e-5, atol=1e-6)


def test_a_constant_state_at_a_symbolic_batch_before_opset_11_is_refused():
    """Nothing computes the batch at run time before opset 11 (a Tile's repeats from Shape)."""
    model = gru_model()
    del model.opset_import[:]
    model.opset_import.append(onnx.helper.make_opsetid("", 9))
    with pytest.raises(PatchError) as caught:
        set_batch(model, size="M")
    text = str(caught.value)
    assert "GRU 'gru' starts from the constant state 'h0' (initial_h, [2, 1, 4])" in text, text
    assert "not batchable" in text


def ort_run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_a_gather_of_sample_zero_is_refused():
    nodes = [helper.make_node("Gather", ["x", "first"], ["y"], name="take_first", axis=0)]
    first = numpy_helper.from_array(np.array(0, dtype=np.int64), "first")
    model = graph_model(nodes, [tensor_info("x", [1, 4])], [tensor_info("y", [4])], [first])
    with pytest.raises(PatchError, match=r"Gather 'take_first' picks samples \[0\] of axis 0, which carries the batch"):
        set_batch(model, size=4)


def test_a_state_fed_as_an_input_still_batches():
    """The remedy the message names works: the same GRU with its state as an input is batched."""
    model = gru_model(1)
    state = model.graph.initializer.pop()  # h0 becomes an input
    model.graph.input.append(helper.make_tensor_value_info("h0", state.data_type, [2, 1, 4]))
    result = set_batch(model, size=4, inputs={"x": 0, "h0": 1})
    assert result.modified and "batch 4 on x[0], h0[1]" in result.summary


def test_a_state_input_left_at_one_sample_is_undecided_not_written():
    """A state fed as an input the batch is not asked for stays one sample at every batch: onnxruntime
    would refuse the GRU at batch 4, so the point is undecided (apply --no-verify writes nothing)."""
    model = gru_model(1)
    state = model.graph.initializer.pop()
    model.graph.input.append(helper.make_tensor_value_info("h0", state.data_type, [2, 1, 4]))
    result = set_batch(model, size=4, inputs={"x": 0})
    assert any("starting state initial_h of GRU 'gru' holds 1 sample(s) at every batch" in u for u in result.details), (
        result.details
    )
    assert "undecided" in result.summary, result.summary


def test_the_refusal_stops_apply_with_exit_4_and_writes_nothing(tmp_path, run_cli):
    import onnx

    onnx.save(cache_update_model(1), tmp_path / "m.onnx")
    text = "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size: 4, inputs: [cache, x]}\n"
    result = run_cli("apply", write_spec(tmp_path, text), "--no-verify")
    assert result.exit_code == 4, result.output
    assert "ScatterND 'cache_update'" in result.output and not (tmp_path / "out.onnx").exists()


def test_a_batch_that_runs_along_a_recurrence_is_refused():
    """silero's sequence models: input [sequence_length, 576] is the LSTM's time axis, not a batch."""
    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "R"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["x", "one"], ["steps"]),  # [T, 1, 3]: one sequence of T steps
        helper.make_node("LSTM", ["steps", "W", "R", "", "", "h", "c"], ["", "h_n", "c_n"], name="rnn", hidden_size=3),
    ]
    model = graph_model(
        nodes,
        [tensor_info("x", ["sequence_length", 3]), tensor_info("h", [1, 1, 3]), tensor_info("c", [1, 1, 3])],
        [tensor_info("h_n", [1, 1, 3]), tensor_info("c_n", [1, 1, 3])],
        constants,
    )
    with pytest.raises(PatchError, match=r"LSTM 'rnn' runs along axis 0 of its input 'steps', its sequence"):
        set_batch(model, size=4)


def test_a_dynamic_quantization_over_the_batch_is_said_in_the_summary_not_silent():
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, 8])], [tensor_info("y", [1, 8])])
    result = set_batch(model, size=4)
    assert "the samples are not independent: DynamicQuantizeLinear 'quantize_x' computes one scale" in result.summary
    assert any(line.startswith("couples samples: DynamicQuantizeLinear 'quantize_x'") for line in result.details)


def test_an_output_whose_rank_nothing_derives_is_undecided():
    """A custom op upstream: the output's rank is the old declaration's, whose size was the old batch."""
    node = helper.make_node("Mystery", ["x"], ["y"], domain="acme")
    model = graph_model([node], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 5])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    result = set_batch(model, size=4)
    assert "1 undecided" in result.summary, result.summary
    assert any("output 'y' was declared [1, 5]; nothing derives its shape" in line for line in result.details)


def index_model(opset=9):
    """PyTorch 0.3's ``x[0]``: a Slice with attribute bounds [0:1] on axis 0, then Squeeze axis 0."""
    nodes = [
        helper.make_node("Slice", ["x"], ["first"], name="index", axes=[0], starts=[0], ends=[1]),
        helper.make_node("Squeeze", ["first"], ["y"], axes=[0]),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 3])], [tensor_info("y", [3])], opset=opset)


@pytest.mark.parametrize("size", [4, "N"])
def test_an_attribute_slice_that_keeps_sample_zero_is_refused(size):
    with pytest.raises(PatchError) as caught:
        set_batch(index_model(), size=size)
    text = str(caught.value)
    assert "Slice 'index' slices axis 0, which carries the batch, with bounds in its attributes" in text
    assert "not batchable" in text and "nothing is written" in text


def test_an_attribute_slice_of_another_axis_is_left_alone():
    nodes = [helper.make_node("Slice", ["x"], ["y"], name="crop", axes=[1], starts=[0], ends=[2])]
    model = graph_model(nodes, [tensor_info("x", [1, 3])], [tensor_info("y", [1, 2])], opset=9)
    result = set_batch(model, size=4)
    assert result.modified and [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [4, 2]


def test_init_at_a_static_batch_takes_a_constant_state_of_one_sample(tmp_path, run_cli):
    """init probes at a symbolic batch, where the state cannot be repeated; at the size asked it can."""
    import onnx

    onnx.save(gru_model(1), tmp_path / "m.onnx")
    made = run_cli("init", tmp_path / "m.onnx", "--batch", "4", "--output", tmp_path / "spec.yaml", cwd=tmp_path)
    assert made.exit_code == 0, made.output
    applied = run_cli("apply", tmp_path / "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0 and "passed" in applied.output, applied.output


def framed_waveform_model():
    """tf2onnx's TFLite log-mel: a waveform x [1, 12] reshaped to 4 rows of 3 (the batch folded into
    the rows) and framed by a constant table of row indices (3 frames of 2 rows), summed per frame."""
    nodes = [
        helper.make_node("Reshape", ["x", "rows"], ["folded"], name="fold"),
        helper.make_node("Gather", ["folded", "frames"], ["framed"], name="frame", axis=0),
        helper.make_node("ReduceSum", ["framed", "last"], ["y"], keepdims=0),
    ]
    constants = [
        numpy_helper.from_array(np.array([4, 3], dtype=np.int64), "rows"),
        numpy_helper.from_array(np.array([[0, 1], [1, 2], [2, 3]], dtype=np.int64), "frames"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "last"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 12])], [tensor_info("y", [3, 2])], constants, opset=13)


def test_constant_rows_read_from_a_folded_batch_are_refused():
    """Before, set_batch rewrote the Reshape to [16, 3] and wrote a model that frames sample 0 alone."""
    with pytest.raises(PatchError) as caught:
        set_batch(framed_waveform_model(), size=4)
    message = str(caught.value)
    assert "Gather 'frame' picks rows [0, 1, 2, 3] of axis 0, which holds the batch with 4 rows per sample" in message
