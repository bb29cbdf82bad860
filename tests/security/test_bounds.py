"""Sizes and depths a spec or a model can ask for are bounded (issue 25, item 7): each is a fault
of the input, exit 2 (or 3 for a model file), found before anything is allocated, never exit 5."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.ort.run.case_inputs import case_input_problems
from patchspec.ort.settings import DEFAULT_MAX_ELEMENTS
from patchspec.shapes import expressions

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]


def relu(shape: list[object]) -> onnx.ModelProto:
    model: onnx.ModelProto = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", shape)], [tensor_info("y", shape)]
    )
    return model


def run_spec(tmp_path: Path, model: onnx.ModelProto, run_yaml: str) -> Path:
    onnx.save(model, tmp_path / "m.onnx")
    verify = f"verify:\n  - run:\n{run_yaml}"
    spec: Path = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n" + verify)
    return spec


@pytest.mark.parametrize(
    "shape, count",
    [([10**12, 4], "4,000,000,000,000"), ([2**32, 2**32], "18,446,744,073,709,551,616")],
    ids=["huge", "wraps int64 to 0"],
)
def test_a_run_case_over_the_element_limit_is_exit_2_naming_the_case(
    tmp_path: Path, run_cli: RunCli, shape: list[int], count: str
) -> None:
    spec = run_spec(
        tmp_path, relu(["N", 4] if shape[1] == 4 else ["N", "M"]), f"      cases: [{{inputs: {{x: {shape}}}}}]\n"
    )
    for command in ("validate", "apply"):
        result = run_cli(command, spec)
        assert result.exit_code == 2, result.output
        assert "cases.0.inputs.x" in result.output and f"is {count} elements" in result.output
        assert "max_elements" in result.output
    assert not (tmp_path / "out").exists()


def test_every_way_of_giving_a_shape_is_bounded(tmp_path: Path, run_cli: RunCli) -> None:
    cases = "[{inputs: {x: {shape: [4000000, 4000], fill: zeros}}}, {inputs: {x: {shape: [4000000, 4000], value: 1}}}]"
    spec = run_spec(tmp_path, relu(["N", "M"]), f"      cases: {cases}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "cases.0.inputs.x.shape" in result.output and "cases.1.inputs.x.shape" in result.output


def test_an_input_left_to_its_declared_fixed_size_is_bounded_too(tmp_path: Path, run_cli: RunCli) -> None:
    """No cases: the default case makes every input at its declared size; a model that declares
    [10**12, 4] is refused before the array is made."""
    spec = run_spec(tmp_path, relu([10**12, 4]), "      compare: {against: none}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert "cases.0.inputs" in result.output and "4,000,000,000,000 elements" in result.output


def test_the_limit_is_a_param(tmp_path: Path, run_cli: RunCli) -> None:
    spec = run_spec(tmp_path, relu(["N", 4]), "      max_elements: 10\n      cases: [{inputs: {x: [4, 4]}}]\n")
    refused = run_cli("validate", spec)
    assert refused.exit_code == 2 and "over the limit of 10 per input" in refused.output
    spec.write_text(spec.read_text().replace("max_elements: 10", "max_elements: 16"))
    assert run_cli("apply", spec).exit_code == 0


def test_the_default_limit_is_the_documented_one() -> None:
    assert DEFAULT_MAX_ELEMENTS == 2**27
    assert not list(case_input_problems([2**27], ("x",)))
    assert list(case_input_problems([2**27 + 1], ("x",)))


def test_lint_inputs_are_bounded_as_run_cases_are(tmp_path: Path, run_cli: RunCli) -> None:
    onnx.save(relu(["N", 4]), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n"
        "  - lint: {inputs: {x: [1000000000000, 4]}}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "inputs.x" in result.output and "over the limit" in result.output


@pytest.mark.parametrize(
    "text",
    [
        "(" * 5000 + "1" + ")" * 5000,
        "-" * 5000 + "1",
        " + ".join(["1"] * 5000),
        "max(" * 3000 + "1" + ", 1)" * 3000,
    ],
    ids=["parentheses", "signs", "a flat chain", "calls"],
)
def test_deep_expressions_are_an_expression_error(text: str) -> None:
    assert "nests deeper than" in (expressions.check(text) or "")


def test_a_reasonable_expression_still_parses() -> None:
    text = "max(" * 20 + "dim(x, 0)" + ", 1)" * 20 + " + " + " + ".join(["1"] * 50)
    assert expressions.check(text) is None


def test_a_deep_expression_in_a_spec_is_exit_2(tmp_path: Path, run_cli: RunCli) -> None:
    deep = "(" * 5000 + "1" + ")" * 5000
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: missing.onnx\noutput: out.onnx\npatches:\n"
        f"  - replace_initializer: {{initializer: shape, shape: ['{deep}']}}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "shape.0" in result.output and "nests deeper than 100 levels" in result.output


def test_external_data_whose_declared_size_wraps_int64_is_refused(tmp_path: Path, run_cli: RunCli) -> None:
    """dims [2**32, 2**32]: 2**64 elements, which int64 arithmetic wraps to 0, so 'length: 0' agreed."""
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**32, 2**32])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "0")):
        weight.external_data.add(key=key, value=value)
    (tmp_path / "w.bin").write_bytes(b"")
    model = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", [1])], [tensor_info("y", [1])], [weight]
    )
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 3, result.output
    assert "w" in result.output and not (tmp_path / "out").exists()
    assert np.iinfo(np.int64).max < (2**32) ** 2 * 4  # the premise: the true size does not fit int64


def int8_identity() -> onnx.ModelProto:
    model: onnx.ModelProto = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor_info("x", ["N", 4], TensorProto.INT8)],
        [tensor_info("y", ["N", 4], TensorProto.INT8)],
    )
    return model


@pytest.mark.parametrize(
    "item, message",
    [
        ("{value: [[1, 2, 3, 4], [5]]}", "cases.0.inputs.x.value: a list 'value' must be rectangular"),
        ("{value: [[1, 2, 3, 4], [5, 6, 7, [8]]]}", "must be rectangular"),
        ("{shape: [2, 4], low: -1.0e+300, high: 1.0e+300}", "int8 values lie in [-128, 127]"),
        ("{shape: [2, 4], low: 0, high: 1000}", "int8 values lie in [-128, 127]"),
        ("{shape: [2, 4], low: 0.5, high: 0.7}", "no int8 value lies in [0, 0)"),
        ("{shape: [2, 4], low: -.inf}", "low and high must be finite"),
    ],
    ids=["ragged", "ragged deeper", "huge range", "past int8", "empty range", "infinite"],
)
def test_hostile_case_values_are_exit_2_not_a_crash(tmp_path: Path, run_cli: RunCli, item: str, message: str) -> None:
    onnx.save(int8_identity(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n"
        f"  - run: {{compare: {{against: none}}, cases: [{{inputs: {{x: {item}}}}}]}}\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_random_range_the_type_holds_still_runs(tmp_path: Path, run_cli: RunCli) -> None:
    onnx.save(int8_identity(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n"
        "  - run: {compare: {against: none}, cases: [{inputs: {x: {shape: [2, 4], low: -128, high: 128}}}]}\n",
    )
    assert run_cli("apply", spec).exit_code == 0


def test_the_shape_lint_never_allocates_past_the_limit(tmp_path: Path) -> None:
    """inspect and lint run a probe at the model's own fixed sizes: [100000, 100000] is 40 GB."""
    from patchspec.ort.lint.probe import lint_model

    result = lint_model(relu([100000, 100000]), tmp_path)
    assert result.error is not None and "10,000,000,000 elements, over the limit" in result.error
