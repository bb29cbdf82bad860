"""onnxruntime failures come with the node they name and a hint: each rule on a model that triggers it."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.ort.hints import diagnose
from patchspec.ort.sessions import RunFailure, Session


def refusal(tmp_path, model, feeds=None) -> RunFailure:
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(RunFailure) as caught:
        session = Session(tmp_path / "m.onnx", "CPUExecutionProvider")
        session.run(feeds or {})
    return caught.value


def custom_op_model():
    model = graph_model([helper.make_node("NegPos", ["x"], ["y"], domain="com.acme", name="acme_op")],
                        [tensor_info("x", [2])], [tensor_info("y", [2])])
    model.opset_import.append(helper.make_opsetid("com.acme", 1))
    return model


def test_an_unregistered_custom_op_names_its_domain_and_the_setting(tmp_path):
    failure = refusal(tmp_path, custom_op_model())
    assert "com.acme:NegPos" in failure.message
    assert "custom_op_libraries" in failure.hint and "register_custom_ops_library" in failure.hint


def test_an_old_exporters_attribute_says_re_export_or_patch(tmp_path):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="bilinear", name="upsample")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    model = graph_model([node], [tensor_info("x", [1, 1, 4, 4])], [tensor_info("y", [1, 1, 8, 8])], [scales], opset=13)
    failure = refusal(tmp_path, model, {"x": np.zeros((1, 1, 4, 4), np.float32)})
    assert "older exporter" in failure.hint and "mode: linear" in failure.hint


def test_a_runtime_too_old_for_the_model_says_upgrade(tmp_path):
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2])], [tensor_info("y", [2])],
                        ir_version=99)
    failure = refusal(tmp_path, model)
    assert "upgrade onnxruntime" in failure.hint


def test_a_type_without_a_kernel_names_the_node_and_op(tmp_path):
    """Polygraphy's matmul.bf16.onnx: no bfloat16 MatMul on the CPU provider."""
    model = graph_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                        [tensor_info("a", [2, 2], TensorProto.BFLOAT16), tensor_info("b", [2, 2], TensorProto.BFLOAT16)],
                        [tensor_info("y", [2, 2], TensorProto.BFLOAT16)])
    failure = refusal(tmp_path, model)
    assert "at node 'mm'" in failure.message
    assert "no kernel for MatMul" in failure.hint and "providers:" in failure.hint


@pytest.mark.skipif(tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 24),
                    reason=f"onnxruntime {ort.__version__} follows data links out of the model's folder (1.24 refuses)")
def test_data_outside_the_models_folder_says_keep_it_inside(tmp_path):
    weights = numpy_helper.from_array(np.ones(512, np.float32), "w")
    model = graph_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", [512])], [tensor_info("y", [512])],
                        [weights])
    (tmp_path / "shared").mkdir()
    (tmp_path / "model").mkdir()
    onnx.save(model, tmp_path / "shared" / "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    os.symlink(tmp_path / "shared" / "m.onnx.data", tmp_path / "model" / "m.onnx.data")
    (tmp_path / "model" / "m.onnx").write_bytes((tmp_path / "shared" / "m.onnx").read_bytes())
    with pytest.raises(RunFailure) as caught:
        Session(tmp_path / "model" / "m.onnx", "CPUExecutionProvider")
    assert "outside the model's folder" in caught.value.hint


def test_unknown_messages_get_no_made_up_hint():
    assert diagnose("something nobody has seen before") is None


def test_the_run_verifier_takes_custom_op_libraries_relative_to_the_spec(tmp_path, run_cli):
    onnx.save(custom_op_model(), tmp_path / "m.onnx")
    verify = "verify:\n  - run:\n      custom_op_libraries: [libs/libacme.so]\n      compare: {against: none}\n"
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n" + verify)
    missing = run_cli("validate", spec)
    assert missing.exit_code == 2 and "libs/libacme.so does not exist" in missing.output
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "libacme.so").write_bytes(b"not a library")
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "cannot load the custom-op library" in result.output and "libacme.so" in result.output
