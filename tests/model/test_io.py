"""Loading the input model (graph only, with one clear error per way a file is unusable) and what the
output keeps of it: ir_version, opset imports, metadata, plus patchspec's own version and digest."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import patchspec
from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import ModelFileError
from patchspec.model.graph import default_opset
from patchspec.model.io import FileStamp, load_model
from patchspec.run.stamp import DIGEST_KEY, VERSION_KEY


def add_model(ir_version=8, opset=17) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", [1, 4])],
        [tensor_info("y", [1, 4])],
        [weight],
        opset=opset,
        ir_version=ir_version,
    )


def metadata(model: onnx.ModelProto) -> dict:
    return {prop.key: prop.value for prop in model.metadata_props}


# -- the loader ---------------------------------------------------------------------------------
def test_load_reads_the_graph(tmp_path):
    onnx.save(add_model(), tmp_path / "m.onnx")
    model = load_model(tmp_path / "m.onnx")
    assert model.graph.node[0].op_type == "Add" and default_opset(model) == 17


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not an ONNX model (0 bytes)"),
        (b"\xff" * 64, "not an ONNX model (parse failed)"),
        (b"\x08\x08", "not an ONNX model (no graph in 2 bytes)"),  # ir_version only: parses as a ModelProto
    ],
)
def test_loader_refuses_what_is_not_a_model(tmp_path, content, message):
    (tmp_path / "m.onnx").write_bytes(content)
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(tmp_path / "m.onnx")


def test_loader_refuses_a_model_without_opset_import(tmp_path):
    model = add_model()
    del model.opset_import[:]
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError, match="no opset_import; the file may be truncated"):
        load_model(tmp_path / "m.onnx")


def test_prefix_that_ends_before_opset_import_is_refused(tmp_path):
    raw = add_model().SerializeToString(deterministic=True)
    opset = onnx.ModelProto()
    opset.opset_import.extend(add_model().opset_import)
    cut = raw[: len(raw) - len(opset.SerializeToString())]  # opset_import (field 8) is written last here
    parsed = onnx.ModelProto()
    parsed.ParseFromString(cut)  # protobuf accepts it
    assert parsed.HasField("graph") and not parsed.opset_import
    (tmp_path / "m.onnx").write_bytes(cut)
    with pytest.raises(ModelFileError, match="no opset_import"):
        load_model(tmp_path / "m.onnx")


def test_ir_and_opset_at_the_installed_maximum_are_accepted(tmp_path):
    model = add_model(ir_version=onnx.IR_VERSION, opset=onnx.defs.onnx_opset_version())
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    assert load_model(tmp_path / "m.onnx").ir_version == onnx.IR_VERSION


def test_loader_does_not_read_external_weights(tmp_path):
    onnx.save(add_model(), tmp_path / "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    os.truncate(tmp_path / "m.onnx.data", 0)  # the graph still loads; the data is checked elsewhere
    model = load_model(tmp_path / "m.onnx")
    assert model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL


def test_file_stamp_sees_a_rewrite_with_the_same_size(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    stamp = FileStamp.of(path)
    assert stamp.unchanged()
    replacement = tmp_path / "g"
    replacement.write_bytes(b"xyz")
    os.replace(replacement, path)
    assert not stamp.unchanged()
    path.unlink()
    assert not stamp.unchanged()


# -- what the output keeps ----------------------------------------------------------------------
@pytest.mark.parametrize(("ir_version", "opset"), [(7, 13), (8, 17), (9, 19)])
def test_output_keeps_ir_version_and_opsets_and_is_stamped(tmp_path, run_cli, ir_version, opset):
    model = add_model(ir_version, opset)
    model.opset_import.append(helper.make_opsetid("com.example", 3))
    model.producer_name, model.producer_version = "exporter", "9.9"
    entry = model.metadata_props.add()
    entry.key, entry.value = "author", "someone"
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\nverify: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    output = onnx.load(str(tmp_path / "out" / "m.onnx"))
    assert output.ir_version == ir_version
    assert {(o.domain, o.version) for o in output.opset_import} == {("", opset), ("com.example", 3)}
    assert (output.producer_name, output.producer_version) == ("exporter", "9.9")
    props = metadata(output)
    assert props["author"] == "someone"
    assert props[VERSION_KEY] == patchspec.__version__
    assert len(props[DIGEST_KEY]) == 64 and int(props[DIGEST_KEY], 16) >= 0


def test_stale_patchspec_stamps_are_replaced_not_duplicated(tmp_path, run_cli):
    onnx.save(add_model(), tmp_path / "m.onnx")
    first = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: stage1.onnx\npatches: []\n", name="first.yaml")
    assert run_cli("-q", "apply", first).exit_code == 0
    second = write_spec(
        tmp_path, "patchspec: 1\nmodel: stage1.onnx\noutput: stage2.onnx\npatches: []\n", name="second.yaml"
    )
    assert run_cli("-q", "apply", second).exit_code == 0
    keys = [p.key for p in onnx.load(str(tmp_path / "stage2.onnx")).metadata_props]
    assert keys.count(VERSION_KEY) == 1 and keys.count(DIGEST_KEY) == 1
    digests = [metadata(onnx.load(str(tmp_path / name)))[DIGEST_KEY] for name in ("stage1.onnx", "stage2.onnx")]
    assert digests[0] != digests[1]


@pytest.mark.parametrize("kind", ["cls", "det"])
def test_real_model_round_trip_keeps_versions_and_runs(tmp_path, run_cli, ppocr_models, kind):
    ort = pytest.importorskip("onnxruntime")
    source = ppocr_models[kind]
    before = (source.read_bytes(), source.stat().st_mtime_ns)
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: {source}\noutput: out/{kind}.onnx\npatches: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    original = onnx.load(str(source))
    output = onnx.load(str(tmp_path / "out" / f"{kind}.onnx"))
    assert output.ir_version == original.ir_version
    assert list(output.opset_import) == list(original.opset_import)
    assert output.graph == original.graph  # patches: [] changes nothing but the stamps
    assert (source.read_bytes(), source.stat().st_mtime_ns) == before
    ort.InferenceSession(str(tmp_path / "out" / f"{kind}.onnx"), providers=["CPUExecutionProvider"])
