"""Audio front ends (issue 34: hidden models of an exporter not seen before, onnx-asr's OnnxScript
preprocessors): a waveform ``[batch, N]`` framed by an STFT, or by slices that are empty below a window.

Two ways set_batch failed on them: onnx's shape inference reads an STFT without ``onesided`` as
two-sided (512 bins for a window of 512, where onnxruntime gives 257), so the batch was lost at the
MatMul of the mel filters and the model refused; and the other symbolic dims were evaluated at sizes
below the window (128 and 192 samples), where every length gives the same empty slice or one frame, so
that size was declared as fixed: the written model failed to run, or gave wrong numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from set_batch_kit import assert_declared_shapes_hold, const, per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

WINDOW, HOP, BINS, MELS = 64, 16, 33, 8
INT64_MAX = np.iinfo(np.int64).max


def stft_model(onesided: int | None = None):
    """A log-mel front end: STFT (``onesided`` as given, or left out), power, mel filters, log."""
    attributes = {} if onesided is None else {"onesided": onesided}
    bins = BINS if onesided in (None, 1) else WINDOW
    nodes = [
        helper.make_node("STFT", ["waveforms", "hop", "window"], ["image"], name="stft", **attributes),
        helper.make_node("ReduceSumSquare", ["image"], ["power"], axes=[-1], keepdims=0),
        helper.make_node("MatMul", ["power", "mel"], ["mel_power"]),
        helper.make_node("Add", ["mel_power", "guard"], ["guarded"]),
        helper.make_node("Log", ["guarded"], ["features"]),
    ]
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(np.array(HOP, dtype=np.int64), "hop"),
        numpy_helper.from_array(np.hanning(WINDOW).astype(np.float32), "window"),
        numpy_helper.from_array(rng.random((bins, MELS)).astype(np.float32), "mel"),
        numpy_helper.from_array(np.array(1e-6, dtype=np.float32), "guard"),
    ]
    inputs = [tensor_info("waveforms", ["batch_size", "N"])]
    return graph_model(nodes, inputs, [tensor_info("features", ["batch_size", "T", MELS])], weights)


def test_an_stft_without_onesided_is_evaluated_one_sided() -> None:
    model = stft_model()
    evaluator = ShapeEvaluator(model, [{"waveforms": Known(TensorProto.FLOAT, (2, 400))}]).run()
    frames = (400 - WINDOW) // HOP + 1
    assert evaluator.at("image")[0].shape == (2, frames, BINS, 2)
    assert evaluator.at("features")[0].shape == (2, frames, MELS)


@pytest.mark.parametrize("onesided", [None, 1, 0])
def test_set_batch_writes_an_stft_front_end_that_runs_per_sample(onesided: int | None) -> None:
    original = stft_model(onesided)
    model = stft_model(onesided)
    result = set_batch(model, size=4)
    assert result.modified and "undecided" not in result.summary, result.summary
    feeds = {"waveforms": rand(4, 400)}
    assert_declared_shapes_hold(model, feeds)
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, ["waveforms"])[0], rtol=1e-5)


def windowed_model():
    """Frames that start 240 samples in and end where the last whole hop ends (wespeaker's sliding
    buffer): empty for any waveform below 240 samples, [batch, N - 240 - (N - 400) % 160] above."""
    nodes = [
        helper.make_node("Shape", ["waveforms"], ["length_1d"], start=1, end=2),
        helper.make_node("Squeeze", ["length_1d"], ["samples"]),
        helper.make_node("Sub", ["samples", "window"], ["past_window"]),
        helper.make_node("Mod", ["past_window", "hop"], ["ragged"]),
        helper.make_node("Sub", ["samples", "ragged"], ["whole"]),
        helper.make_node("Unsqueeze", ["whole", "zero"], ["end"]),
        helper.make_node("Slice", ["waveforms", "start", "end", "one", "one"], ["framed"]),
        helper.make_node("Relu", ["framed"], ["features"]),
    ]
    weights = [
        numpy_helper.from_array(np.array(400, dtype=np.int64), "window"),
        numpy_helper.from_array(np.array(160, dtype=np.int64), "hop"),
        const("zero", [0]),
        const("start", [240]),
        const("one", [1]),
    ]
    inputs = [tensor_info("waveforms", ["batch_size", "N"])]
    return graph_model(nodes, inputs, [tensor_info("features", ["batch_size", "M"])], weights)


def test_a_length_that_the_small_sizes_all_make_empty_is_not_declared_fixed() -> None:
    model = windowed_model()
    set_batch(model, size=4)
    declared = {info.name: read_dims(info) for info in [*model.graph.value_info, *model.graph.output]}
    assert declared["features"] is not None and declared["features"][0] == 4
    assert all(dims is None or 0 not in dims for dims in declared.values()), declared
    feeds = {"waveforms": rand(4, 4000)}
    assert_declared_shapes_hold(model, feeds)
    assert run(model, feeds)[0].shape == (4, 4000 - 240 - (4000 - 400) % 160)
