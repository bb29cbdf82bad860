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
