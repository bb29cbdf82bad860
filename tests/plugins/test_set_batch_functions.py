"""A model whose layers are model-local functions (TorchScript's ``export_modules_as_functions``,
onnxscript): set_batch expands the calls with onnx's inliner and follows the batch through them.
Before, the evaluation stopped at the first call, the Reshape after it kept its baked batch, and
set_batch wrote, without a word, a model that gave one row at batch 4."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec import api


def block_model() -> onnx.ModelProto:
    """x [1, 5, 8] -> Block (Relu, then + x) twice -> Reshape [1, -1] -> y [1, 40]."""
    block = helper.make_function(
        "local",
        "Block",
        ["v"],
        ["out"],
        [helper.make_node("Relu", ["v"], ["r"]), helper.make_node("Add", ["r", "v"], ["out"])],
        [helper.make_opsetid("", 17)],
    )
    nodes = [
        helper.make_node("Block", ["x"], ["h1"], domain="local", name="block_1"),
        helper.make_node("Block", ["h1"], ["h2"], domain="local", name="block_2"),
        helper.make_node("Reshape", ["h2", "flat"], ["y"], name="flatten"),
    ]
    flat = numpy_helper.from_array(np.array([1, -1], np.int64), "flat")
    model = graph_model(nodes, [tensor_info("x", [1, 5, 8])], [tensor_info("y", [1, 40])], [flat])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(block)
    return model


def test_the_batch_is_followed_through_inlined_function_calls(tmp_path, run_cli):
    onnx.save(block_model(), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: 4\n")
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "1 shape constant rewritten, 2 calls of model-local functions inlined" in result.output, result.output
    assert "inlined (onnx's inliner), so that the batch is followed through them: Block (2)" in result.output
    written = onnx.load(tmp_path / "out" / "m.onnx")
    assert not written.functions
    x = np.random.default_rng(0).normal(size=(4, 5, 8)).astype(np.float32)
    got = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    h = np.maximum(x, 0) + x
    np.testing.assert_allclose(got, (np.maximum(h, 0) + h).reshape(4, 40), rtol=1e-6)


def test_a_model_without_calls_is_left_as_it_is():
    model = block_model()
    del model.graph.node[:2]
    model.graph.node[0].input[0] = "x"
    before = model.SerializeToString()
    assert api.inline_local_functions(model) == {} and model.SerializeToString() == before
