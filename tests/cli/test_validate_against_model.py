"""validate reads the spec's model where it is there: a name the model lacks is the same mistake, with the
same exit code (2), in validate and in apply; every spec is checked; --no-model checks the spec alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from helpers import graph_model, tensor_info, write_spec

RunCli = Any


def small(folder: Path) -> None:
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    onnx.save(graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), str(folder / "m.onnx"))


def spec(folder: Path, body: str, name: str = "spec.yaml") -> Path:
    return write_spec(folder, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n" + body, name)


def test_an_input_name_the_model_lacks_is_exit_2_in_validate_and_apply(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    path = spec(tmp_path, "patches:\n  - set_batch: {size: 4, inputs: {xx: 0}}\n")
    for command in (("validate",), ("apply",)):
        result = run_cli(*command, path)
        assert result.exit_code == 2, result.output
        assert "inputs.xx: input 'xx' is not a graph input of this model (did you mean 'x'?)" in result.stderr
    assert not (tmp_path / "out").exists()
    assert run_cli("validate", "--no-model", path).exit_code == 0


def test_a_run_case_naming_another_input_is_found_by_validate(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    path = spec(
        tmp_path, "patches:\n  - set_batch: 4\nverify:\n  - run:\n      cases:\n        - inputs: {y: [4, 4]}\n"
    )
    result = run_cli("validate", path)
    assert result.exit_code == 2, result.output
    assert "'y' is not an input of the patched model; its inputs are: x" in result.stderr


def test_every_spec_is_checked_and_a_spec_without_its_model_is_checked_alone(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    wrong = spec(tmp_path, "patches:\n  - set_batch: {size: 4, inputs: [xx]}\n", "wrong.yaml")
    good = spec(tmp_path, "patches:\n  - set_batch: 4\n", "good.yaml")
    alone = write_spec(tmp_path, "patchspec: 1\nmodel: absent.onnx\noutput: out/a.onnx\npatches: []\n", "alone.yaml")
    result = run_cli("validate", wrong, good, alone)
    assert result.exit_code == 2, result.output
    assert f"{good}: ok" in result.stdout and f"{alone}: ok" in result.stdout
    assert "wrong.yaml:5:" in result.stderr and "'xx'" in result.stderr
    assert not (tmp_path / "out").exists()
