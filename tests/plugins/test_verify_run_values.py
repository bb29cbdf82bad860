"""The run verifier's element types and input values: fp16 outputs against an fp32 original, per-dtype
tolerances, an input given its exact value, what value an input needs."""

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from verify_run_kit import RunCli, apply, assert_failed_without_output, run_data, unary_model

from helpers import graph_model, tensor_info, write_spec

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output


def tanh_model(dtype: int) -> onnx.ModelProto:
    """y = tanh(x) * 3 in ``dtype``: fp16 loses precision against fp32 by a known order."""
    scale = numpy_helper.from_array(np.array(3.0, helper.tensor_dtype_to_np_dtype(dtype)), "scale")
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "scale"], ["y"])]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", ["N", 64], dtype)], [tensor_info("y", ["N", 64], dtype)], initializers=[scale]
    )
    return model


def test_fp16_output_is_compared_with_the_fp32_original_cast_per_side(tmp_path: Path, run_cli: RunCli) -> None:
    fp16, fp32 = tanh_model(onnx.TensorProto.FLOAT16), tanh_model(onnx.TensorProto.FLOAT)
    verify = "  - run:\n      cases: [{inputs: {x: [8, 64]}}]\n      compare: {against: fp32.onnx}\n"
    result, report = apply(tmp_path / "default", run_cli, fp16, verify, {"fp32.onnx": fp32})
    assert result.exit_code == 0, result.output  # the fp16 tolerance applies, not fp32's 1e-4
    data = run_data(report)["data"]
    assert data["tolerances"]["float16"] == [1e-2, 1e-3] and data["applied_tolerances"] == {"float16": [1e-2, 1e-3]}
    assert "float16 outputs rtol 0.01, atol 0.001" in result.stdout
    worst = max(o["max_abs"] for row in data["results"] for o in row["outputs"])
    assert 0 < worst < 1e-2  # it did compare values, and fp16 rounding shows


def test_per_dtype_tolerance_can_be_tightened_and_then_fails(tmp_path: Path, run_cli: RunCli) -> None:
    fp16, fp32 = tanh_model(onnx.TensorProto.FLOAT16), tanh_model(onnx.TensorProto.FLOAT)
    verify = (
        "  - run:\n      cases: [{inputs: {x: [8, 64]}}]\n"
        "      compare: {against: fp32.onnx, tolerances: {float16: {rtol: 0, atol: 1.0e-7}}}\n"
    )
    result, _ = apply(tmp_path / "tight", run_cli, fp16, verify, {"fp32.onnx": fp32})
    assert_failed_without_output(tmp_path / "tight", result)
    assert "differs beyond tolerance (rtol 0, atol 1e-07)" in result.output


def test_unknown_dtype_in_tolerances_is_a_spec_error(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n      compare: {tolerances: {flot16: {rtol: 0.1}}}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 2, result.output
    assert "flot16" in result.output


def test_an_input_can_be_given_its_exact_value(tmp_path: Path, run_cli: RunCli) -> None:
    """sr: {value: 16000}: a model that only runs for certain values of an input (silero's sample rate)."""
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["ok"]),
        helper.make_node("Cast", ["ok"], ["okf"], to=1),
        helper.make_node("Mul", ["x", "okf"], ["y"]),
    ]
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", 4]), tensor_info("sr", [], onnx.TensorProto.INT64)],
        [tensor_info("y", ["N", 4])],
        initializers=[rate],
    )
    scaled = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]
    )
    result, _ = apply(
        tmp_path,
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 16000}}}]\n      compare: {against: ref.onnx}\n",
        {"ref.onnx": scaled},
    )
    assert result.exit_code == 0, result.output  # y == x only when sr is exactly 16000
    result, _ = apply(
        tmp_path / "again",
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 8000}}}]\n      compare: {against: ref.onnx}\n",
        {"ref.onnx": scaled},
    )
    assert result.exit_code == 1, result.output


@pytest.mark.parametrize(
    "item, message",
    [
        ("{value: 1, low: 0}", "'value' gives the values"),
        ("{value: 1, file: a.npy}", "give the values once"),
        ("{value: [1, 2], shape: [2]}", "a list 'value' has its own shape"),
    ],
)
def test_value_cannot_be_combined_with_other_sources(tmp_path: Path, run_cli: RunCli, item: Any, message: str) -> None:
    result, _ = apply(tmp_path, run_cli, unary_model(), f"  - run:\n      cases: [{{inputs: {{x: {item}}}}}]\n")
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_validate_finds_a_missing_file_without_the_model(tmp_path: Path, run_cli: RunCli) -> None:
    """`file:` inputs and reference models are checked by validate: no model is needed to see they are absent."""
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: not-there.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n"
        "  - run:\n      cases: [{inputs: {x: {file: data/x.npy}}}]\n      compare: {against: ref.onnx}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert (
        "spec.yaml:7:35: verify[0] (run) > cases.0.inputs.x.file: data/x.npy does not exist (resolved to "
        in result.output
    )
    assert "compare.against: ref.onnx does not exist" in result.output
    assert "relative to the spec's folder" in result.output


def test_a_failed_run_says_what_value_an_input_needs(tmp_path: Path, run_cli: RunCli) -> None:
    """silero-like: sr compared with 16000 chooses the branch; the other branch cannot run. A case with
    sr 8000 fails, and the failure says what the graph expects of sr."""
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    shape = numpy_helper.from_array(np.array([-1, 7], np.int64), "bad_shape")  # x [N, 4] cannot be [-1, 7]
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])], "then", [], [tensor_info("t", ["N", 4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Reshape", ["x", "bad_shape"], ["e"])], "else", [], [tensor_info("e", ["N", 7])], [shape]
    )
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", 4]), tensor_info("sr", [], onnx.TensorProto.INT64)],
        [tensor_info("y", ["N", 4])],
        initializers=[rate],
    )
    result, _ = apply(
        tmp_path,
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 8000}}}]\n      compare: {against: none}\n",
    )
    assert result.exit_code == 1, result.output
    assert "input 'sr' is [8000], but Equal" in result.output and "give it {value: 16000}" in result.output
