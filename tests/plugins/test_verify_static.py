"""The ``static`` verifier: fixed sizes on graph inputs and outputs (and annotated tensors on request)."""

import json

import onnx
from onnx import helper

from helpers import graph_model, tensor_info, write_spec


def two_relus(x_shape, mid_shape, y_shape):
    nodes = [helper.make_node("Relu", ["x"], ["mid"]), helper.make_node("Relu", ["mid"], ["y"])]
    return graph_model(
        nodes, [tensor_info("x", x_shape)], [tensor_info("y", y_shape)], value_info=[tensor_info("mid", mid_shape)]
    )


def apply(folder, run_cli, model, verify_yaml):
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "m.onnx")
    spec = write_spec(folder, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n" + verify_yaml)
    result = run_cli("apply", spec, "--report", folder / "report.json")
    return result, json.loads((folder / "report.json").read_text())


def test_fixed_inputs_and_outputs_pass(tmp_path, run_cli):
    result, report = apply(tmp_path, run_cli, two_relus([2, 4], ["N", 4], [2, 4]), "  - static: {}\n")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m2.onnx").is_file()
    assert report["verifiers"][0]["status"] == "passed"
    assert "all 2 inputs and outputs have fixed sizes" in report["verifiers"][0]["summary"]


def test_symbolic_and_unknown_axes_fail_listing_tensor_and_axis(tmp_path, run_cli):
    model = two_relus(["N", 4], ["N", 4], [2, None])
    result, report = apply(tmp_path, run_cli, model, "  - static: {}\n")
    assert result.exit_code == 1, result.output
    assert not (tmp_path / "out" / "m2.onnx").exists()
    offenders = report["verifiers"][0]["data"]["offenders"]
    assert offenders == ["input 'x' [N, 4]: axis 0 is 'N'", "output 'y' [2, ?]: axis 1 is unknown"]
    assert "input 'x' [N, 4]: axis 0 is 'N'" in result.stderr


def test_value_info_true_also_checks_annotated_tensors(tmp_path, run_cli):
    model = two_relus([2, 4], ["N", 4], [2, 4])
    result, report = apply(tmp_path, run_cli, model, "  - static: {value_info: true}\n")
    assert result.exit_code == 1, result.output
    assert report["verifiers"][0]["data"]["offenders"] == ["value_info 'mid' [N, 4]: axis 0 is 'N'"]


def test_unknown_rank_is_reported(tmp_path, run_cli):
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor_info("x", [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    result, report = apply(tmp_path, run_cli, model, "  - static: {}\n")
    assert result.exit_code == 1
    assert report["verifiers"][0]["data"]["offenders"] == ["output 'y': no shape (unknown rank)"]


def test_unknown_key_is_a_spec_error(tmp_path, run_cli):
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\nverify:\n  - static: {value_infos: true}\n"
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2 and "did you mean 'value_info'" in result.output


def halving_reshape():
    """x [4, 8] -> Shape / [1, 2] -> concat [2] -> Reshape: [4, 4, 2]. ONNX's inference stops at the Div."""
    import numpy as np
    from onnx import numpy_helper

    ints = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Div", ["s", "halves"], ["h"]),
        helper.make_node("Concat", ["h", "two"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    return graph_model(
        nodes,
        [tensor_info("x", [4, 8])],
        [tensor_info("y", ["a", "b", "c"])],
        [ints("halves", [1, 2]), ints("two", [2])],
        opset=18,
    )


def test_the_hint_for_outputs_inference_cannot_derive_is_exact_and_works(tmp_path, run_cli):
    """Every hint is applied: the printed lines, pasted at the end of patches, make the verifier pass."""
    result, _ = apply(tmp_path / "first", run_cli, halving_reshape(), "  - static: {}\n")
    assert result.exit_code == 1, result.output
    start = result.output.index("  - rename_dims:\n")
    lines = result.output[start:].splitlines()[:3]
    assert lines == ["  - rename_dims:", '      tensor: "y"', "      axes: {0: 4, 1: 4, 2: 2}"], result.output
    folder = tmp_path / "second"
    folder.mkdir()
    onnx.save(halving_reshape(), folder / "m.onnx")
    spec = write_spec(
        folder,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n"
        + "\n".join(lines)
        + "\nverify:\n  - static: {}\n  - run: {}\n",
    )
    fixed = run_cli("apply", spec)
    assert fixed.exit_code == 0, fixed.output


def test_a_symbolic_input_gets_the_ordering_hint_not_exact_lines(tmp_path, run_cli):
    result, _ = apply(tmp_path, run_cli, two_relus(["N", 4], ["N", 4], ["N", 4]), "  - static: {}\n")
    assert result.exit_code == 1
    assert "x[0]" in result.output and "listed before set_batch" in result.output
