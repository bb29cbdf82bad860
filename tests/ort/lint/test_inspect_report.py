"""``patchspec inspect``'s report: what the graph says (ops, weights, metadata), folded for reading,
shown even when the weights are missing, and the values the lint feeds (issues 18 and 21)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.ort.lint.report import fold_names
from real_models import CORPUS
from scrfd_like import fpn_model

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]

SILERO = {
    "silero_vad": CORPUS / "silero_vad/data/silero_vad.onnx",
    "silero_vad_v4": CORPUS / "openwakeword/resources/models/silero_vad.onnx",
}
#: lines the default text of a silero model may take (the unfolded one: 70 and more)
LINE_BUDGET = 25

_DIMS = {"type": "array", "items": {"type": ["integer", "string", "null"]}}
_VALUE = {
    "type": "object",
    "required": ["name", "dtype", "dims"],
    "properties": {"name": {"type": "string"}, "dtype": {"type": "string"}, "dims": _DIMS},
}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
_PROBLEM = {
    "type": "object",
    "required": ["exit_code", "message", "hint"],
    "properties": {"exit_code": {"const": 3}, "message": {"type": "string"}, "hint": {"type": ["string", "null"]}},
}
#: the JSON Schema of ``inspect --json`` for a model that could be read (with usable data or not)
INSPECT_SCHEMA = {
    "type": "object",
    "required": [
        "model",
        "ir_version",
        "producer",
        "opsets",
        "metadata",
        "nodes",
        "ops",
        "inputs",
        "outputs",
        "initializers",
        "dim_params",
        "external_data",
        "subgraphs",
        "control_flow",
        "lint",
        "lint_skipped",
        "external_data_problem",
    ],
    "properties": {
        "model": {"type": "string"},
        "ir_version": {"type": "integer"},
        "producer": {
            "type": "object",
            "required": ["name", "version"],
            "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
        },
        "opsets": _COUNTS,
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "nodes": {"type": "integer"},
        "ops": _COUNTS,
        "inputs": {"type": "array", "items": _VALUE},
        "outputs": {"type": "array", "items": _VALUE},
        "initializers": {
            "type": "object",
            "required": ["count", "bytes", "dtypes", "inline", "inline_bytes", "external", "external_bytes"],
            "properties": {"dtypes": _COUNTS},
        },
        "dim_params": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {"type": "object", "required": ["tensor", "axis", "graph"]},
            },
        },
        "external_data": {
            "type": "object",
            "required": ["tensors", "files"],
            "properties": {
                "files": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["file", "size", "tensors", "bytes"],
                        "properties": {"size": {"type": ["integer", "null"]}},
                    },
                }
            },
        },
        "subgraphs": {"type": "array", "items": {"type": "object", "required": ["graph", "nodes", "annotated"]}},
        "control_flow": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["node", "op", "bodies", "nested"],
                "properties": {"bodies": _COUNTS},
            },
        },
        "lint": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": [
                        "input_shapes",
                        "shapes_given",
                        "conflicts",
                        "wrong_sizes",
                        "probed",
                        "not_probed",
                        "values",
                        "error",
                        "suggested_patches",
                        "clean",
                    ],
                },
            ]
        },
        "lint_skipped": {"type": ["string", "null"]},
        "external_data_problem": {"oneOf": [{"type": "null"}, _PROBLEM]},
    },
}


def nested_if_model() -> onnx.ModelProto:
    """x -> If 'outer' (then: Add, If 'inner' (then: Neg, else: Relu); else: Neg) -> y."""
    inner_then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["it"], name="inner_neg")], "it", [], [tensor_info("it", [2])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["ie"], name="inner_relu")], "ie", [], [tensor_info("ie", [2])]
    )
    outer_then = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["t1"], name="then_add"),
            helper.make_node("If", ["cond"], ["t2"], name="inner", then_branch=inner_then, else_branch=inner_else),
        ],
        "ot",
        [],
        [tensor_info("t2", [2])],
    )
    outer_else = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e1"], name="else_neg")], "oe", [], [tensor_info("e1", [2])]
    )
    nodes = [helper.make_node("If", ["cond"], ["y"], name="outer", then_branch=outer_then, else_branch=outer_else)]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", [2]), tensor_info("cond", [], TensorProto.BOOL)], [tensor_info("y", [2])]
    )
    return model


def described_model() -> onnx.ModelProto:
    """Conv -> Relu -> Relu, two float initializers and an int64 one, metadata, a producer, a custom-domain op."""
    weight = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu0"),
        helper.make_node("Relu", ["r"], ["r2"], name="relu1"),
        helper.make_node("FusedGelu", ["r2"], ["y"], name="gelu", domain="com.example"),
    ]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", [1, 3, 8, 8])], [tensor_info("y", [1, 4, 8, 8])], [weight, bias, axes]
    )
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    model.producer_name, model.producer_version = "exporter", "2.1"
    helper.set_model_props(model, {"author": "someone", "license": "MIT"})
    return model


def inspect_json(run_cli: RunCli, *args: Any, code: int = 0) -> Any:
    result = run_cli("inspect", *args, "--json")
    assert result.exit_code == code, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, INSPECT_SCHEMA)
    return data


# -- the graph's description -------------------------------------------------------------------------
def test_ops_initializers_metadata_and_producer(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(described_model(), path)
    data = inspect_json(run_cli, path)
    assert data["ops"] == {"Relu": 2, "Conv": 1, "com.example:FusedGelu": 1}
    assert data["initializers"] == {
        "count": 3,
        "bytes": 48 + 16 + 8,
        "dtypes": {"float": 2, "int64": 1},
        "inline": 3,
        "inline_bytes": 72,
        "external": 0,
        "external_bytes": 0,
    }
    assert data["metadata"] == {"author": "someone", "license": "MIT"}
    assert data["producer"] == {"name": "exporter", "version": "2.1"} and data["ir_version"] == 8
    assert data["opsets"] == {"ai.onnx": 17, "com.example": 1}
    text = run_cli("inspect", path).stdout
    assert "producer exporter 2.1" in text.splitlines()[0]
    assert "ops: Relu 2, Conv 1, com.example:FusedGelu 1" in text
    assert "initializers: 3, 72 bytes (float 2, int64 1); inline 3 (72 bytes), external 0 (0 bytes)" in text
    assert "metadata: author=someone, license=MIT" in text


def test_external_weights_are_counted_apart(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fpn_model(), path, save_as_external_data=True, location="m.data", size_threshold=256)
    init = inspect_json(run_cli, path)["initializers"]
    assert init["external"] >= 1 and init["inline"] >= 1 and init["external"] + init["inline"] == init["count"]
    assert init["external_bytes"] + init["inline_bytes"] == init["bytes"]


# -- folding -----------------------------------------------------------------------------------------
def test_nested_ifs_fold_into_one_line_and_all_unfolds(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "if.onnx"
    onnx.save(nested_if_model(), path)
    text = run_cli("inspect", path).stdout
    assert "  If 'outer': then 2 nodes, else 1 node, 1 nested" in text
    assert "main/outer.then_branch" not in text and "subgraphs: 4 (--all lists each)" in text
    for unfold in ("--all", "-v"):
        args = ("-v", "inspect", path) if unfold == "-v" else ("inspect", path, "--all")
        full = run_cli(*args).stdout
        assert "main/outer.then_branch/inner.else_branch: 1 nodes" in full, unfold
    data = inspect_json(run_cli, path)
    assert data["control_flow"] == [
        {"node": "outer", "op": "If", "bodies": {"then_branch": 2, "else_branch": 1}, "nested": 1}
    ]
    assert len(data["subgraphs"]) == 4  # --json keeps every detail


def test_unk_names_and_long_use_lists_are_summarised(run_cli: RunCli, tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"], name=f"n{i}") for i in range(12)]
    nodes.append(helper.make_node("Identity", ["t11"], ["y"], name="out"))
    value_info = [tensor_info(f"t{i}", ["batch", f"unk__{i}"]) for i in range(12)]
    model = graph_model(
        nodes, [tensor_info("x", ["batch", 8])], [tensor_info("y", ["batch", 8])], value_info=value_info
    )
    path = tmp_path / "unk.onnx"
    onnx.save(model, path)
    text = run_cli("inspect", path).stdout
    assert '"batch": 14 uses: x[0], t0[0], t1[0], t2[0], t3[0], t4[0] and 8 more' in text
    assert "12 more on intermediate tensors only: unk__0..unk__11 (12 names) (--all lists them)" in text
    assert '"unk__5": 1 use: t5[1]' in run_cli("inspect", path, "--all").stdout
    assert fold_names(["a", "unk__1", "unk__2", "b", "unk__7"]) == ["a", "unk__1", "unk__2", "b", "unk__7"]


@pytest.mark.parametrize("key", SILERO)
def test_silero_text_is_short_with_inputs_and_outputs_first(run_cli: RunCli, key: Any) -> None:
    path = SILERO[key]
    if not path.is_file():
        pytest.skip(f"the real-model corpus is not installed ({path} is absent): make venv installs it")
    lines = run_cli("inspect", path).stdout.splitlines()
    assert len(lines) <= LINE_BUDGET, "\n".join(lines)
    assert lines[1] == "inputs:" and lines.index("outputs:") < 10
    assert lines[lines.index("outputs:") + 3].startswith("lint at ") or lines[lines.index("outputs:") + 4].startswith(
        "lint at "
    )
    folded = [line for line in lines if not line.startswith("  not run: ")]  # onnxruntime's message is its own
    assert not any("Inline_0__" in line or "_branch/" in line for line in folded)
    assert any(line.startswith("  fed sr=16000 (the graph needs it: Equal") for line in lines)
    assert len(run_cli("inspect", path, "--all").stdout.splitlines()) > len(lines) + 10


# -- missing weights: the graph view, then the problem ------------------------------------------------
def _broken_external(tmp_path: Path, lfs: bool) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(fpn_model(), path, save_as_external_data=True, location="m.data", size_threshold=256)
    data = tmp_path / "m.data"
    if lfs:
        data.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 9000\n")
    else:
        data.unlink()
    return path


@pytest.mark.parametrize("lfs", [False, True], ids=["deleted", "git lfs pointer"])
def test_missing_weights_show_the_graph_then_the_files_once(run_cli: RunCli, tmp_path: Path, lfs: bool) -> None:
    path = _broken_external(tmp_path, lfs)
    result = run_cli("inspect", path)
    assert result.exit_code == 3, result.output
    assert 'inputs:\n  input.1  float  [1, 3, "?", "?"]' in result.stdout
    assert "outputs:\n  out0" in result.stdout and "ops: " in result.stdout
    assert "lint: skipped, the external data cannot be used (listed at the end)" in result.stdout
    assert "m.data" not in result.stdout and result.stdout.endswith("until this is fixed:\n")  # named once, at the end
    assert ("Git LFS pointer" if lfs else "external data file 'm.data' not found") in result.stderr
    assert ("git lfs pull" if lfs else "no similarly named file there") in result.stderr


@pytest.mark.parametrize("lfs", [False, True], ids=["deleted", "git lfs pointer"])
def test_missing_weights_json_is_complete_and_valid(run_cli: RunCli, tmp_path: Path, lfs: bool) -> None:
    data = inspect_json(run_cli, _broken_external(tmp_path, lfs), code=3)
    assert data["lint"] is None and data["lint_skipped"]
    assert data["external_data_problem"]["exit_code"] == 3 and "m.data" in data["external_data_problem"]["message"]
    assert [v["name"] for v in data["inputs"]] == ["input.1"] and len(data["outputs"]) == 3
    (entry,) = data["external_data"]["files"]
    assert entry["file"] == "m.data" and (entry["size"] is None) != lfs


def test_json_of_a_usable_model_has_no_problem(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "fpn.onnx"
    onnx.save(fpn_model(), path)
    data = inspect_json(run_cli, path)
    assert data["external_data_problem"] is None and data["lint_skipped"] is None and data["lint"]["values"] == {}


# -- values the lint feeds ---------------------------------------------------------------------------
def reshape_model() -> onnx.ModelProto:
    """x [1, 64] reshaped to the int64 input ``shape``: zeros (the default feed) cannot run."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=1)]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", [1, 64]), tensor_info("shape", [2], TensorProto.INT64)], [tensor_info("y", ["a", "b"])]
    )
    return model


def test_value_reaches_the_lint(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "r.onnx"
    onnx.save(reshape_model(), path)
    assert inspect_json(run_cli, path)["lint"]["error"]  # zeros: Reshape to [0, 0] fails
    lint = inspect_json(run_cli, path, "--value", "shape=2,32")["lint"]
    assert lint["error"] is None and lint["values"] == {
        "shape": {"value": [2, 32], "origin": "given", "why": "--value"}
    }
    assert "fed shape=2,32 (given)" in run_cli("inspect", path, "--value", "shape=2,32").stdout


@pytest.mark.parametrize(
    "option, message",
    [
        ("shap=2,32", "no input 'shap' (did you mean 'shape'?)"),
        ("shape=a", "expected NAME=V or NAME=V0,V1,..."),
        ("shape=1,2,3", "3 values for shape [2]"),
    ],
)
def test_bad_value_option_is_exit_2(run_cli: RunCli, tmp_path: Path, option: str, message: str) -> None:
    path = tmp_path / "r.onnx"
    onnx.save(reshape_model(), path)
    result = run_cli("inspect", path, "--value", option)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
