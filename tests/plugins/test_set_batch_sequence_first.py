"""Sequence-first attention as torch dynamo exports it at batch 1 (issue 34, item 6): the Reshapes
take ``-1`` for the sequence and bake the batch as an element of its own (``[-1, 1, 3, 16]``) or as the
outer part of batch x heads (``[-1, 2, 8]``). At batch 4 they still run, with the ``-1`` absorbing
the batch, and the attention then runs across the samples: set_batch must rewrite the baked
elements instead of letting the ``-1`` fold the batch into the sequence."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

EMBED, HEADS = 16, 2


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def seq_first_attention(batch=1, residual=False):
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((EMBED, 3 * EMBED)) / 4).astype(np.float32), "w_qkv"),
        numpy_helper.from_array((rng.standard_normal((EMBED, EMBED)) / 4).astype(np.float32), "w_out"),
    ]
    shapes = [
        ints("unflatten", [-1, batch, 3, EMBED]),
        ints("heads", [-1, batch * HEADS, EMBED // HEADS]),
        ints("rows", [-1, EMBED]),
        ints("back", [-1, batch, EMBED]),
        ints("pick", 0),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w_qkv"], ["qkv"]),
        helper.make_node("Reshape", ["qkv", "unflatten"], ["qkv4"], name="unflatten_qkv"),
        helper.make_node("Gather", ["qkv4", "pick"], ["q"], axis=2),
        helper.make_node("Reshape", ["q", "heads"], ["qh"], name="split_heads"),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["qt"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "qt"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_seq"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["ctx_seq", "rows"], ["flat"], name="merge_heads"),
        helper.make_node("MatMul", ["flat", "w_out"], ["o"]),
        helper.make_node("Reshape", ["o", "back"], ["attended" if residual else "y"], name="unflatten_out"),
    ]
    if residual:  # as a TransformerEncoderLayer adds its input back
        nodes.append(helper.make_node("Add", ["attended", "x"], ["y"], name="residual"))
    return graph_model(
        nodes, [tensor_info("x", ["time", batch, EMBED])], [tensor_info("y", ["time", batch, EMBED])], weights + shapes
    )


def per_sample(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[:, b : b + 1]})[0] for b in range(x.shape[1])], axis=1)


def test_the_original_runs_at_batch_4_but_mixes_the_samples():
    model = seq_first_attention()
    for info in (model.graph.input[0], model.graph.output[0]):  # let onnxruntime take any batch
        info.type.tensor_type.shape.dim[1].dim_param = "B"
    x = np.random.default_rng(1).standard_normal((5, 4, EMBED)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    batched = session.run(None, {"x": x})[0]
    assert batched.shape != (5, 4, EMBED) or not np.allclose(batched, per_sample(model, x), atol=1e-4)


def test_set_batch_rewrites_the_baked_elements_and_keeps_the_samples_apart():
    model = seq_first_attention()
    params = {"size": 4, "inputs": {"x": 1}}
    result = SetBatchPatch().apply(model, params, patch_context("set_batch", params))
    assert "undecided" not in result.summary and "not independent" not in result.summary, result.summary
    rewritten = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer if t.data_type == 7}
    assert rewritten["unflatten"] == [-1, 4, 3, EMBED]
    assert rewritten["heads"] == [-1, 4 * HEADS, EMBED // HEADS]
    assert rewritten["rows"] == [-1, EMBED]  # torch's view(L * B, E): the batch folded into the rows, left
    assert rewritten["back"] == [-1, 4, EMBED]
    x = np.random.default_rng(1).standard_normal((5, 4, EMBED)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], per_sample(seq_first_attention(), x), atol=1e-5)
    onnx.checker.check_model(model, full_check=True)


def test_a_batch_first_flatten_is_still_folded_not_scaled_into_the_features():
    """[L, 1, E] -> [-1, E] alone: the batch joins the rows; E is never made B * E."""
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["y"], name="flatten")]
    model = graph_model(
        nodes, [tensor_info("x", ["time", 1, EMBED])], [tensor_info("y", ["rows", EMBED])], [ints("rows", [-1, EMBED])]
    )
    params = {"size": 4, "inputs": {"x": 1}}
    result = SetBatchPatch().apply(model, params, patch_context("set_batch", params))
    assert "0 shape constants rewritten" in result.summary, result.summary


def test_init_moves_the_batch_off_a_time_axis_that_couples_the_samples(tmp_path, run_cli):
    """x ['time', 1, 16]: axis 0 is named, so detection takes it; set_batch there finds the attention
    across it, so init takes axis 1 (the export's 1), sizes time at more than 1, and apply passes.
    (The residual Add lets the symbolic probe see the output's batch axis; without it, the last
    Reshape's [-1, 1, 16] has no symbolic form and the per-sample join is along axis 0: apply fails.)"""
    import yaml

    onnx.save(seq_first_attention(residual=True), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    made = run_cli("init", tmp_path / "m.onnx", "--batch", "4", "--output", spec)
    assert made.exit_code == 0, made.output
    loaded = yaml.safe_load(spec.read_text())
    assert loaded["patches"][0]["set_batch"]["inputs"] == {"x": 1}, spec.read_text()
    assert "on axis 0 the samples would not be independent" in spec.read_text()
    run = loaded["verify"][1]["run"]
    assert run["cases"][0]["inputs"]["x"][0] > 1 and run["compare"]["split_batch"]["inputs"] == {"x": 1}
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
