"""The ``lint`` verifier fails a run whose output binds one dim_param to different sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from helpers import write_spec
from scrfd_like import fpn_model

HEAD = "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches: []\n"


@pytest.fixture
def folder(tmp_path):
    onnx.save(fpn_model(), tmp_path / "m.onnx")
    return tmp_path


def test_lint_fails_on_aliased_dims_and_writes_nothing(run_cli, folder):
    spec = write_spec(folder, HEAD + "verify:\n  - lint: {inputs: {input.1: [1, 3, 640, 640]}}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "1 dim_param(s) bound to different sizes at input.1=1,3,640,640 (lint inputs)" in result.output
    assert "'?': 640 on input.1 (axes 2, 3); 80 on c3 (axes 2, 3), /lat.0/Conv_output_0" in result.output
    assert "rename_dims: {unique: true}" in result.output
    assert not (folder / "out.onnx").exists()


def test_lint_passes_a_model_with_unique_dims(run_cli, tmp_path):
    onnx.save(fpn_model(unique=True), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, HEAD + "verify:\n  - lint: {}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "14 annotated tensors agree at input.1=1,3,64,96 (default shapes)" in result.output
    assert (tmp_path / "out.onnx").exists()


def test_lint_takes_the_first_run_cases_inputs(run_cli, folder):
    spec = write_spec(
        folder,
        HEAD + "verify:\n  - lint: {}\n  - run:\n      compare: {against: none}\n      cases:\n"
        "        - inputs: {input.1: [1, 3, 320, 256]}\n        - inputs: {input.1: [1, 3, 64, 64]}\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "at input.1=1,3,320,256 (inputs of verify[1] (run) case 0)" in result.output
    assert "40 on c3 (axis 2)" in result.output and "32 on c3 (axis 3)" in result.output


def test_lint_reads_the_shape_of_a_file_input(run_cli, folder):
    np.save(folder / "x.npy", np.zeros((1, 3, 128, 128), np.float32))
    spec = write_spec(folder, HEAD + "verify:\n  - lint: {inputs: {input.1: {file: x.npy}}}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 1 and "at input.1=1,3,128,128" in result.output


def test_a_wrong_input_name_is_a_spec_mistake_found_by_validate_too(run_cli, folder):
    spec = write_spec(folder, HEAD + "verify:\n  - lint: {inputs: {input1: [1, 3, 64, 64]}}\n")
    for command in ("apply", "validate"):
        result = run_cli(command, spec)
        assert result.exit_code == 2, result.output
        assert "'input1' is not an input of the patched model (did you mean 'input.1'?)" in result.output
    assert not (folder / "out.onnx").exists()


def test_lint_fails_when_the_model_cannot_run(run_cli, folder):
    spec = write_spec(folder, HEAD + "verify:\n  - lint: {inputs: {input.1: [1, 3, 60, 60]}}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "could not lint at input.1=1,3,60,60 (lint inputs): onnxruntime could not run the model" in result.output


@pytest.mark.parametrize(
    "params, message",
    [
        ("{input: {x: [1]}}", "unknown key 'input' (did you mean 'inputs'?)"),
        ("{inputs: {x: [1, -3]}}", "dim -3 is negative; sizes are numbers >= 0"),
        (
            "{inputs: {x: {fill: zeros}}}",
            "give 'shape' (a list of sizes), 'value' (the exact value) or 'file' (a .npy file)",
        ),
    ],
)
def test_validate_rejects_bad_params(run_cli, folder, params, message):
    spec = write_spec(folder, HEAD + f"verify:\n  - lint: {params}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert message in result.output


# -- with the rename_dims patch (the fix the lint suggests) -------------------------------------------
def test_rename_dims_unique_repairs_what_lint_found(run_cli, folder):
    spec = write_spec(
        folder,
        HEAD.replace("patches: []", "patches:\n  - rename_dims: {unique: true}")
        + "verify:\n  - lint: {}\n  - run:\n      compare: {against: none}\n"
        "      cases: [{inputs: {input.1: [1, 3, 640, 480]}}]\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "annotated tensors agree at input.1=1,3,640,480" in result.output
    inspected = run_cli("inspect", folder / "out.onnx", "--shape", "input.1=1,3,320,256")
    assert inspected.exit_code == 0 and "ok: 14 annotated tensors agree" in inspected.stdout


def test_validate_rejects_a_bad_regex_in_rename_dims_select(run_cli, folder):
    spec = write_spec(
        folder,
        HEAD.replace(
            "patches: []", 'patches:\n  - rename_dims:\n      select: {name: "re:/lat.(0"}\n      axes: {2: h}'
        ),
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "patches[0] (rename_dims) > select.name: invalid regular expression '/lat.(0'" in result.output


def test_lint_is_skipped_when_onnxruntime_cannot_run_the_original_either(run_cli, tmp_path):
    """An old export whose op version onnxruntime no longer implements (AveragePool-1): lint cannot run
    the model, and neither can anything else here; that is not the patch's fault."""
    from onnx import helper

    from helpers import graph_model, tensor_info

    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2])
    model = graph_model([node], [tensor_info("x", [1, 3, 6])], [tensor_info("y", [1, 3, 5])], opset=1, ir_version=3)
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\nverify:\n  - lint: {}\n"
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "lint .................... skipped   onnxruntime cannot run the original either" in result.stdout


def shape_fed(op: str) -> onnx.ModelProto:
    """data [N, 3] -> op(data, new_shape) -> y [N, 3]: an int64 input that is a shape."""
    from onnx import TensorProto, helper

    from helpers import graph_model, tensor_info

    return graph_model(
        [helper.make_node(op, ["data", "new_shape"], ["y"])],
        [tensor_info("data", ["N", 3]), tensor_info("new_shape", [2], TensorProto.INT64)],
        [tensor_info("y", ["N", 3])],
    )


def test_lint_is_skipped_when_the_original_does_not_run_at_the_lint_inputs_either(run_cli, tmp_path):
    """Polygraphy's empty_tensor_expand.onnx, its shape also passed on as an output: an int64 input the
    graph says nothing definite about, and lint's random values are no shape. The original fails the
    same way: that is the inputs, not the patch."""
    from onnx import helper

    from helpers import tensor_info

    model = shape_fed("Expand")
    model.graph.node.append(helper.make_node("Identity", ["new_shape"], ["shape_out"]))
    model.graph.output.append(tensor_info("shape_out", [2], onnx.TensorProto.INT64))
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\nverify:\n  - lint: {}\n"
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "skipped   the original does not run at" in result.stdout, result.stdout


def test_lint_gives_an_expands_shape_input_the_declared_output_dims(run_cli, tmp_path):
    """Polygraphy's empty_tensor_expand.onnx: the int64 input is an Expand's shape; the lint gives it the
    output's declared dims ([1, 3]: N declares no size) and runs the model instead of skipping it."""
    onnx.save(shape_fed("Expand"), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\nverify:\n  - lint: {}\n"
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.stdout and "passed" in result.stdout, result.stdout


def test_the_lint_fix_it_prints_applied_makes_it_pass(run_cli, folder):
    """Every hint is applied: the first fix lint prints, pasted into the patches, gives a passing spec."""
    spec = write_spec(folder, HEAD + "verify:\n  - lint: {inputs: {input.1: [1, 3, 640, 640]}}\n")
    failed = run_cli("apply", spec)
    fix = next(line.split("fix: add '")[1].split("'")[0] for line in failed.output.splitlines() if "fix: add '" in line)
    assert fix == "- rename_dims: {unique: true}"
    fixed = write_spec(
        folder,
        HEAD.replace("patches: []\n", f"patches:\n  {fix}\n")
        + "verify:\n  - lint: {inputs: {input.1: [1, 3, 640, 640]}}\n",
        name="fixed.yaml",
    )
    result = run_cli("apply", fixed)
    assert result.exit_code == 0, fixed.read_text() + result.output
