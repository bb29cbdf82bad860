"""A plain ``set_batch: 4`` names the inputs that carry the batch under a name of their own (issue 24,
item 3): tf2onnx gives each input its own (``unk__6134``, ``unk__6135``), and the hint it prints,
pasted into a spec, sets them all and passes."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec


def two_names_model():
    """image [unk__6134, 4] and mask [unk__6135, 4], added: one batch under two names."""
    nodes = [
        helper.make_node("Mul", ["image", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["y"], name="merge"),
    ]
    scale = numpy_helper.from_array(np.full((4,), 2.0, np.float32), "scale")
    inputs = [tensor_info("image", ["unk__6134", 4]), tensor_info("mask", ["unk__6135", 4])]
    return graph_model(nodes, inputs, [tensor_info("y", ["unk__6134", 4])], [scale])


VERIFY = (
    "verify:\n  - static: {}\n"
    "  - run: {cases: [{inputs: {image: [4, 4], mask: [4, 4]}}], compare: {against: original, "
    "split_batch: {inputs: {image: 0, mask: 0}, outputs: {y: 0}}}}\n"
)


def test_the_hint_for_inputs_left_with_their_own_batch_name_works_as_printed(tmp_path, run_cli):
    onnx.save(two_names_model(), tmp_path / "m.onnx")
    plain = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    first = run_cli("apply", plain, "--no-verify", "--allow-undecided", "-v")
    assert "mask[0] ('unk__6135')" in first.output, first.output
    hint = first.output[first.output.index("use instead:\n") :].splitlines()[1:4]  # the entry printed
    assert hint[0] == "  - set_batch:", first.output
    fixed = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/fixed.onnx\npatches:\n" + "\n".join(hint) + "\n" + VERIFY,
        "fixed.yaml",
    )
    result = run_cli("apply", fixed)
    assert result.exit_code == 0, fixed.read_text() + result.output
    written = onnx.load(tmp_path / "out" / "fixed.onnx")
    assert [d.dim_value for i in written.graph.input for d in i.type.tensor_type.shape.dim] == [4, 4, 4, 4]


def test_inputs_given_by_the_user_get_no_hint(tmp_path, run_cli):
    onnx.save(two_names_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size: 4, inputs: [image, mask]}\n",
    )
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "another name" not in result.output
