"""``init`` on inputs of every ONNX element type (issue 34, item 4): a STRING input gets the strings
the graph names (a LabelEncoder's keys, a constant it is compared with) and is never called an
integer input; BOOL, FLOAT16, DOUBLE and UINT8 inputs give specs that apply first time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info


def _init_and_apply(run_cli, model: onnx.ModelProto, folder: Path) -> tuple[str, dict, object]:
    onnx.save(model, folder / "m.onnx")
    spec = folder / "spec.yaml"
    made = run_cli("init", folder / "m.onnx", "--batch", "4", "--output", spec)
    assert made.exit_code == 0, made.output
    return spec.read_text(), yaml.safe_load(spec.read_text()), run_cli("apply", spec)


def _label_encoder(keys=("a", "b", "c")):
    node = helper.make_node(
        "LabelEncoder",
        ["letters"],
        ["ids"],
        domain="ai.onnx.ml",
        keys_strings=list(keys),
        values_int64s=list(range(len(keys))),
        default_int64=-1,
    )
    model = graph_model(
        [node],
        [tensor_info("letters", [None], TensorProto.STRING)],
        [tensor_info("ids", [None], TensorProto.INT64)],
    )
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
    return model


def test_a_label_encoder_over_letters_is_fed_its_own_keys(tmp_path, run_cli):
    text, spec, applied = _init_and_apply(run_cli, _label_encoder(), tmp_path)
    item = spec["verify"][1]["run"]["cases"][0]["inputs"]["letters"]
    assert item == {"value": ["a", "b", "c"], "shape": [4]}, text
    assert "integer input" not in text and "strings LabelEncoder" in text
    assert applied.exit_code == 0, applied.output


def test_a_label_encoder_of_opset_1_is_fed_its_classes_and_followed(tmp_path, run_cli):
    """LabelEncoder-1 (``classes_strings`` + ``default_int64``: old skl2onnx and keras2onnx): its output's
    type was unknown, so the Cast after it stopped the evaluation and set_batch left the output undecided."""
    encoder = helper.make_node(
        "LabelEncoder", ["letters"], ["ids"], domain="ai.onnx.ml", classes_strings=["a", "b", "c"], default_int64=-1
    )
    model = graph_model(
        [encoder, helper.make_node("Cast", ["ids"], ["codes"], to=TensorProto.FLOAT)],
        [tensor_info("letters", ["N", 8], TensorProto.STRING)],
        [tensor_info("codes", ["M", 8])],
    )
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    text, spec, applied = _init_and_apply(run_cli, model, tmp_path)
    assert spec["verify"][1]["run"]["cases"][0]["inputs"]["letters"]["value"] == ["a", "b", "c"], text
    assert applied.exit_code == 0, applied.output
    (tmp_path / "plain.yaml").write_text("patchspec: 1\nmodel: m.onnx\noutput: b4.onnx\npatches:\n  - set_batch: 4\n")
    plain = run_cli("apply", tmp_path / "plain.yaml", "--no-verify")
    assert plain.exit_code == 0, plain.output
    assert [d.dim_value for d in onnx.load(tmp_path / "b4.onnx").graph.output[0].type.tensor_type.shape.dim] == [4, 8]


def test_keys_that_look_like_numbers_stay_strings_in_the_spec(tmp_path, run_cli):
    text, spec, applied = _init_and_apply(run_cli, _label_encoder(("1", "no", "2.5")), tmp_path)
    assert spec["verify"][1]["run"]["cases"][0]["inputs"]["letters"]["value"] == ["1", "no", "2.5"], text
    assert applied.exit_code == 0, applied.output


def test_a_string_compared_with_a_constant_gets_that_constant(tmp_path, run_cli):
    target = numpy_helper.from_array(np.array(["spam"], dtype=object), "target")
    nodes = [helper.make_node("Equal", ["word", "target"], ["hit"]), helper.make_node("Cast", ["hit"], ["y"], to=1)]
    model = graph_model(
        nodes,
        [tensor_info("word", [None], TensorProto.STRING)],
        [tensor_info("y", [None])],
        [target],
        opset=19,  # Equal takes strings from opset 19
        ir_version=9,
    )
    text, spec, applied = _init_and_apply(run_cli, model, tmp_path)
    assert spec["verify"][1]["run"]["cases"][0]["inputs"]["word"]["value"] == ["spam"], text
    assert applied.exit_code == 0, applied.output


def test_a_string_input_the_graph_names_nothing_for_is_flagged_as_a_string(tmp_path, run_cli):
    nodes = [helper.make_node("Identity", ["text"], ["norm"])]
    model = graph_model(
        nodes, [tensor_info("text", [None], TensorProto.STRING)], [tensor_info("norm", [None], TensorProto.STRING)]
    )
    onnx.save(model, tmp_path / "m.onnx")
    made = run_cli("init", tmp_path / "m.onnx", "--batch", "4", "--output", tmp_path / "spec.yaml")
    assert made.exit_code == 0, made.output
    text = (tmp_path / "spec.yaml").read_text()
    assert "a string input the graph names no values for" in text and "integer input" not in text
    assert "a numpy array of str" in text and "file: text.npy" in text


@pytest.mark.parametrize(
    "element",
    [TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT8],
    ids=["bool", "float16", "double", "uint8"],
)
def test_inputs_of_other_types_apply_first_time(tmp_path, run_cli, element):
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT), helper.make_node("Relu", ["f"], ["y"])]
    if element == TensorProto.UINT8:  # an image: scaled to [0, 1]
        scale = numpy_helper.from_array(np.array(255.0, np.float32), "scale")
        nodes = [*nodes[:1], helper.make_node("Div", ["f", "scale"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
        model = graph_model(nodes, [tensor_info("x", [None, 3], element)], [tensor_info("y", [None, 3])], [scale])
    else:
        model = graph_model(nodes, [tensor_info("x", [None, 3], element)], [tensor_info("y", [None, 3])])
    text, _, applied = _init_and_apply(run_cli, model, tmp_path)
    assert applied.exit_code == 0, text + applied.output
