"""SpecLocation: the one type for a place in a spec, and its one formatter; Step.kind is an enum."""

from __future__ import annotations

from patchspec.errors import PatchError, SpecLocation, SpecProblem, Where
from patchspec.spec.catalog import StepKind
from patchspec.spec.steps import Step


def test_a_place_in_a_step_and_one_in_the_spec_s_own_keys() -> None:
    in_step = SpecLocation("s.yaml", 5, 9, "patches[1] (rename_dims)", ("axes", 2))
    assert str(in_step) == "s.yaml:5:9: patches[1] (rename_dims) > axes.2"
    assert str(SpecLocation("s.yaml", 7, 1, "", ("patches", 0, "set_batch"))) == "s.yaml:7:1: patches[0].set_batch"
    assert str(SpecLocation("s.yaml")) == "s.yaml"
    assert str(in_step.inside("x")) == "s.yaml:5:9: patches[1] (rename_dims) > axes.2.x"
    assert SpecLocation(label="verify[0] (run)", key=("cases", 0)).place == "verify[0] (run) > cases.0"
    assert Where is SpecLocation and in_step.step == in_step.label


def test_an_error_and_a_problem_at_one_place_print_it_alike() -> None:
    place = SpecLocation("s.yaml", 5, 9, "patches[1] (rename_dims)", ("axes", 2))
    problem = SpecProblem(place, "12.5 is not of type 'string'")
    error = PatchError("12.5 is not of type 'string'", where=place)
    assert str(problem) == str(error) == "s.yaml:5:9: patches[1] (rename_dims) > axes.2: 12.5 is not of type 'string'"
    assert problem.to_json()["where"] == "patches[1] (rename_dims)" and problem.to_json()["key"] == ["axes", 2]
    assert error.to_json()["where"] == {
        "file": "s.yaml",
        "line": 5,
        "column": 9,
        "step": place.label,
        "key": ["axes", 2],
    }


def test_a_spec_s_own_key_keeps_its_path_as_the_key_in_json() -> None:
    problem = SpecProblem(SpecLocation("s.yaml", 4, 1, "", ("patches", 0)), "each item has exactly one key")
    assert problem.to_json()["where"] == "patches[0]" and problem.to_json()["key"] == ["patches", 0]


def test_control_characters_are_escaped_in_the_place() -> None:
    assert "\x1b" not in str(SpecLocation("s.yaml", 1, 1, "patches[0] (x)", ("a\x1b[2J",)))


def test_a_step_s_kind_is_the_enum_and_names_its_section() -> None:
    step = Step(StepKind.VERIFIER, 2, "run", {})
    assert step.kind is StepKind.VERIFIER and step.section == "verify"
    assert step.label == "verify[2] (run)" and step.path == ("verify", 2, "run")


def test_json_names_a_problem_outside_any_step_by_its_path_in_the_file(tmp_path, run_cli):
    """docs/cli.md: for the spec's own keys ``where`` is the place and ``key`` its path in the file; for
    a step's params, ``where`` the step and ``key`` the path inside its params."""
    import json

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "patchspec: 1\nplugins: [no-such-dist]\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - set_bach: 8\n"
        "  - set_batch 8\n  - set_batch: {size: [1]}\nverify:\n  - chek: {}\n"
    )
    result = run_cli("validate", "--json", "--no-model", spec)
    problems = [(p["where"], p["key"]) for p in json.loads(result.stdout)["specs"][0]["problems"]]
    assert problems == [
        ("plugins[0]", ["plugins", 0]),
        ("patches[0]", ["patches", 0]),
        ("patches[1]", ["patches", 1]),
        ("patches[2] (set_batch)", ["size"]),
        ("verify[0]", ["verify", 0]),
    ], problems
