"""The graph ``init``'s set_batch probe patches: the model less the bytes of its large weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.author.weightless import NEVER_READ, weightless_copy
from patchspec.run.engine import Engine
from patchspec.shapes.kernels import SMALL


def _model():
    weight = numpy_helper.from_array(np.ones((SMALL + 1, 1), np.float32), "weight")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "weight"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, SMALL + 1])], [tensor_info("y", [1, 1])], [weight, shape])
    model.metadata_props.add(key="author", value="test")
    model.doc_string = "kept"
    return model


def test_a_large_weight_becomes_a_stub_and_everything_else_is_kept():
    model = _model()
    before = model.SerializeToString()
    light = weightless_copy(model)
    assert model.SerializeToString() == before  # the model as read is left as it was
    stub, shape = light.graph.initializer
    assert (stub.name, stub.data_type, list(stub.dims)) == ("weight", onnx.TensorProto.FLOAT, [SMALL + 1, 1])
    assert stub.data_location == onnx.TensorProto.EXTERNAL and not stub.raw_data
    assert {e.key: e.value for e in stub.external_data} == {"location": NEVER_READ}
    assert shape == model.graph.initializer[1]  # small: a value set_batch may read, copied whole
    for field in ("node", "input", "output", "value_info"):
        assert list(getattr(light.graph, field)) == list(getattr(model.graph, field))
    assert (light.ir_version, light.opset_import, light.metadata_props, light.doc_string) == (
        model.ir_version,
        model.opset_import,
        model.metadata_props,
        model.doc_string,
    )
    assert light.ByteSize() < model.graph.initializer[0].ByteSize()


def test_weights_already_outside_the_file_are_copied_as_they_are(tmp_path):
    model = _model()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    outside = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    assert weightless_copy(outside) == outside


def test_init_probes_set_batch_without_the_weights_bytes(tmp_path, run_cli, monkeypatch):
    probed = []
    patch = Engine.patch

    def recording(self, loaded, report, **options):
        probed.append([(t.name, t.data_location, len(t.raw_data)) for t in loaded.model.graph.initializer])
        return patch(self, loaded, report, **options)

    monkeypatch.setattr(Engine, "patch", recording)
    onnx.save(_model(), tmp_path / "m.onnx")
    made = run_cli("init", tmp_path / "m.onnx", "--output", tmp_path / "spec.yaml", "--batch", "4")
    assert made.exit_code == 0, made.output
    assert probed and all(
        seen == [("weight", onnx.TensorProto.EXTERNAL, 0), ("shape", onnx.TensorProto.DEFAULT, 16)] for seen in probed
    )


@pytest.mark.parametrize("elements", [SMALL, SMALL + 1])
def test_the_threshold_is_the_evaluations(elements):
    tensor = numpy_helper.from_array(np.zeros(elements, np.int64), "t")
    model = graph_model([helper.make_node("Identity", ["t"], ["y"])], [], [tensor_info("y", [elements])], [tensor])
    light = weightless_copy(model)
    assert (light.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL) == (elements > SMALL)
