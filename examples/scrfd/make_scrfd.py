"""Write a small SCRFD-shaped face detector, built with onnx.helper, to the path given.

The graph has the traits of insightface's ``det_10g.onnx`` that break naive re-batching:

- input ``input.1`` is ``[1, 3, '?', '?']``: height and width share one dim_param, ``?``;
- a conv backbone gives strides 8, 16 and 32; an FPN adds lateral 1x1 convs and a top-down path
  whose nearest ``Resize`` takes its ``sizes`` from ``Shape`` of the lateral at run time;
- per level heads (score, bbox, keypoints) flattened with ``Transpose`` + ``Reshape`` to ``[-1, k]``
  (outputs ``score_8 [N*H*W*A, 1]``, ``bbox_8 [.., 4]``, ``kps_8 [.., 10]`` and so on);
- the input and outputs carry the dim_param ``?`` (height, width and the flattened row count all
  share the one name), and every intermediate is annotated ``[1, C, ?, ?]`` with unnamed spatial
  dims, which Netron also draws as ``?``.

Why the intermediates' spatial dims are unnamed rather than the dim_param ``?``: ONNX Runtime's
allocation planner treats tensors whose dims carry the same dim_param as the same size and reuses
one's buffer for the other. Across an FPN that is false (a stride-32 map is a quarter of a
stride-16 one), so a model annotated ``[1, C, '?', '?']`` everywhere fails even at batch 1 with
"Shape mismatch attempting to re-use buffer" (measured with onnxruntime 1.31). That is exactly the
annotation a naive batch edit writes (``tests/test_scrfd_seed.py`` shows it); the original has to
run at batch 1, since it is the reference the patched model is compared with.

Weights come from ``numpy.random.default_rng(0)``: the same file every run.

    python examples/scrfd/make_scrfd.py models/scrfd_like.onnx
    python examples/scrfd/make_scrfd.py --traced-batch models/scrfd_traced.onnx   # heads [1, -1, k]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8
ANCHORS = 2  # anchors per location, as in det_10g
STRIDES = (8, 16, 32)
FPN_CHANNELS = 16
HEADS = (("score", 1), ("bbox", 4), ("kps", 10))


class GraphBuilder:
    """Collects nodes, initializers and det_10g-style annotations while the graph is described."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.annotations: dict[str, tuple[int, list]] = {}  # name -> (dtype, shape); None: unnamed dim
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(
        self, op_type: str, inputs: list[str], shape, dtype=TensorProto.FLOAT, output: str | None = None, **attrs
    ) -> str:
        out = output or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{op_type}_{out}", **attrs))
        self.annotations[out] = (dtype, shape)
        return out

    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        kernel: int = 3,
        stride: int = 1,
        relu: bool = True,
        output: str | None = None,
    ) -> str:
        fan_in = c_in * kernel * kernel
        weight = (self.rng.standard_normal((c_out, c_in, kernel, kernel)) * np.sqrt(1.0 / fan_in)).astype(np.float32)
        bias = (self.rng.standard_normal(c_out) * 0.01).astype(np.float32)
        stem = self.fresh("conv")
        w = self.constant(f"{stem}.weight", weight)
        b = self.constant(f"{stem}.bias", bias)
        pad = kernel // 2
        y = self.node(
            "Conv",
            [x, w, b],
            [1, c_out, None, None],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            output=None if relu else output,
        )
        return self.node("Relu", [y], [1, c_out, None, None], output=output) if relu else y


def backbone(g: GraphBuilder, image: str) -> dict[int, tuple[str, int]]:
    """Strided convs: {stride: (feature, channels)} for strides 8, 16 and 32."""
    x = g.conv(image, 3, 8, stride=2)  # stride 2
    x = g.conv(x, 8, 16, stride=2)  # 4
    c8 = g.conv(g.conv(x, 16, 16, stride=2), 16, 24)  # 8
    c16 = g.conv(c8, 24, 32, stride=2)  # 16
    c32 = g.conv(c16, 32, 48, stride=2)  # 32
    return {8: (c8, 24), 16: (c16, 32), 32: (c32, 48)}


def resize_like(g: GraphBuilder, x: str, like: str) -> str:
    """Nearest Resize of ``x`` to the spatial size of ``like``, computed at run time (as det_10g)."""
    like_shape = g.node("Shape", [like], [4], TensorProto.INT64)
    like_hw = g.node("Slice", [like_shape, "const_2", "const_4", "const_0"], [2], TensorProto.INT64)
    x_shape = g.node("Shape", [x], [4], TensorProto.INT64)
    x_nc = g.node("Slice", [x_shape, "const_0", "const_2", "const_0"], [2], TensorProto.INT64)
    sizes = g.node("Concat", [x_nc, like_hw], [4], TensorProto.INT64, axis=0)
    return g.node("Resize", [x, "", "", sizes], [1, FPN_CHANNELS, None, None], mode="nearest")


def fpn(g: GraphBuilder, features: dict[int, tuple[str, int]]) -> dict[int, str]:
    """Lateral 1x1 convs, top-down nearest upsampling + Add, then a 3x3 conv per level."""
    lateral = {s: g.conv(f, c, FPN_CHANNELS, kernel=1, relu=False) for s, (f, c) in features.items()}
    merged = {32: lateral[32]}
    for stride, coarser in ((16, 32), (8, 16)):
        up = resize_like(g, merged[coarser], lateral[stride])
        merged[stride] = g.node("Add", [lateral[stride], up], [1, FPN_CHANNELS, None, None])
    return merged


def heads(g: GraphBuilder, levels: dict[int, str], traced_batch: bool = False) -> list[str]:
    """Score, bbox and keypoint convs per level, flattened to ``[-1, k]`` (or, as a torch export traced
    at batch 1 writes ``reshape(1, -1, k)``, to ``[1, -1, k]``); output names in det_10g order."""
    outputs: dict[tuple[str, int], str] = {}
    for stride in STRIDES:
        trunk = g.conv(g.conv(levels[stride], FPN_CHANNELS, FPN_CHANNELS), FPN_CHANNELS, FPN_CHANNELS)
        for kind, k in HEADS:
            y = g.conv(trunk, FPN_CHANNELS, ANCHORS * k, relu=False)
            if kind == "score":
                y = g.node("Sigmoid", [y], [1, ANCHORS * k, None, None])
            nhwc = g.node("Transpose", [y], [1, None, None, ANCHORS * k], perm=[0, 2, 3, 1])
            flat = [1, -1, k] if traced_batch else [-1, k]
            shape = g.constant(f"{kind}_{stride}.shape", np.array(flat, dtype=np.int64))
            declared = [1, "?", k] if traced_batch else ["?", k]
            outputs[kind, stride] = g.node("Reshape", [nhwc, shape], declared, output=f"{kind}_{stride}")
    return [outputs[kind, stride] for kind, _ in HEADS for stride in STRIDES]


def build_model(traced_batch: bool = False) -> onnx.ModelProto:
    g = GraphBuilder(seed=0)
    for value in (0, 2, 4):
        g.constant(f"const_{value}", np.array([value], dtype=np.int64))
    levels = fpn(g, backbone(g, "input.1"))
    output_names = heads(g, levels, traced_batch)
    image = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "?", "?"])
    outputs = [helper.make_tensor_value_info(n, g.annotations[n][0], g.annotations[n][1]) for n in output_names]
    value_info = [
        helper.make_tensor_value_info(n, dtype, shape)
        for n, (dtype, shape) in g.annotations.items()
        if n not in output_names
    ]
    graph = helper.make_graph(g.nodes, "scrfd_like", [image], outputs, g.initializers, value_info=value_info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="patchspec-examples")
    model.ir_version = IR_VERSION  # helper.make_model writes IR 14, which onnxruntime 1.31 refuses
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="where to write the model, e.g. models/scrfd_like.onnx")
    parser.add_argument(
        "--traced-batch",
        action="store_true",
        help="flatten the heads to [1, -1, k], the batch a torch trace at batch 1 bakes in",
    )
    parser.add_argument(
        "--external-data",
        action="store_true",
        help="keep the weights in OUTPUT.data next to the model, as large exports do",
    )
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    model = build_model(args.traced_batch)
    if args.external_data:
        data = args.output.with_name(args.output.name + ".data")
        data.unlink(missing_ok=True)  # onnx.save appends to a data file left from an earlier run
        onnx.save(model, args.output, save_as_external_data=True, location=data.name, size_threshold=1024)
        print(f"wrote {args.output} and {data}")
        return 0
    args.output.write_bytes(model.SerializeToString(deterministic=True))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
