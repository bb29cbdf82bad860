"""Static-batch detectors: a Resize neck sized from Shape, heads flattened with baked constants, an export at batch two."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from set_batch_kit import assert_declared_shapes_hold, const, per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info
from patchspec.shapes.annotations import read_dims


# -- static-batch detectors: a Resize neck sized from Shape, heads flattened with baked constants -----------------
def resize_neck_detector(batch=1, opset=13):
    """YOLOX/PicoDet-like: two levels, the top one upsampled by a Resize whose ``sizes`` come from
    ``Shape -> Slice -> Concat`` (ONNX shape inference loses the batch there), heads flattened with
    ``Reshape(1, C, -1)`` and ``Reshape(1, -1, k)``, concatenated into [1, anchors, k]."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
    nodes = [
        helper.make_node("Conv", ["images", "w0"], ["c3"], strides=[2, 2], kernel_shape=[2, 2], name="stem"),
        helper.make_node("Conv", ["c3", "w1"], ["c4"], strides=[2, 2], kernel_shape=[2, 2], name="down"),
        helper.make_node("Shape", ["c3"], ["c3_shape"], name="neck/Shape"),
        helper.make_node("Slice", ["c3_shape", "s_start", "s_end"], ["c3_hw"], name="neck/Slice"),
        helper.make_node("Shape", ["c4"], ["c4_shape"], name="neck/Shape_1"),
        helper.make_node("Slice", ["c4_shape", "nc_start", "nc_end"], ["c4_nc"], name="neck/Slice_1"),
        helper.make_node("Concat", ["c4_nc", "c3_hw"], ["up_sizes"], axis=0, name="neck/Concat"),
        helper.make_node("Resize", ["c4", "", "", "up_sizes"], ["up"], mode="nearest", name="neck/Resize"),
        helper.make_node("Add", ["c3", "up"], ["p3"], name="neck/Add"),
        helper.make_node("Conv", ["p3", "w2"], ["h3"], kernel_shape=[1, 1], name="head0/Conv"),
        helper.make_node("Conv", ["c4", "w2"], ["h4"], kernel_shape=[1, 1], name="head1/Conv"),
        helper.make_node("Reshape", ["h3", "flat_c"], ["f3"], name="head0/Reshape"),  # [1, 6, -1]
        helper.make_node("Transpose", ["f3"], ["t3"], perm=[0, 2, 1], name="head0/Transpose"),
        helper.make_node("Reshape", ["h4", "flat_k"], ["t4"], name="head1/Reshape"),  # [1, -1, 6] (traced batch)
        helper.make_node("Concat", ["t3", "t4"], ["dets"], axis=1, name="head/Concat"),
    ]
    inits = [
        w("w0", 4, 3, 2, 2),
        w("w1", 4, 4, 2, 2),
        w("w2", 6, 4, 1, 1),
        const("s_start", [2]),
        const("s_end", [4]),
        const("nc_start", [0]),
        const("nc_end", [2]),
        const("flat_c", [batch, 6, -1]),
        const("flat_k", [batch, -1, 6]),
    ]
    return graph_model(
        nodes, [tensor_info("images", [batch, 3, 16, 16])], [tensor_info("dets", [batch, 80, 6])], inits, opset=opset
    )


def test_onnx_inference_loses_the_batch_at_the_resize_neck():
    """The premise: why set_batch cannot lean on ONNX shape inference alone."""
    model = resize_neck_detector()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "B"
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    dims = {vi.name: read_dims(vi) for vi in inferred.graph.value_info}
    assert dims["c4"][0] == "B" and dims["up"][0] != "B"


@pytest.mark.parametrize("size", [4, "N"])
def test_baked_head_constants_behind_a_resize_neck_are_rewritten(size):
    original = resize_neck_detector()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert "2 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert inits["flat_c"] == ([4, 6, -1] if size == 4 else [0, 6, -1])
    assert inits["flat_k"] == ([4, -1, 6] if size == 4 else [0, -1, 6])
    assert read_dims(model.graph.output[0]) == [size, 80, 6]
    x = rand(4, 3, 16, 16)
    np.testing.assert_allclose(
        run(model, {"images": x})[0], per_sample(original, {"images": x}, ["images"])[0], rtol=1e-5, atol=1e-6
    )
    assert_declared_shapes_hold(model, {"images": x})


def test_exported_at_batch_two_rebatched_to_five():
    original = resize_neck_detector(batch=2)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=5)
    assert "2 shape constants rewritten" in result.summary, result.details
    x = rand(5, 3, 16, 16)
    want = np.concatenate([run(original, {"images": np.concatenate([x[i : i + 1]] * 2)})[0][:1] for i in range(5)])
    np.testing.assert_allclose(run(model, {"images": x})[0], want, rtol=1e-5, atol=1e-6)
