"""The sizes of ``init``'s run case, checked against the original before they are written:

- where the original fails at the default sizes (a TopK of 300 over a detector's anchors at 64 x 96
  pixels, a speech front end given 512 samples), its symbolic sizes past axis 0 are doubled until it
  runs; before, init wrote a case the original itself could not run and apply blamed the output;
- axes an input names alike are told apart (``rename_dims``) unless the original runs with them equal
  and fails with them apart (a square distance matrix ``[1, seq_len, seq_len]``); before, the split
  let ``apply --no-verify`` write a wrong model.
"""

from __future__ import annotations

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info


def _init(run_cli, model: onnx.ModelProto, folder) -> tuple[str, dict]:
    onnx.save(model, folder / "m.onnx")
    made = run_cli("init", folder / "m.onnx", "--batch", "4", "--output", folder / "spec.yaml")
    assert made.exit_code == 0, made.output
    text = (folder / "spec.yaml").read_text()
    return text, yaml.safe_load(text)


def test_sizes_the_original_fails_at_are_doubled_until_it_runs(tmp_path, run_cli):
    """x [batch, length] -> TopK k=1500 over the length: 512 samples are too few, 2048 run."""
    k = numpy_helper.from_array(np.array([1500], np.int64), "k")
    model = graph_model(
        [helper.make_node("TopK", ["x", "k"], ["top", "where"], axis=1)],
        [tensor_info("x", ["batch", "length"])],
        [tensor_info("top", ["batch", 1500]), tensor_info("where", ["batch", 1500], TensorProto.INT64)],
        [k],
    )
    text, spec = _init(run_cli, model, tmp_path)
    assert spec["verify"][1]["run"]["cases"][0]["inputs"]["x"] == [4, 2048], text
    applied = run_cli("apply", tmp_path / "spec.yaml")
    assert applied.exit_code == 0, applied.output


def _square(name: str = "seq_len") -> onnx.ModelProto:
    """d [1, S, S] + its transpose: square by construction (a pairwise distance matrix)."""
    return graph_model(
        [
            helper.make_node("Transpose", ["d"], ["dt"], perm=[0, 2, 1]),
            helper.make_node("Add", ["d", "dt"], ["y"]),
        ],
        [tensor_info("d", ["batch", name, name])],
        [tensor_info("y", ["batch", name, name])],
    )


def test_axes_that_must_stay_equal_are_not_told_apart(tmp_path, run_cli):
    text, spec = _init(run_cli, _square(), tmp_path)
    assert not any("rename_dims" in step for step in spec["patches"]), text
    applied = run_cli("apply", tmp_path / "spec.yaml")
    assert applied.exit_code == 0, applied.output


def test_axes_that_may_differ_are_still_told_apart(tmp_path, run_cli):
    """An image [?, 3, ?, ?] (SCRFD names every dim '?') runs with height and width apart."""
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor_info("x", ["?", 3, "?", "?"])],
        [tensor_info("y", ["?", 3, "?", "?"])],
    )
    text, spec = _init(run_cli, model, tmp_path)
    renames = [step["rename_dims"] for step in spec["patches"] if "rename_dims" in step]
    assert renames == [{"tensor": "x", "axes": {2: "height", 3: "width"}}], text
