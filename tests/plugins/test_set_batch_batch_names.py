"""Inputs that carry the batch under a name of their own (issue 24, item 3; issue 34): tf2onnx gives
each input its own (``unk__6134``, ``unk__6135``). A plain ``set_batch: 4`` sets those the evaluation
proves to be the batch, and names the others with the entry that would set them."""

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


def test_an_input_proved_to_carry_the_batch_under_another_name_is_set_too(tmp_path, run_cli):
    """mask is added to image: at batch 4 with a size of its own the Add cannot run, with the batch's it
    does. A plain set_batch sets both (before: 1 undecided, and --no-verify wrote nothing), and the
    entry -v prints, pasted into a spec, writes the same model."""
    onnx.save(two_names_model(), tmp_path / "m.onnx")
    plain = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    first = run_cli("apply", plain, "--no-verify", "-v")
    assert first.exit_code == 0, first.output
    assert "batch 4 on image[0], mask[0]" in first.output and "undecided" not in first.output, first.output
    assert "mask[0] ('unk__6135') names the batch under another name" in first.output, first.output
    written = onnx.load(tmp_path / "out" / "m.onnx")
    assert [d.dim_value for i in written.graph.input for d in i.type.tensor_type.shape.dim] == [4, 4, 4, 4]
    hint = first.output[first.output.index("(or list other inputs):\n") :].splitlines()[1:4]  # the entry printed
    assert hint[0] == "  - set_batch:", first.output
    fixed = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/fixed.onnx\npatches:\n" + "\n".join(hint) + "\n" + VERIFY,
        "fixed.yaml",
    )
    result = run_cli("apply", fixed)
    assert result.exit_code == 0, fixed.read_text() + result.output
    assert onnx.load(tmp_path / "out" / "fixed.onnx").graph == written.graph  # the metadata names each spec


def test_inputs_given_by_the_user_get_no_hint(tmp_path, run_cli):
    onnx.save(two_names_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size: 4, inputs: [image, mask]}\n",
    )
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "another name" not in result.output


def test_an_input_that_never_meets_the_batch_is_named_without_a_claim(tmp_path, run_cli):
    """Two branches that never meet: nothing proves mask's name is the batch, so the hint only says it
    keeps its own, and the entry it prints still applies."""
    nodes = [helper.make_node("Relu", ["image"], ["y"]), helper.make_node("Relu", ["mask"], ["z"])]
    inputs = [tensor_info("image", ["unk__6134", 4]), tensor_info("mask", ["unk__6135", 4])]
    model = graph_model(nodes, inputs, [tensor_info("y", ["unk__6134", 4]), tensor_info("z", ["unk__6135", 4])])
    onnx.save(model, tmp_path / "m.onnx")
    plain = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    first = run_cli("apply", plain, "-v")
    assert first.exit_code == 0, first.output
    assert "mask[0] ('unk__6135') keeps a batch name of its own; if it carries the batch too" in first.output
    hint = first.output[first.output.index("use instead:\n") :].splitlines()[1:4]
    fixed = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/fixed.onnx\npatches:\n"
        + "\n".join(hint)
        + "\nverify:\n  - static: {}\n",
        "fixed.yaml",
    )
    assert run_cli("apply", fixed).exit_code == 0
