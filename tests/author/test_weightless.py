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
    tensor = numpy_helper.from_array(np.zeros(elements, np.float32), "t")
    nodes = [helper.make_node("Add", ["x", "t"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", [elements])], [tensor_info("y", [elements])], [tensor])
    light = weightless_copy(model)
    assert (light.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL) == (elements > SMALL)


def _read_by(node, extra_inputs=(), outputs=("y",)):
    big = numpy_helper.from_array(np.zeros((SMALL + 1,), np.int64), "big")
    inputs = [tensor_info(name, [SMALL + 1]) for name in extra_inputs]
    return graph_model([node], inputs, [tensor_info(name, None) for name in outputs], [big])


@pytest.mark.parametrize(
    "model",
    [
        _read_by(helper.make_node("Gather", ["x", "big"], ["y"]), ["x"]),  # indices: batch_pinned reads them
        _read_by(helper.make_node("Identity", ["big"], ["y"])),  # an op not known to take weights
        _read_by(helper.make_node("MatMul", ["x", "big"], ["y"], domain="custom"), ["x"]),  # another domain
        _read_by(helper.make_node("Relu", ["x"], ["y"]), ["x"], outputs=("y", "big")),  # a graph output
    ],
    ids=["gather-indices", "unknown-op", "other-domain", "graph-output"],
)
def test_a_large_tensor_read_other_than_as_a_weight_is_kept_whole(model):
    assert weightless_copy(model).graph.initializer[0] == model.graph.initializer[0]


def test_a_recurrent_ops_constant_state_is_kept_and_its_weights_are_not():
    hidden = 64
    w = numpy_helper.from_array(np.zeros((1, 4 * hidden, hidden), np.float32), "W")
    h0 = numpy_helper.from_array(np.zeros((1, 1, SMALL + 1), np.float32), "h0")
    node = helper.make_node("LSTM", ["x", "W", "W", "", "", "h0"], ["y"], hidden_size=hidden)
    model = graph_model([node], [tensor_info("x", [5, 1, hidden])], [tensor_info("y", None)], [w, h0])
    stubbed = {t.name: t.data_location == onnx.TensorProto.EXTERNAL for t in weightless_copy(model).graph.initializer}
    assert stubbed == {"W": True, "h0": False}


def test_a_weight_read_inside_an_if_branch_by_an_unknown_op_is_kept():
    branch = helper.make_graph([helper.make_node("Identity", ["big"], ["b"])], "then", [], [tensor_info("b", None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "else", [], [tensor_info("c", None)])
    node = helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other)
    big = numpy_helper.from_array(np.zeros((SMALL + 1,), np.float32), "big")
    uses = helper.make_node("MatMul", ["x", "big"], ["z"])
    inputs = [tensor_info("flag", [], onnx.TensorProto.BOOL), tensor_info("x", [SMALL + 1])]
    model = graph_model([uses, node], inputs, [tensor_info("y", None), tensor_info("z", None)], [big])
    assert weightless_copy(model).graph.initializer[0] == big
