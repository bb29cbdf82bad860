"""onnxruntime failures come with the node they name and a hint: each rule on a model that triggers it."""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.ort.hints import diagnose
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Session

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]


def refusal(tmp_path: Path, model: onnx.ModelProto, feeds: dict[str, Any] | None = None) -> RunFailure:
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(RunFailure) as caught:
        session = Session(tmp_path / "m.onnx", "CPUExecutionProvider")
        session.run(feeds or {})
    return caught.value


def custom_op_model() -> onnx.ModelProto:
    model: onnx.ModelProto = graph_model(
        [helper.make_node("NegPos", ["x"], ["y"], domain="com.acme", name="acme_op")],
        [tensor_info("x", [2])],
        [tensor_info("y", [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.acme", 1))
    return model


def test_an_unregistered_custom_op_names_its_domain_and_the_setting(tmp_path: Path) -> None:
    failure = refusal(tmp_path, custom_op_model())
    assert "com.acme:NegPos" in failure.message
    assert "custom_op_libraries" in (failure.hint or "") and "register_custom_ops_library" in (failure.hint or "")


def test_an_old_exporters_attribute_says_re_export_or_patch(tmp_path: Path) -> None:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="bilinear", name="upsample")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    model = graph_model([node], [tensor_info("x", [1, 1, 4, 4])], [tensor_info("y", [1, 1, 8, 8])], [scales], opset=13)
    failure = refusal(tmp_path, model, {"x": np.zeros((1, 1, 4, 4), np.float32)})
    assert "older exporter" in (failure.hint or "") and "mode: linear" in (failure.hint or "")


def test_a_runtime_too_old_for_the_model_says_upgrade(tmp_path: Path) -> None:
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2])], [tensor_info("y", [2])], ir_version=99
    )
    failure = refusal(tmp_path, model)
    assert "upgrade onnxruntime" in (failure.hint or "")


def test_a_type_without_a_kernel_names_the_node_and_op(tmp_path: Path) -> None:
    """Polygraphy's matmul.bf16.onnx: no bfloat16 MatMul on the CPU provider."""
    model = graph_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        [tensor_info("a", [2, 2], TensorProto.BFLOAT16), tensor_info("b", [2, 2], TensorProto.BFLOAT16)],
        [tensor_info("y", [2, 2], TensorProto.BFLOAT16)],
    )
    failure = refusal(tmp_path, model)
    assert "at node 'mm'" in failure.message
    assert "no kernel for MatMul" in (failure.hint or "") and "providers:" in (failure.hint or "")


def test_data_outside_the_models_folder_is_diagnosed() -> None:
    message = (
        "[ONNXRuntimeError] : 1 : FAIL : Load model failed: External data path '/x/blobs/abc' escapes model directory"
    )
    found = diagnose(message)
    assert found is not None and "keep the model and data in one folder" in (found.hint or "")


def hub_cache(root: Path, model: onnx.ModelProto) -> Path:
    """A Hugging Face cache: snapshots/<rev>/ holds links into blobs/, where the bytes are."""
    blobs, snapshot = root / "blobs", root / "snapshots" / "rev1"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    onnx.save(model, blobs / "model.onnx", save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    (blobs / "model.onnx").rename(blobs / "sha-model")
    (blobs / "model.onnx.data").rename(blobs / "sha-data")
    os.symlink("../../blobs/sha-model", snapshot / "model.onnx")
    os.symlink("../../blobs/sha-data", snapshot / "model.onnx.data")
    return snapshot / "model.onnx"


def shared_weights(root: Path, model: onnx.ModelProto) -> Path:
    """The model in its own folder, its data file a link into a shared weights folder next to it."""
    (root / "shared").mkdir(parents=True)
    (root / "model").mkdir()
    onnx.save(
        model, root / "shared" / "model.onnx", save_as_external_data=True, location="model.onnx.data", size_threshold=0
    )
    (root / "shared" / "model.onnx").rename(root / "model" / "model.onnx")
    os.symlink("../shared/model.onnx.data", root / "model" / "model.onnx.data")
    return root / "model" / "model.onnx"


def adder() -> onnx.ModelProto:
    weights = numpy_helper.from_array(np.arange(512, dtype=np.float32), "w")
    model: onnx.ModelProto = graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", ["N", 512])],
        [tensor_info("y", ["N", 512])],
        [weights],
    )
    return model


@pytest.mark.parametrize("layout", [hub_cache, shared_weights], ids=["hub_cache", "shared_weights"])
def test_data_linked_from_outside_runs_as_a_reference(layout: Any, tmp_path: Path, run_cli: RunCli) -> None:
    """onnxruntime >= 1.24 refuses a data file whose real path is outside the model's folder; the run
    verifier's reference session is built from a private staged copy (hard links), and the user's files
    stay as they were."""
    (tmp_path / ".git").mkdir()  # a repository: the cache's links stay inside its root
    path = layout(tmp_path / "cache", adder())
    files = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file() and not p.is_symlink())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {path}\noutput: out/tiny.onnx\npatches:\n  - set_batch: 2\n"
        "verify:\n  - run:\n      cases: [{inputs: {x: [2, 512]}}]\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "run ..................... passed" in result.stdout
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before
    session = Session(path, "CPUExecutionProvider")
    outputs, _ = session.run({"x": np.ones((1, 512), np.float32)})
    np.testing.assert_array_equal(outputs["y"][0], np.arange(512, dtype=np.float32) + 1)


def test_the_staged_copy_goes_with_its_session(tmp_path: Path) -> None:
    path = shared_weights(tmp_path / "cache", adder())
    (tmp_path / "cache" / ".git").mkdir()  # a repository: the shared weights are inside its root
    session = Session(path, "CPUExecutionProvider")
    staged = list(Path(tempfile.gettempdir()).glob("patchspec-stage-*"))
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 24):
        assert not staged  # this onnxruntime follows the link: nothing to stage
        return
    assert staged and all((folder / "model.onnx.data").stat().st_nlink >= 2 for folder in staged)  # hard links
    del session
    gc.collect()
    assert not [f for f in staged if f.exists()]


def test_unknown_messages_get_no_made_up_hint() -> None:
    assert diagnose("something nobody has seen before") is None


def test_the_run_verifier_takes_custom_op_libraries_relative_to_the_spec(tmp_path: Path, run_cli: RunCli) -> None:
    onnx.save(custom_op_model(), tmp_path / "m.onnx")
    verify = "verify:\n  - run:\n      custom_op_libraries: [libs/libacme.so]\n      compare: {against: none}\n"
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n" + verify)
    missing = run_cli("validate", spec)
    assert missing.exit_code == 2 and "libs/libacme.so does not exist" in missing.output
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "libacme.so").write_bytes(b"not a library")
    (tmp_path / "pyproject.toml").write_text("[tool.patchspec]\nallow-native-code = true\n")  # the project allows it
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "cannot load the custom-op library" in result.output and "libacme.so" in result.output


def test_a_domain_without_an_opset_import_is_named_without_a_made_up_op() -> None:
    found = diagnose("No opset import for domain 'com.acme'")
    assert found is not None
    assert found.cause == "custom_op" and found.op == "com.acme" and "None" not in (found.hint or "")
