"""A static batch is static everywhere (issue 34, item 5): every input that carries the batch, read
or not, and every output whose axis carries it get the size; sizes a declaration stated are never
degraded to unknown (skl2onnx's ``[?, 3]`` scores stay ``[4, 3]``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.annotations import read_dims
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def dims(model, name):
    infos = {i.name: i for i in [*model.graph.input, *model.graph.output]}
    return read_dims(infos[name])


def ml_model(nodes, inputs, outputs, ml=1):
    model = graph_model(nodes, inputs, outputs, opset=17)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", ml))
    return model


def paddle_like(length_dim="DynamicDimension.2"):
    """token_ids read through a table; length [its own name], read by no node."""
    table = numpy_helper.from_array(np.ones((50, 8), np.float32), "emb")
    nodes = [
        helper.make_node("Gather", ["emb", "token_ids"], ["e"]),
        helper.make_node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0),
    ]
    inputs = [
        tensor_info("token_ids", ["DynamicDimension.0", "DynamicDimension.1"], TensorProto.INT64),
        tensor_info("length", [length_dim], TensorProto.INT64),
    ]
    return graph_model(nodes, inputs, [tensor_info("y", ["DynamicDimension.0", 8])], [table], opset=13)


@pytest.mark.parametrize("size", [4, "N"])
def test_an_input_no_node_reads_takes_the_batch(size):
    model = paddle_like()
    result = set_batch(model, size=size)
    assert dims(model, "length") == [size] and dims(model, "token_ids")[0] == size, result.summary
    assert "length[0]" in result.summary
    assert any("'length'[0] (DynamicDimension.2): no node reads it" in line for line in result.details)


def test_an_unread_input_with_a_fixed_axis_0_keeps_it():
    model = paddle_like(length_dim=7)
    set_batch(model, size=4)
    assert dims(model, "length") == [7]


def test_inputs_given_by_name_leave_an_unread_one_alone():
    model = paddle_like()
    set_batch(model, size=4, inputs=["token_ids"])
    assert dims(model, "length") == ["DynamicDimension.2"]


def classifier(labels=("a", "b", "c")):
    """skl2onnx's LinearClassifier -> Normalizer: label [?], probabilities [?, 3]."""
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["X"],
            ["label", "scores"],
            domain="ai.onnx.ml",
            classlabels_strings=list(labels),
            coefficients=list(np.linspace(-1, 1, 4 * len(labels))),
            intercepts=[0.0] * len(labels),
            multi_class=1,
        ),
        helper.make_node("Normalizer", ["scores"], ["probabilities"], domain="ai.onnx.ml", norm="L1"),
    ]
    outputs = [tensor_info("label", [None], TensorProto.STRING), tensor_info("probabilities", [None, len(labels)])]
    return ml_model(nodes, [tensor_info("X", [None, 4])], outputs)


def regressor(declared):
    """CatBoost's TreeEnsembleRegressor, declared rank 1: onnxruntime gives [N, 1]."""
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["features"],
        ["predictions"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=[0],
        nodes_nodeids=[0],
        nodes_featureids=[0],
        nodes_values=[0.0],
        nodes_modes=["LEAF"],
        nodes_truenodeids=[0],
        nodes_falsenodeids=[0],
        target_treeids=[0],
        target_nodeids=[0],
        target_ids=[0],
        target_weights=[2.5],
    )
    return ml_model([node], [tensor_info("features", ["N", 4])], [tensor_info("predictions", declared)])


def _runs_as_declared(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for info, value in zip(model.graph.output, session.run(None, feeds)):
        declared = read_dims(info)
        assert declared is not None and len(declared) == np.asarray(value).ndim, (info.name, declared)
        assert all(d is None or isinstance(d, str) or d == n for d, n in zip(declared, np.asarray(value).shape))


def test_classifier_outputs_get_the_batch_and_keep_their_classes():
    model = classifier()
    result = set_batch(model, size=4)
    assert dims(model, "label") == [4] and dims(model, "probabilities") == [4, 3], result.summary
    assert "corrected" not in result.summary and "undecided" not in result.summary
    _runs_as_declared(model, {"X": np.ones((4, 4), np.float32)})


def test_a_symbolic_batch_reaches_classifier_outputs():
    model = classifier()
    set_batch(model, size="N")
    assert dims(model, "label") == ["N"] and dims(model, "probabilities") == ["N", 3]


def test_a_regressor_declared_at_the_wrong_rank_is_corrected_to_what_it_computes():
    model = regressor(["N"])
    result = set_batch(model, size=4)
    assert dims(model, "predictions") == [4, 1] and "1 output declaration corrected" in result.summary
    _runs_as_declared(model, {"features": np.ones((4, 4), np.float32)})


def test_a_declared_size_nothing_derives_is_kept_not_degraded():
    """A custom op: nothing derives its output; [?, 2] keeps its 2 (not the old batch), and is undecided."""
    node = helper.make_node("Mystery", ["x"], ["y"], domain="acme")
    model = graph_model([node], [tensor_info("x", [None, 4])], [tensor_info("y", [None, 2])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    result = set_batch(model, size=4)
    assert dims(model, "y") == [None, 2], result.summary
    assert "1 undecided" in result.summary


def test_a_declared_size_equal_to_the_old_batch_is_not_kept_blindly():
    """[1, 5] at batch 1: the 1 may be the batch, so it is not carried to batch 4; the 5 is."""
    node = helper.make_node("Mystery", ["x"], ["y"], domain="acme")
    model = graph_model([node], [tensor_info("x", [1, 4])], [tensor_info("y", [1, 5])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    set_batch(model, size=4)
    assert dims(model, "y") == [None, 5]


def test_a_label_encoder_over_strings_keeps_the_batch():
    node = helper.make_node(
        "LabelEncoder",
        ["letters"],
        ["ids"],
        domain="ai.onnx.ml",
        keys_strings=["a", "b"],
        values_int64s=[0, 1],
        default_int64=-1,
    )
    model = ml_model(
        [node], [tensor_info("letters", [None], TensorProto.STRING)], [tensor_info("ids", [None], TensorProto.INT64)], 2
    )
    set_batch(model, size=4)
    assert dims(model, "ids") == [4]
    _runs_as_declared(model, {"letters": np.array(["a", "b", "z", "a"], dtype=object)})
    onnx.checker.check_model(model, full_check=True)


def test_an_output_declared_with_the_batch_name_gets_the_batch_where_nothing_derives_it():
    node = helper.make_node("Mystery", ["x"], ["y"], domain="acme")
    model = graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 5])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    set_batch(model, size=4)
    assert dims(model, "y") == [4, 5]
    other = graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["M", 5])])
    other.opset_import.append(helper.make_opsetid("acme", 1))
    set_batch(other, size=4)
    assert dims(other, "y") == [None, 5]  # another name: not the batch by declaration


def test_a_declared_size_another_free_input_dim_may_move_is_not_kept():
    """x [1, 'width']: the custom op's declared 19 was the size at the export's width, not a fact."""
    node = helper.make_node("Mystery", ["x"], ["y"], domain="acme")
    model = graph_model([node], [tensor_info("x", [1, "width"])], [tensor_info("y", [1, 19])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    set_batch(model, size=4)
    assert dims(model, "y") == [None, None]


def test_a_declared_size_both_batches_find_is_kept_where_moving_other_dims_fails():
    """LORE's processor (lineless-table-rec) declares ``[batch, 54, 4]``: the 54 its cells at export, the 4 a
    constant. Where the evaluation moves the other symbolic dims it fails (here: a table of 128 positions
    sliced to the length), so nothing says the 4 stays 4 there; found at both batches, it is kept."""
    nodes = [
        helper.make_node("Shape", ["x"], ["n"], start=1, end=2),
        helper.make_node("Slice", ["table", "zero", "n"], ["positions"]),
        helper.make_node("Add", ["x", "positions"], ["placed"], name="place"),
        helper.make_node("Unsqueeze", ["placed", "two"], ["column"]),
        helper.make_node("MatMul", ["column", "w"], ["wide"]),  # [batch, n, 4]
        helper.make_node("Gelu", ["wide"], ["z"], domain="com.microsoft"),  # onnx's inference says nothing
    ]
    constants = [
        numpy_helper.from_array(np.arange(128, dtype=np.float32), "table"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.ones((1, 4), np.float32), "w"),
    ]
    declared = [tensor_info("z", ["batch", 54, 4])]  # 54: the length at export
    model = graph_model(nodes, [tensor_info("x", ["batch", "n"])], declared, constants, opset=13)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    set_batch(model, size=4)
    assert dims(model, "z") == [4, None, 4]


def test_init_gives_an_unread_input_the_batch_and_the_spec_applies(tmp_path, run_cli):
    import yaml

    onnx.save(paddle_like(), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    made = run_cli("init", tmp_path / "m.onnx", "--batch", "4", "--output", spec)
    assert made.exit_code == 0, made.output
    step = yaml.safe_load(spec.read_text())["patches"][0]["set_batch"]
    assert step["inputs"] == {"token_ids": 0, "length": 0}
    assert "'length'[0]: no node reads it: it takes the batch with the others" in spec.read_text()
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
    written = onnx.load(tmp_path / "build" / "m.b4.onnx")
    assert dims(written, "length") == [4]


def test_a_batch_already_at_its_size_still_gets_a_false_output_declaration_corrected():
    """CatBoost declares its predictions [N] and gives [N, 1]; set_batch N on it changes no batch, and
    used to leave the false declaration in the model it wrote."""
    weights = numpy_helper.from_array(np.ones((4, 1), np.float32), "w")
    model = graph_model(
        [helper.make_node("MatMul", ["features", "w"], ["predictions"])],
        [tensor_info("features", ["N", 4])],
        [tensor_info("predictions", ["N"])],
        [weights],
    )
    result = set_batch(model, size="N")
    assert result.modified and "batch already N on features[0]; 1 output declaration corrected" in result.summary
    assert dims(model, "predictions") == ["N", 1]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"features": np.ones((3, 4), np.float32)})[0].shape == (3, 1)
