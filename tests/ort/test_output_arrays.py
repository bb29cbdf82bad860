"""Outputs that are not tensors (a ZipMap's sequence of maps) are compared as arrays, not exit 5."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import as_array


def zipmap_classifier() -> onnx.ModelProto:
    """What skl2onnx and onnxmltools classifiers end with: probabilities, then ZipMap."""
    scores = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])
    maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    nodes = [
        helper.make_node("Softmax", ["X"], ["prob"], axis=1),
        helper.make_node("ZipMap", ["prob"], ["zm"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
    ]
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 2]), helper.make_value_info("zm", maps)]
    graph = helper.make_graph(nodes, "classifier", [scores], outputs)
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_a_sequence_of_maps_is_one_row_per_element_in_key_order():
    rows = as_array("zm", [{1: 0.75, 0: 0.25}, {0: 0.5, 1: 0.5}])
    assert rows.shape == (2, 2) and rows.tolist() == [[0.25, 0.75], [0.5, 0.5]]
    assert as_array("m", {"b": 2.0, "a": 1.0}).tolist() == [1.0, 2.0]


def test_an_output_that_is_no_array_names_itself_and_the_way_out():
    with pytest.raises(RunFailure, match="output 'odd'") as caught:
        as_array("odd", [np.zeros(2), np.zeros(3)])
    assert "compare: {outputs: {odd: skip}}" in str(caught.value.hint)


@pytest.mark.parametrize("patch, code", [("{set_batch: 3}", 0), ("{set_batch: 2}", 2)])
def test_a_zipmap_classifier_verifies_at_the_new_batch(tmp_path, run_cli, patch, code):
    onnx.save(zipmap_classifier(), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    cases = "verify:\n  - run: {cases: [{inputs: {X: [3, 2]}}]}\n"
    spec.write_text(f"patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: [{patch}]\n{cases}")
    result = run_cli("apply", spec)
    assert result.exit_code == code, result.output  # batch 2 cannot take a case at 3: the spec is wrong
    assert (tmp_path / "o.onnx").exists() == (code == 0)


def test_string_outputs_are_compared_for_equality():
    """skl2onnx's string labels ended in exit 5: a float conversion of 'versicolor'."""
    import numpy as np

    from patchspec.ort.run.comparison import compare_output

    same = compare_output(
        "label", np.array(["setosa", "versicolor"], dtype=object), np.array(["setosa", "versicolor"]), 1e-4, 1e-5
    )
    assert same.passed and same.max_abs == 0
    other = compare_output(
        "label", np.array(["setosa", "virginica"], dtype=object), np.array(["setosa", "versicolor"]), 1e-4, 1e-5
    )
    assert not other.passed and "first at index (1,)" in other.message and "'virginica'" in other.message
