"""set_batch tells the user, at the default verbosity, where the samples of a batch are not
independent: an op that computes across the batch axis (one quantization scale, a reduction, batch
statistics, a contraction). Ops that work within each sample are not named."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def one_op(op, attrs=None, extra_inputs=(), constants=(), opset=17, shape=(1, 4, 6), out=None):
    node = helper.make_node(op, ["x", *extra_inputs], ["y"], name="op", **(attrs or {}))
    return graph_model([node], [tensor_info("x", list(shape))], [tensor_info("y", out)], list(constants), opset=opset)


def axes(values, name="axes"):
    return numpy_helper.from_array(np.array(values, np.int64), name)


COUPLED = {
    "ReduceMean over the batch axis": one_op("ReduceMean", {"axes": [0, 2]}, opset=13),
    "ReduceMean over every axis": one_op("ReduceMean", {"keepdims": 0}, opset=13),
    "ReduceSum with axes as an input": one_op("ReduceSum", extra_inputs=["axes"], constants=[axes([0])], opset=13),
    "ReduceMax at opset 18": one_op("ReduceMax", extra_inputs=["axes"], constants=[axes([-3])], opset=18),
    "ArgMax on its default axis 0": one_op("ArgMax"),
    "Softmax over axis 0": one_op("Softmax", {"axis": 0}),
    "Softmax at opset 11 from axis 0": one_op("Softmax", {"axis": 0}, opset=11),
    "CumSum along the batch": one_op("CumSum", extra_inputs=["axis"], constants=[axes([0], "axis")]),
    "LayerNormalization from axis 0": one_op(
        "LayerNormalization",
        {"axis": 0},
        extra_inputs=["scale"],
        constants=[numpy_helper.from_array(np.ones((1, 4, 6), np.float32), "scale")],
    ),
    "MeanVarianceNormalization on its default axes": one_op("MeanVarianceNormalization", shape=(1, 4, 6, 6)),
    "Einsum summing over the batch's letter": one_op("Einsum", {"equation": "bij,cij->bij"}, extra_inputs=["x"]),
    "Einsum with an implicit output": one_op("Einsum", {"equation": "bij,bij"}, extra_inputs=["x"]),
}

INDEPENDENT = {
    "ReduceMean within each sample": one_op("ReduceMean", {"axes": [1, 2]}, opset=13),
    "ReduceSum with empty axes as a no-op": one_op(
        "ReduceSum", {"noop_with_empty_axes": 1}, extra_inputs=["axes"], constants=[axes([])], opset=13
    ),
    "Softmax on the last axis": one_op("Softmax"),
    "Softmax at opset 11 on its default axis 1": one_op("Softmax", opset=11),
    "LayerNormalization on the last axis": one_op(
        "LayerNormalization",
        extra_inputs=["scale"],
        constants=[numpy_helper.from_array(np.ones(6, np.float32), "scale")],
    ),
    "ArgMax on axis 2": one_op("ArgMax", {"axis": 2}),
    "Einsum within each sample": one_op("Einsum", {"equation": "bij,bkj->bik"}, extra_inputs=["x"]),
    "Einsum keeping the broadcast axes": one_op("Einsum", {"equation": "...j,...j->..."}, extra_inputs=["x"]),
    "Conv over each sample": one_op(
        "Conv",
        extra_inputs=["w"],
        constants=[numpy_helper.from_array(np.ones((2, 4, 3, 3), np.float32), "w")],
        shape=(1, 4, 6, 6),
    ),
    "MaxPool over each sample": one_op("MaxPool", {"kernel_shape": [3, 3]}, shape=(1, 4, 6, 6)),
}


@pytest.mark.parametrize("label", COUPLED)
def test_an_op_across_the_batch_axis_is_named_in_the_summary(label):
    result = set_batch(COUPLED[label], size=4)
    assert "the samples are not independent: " in result.summary, result.summary
    assert "op' " in result.summary and "carries the batch" in result.summary
    assert any(line.startswith("couples samples: ") for line in result.details)


@pytest.mark.parametrize("label", INDEPENDENT)
def test_an_op_within_each_sample_is_not_named(label):
    result = set_batch(INDEPENDENT[label], size=4)
    assert "not independent" not in result.summary, result.summary
    assert not any(line.startswith("couples samples") for line in result.details)


def batch_on_a_spatial_axis(op, **attrs):
    """x [N, 4] -> Transpose -> [1, 4, N]: the samples side by side along the only spatial axis, then ``op``."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Unsqueeze", ["t", "zero"], ["row"]),
        helper.make_node(op, ["row", *(["w"] if op == "Conv" else [])], ["y"], name="op", **attrs),
    ]
    weight = numpy_helper.from_array(np.ones((4, 4, 3), np.float32), "w")
    return graph_model(nodes, [tensor_info("x", [1, 4])], [tensor_info("y", None)], [axes([0], "zero"), weight])


@pytest.mark.parametrize(
    ("op", "attrs"),
    [("MaxPool", {"kernel_shape": [3], "pads": [1, 1]}), ("Conv", {"pads": [1, 1]}), ("GlobalAveragePool", {})],
)
def test_a_window_along_the_batch_couples_the_samples(op, attrs):
    """probe4: a MaxPool or a conv1d along the batch after a Transpose was written without a word."""
    summary = set_batch(batch_on_a_spatial_axis(op, **attrs), size=4).summary
    assert f"{op} 'op' " in summary and "axis 2 of 'row', which carries the batch" in summary, summary


def test_a_conv_over_channels_that_carry_the_batch_couples_them():
    nodes = [
        helper.make_node("Unsqueeze", ["x", "zero"], ["row"]),
        helper.make_node("Conv", ["row", "w"], ["y"], name="op"),
    ]
    weight = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")
    model = graph_model(nodes, [tensor_info("x", [1, 5, 5])], [tensor_info("y", None)], [axes([0], "zero"), weight])
    summary = set_batch(model, size=4).summary
    assert "Conv 'op' sums over the channels (axis 1) of 'row', which carries the batch" in summary, summary


def test_a_window_of_one_along_the_batch_does_not():
    summary = set_batch(batch_on_a_spatial_axis("MaxPool", kernel_shape=[1]), size=4).summary
    assert "not independent" not in summary, summary


def scan(states: int, scan_axis: int, passed: bool = False):
    """x [N, 4] scanned along ``scan_axis``, with a running sum as its state when ``states`` (``passed``: a
    state the steps pass on untouched, as probe4's h_scan_over_batch_b1 has)."""
    step_in = [tensor_info("row", None)]
    if states:
        body_nodes = [
            helper.make_node(
                "Identity" if passed else "Add", ["total_in"] if passed else ["total_in", "row"], ["total_out"]
            ),
            helper.make_node("Relu" if passed else "Identity", ["row" if passed else "total_out"], ["each"]),
        ]
        body = helper.make_graph(
            body_nodes,
            "body",
            [tensor_info("total_in", None), *step_in],
            [tensor_info("total_out", None), tensor_info("each", None)],
        )
    else:
        body = helper.make_graph(
            [helper.make_node("Relu", ["row"], ["each"])], "body", step_in, [tensor_info("each", None)]
        )
    start = numpy_helper.from_array(np.zeros(1, np.float32), "start")
    inputs = (["start"] if states else []) + ["x"]
    outputs = (["total"] if states else []) + ["y"]
    node = helper.make_node(
        "Scan", inputs, outputs, name="op", body=body, num_scan_inputs=1, scan_input_axes=[scan_axis]
    )
    return graph_model(
        [node], [tensor_info("x", [1, 4])], [tensor_info(name, None) for name in outputs], [start] if states else []
    )


def test_a_scan_with_a_state_along_the_batch_couples_the_samples():
    summary = set_batch(scan(1, 0), size=4).summary
    assert "Scan 'op' scans along axis 0 of 'x', which carries the batch" in summary, summary


@pytest.mark.parametrize(
    ("states", "scan_axis", "passed"),
    [(0, 0, False), (1, 1, False), (1, 0, True)],
    ids=["no state", "along the features", "a state passed on untouched"],
)
def test_a_scan_without_a_state_or_along_another_axis_does_not(states, scan_axis, passed):
    summary = set_batch(scan(states, scan_axis, passed), size=4).summary
    assert "not independent" not in summary, summary


def batch_norm(training):
    params = [
        numpy_helper.from_array(np.full(4, v, np.float32), n) for n, v in (("s", 1), ("b", 0), ("m", 0), ("v", 1))
    ]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", training_mode=training)
    return graph_model([node], [tensor_info("x", [1, 4, 6])], [tensor_info("y", None)], params, opset=15)


def test_batch_normalization_couples_only_in_training_mode():
    assert "bn' runs in training mode" in set_batch(batch_norm(1), size=4).summary
    assert "not independent" not in set_batch(batch_norm(0), size=4).summary


def gram(transposed_left):
    """x [N, 4]: x^T x sums over the samples; x w does not."""
    weight = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    if transposed_left:
        nodes = [
            helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
            helper.make_node("MatMul", ["xt", "x"], ["y"], name="gram"),
        ]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="gram")]
    return graph_model(nodes, [tensor_info("x", [1, 4])], [tensor_info("y", None)], [weight])


def test_a_matmul_that_sums_over_the_samples_couples_them():
    assert "'gram' sums over axis 1 of 'xt'" in set_batch(gram(True), size=4).summary
    assert "not independent" not in set_batch(gram(False), size=4).summary


def pairs(op):
    """x [N, 4] met with itself across the samples: x x^T ([N, N]), or x[:, None] - x[None, :] ([N, N, 4])."""
    if op == "MatMul":
        nodes = [
            helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
            helper.make_node("MatMul", ["x", "xt"], ["y"], name="pairs"),
        ]
        return graph_model(nodes, [tensor_info("x", [1, 4])], [tensor_info("y", None)])
    nodes = [
        helper.make_node("Unsqueeze", ["x", "one"], ["rows"]),
        helper.make_node("Unsqueeze", ["x", "zero"], ["cols"]),
        helper.make_node(op, ["rows", "cols"], ["y"], name="pairs"),
    ]
    constants = [axes([1], "one"), axes([0], "zero")]
    return graph_model(nodes, [tensor_info("x", [1, 4])], [tensor_info("y", None)], constants)


@pytest.mark.parametrize("op", ["MatMul", "Sub", "Mul"])
def test_an_op_that_meets_every_sample_with_every_other_couples_them(op):
    """Before, x x^T was written at batch 4 without a word: a [4, 4] output where each sample gives [1, 1]."""
    summary = set_batch(pairs(op), size=4).summary
    assert "'pairs' gives 'y' the batch on axes 0 and 1: each sample's result is made with every other" in summary


def test_several_coupling_ops_are_one_summary_clause_with_the_first_named():
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="q1"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("DynamicQuantizeLinear", ["d"], ["q2", "s2", "z2"], name="q2"),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, 8])], [tensor_info("y", [1, 8])])
    result = set_batch(model, size=4)
    assert "DynamicQuantizeLinear 'q1'" in result.summary and "(and 1 more, -v lists them)" in result.summary
    assert sum(line.startswith("couples samples: ") for line in result.details) == 2


def test_apply_prints_the_coupling_without_v_and_no_verify_refuses_it(tmp_path, run_cli):
    import onnx

    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", ["N", 8])], [tensor_info("y", ["N", 8])])
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\n")
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
    assert "the samples are not independent: DynamicQuantizeLinear 'quantize_x'" in applied.stdout
    unverified = run_cli("apply", spec, "--no-verify", "--force")
    assert unverified.exit_code == 4 and "couples samples: DynamicQuantizeLinear" in unverified.stderr


def test_a_string_input_does_not_confuse_the_coupling_check():
    node = helper.make_node("ReduceMean", ["x"], ["y"], name="op", axes=[1])
    model = graph_model(
        [node, helper.make_node("Identity", ["names"], ["names_out"])],
        [tensor_info("x", [1, 4]), tensor_info("names", [1], TensorProto.STRING)],
        [tensor_info("y", None), tensor_info("names_out", None)],
        opset=13,
    )
    assert "not independent" not in set_batch(model, size=4).summary


def quantized(batch="N"):
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    return graph_model(nodes, [tensor_info("x", [batch, 8])], [tensor_info("y", [batch, 8])])


PER_SAMPLE = (
    "verify:\n  - run:\n      cases:\n        - inputs: {x: [4, 8]}\n"
    "      compare: {against: original, split_batch: true}\n"
)


def test_a_per_sample_compare_of_a_coupled_model_fails_naming_the_cause(tmp_path, run_cli):
    import onnx

    onnx.save(quantized(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\n" + PER_SAMPLE
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert "the patches found that the model couples samples (DynamicQuantizeLinear 'quantize_x'" in result.stderr
    assert "compare: {coupled: REASON}" in result.stderr
    accepted = spec.read_text().replace("split_batch: true", "coupled: one scale per batch as exported")
    spec.write_text(accepted)
    assert run_cli("apply", spec).exit_code == 0


def test_a_batch_already_at_its_size_still_says_the_samples_are_coupled(tmp_path, run_cli):
    import onnx

    onnx.save(quantized(batch=4), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\n" + PER_SAMPLE
    )
    result = run_cli("apply", spec)
    assert "batch already 4 on x[0]; the samples are not independent: DynamicQuantizeLinear 'quantize_x'" in (
        result.stdout
    ), result.output
    assert result.exit_code == 1 and "couples samples (DynamicQuantizeLinear 'quantize_x'" in result.stderr


@pytest.mark.parametrize("model", [quantized(batch="N"), quantized(batch=1)], ids=["dynamic", "already 1"])
def test_a_static_batch_of_one_couples_nothing(model):
    """One sample has no other to depend on: nothing is told (and --no-verify does not refuse it)."""
    result = set_batch(model, size=1)
    assert "not independent" not in result.summary, result.summary
    assert not any(line.startswith("couples samples") for line in result.details), result.details


def test_an_export_at_batch_1_set_to_1_keeps_its_declarations(tmp_path, run_cli):
    """cnn_fp16_io_b1 (a Reshape to [1, -1] before a Gemm): at batch 1 it is what it was. Before, set_batch
    called the Gemm a coupling, refused it under --no-verify, and 'corrected' the output [1, 5] to [?, 5]."""
    import onnx

    weight = numpy_helper.from_array(np.ones((6, 5), np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["rows"]), helper.make_node("Gemm", ["rows", "w"], ["y"])]
    model = graph_model(
        nodes, [tensor_info("x", [1, 3, 2])], [tensor_info("y", [1, 5])], [axes([1, -1], "flat"), weight]
    )
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 1\n")
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 0, result.output
    assert "unchanged batch already 1 on x[0]" in result.output, result.output
    written = onnx.load(tmp_path / "out.onnx").graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in written] == [1, 5]


def test_a_real_coupled_export_at_its_own_batch_is_refused_without_verification_not_a_crash(tmp_path, run_cli):
    """benchmarks/corpus's batch_mean_center (torch, x - x.mean(0)) at N, its own batch: set_batch
    corrects declarations only, says the samples are coupled, and --no-verify refuses it (exit 4).
    A first version reported modified=False after correcting an intermediate declaration (exit 5)."""
    import shutil

    from helpers import REPO

    shutil.copy(REPO / "benchmarks" / "corpus" / "generated" / "torch" / "batch_mean_center.onnx", tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: N\n")
    import onnx

    name = onnx.load(tmp_path / "m.onnx").graph.input[0].type.tensor_type.shape.dim[0].dim_param
    spec.write_text(spec.read_text().replace("set_batch: N", f"set_batch: {name or 'N'}"))
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 4, result.output
    assert "couples samples" in result.stderr and not (tmp_path / "out.onnx").exists()


def folded_mean(batch: str = "N") -> object:
    """x [N, 4, 6] -> Reshape [1, -1, 6] (a 1 baked at the exported batch: the batch folds into the rows)
    -> x minus its mean over the rows -> Reshape [-1, 4, 6]: per sample at batch 1; as exported, a batch of
    4 centers every sample on the mean of all 16 rows."""
    nodes = [
        helper.make_node("Reshape", ["x", "rows"], ["flat"], name="fold"),
        helper.make_node("ReduceMean", ["flat"], ["mean"], axes=[1], keepdims=1, name="mean"),
        helper.make_node("Sub", ["flat", "mean"], ["centered"]),
        helper.make_node("Reshape", ["centered", "back"], ["y"], name="unfold"),
    ]
    constants = [axes([1, -1, 6], "rows"), axes([-1, 4, 6], "back")]
    return graph_model(nodes, [tensor_info("x", [batch, 4, 6])], [tensor_info("y", [batch, 4, 6])], constants, opset=13)


@pytest.mark.parametrize("size", [4, "B"])  # "B": another name than the export's "N"
def test_a_dynamic_batch_coupled_only_by_a_constant_baked_at_1_is_decided(size) -> None:
    """tesseranet (a reCAPTCHA solver's export with dynamic_axes): the walk as exported couples the samples,
    the walk that decides constants rewrites the 1 and couples none: that one is taken."""
    import onnxruntime as ort

    original, model = folded_mean(), folded_mean()
    result = set_batch(model, size=size)
    assert "not independent" not in result.summary, result.summary
    assert any("rewrote Reshape 'fold': element 0 is the batch" in line for line in result.details), result.details
    x = np.random.default_rng(0).standard_normal((4, 4, 6)).astype(np.float32)
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run
    one = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"]).run
    want = np.concatenate([one(None, {"x": x[k : k + 1]})[0] for k in range(4)])
    np.testing.assert_allclose(run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_a_coupling_no_constant_causes_is_still_told() -> None:
    """Dynamic quantization couples the samples whatever the constants: the walk as exported stands."""
    result = set_batch(quantized(), size=4)
    assert "the samples are not independent: DynamicQuantizeLinear 'quantize_x'" in result.summary, result.summary


def flattened_nms() -> object:
    """torchvision's batched_nms at a static batch 1: the boxes [1, 5, 4] flattened to [-1, 4] and given to
    one NonMaxSuppression as a single image's: at batch 4 the samples' boxes suppress each other."""
    nodes = [
        helper.make_node("Reshape", ["boxes", "rows"], ["flat"]),
        helper.make_node("Reshape", ["scores", "all"], ["flat_scores"]),
        helper.make_node("Unsqueeze", ["flat", "ax0"], ["one_image"]),
        helper.make_node("Unsqueeze", ["flat_scores", "ax01"], ["one_class"]),
        helper.make_node("NonMaxSuppression", ["one_image", "one_class", "most", "iou"], ["keep"], name="nms"),
    ]
    constants = [axes([-1, 4], "rows"), axes([-1], "all"), axes([0], "ax0"), axes([0, 1], "ax01"), axes([100], "most")]
    constants.append(numpy_helper.from_array(np.array([0.5], np.float32), "iou"))
    inputs = [tensor_info("boxes", [1, 5, 4]), tensor_info("scores", [1, 5])]
    return graph_model(nodes, inputs, [tensor_info("keep", ["K", 3], TensorProto.INT64)], constants)


def test_a_non_max_suppression_over_the_flattened_batch_couples_the_samples() -> None:
    """Before, --no-verify wrote it without a word (a control written wrong: 'keep' indexed the 20 boxes
    of the batch, not each sample's 5)."""
    result = set_batch(flattened_nms(), size=4)
    assert "NonMaxSuppression 'nms' suppresses boxes across axis 1 of 'one_image'" in result.summary, result.summary
