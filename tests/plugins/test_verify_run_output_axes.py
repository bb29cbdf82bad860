"""split_batch joins each output along its own batch axis, found from the batched output: an output
that keeps the batch on axis 1 (``[3, N, 7]``) is compared per sample, a wrong patch of it still
fails, and no advice turns the check off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from patchspec.ort.batch_join import batch_axis_of

RunCli = Any


def axis_one_model(path: Path, declared: bool = True, swap: bool = False) -> Path:
    """x [N, 7] -> y [3, N, 7]: x, 2x and 3x stacked in front of the batch; ``swap`` mixes the samples
    of y (what a wrong patch would do)."""
    nodes = [
        helper.make_node("Unsqueeze", ["x", "zero"], ["u"]),
        helper.make_node("Mul", ["u", "two"], ["u2"]),
        helper.make_node("Mul", ["u", "three"], ["u3"]),
        helper.make_node("Concat", ["u", "u2", "u3"], ["y_" if swap else "y"], axis=0),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array(2, np.float32), "two"),
        numpy_helper.from_array(np.array(3, np.float32), "three"),
    ]
    if swap:  # samples 0 and 1 of the batch (axis 1) exchanged
        nodes.append(helper.make_node("Gather", ["y_", "order"], ["y"], axis=1))
        inits.append(numpy_helper.from_array(np.array([1, 0, 2, 3], np.int64), "order"))
    y_dims = [3, 4 if swap else "N", 7] if declared else None
    graph = helper.make_graph(
        nodes,
        "axis_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4 if swap else "N", 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_dims)],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def spec(tmp_path: Path, model: str, patches: str = "  - set_batch: 4\n") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"patchspec: 1\nmodel: {model}\noutput: out/y.onnx\npatches:\n{patches}verify:\n  - run:\n"
        "      cases:\n        - inputs: {x: [4, 7]}\n      compare: {against: original, split_batch: true}\n"
    )
    return path


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_an_output_with_the_batch_on_axis_1_is_compared_per_sample(
    tmp_path: Path, run_cli: RunCli, declared: bool
) -> None:
    axis_one_model(tmp_path / "m.onnx", declared=declared)
    result = run_cli("apply", spec(tmp_path, "m.onnx"))
    assert result.exit_code == 0, result.output
    assert "max abs error 0" in result.output
    assert (tmp_path / "out" / "y.onnx").is_file()


def test_a_wrong_patch_of_such_an_output_still_fails(tmp_path: Path, run_cli: RunCli) -> None:
    axis_one_model(tmp_path / "m.onnx")
    axis_one_model(tmp_path / "wrong.onnx", swap=True)
    result = run_cli("verify", spec(tmp_path, "m.onnx"), "--output", str(tmp_path / "wrong.onnx"))
    assert result.exit_code == 1, result.output
    assert "y: FAIL" in result.output
    assert "skip" not in result.output and "inf" not in result.output.split("FAIL", 1)[0]


def test_an_output_given_the_wrong_axis_fails_with_the_way_to_give_it(tmp_path: Path, run_cli: RunCli) -> None:
    axis_one_model(tmp_path / "m.onnx")
    path = spec(tmp_path, "m.onnx")
    path.write_text(path.read_text().replace("split_batch: true", "split_batch: {outputs: {y: 0}}"))
    result = run_cli("apply", path)
    assert result.exit_code == 1, result.output
    assert "split_batch: {outputs: {y: AXIS}}" in result.output
    assert "skip" not in result.output  # no advice turns the check off
    assert not (tmp_path / "out" / "y.onnx").exists()


@pytest.mark.parametrize(
    ("sample", "batched", "axis"),
    [
        ((3, 1, 7), (3, 4, 7), 1),  # concatenated on axis 1
        ((1, 5), (4, 5), 0),
        ((2,), (4, 2), 0),  # the export squeezed the batch away: stacked
        ((2,), (2, 4), 1),
        ((1, 1), (4, 4), 0),  # no single axis fits: axis 0, as before
        ((1, 192, 1), (1, 768, 1), 0),  # a sample's 192 rows are no batch axis (a batch constant left at 1)
        ((3, 1, 7), None, 0),  # the batched run failed: nothing to read
    ],
)
def test_the_batch_axis_is_read_off_the_batched_output(
    sample: tuple[int, ...], batched: tuple[int, ...] | None, axis: int
) -> None:
    assert batch_axis_of([np.zeros(sample)] * 4, batched) == axis
