"""validate reports every mistake of a spec in one run, across kinds (schema, unknown types, params,
names the model lacks, patches that cannot apply), sorted by line, with one exit code per kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import (
    EXIT_BAD_FILE,
    EXIT_INTERNAL,
    EXIT_INVALID_SPEC,
    EXIT_PATCH_FAILED,
    ModelFileError,
    PatchError,
    PluginError,
    SpecError,
    exit_code_of_all,
)

RunCli = Any

#: four typos of four kinds; each used to show only once the ones above it were fixed
FOUR_TYPOS = """\
patchspec: 1
model: m.onnx
output: out/m.onnx
patches:
  - set_batch: {size: 4, inputs: [xx]}
  - rename_dims: {tensor: y, axes: {1: 12.5}}
  - set_bach: 2
verify:
  - run:
      cases:
        - inputs: {xs: [4, 4]}
      compare: {against: orignal}
"""


def small(folder: Path) -> None:
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    onnx.save(graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), str(folder / "m.onnx"))


def test_every_mistake_of_every_kind_is_reported_in_one_run_sorted_by_line(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    path = write_spec(tmp_path, FOUR_TYPOS)
    result = run_cli("validate", path)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith(str(path))]
    expected = [
        ("5:", "patches[0] (set_batch) > inputs.0: input 'xx' is not a graph input of this model (did you mean 'x'?)"),
        ("6:", "patches[1] (rename_dims) > axes.1: 12.5 is not of type"),
        ("7:", "patches[2]: unknown patch type 'set_bach' (did you mean 'set_batch'?)"),
        ("11:", "verify[0] (run) > cases.0.inputs: the case gives no shape for input 'x'"),
        ("11:", "verify[0] (run) > cases.0.inputs.xs: 'xs' is not an input of the patched model (did you mean 'x'?)"),
        ("12:", "verify[0] (run) > compare.against:"),
    ]
    assert len(lines) == len(expected), result.stderr
    for line, (position, text) in zip(lines, expected):
        assert line.startswith(f"{path}:{position}") and text in line, line
    assert "did you mean 'original'" in lines[-1]


def test_a_step_checked_on_a_model_a_left_out_patch_would_change_says_so(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    body = "patches:\n  - set_batch: {size: 0}\nverify:\n  - run:\n      cases:\n        - inputs: {xs: [4, 4]}\n"
    path = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n" + body)
    result = run_cli("validate", path)
    assert result.exit_code == 2, result.output
    assert "patches[0] (set_batch) > size" in result.stderr
    assert "'xs' is not an input of the patched model" in result.stderr
    assert "checked on the model without patches[0] (set_batch), which could not apply" in result.stderr


def test_a_patch_that_cannot_apply_is_exit_4_alone_and_the_spec_mistake_wins_beside_it(
    tmp_path: Path, run_cli: RunCli
) -> None:
    small(tmp_path)
    cannot = "  - replace_initializer: {initializer: nowhere, value: [1]}\n"
    alone = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n" + cannot, "a.yaml")
    result = run_cli("validate", alone)
    assert result.exit_code == EXIT_PATCH_FAILED, result.output
    assert "a.yaml:5:" in result.stderr and "nowhere" in result.stderr
    typo = "  - set_batch: {size: 4, inputs: [xx]}\n"
    both = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n" + typo + cannot, "b.yaml")
    result = run_cli("validate", both)
    assert result.exit_code == EXIT_INVALID_SPEC, result.output
    assert "b.yaml:5:" in result.stderr and "'xx'" in result.stderr
    assert "b.yaml:6:" in result.stderr and "nowhere" in result.stderr
    assert not (tmp_path / "out").exists()


def test_json_gives_each_problem_its_place_key_path_and_exit_code(tmp_path: Path, run_cli: RunCli) -> None:
    small(tmp_path)
    path = write_spec(tmp_path, FOUR_TYPOS)
    result = run_cli("validate", "--json", path)
    assert result.exit_code == 2, result.output
    (only,) = json.loads(result.stdout)["specs"]
    problems = only["problems"]
    assert [p["line"] for p in problems] == sorted(p["line"] for p in problems)
    first = problems[0]
    assert (first["where"], first["key"], first["exit_code"]) == ("patches[0] (set_batch)", ["inputs", 0], 2)
    run_case = next(p for p in problems if p["where"] == "verify[0] (run)" and "'xs'" in p["message"])
    assert run_case["key"] == ["cases", 0, "inputs", "xs"]
    assert all(" > " not in p["where"] for p in problems)


def test_a_model_that_cannot_be_read_is_exit_3_and_the_spec_mistakes_still_shown(
    tmp_path: Path, run_cli: RunCli
) -> None:
    (tmp_path / "m.onnx").write_bytes(b"not a model")
    path = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\nverify:\n  - chek: {}\n")
    result = run_cli("validate", path)
    assert result.exit_code == EXIT_INVALID_SPEC, result.output
    assert "unknown verifier 'chek' (did you mean 'check'?)" in result.stderr
    good = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\n", "good.yaml")
    result = run_cli("validate", good)
    assert result.exit_code == EXIT_BAD_FILE, result.output
    assert "m.onnx" in result.stderr


@pytest.mark.parametrize(
    ("errors", "code"),
    [
        ([PatchError("p"), ModelFileError("f")], EXIT_BAD_FILE),
        ([PatchError("p"), SpecError("s"), ModelFileError("f")], EXIT_INVALID_SPEC),
        ([SpecError("s"), PluginError("bug")], EXIT_INTERNAL),
        ([PatchError("p")], EXIT_PATCH_FAILED),
        ([], 0),
    ],
)
def test_one_exit_code_for_mistakes_of_several_kinds(errors: list[Any], code: int) -> None:
    assert exit_code_of_all(errors) == code


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_plan_and_apply_say_every_step_s_problem_with_the_model_at_once(
    tmp_path: Path, run_cli: RunCli, command: str
) -> None:
    small(tmp_path)
    body = (
        "patches:\n  - set_batch: {size: 4, inputs: [xx]}\n  - replace_initializer: {initializer: nowhere, value: [1]}\n"
        "verify:\n  - run:\n      cases:\n        - inputs: {xs: [4, 4]}\n"
    )
    path = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n" + body)
    result = run_cli(command, path)
    assert result.exit_code == EXIT_INVALID_SPEC, result.output
    found = [line.split(": ")[0].rsplit(":", 2)[1] for line in result.stderr.splitlines() if line.startswith(str(path))]
    assert found == ["5", "6", "10", "10"], result.stderr  # set_batch's name, the patch, the case (twice)
    assert not (tmp_path / "out" / "m.onnx").exists()


def test_a_step_its_own_checks_refused_is_not_blamed_for_a_fault_on_those_params(tmp_path: Path) -> None:
    import types

    from patchspec import Verifier, VerifyResult, hookimpl
    from patchspec.testing import run_spec

    class PickyVerifier(Verifier[dict[str, Any]]):
        name = "picky.check"
        description = "refuses 'odd'"
        params_schema = {
            "type": "object",
            "properties": {"mode": {"type": "string", "description": "odd or even"}},
            "additionalProperties": False,
        }

        def check_params(self, params: dict[str, Any]) -> Any:
            if params.get("mode") == "odd":
                yield ("mode",), "mode 'odd' is not supported"

        def check_model(self, params: dict[str, Any], model: Any) -> Any:
            return iter([{"even": ()}[params["mode"]]])  # a KeyError on what check_params refused

        def verify(self, params: dict[str, Any], context: Any) -> VerifyResult:
            return VerifyResult("passed", "ok")

    plugin = types.ModuleType("picky")
    plugin.register_verifiers = hookimpl(lambda register: register(PickyVerifier))  # type: ignore[attr-defined]
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    model = graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])])
    run = run_spec(
        tmp_path, "patches: []\nverify:\n  - picky.check: {mode: odd}\n", model, plugins=[plugin], command="validate"
    )
    assert run.exit_code == EXIT_INVALID_SPEC, run.output
    assert "verify[0] (picky.check) > mode: mode 'odd' is not supported" in run.stderr
    assert "bug" not in run.stderr


def test_a_problem_that_follows_from_a_refused_patch_does_not_set_the_exit_code(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """set_batch refuses (exit 4); the run case at batch 4 then does not fit the model it left at batch 1.
    Both are said; the exit code is the cause's, not 2 for the case that follows from it."""
    first = onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), "first")
    node = onnx.helper.make_node("Gather", ["x", "first"], ["y"], name="take_first", axis=0)
    onnx.save(graph_model([node], [tensor_info("x", [1, 4])], [tensor_info("y", [4])], [first]), tmp_path / "m.onnx")
    body = "patches:\n  - set_batch: 4\nverify:\n  - run:\n      cases:\n        - inputs: {x: [4, 4]}\n"
    for command in ("apply", "validate"):
        result = run_cli(command, write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\n" + body))
        assert result.exit_code == 4, result.output
        assert "Gather 'take_first' picks samples [0]" in result.output, result.output
        assert "checked on the model without patches[0] (set_batch)" in result.output, result.output
