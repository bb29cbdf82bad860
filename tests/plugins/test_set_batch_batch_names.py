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


def grouped_mean_model():
    """ICLabel's head: image [unk_a, 1, 3] and spectrum [unk_b, 1, 2] concatenated on axis 2, squeezed,
    then ``Reshape [4, -1]`` and a mean over the 4: each output row averages 4 rows of the batch (4
    augmented copies of one component), so the model runs at multiples of 4 only and mixes samples."""
    nodes = [
        helper.make_node("Concat", ["image", "spectrum"], ["joined"], axis=2),
        helper.make_node("Squeeze", ["joined"], ["rows"], name="squeeze"),
        helper.make_node("Reshape", ["rows", "groups"], ["grouped"], name="group"),
        helper.make_node("Transpose", ["grouped"], ["columns"], perm=[1, 0]),
        helper.make_node("ReduceMean", ["columns"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Reshape", ["mean", "rows_of_5"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([4, -1], np.int64), "groups"),
        numpy_helper.from_array(np.array([-1, 5], np.int64), "rows_of_5"),
    ]
    inputs = [tensor_info("image", ["unk_a", 1, 3]), tensor_info("spectrum", ["unk_b", 1, 2])]
    return graph_model(nodes, inputs, [tensor_info("y", ["unk_y", 5])], constants, opset=12)


def test_inputs_that_meet_the_batch_are_judged_with_it_and_a_coupled_model_is_refused(tmp_path, run_cli):
    """With spectrum at a size of its own the Concat fails and nothing past it can be judged; with it
    moving with the batch the evaluation reaches the Reshape that groups rows of 4. Before, set_batch
    judged the first (nothing known, nothing refused) and wrote the model at batch 4 and at N."""
    onnx.save(grouped_mean_model(), tmp_path / "m.onnx")
    for size in ("4", "N"):
        spec = write_spec(
            tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size}\n"
        )
        result = run_cli("apply", spec, "--no-verify")
        assert result.exit_code == 4, result.output
        assert "Reshape 'group'" in result.output and "mixes samples" in result.output, result.output
        assert "on image[0], spectrum[0]" in result.output, result.output
        assert not (tmp_path / "out").exists()


def test_inputs_concatenated_beside_the_batch_are_set_with_it(tmp_path, run_cli):
    """The same two inputs concatenated into one row per sample: with a size of its own, spectrum stops
    the evaluation at the Concat; with the batch's it runs. Both are set (before: spectrum kept
    'unk_b' in a model asked to be batch 4), and the written model runs per sample."""
    nodes = [
        helper.make_node("Concat", ["image", "spectrum"], ["joined"], axis=2),
        helper.make_node("Relu", ["joined"], ["y"]),
    ]
    inputs = [tensor_info("image", ["unk_a", 1, 3]), tensor_info("spectrum", ["unk_b", 1, 2])]
    onnx.save(graph_model(nodes, inputs, [tensor_info("y", ["unk_a", 1, 5])]), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "batch 4 on image[0], spectrum[0]" in result.output, result.output
    written = onnx.load(tmp_path / "out" / "m.onnx")
    assert [i.type.tensor_type.shape.dim[0].dim_value for i in written.graph.input] == [4, 4]
    assert written.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 4
