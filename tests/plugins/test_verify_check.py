"""The ``check`` verifier: onnx's full check on the output, judged against the original (issue 16).

Problems the original already has pass with a note (fail with ``strict: true``); problems the patch
adds fail; nothing onnx raises crashes the run.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec import PatchResult, PatchType, hookimpl
from patchspec.testing import filled, registered
from patchspec.testing.contexts import verify_context
from patchspec_plugins._onnx_check import normalise
from patchspec_plugins.verify_check import CheckVerifier

ONNX = onnx.__version__
NO_GRAPH_NAME = "Field 'name' of 'graph' is required to be non-empty"


# -- models: each one onnxruntime loads, though onnx's full check rejects some ------------------------


def relu(graph_name: str = "g", y_shape=("N", 4)) -> onnx.ModelProto:
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor_info("x", ["N", 4])],
        [tensor_info("y", list(y_shape))],
    )
    model.graph.name = graph_name
    return model


def add_weight(y_shape=("N", 5)) -> onnx.ModelProto:
    """x [N, 4] + w [4] -> y, declared ``y_shape``: [N, 5] fails strict shape inference (onnxruntime
    only warns and merges leniently)."""
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor_info("x", ["N", 4])],
        [tensor_info("y", list(y_shape))],
        [weight],
    )


# -- in-test patch types that break what the original had right ----------------------------------------


class Unname(PatchType):
    name = "corrupt.unname"
    description = "clears the graph's name (onnx's checker requires one)"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        model.graph.name = ""
        return PatchResult(True, "graph name cleared")


class Misdeclare(PatchType):
    name = "corrupt.misdeclare"
    description = "declares a wrong size on axis 1 of the first graph output"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 99
        return PatchResult(True, "output axis 1 declared 99")


class Grow(PatchType):
    name = "corrupt.grow"
    description = "sets axis 0 of the first graph input to 3 and re-derives nothing"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3
        return PatchResult(True, "input axis 0 is 3")


class Corrupt:
    @staticmethod
    @hookimpl
    def register_patch_types(register):
        for cls in (Unname, Misdeclare, Grow):
            register(cls)


def apply(folder, run_cli, model, patches: str, verify: str = "  - check: {}\n", *, external: bool = False):
    """Save ``model`` (its weights in m.onnx.data when ``external``), apply a spec, return the result and
    the check verifier's report entry."""
    folder.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(
            model,
            str(folder / "m.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="m.onnx.data",
            size_threshold=0,
        )
    else:
        onnx.save(model, str(folder / "m.onnx"))
    spec = write_spec(folder, f"patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n{patches}verify:\n{verify}")
    plugin = registered(Corrupt(), name="corrupt") if "corrupt." in patches else contextlib.nullcontext()
    with plugin:
        result = run_cli("apply", spec, "--report", folder / "report.json")
    report = json.loads((folder / "report.json").read_text())
    checks = [entry for entry in report.get("verifiers", []) if "(check)" in entry["label"]]
    return result, (checks[0] if checks else None)


# -- what the original already has -----------------------------------------------------------------------


@pytest.mark.parametrize("patch", ["  - set_batch: 4\n", "  - rename_dims: {tensor: x, axes: {0: batch}}\n"])
def test_an_original_without_graph_name_does_not_fail_a_harmless_patch(tmp_path, run_cli, patch):
    model = relu(graph_name="")
    with pytest.raises(onnx.checker.ValidationError, match=NO_GRAPH_NAME):
        onnx.checker.check_model(model, full_check=True)
    result, check = apply(tmp_path, run_cli, model, patch)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m2.onnx").is_file()
    assert check["status"] == "passed"
    assert check["summary"] == (
        f"onnx {ONNX}: the original already fails onnx's check the same way: {NO_GRAPH_NAME}; not caused by the patch"
    )
    assert check["data"]["new"] == [] and check["data"]["already"] == [NO_GRAPH_NAME + "."]
    assert f"already fails onnx's check the same way: {NO_GRAPH_NAME}" in result.stdout


def test_strict_fails_on_what_the_original_already_has(tmp_path, run_cli):
    result, check = apply(tmp_path, run_cli, relu(graph_name=""), "  - set_batch: 4\n", "  - check: {strict: true}\n")
    assert result.exit_code == 1, result.output
    assert not (tmp_path / "out" / "m2.onnx").exists()
    assert check["status"] == "failed"
    assert check["summary"] == (
        f"onnx {ONNX} rejects the output: {NO_GRAPH_NAME}; the original has it too "
        "(strict: true fails the original's problems as well)"
    )
    assert "the original has it too" in result.stderr and NO_GRAPH_NAME in result.stderr


def test_an_original_failing_strict_shape_inference_with_external_data_passes(tmp_path, run_cli):
    """Both models are checked by path: the original's weights are in m.onnx.data, the output's in its
    own data file in the staging folder."""
    model = add_weight(y_shape=("N", 5))
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    result, check = apply(tmp_path, run_cli, model, "  - external_data: {size_threshold: 0}\n", external=True)
    assert result.exit_code == 0, result.output
    assert check["status"] == "passed", check
    assert check["summary"].startswith(
        f"onnx {ONNX}: the original already fails onnx's check the same way: "
        "(op_type:Add, node name: add): [ShapeInferenceError] Inferred shape and "
        "existing shape differ in dimension 1: (4) vs (5)"
    )
    assert check["summary"].endswith("; not caused by the patch")
    assert [name for name in (tmp_path / "out").iterdir() if name.suffix == ".data"], "the output has external data"


def test_sizes_in_a_message_may_differ(tmp_path, run_cli):
    """Flatten(axis=0) of x [1, 4] is [1, 4], declared [1, 5]; with x [3, 4] it is [1, 12]: the message
    says (4) vs (5), then (12) vs (5). Sizes are normalised: the same problem."""
    model = graph_model(
        [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=0)],
        [tensor_info("x", [1, 4])],
        [tensor_info("y", [1, 5])],
    )
    result, check = apply(tmp_path, run_cli, model, "  - corrupt.grow: {}\n")
    assert result.exit_code == 0, result.output
    assert check["status"] == "passed"
    assert "(12) vs (5)" in check["data"]["already"][0] and "not caused by the patch" in check["summary"]
    assert "the original's: (op_type:Flatten, node name: flat)" in check["details"][0]


# -- what the patch adds ------------------------------------------------------------------------------


def test_a_patch_that_breaks_the_checker_fails_though_the_original_passes(tmp_path, run_cli):
    model = relu()
    onnx.checker.check_model(model, full_check=True)
    result, check = apply(tmp_path, run_cli, model, "  - corrupt.unname: {}\n")
    assert result.exit_code == 1, result.output
    assert not (tmp_path / "out" / "m2.onnx").exists()
    assert check["summary"] == (
        f"onnx {ONNX} rejects the output: {NO_GRAPH_NAME}; the original passes onnx's checker: the patch causes it"
    )


def test_a_shape_problem_behind_the_originals_checker_problem_still_fails(tmp_path, run_cli):
    """The full check stops at the missing graph name on both models; strict shape inference, run on
    its own, fails only on the output."""
    result, check = apply(tmp_path, run_cli, relu(graph_name=""), "  - corrupt.misdeclare: {}\n")
    assert result.exit_code == 1, result.output
    assert check["summary"].startswith(f"onnx {ONNX} rejects the output: (op_type:Relu, node name: relu): ")
    assert check["summary"].endswith("the original passes onnx's shape inference: the patch causes it")
    assert check["data"]["already"] == [NO_GRAPH_NAME + "."]


def test_a_new_shape_problem_on_an_original_that_has_one_fails(tmp_path, run_cli):
    """Strict inference lists every node it rejects: the output's extra line is the patch's."""
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Add", ["x", "w"], ["z"], name="add")],
        [tensor_info("x", ["N", 4])],
        [tensor_info("y", ["N", 4]), tensor_info("z", ["N", 5])],
        [weight],
    )
    result, check = apply(tmp_path, run_cli, model, "  - corrupt.misdeclare: {}\n")
    assert result.exit_code == 1, result.output
    assert check["summary"].startswith(f"onnx {ONNX} rejects the output: (op_type:Relu, node name: relu): ")
    assert "the original fails onnx's shape inference too, but not with this: the patch causes it" in check["summary"]
    assert len(check["data"]["already"]) == 1 and "node name: add" in check["data"]["already"][0]


# -- never a crash -------------------------------------------------------------------------------------


def verify(tmp_path, output_bytes: bytes, original_bytes: bytes | None, params=None):
    output, original = tmp_path / "out.onnx", tmp_path / "original.onnx"
    output.write_bytes(output_bytes)
    if original_bytes is not None:
        original.write_bytes(original_bytes)
    params = filled(CheckVerifier, params or {})  # as the loader hands them over: defaults applied
    context = verify_context("check", params, output, onnx.ModelProto(), original=original)
    return CheckVerifier().verify(params, context)


def test_an_unreadable_output_is_a_failed_verdict(tmp_path):
    result = verify(tmp_path, b"not a model \x00\xff\x12", relu().SerializeToString())
    assert result.status == "failed"
    assert "rejects the output: Unable to parse proto" in result.summary
    assert "the original passes onnx's checker" in result.summary


def test_an_unreadable_original_excuses_nothing(tmp_path):
    result = verify(tmp_path, relu(graph_name="").SerializeToString(), None)
    assert result.status == "failed"
    assert result.summary.startswith(f"onnx {ONNX} rejects the output: {NO_GRAPH_NAME}; the original could not be read")


def test_any_exception_from_onnx_is_a_verdict(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something inside onnx")

    monkeypatch.setattr(onnx.checker, "check_model", broken)
    result = verify(tmp_path, relu().SerializeToString(), relu().SerializeToString())
    assert result.status == "passed"  # both fail the same way: an onnx that cannot check anything
    assert "RuntimeError: something inside onnx" in result.summary
    result = verify(tmp_path, relu().SerializeToString(), relu().SerializeToString(), {"strict": True})
    assert result.status == "failed" and "RuntimeError: something inside onnx" in result.summary


def test_an_exception_from_shape_inference_alone_is_a_verdict(tmp_path, monkeypatch):
    """The full check fails on the output only, and inference raises a ValueError on both models:
    the output's problem is in the stage the original fails too."""
    check_model = onnx.checker.check_model

    def full_check_fails(path, full_check=False, **kwargs):
        if full_check and str(path).endswith("out.onnx"):
            raise onnx.shape_inference.InferenceError("[ShapeInferenceError] made up")
        return check_model(path, full_check=False, **kwargs)

    def inference_raises(*args, **kwargs):
        raise ValueError("inference cannot start")

    monkeypatch.setattr(onnx.checker, "check_model", full_check_fails)
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", inference_raises)
    result = verify(tmp_path, relu().SerializeToString(), relu().SerializeToString())
    assert result.status == "passed", result
    assert result.data["already"] == ["ValueError: inference cannot start"]


# -- the rule for "the same problem" ---------------------------------------------------------------------


def test_normalise_takes_out_sizes_and_dim_names_but_not_names_or_type_codes():
    assert normalise("differ in dimension 1: (4) vs (5)") == normalise("differ in dimension 1: (12) vs (5)")
    assert normalise("Inferred=3 Declared=4 Dimension=1") == "Inferred=# Declared=# Dimension=#"
    assert normalise("node /model.0/Conv_12 input.1 x:0") == "node /model.0/Conv_12 input.1 x:0"
    assert normalise("shape {N,3,-1}", dims={"N"}) == normalise("shape {batch,3,-1}", dims={"batch"}) == "shape {#,#,#}"
    assert normalise("tensor (N)", dims=set()) == "tensor (N)"
    elem = "[TypeInferenceError] Inferred elem type differs from existing elem type: (1) vs (7)"
    assert normalise(elem) != normalise(elem.replace("(1)", "(10)"))


def test_strict_is_a_boolean_and_unknown_keys_are_spec_errors(tmp_path, run_cli):
    onnx.save(relu(), str(tmp_path / "m.onnx"))
    for verify_yaml, expected in (
        ("{stict: true}", "did you mean 'strict'"),
        ("{strict: 1}", "is not of type 'boolean'"),
    ):
        spec = write_spec(
            tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\nverify:\n  - check: {verify_yaml}\n"
        )
        result = run_cli("validate", spec)
        assert result.exit_code == 2 and expected in result.output, result.output


def test_a_passing_output_does_not_read_the_original(tmp_path):
    result = verify(tmp_path, relu().SerializeToString(), None)
    assert result.status == "passed" and result.summary == f"onnx {ONNX} checker and strict shape inference"
    assert result.data["new"] == [] and result.data["already"] == []
