"""Everywhere a spec chooses a name from a list, a typo gets the closest names (errors.did_you_mean)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import write_spec

RunCli = Any
HEAD = "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\nverify:\n"


@pytest.mark.parametrize(
    ("verify", "expected"),
    [
        # an object inside an anyOf ({rtol, atol} | skip): the object branch is meant, not 'skip'
        (
            "  - run: {compare: {against: none, outputs: {y: {rtol: 1, atoll: 2}}}}",
            "compare.outputs.y: unknown key 'atoll' (did you mean 'atol'",
        ),
        # a case input given as an object (list | object)
        (
            "  - run: {cases: [{inputs: {x: {shap: [1, 4]}}}]}",
            "cases.0.inputs.x: unknown key 'shap' (did you mean 'shape'?)",
        ),
        ("  - run: {compare: {rtoll: 1}}", "compare: unknown key 'rtoll' (did you mean 'rtol'"),
        ("  - chek: {}", "verify[0]: unknown verifier 'chek' (did you mean 'check'?)"),
        ("  - run: {compare: {against: orignal}}", "(did you mean 'original'?)"),
    ],
)
def test_a_name_chosen_from_a_list_gets_the_closest_ones(
    tmp_path: Path, run_cli: RunCli, verify: str, expected: str
) -> None:
    path = write_spec(tmp_path, HEAD + verify + "\n")
    result = run_cli("validate", "--no-model", path)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr, result.stderr


def test_a_file_the_spec_names_that_is_missing_gets_the_closest_file_beside_it(tmp_path: Path, run_cli: RunCli) -> None:
    (tmp_path / "x.npy").write_bytes(b"")
    path = write_spec(tmp_path, HEAD + "  - run: {cases: [{inputs: {x: {file: x.npz}}}]}\n")
    result = run_cli("validate", "--no-model", path)
    assert result.exit_code == 2, result.output
    assert "x.npz does not exist" in result.stderr and "(did you mean 'x.npy'?)" in result.stderr


def test_a_bad_value_in_a_const_branch_still_says_what_the_const_wants(tmp_path: Path, run_cli: RunCli) -> None:
    path = write_spec(tmp_path, HEAD + "  - run: {compare: {against: none, outputs: {y: skpi}}}\n")
    result = run_cli("validate", "--no-model", path)
    assert result.exit_code == 2, result.output
    assert "compare.outputs.y: expected 'skip', got 'skpi'" in result.stderr


def test_a_step_with_a_control_character_is_refused_once_and_not_checked_further(
    tmp_path: Path, run_cli: RunCli
) -> None:
    import onnx

    from helpers import graph_model, tensor_info

    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    onnx.save(graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), str(tmp_path / "m.onnx"))
    path = write_spec(tmp_path, HEAD + '  - run: {cases: [{inputs: {x: {file: "a\\0b.npy"}}}]}\n')
    result = run_cli("validate", path)
    assert result.exit_code == 2, result.output
    assert "verify[0] (run) > cases.0.inputs.x.file: contains the control character" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith(str(path))]) == 1, result.stderr
