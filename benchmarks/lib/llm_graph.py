"""A generated decoder-only transformer graph of any size, shaped like a TorchScript LLM export.

Each layer is what ``torch.onnx.export`` writes for a Llama block at opset 17: RMSNorm spelled out
(Pow, ReduceMean, Add, Sqrt, Div, Mul), q/k/v projections, head split by a Reshape whose shape is
computed at run time (``Shape -> Gather -> Unsqueeze -> Concat``), rotary embedding (Slice, Neg,
Concat, Mul, Add), attention with a causal mask built from the sequence length (``Shape -> Gather ->
Range -> Unsqueeze -> Less -> Where``), and the heads merged by a Reshape with a *constant* shape
``[1, seq, hidden]``: the export traced batch 1, so that constant bakes the batch and ``set_batch``
must rewrite it (one per layer). A SiLU MLP closes the layer. The input is ``input_ids`` [1, SEQ].

Sizes are small (hidden 64, 4 heads, vocabulary 256) so that the graph, not the weights, is what
costs: ``llm_model(nodes)`` stacks as many layers as make about ``nodes`` nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, HIDDEN, HEADS, FFN, VOCAB = 32, 64, 4, 128, 256
HEAD = HIDDEN // HEADS


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0
        self.rng = np.random.default_rng(0)

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> str:
        names = [f"{op_type.lower()}_{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{op_type}_{self.count}", **attrs))
        self.count += 1
        return names[0]

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ints(self, name: str, values: list[int]) -> str:
        return self.const(name, np.array(values, dtype=np.int64))


def _rms_norm(b: _Builder, x: str, prefix: str) -> str:
    squared = b.op("Pow", [x, "two"])
    mean = b.op("ReduceMean", [squared], axes=[-1], keepdims=1)
    root = b.op("Sqrt", [b.op("Add", [mean, "eps"])])
    return b.op("Mul", [b.op("Div", [x, root]), b.weight(f"{prefix}.norm", HIDDEN)])


def _dim(b: _Builder, x: str, axis: int) -> str:
    """``Shape(x)[axis]`` as a 1-element tensor, as a TorchScript export spells ``x.size(axis)``."""
    return b.op("Unsqueeze", [b.op("Gather", [b.op("Shape", [x]), f"axis{axis}s"], axis=0), "zero1"])


def _heads(b: _Builder, x: str) -> str:
    """[B, S, HIDDEN] -> [B, HEADS, S, HEAD] with a shape computed from ``x``."""
    shape = b.op("Concat", [_dim(b, x, 0), _dim(b, x, 1), "heads", "head"], axis=0)
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])


def _rotary(b: _Builder, x: str) -> str:
    first = b.op("Slice", [x, "zero1", "half", "three1"])
    second = b.op("Slice", [x, "half", "big", "three1"])
    rotated = b.op("Concat", [b.op("Neg", [second]), first], axis=-1)
    return b.op("Add", [b.op("Mul", [x, "cos"]), b.op("Mul", [rotated, "sin"])])


def _layer(b: _Builder, x: str, index: int) -> str:
    p = f"layer{index}"
    h = _rms_norm(b, x, f"{p}.attn")
    q = _rotary(b, _heads(b, b.op("MatMul", [h, b.weight(f"{p}.q", HIDDEN, HIDDEN)])))
    k = _rotary(b, _heads(b, b.op("MatMul", [h, b.weight(f"{p}.k", HIDDEN, HIDDEN)])))
    v = _heads(b, b.op("MatMul", [h, b.weight(f"{p}.v", HIDDEN, HIDDEN)]))
    scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), "scale"])
    length = b.op("Gather", [b.op("Shape", [k]), "axis2s"], axis=0)  # a scalar: the key length
    positions = b.op("Range", ["zero", length, "one"])
    causal = b.op("Less", [b.op("Unsqueeze", [positions, "zero1"]), b.op("Unsqueeze", [positions, "one1"])])
    masked = b.op("Where", [causal, "minus_inf", scores])
    attended = b.op("MatMul", [b.op("Softmax", [masked], axis=-1), v])
    merged = b.op("Transpose", [attended], perm=[0, 2, 1, 3])
    flat = b.op("Reshape", [merged, b.ints(f"{p}.merge_shape", [1, SEQ, HIDDEN])])  # bakes batch 1
    x = b.op("Add", [x, b.op("MatMul", [flat, b.weight(f"{p}.o", HIDDEN, HIDDEN)])])
    h = _rms_norm(b, x, f"{p}.mlp")
    gate = b.op("MatMul", [h, b.weight(f"{p}.gate", HIDDEN, FFN)])
    silu = b.op("Mul", [gate, b.op("Sigmoid", [gate])])
    up = b.op("Mul", [silu, b.op("MatMul", [h, b.weight(f"{p}.up", HIDDEN, FFN)])])
    return b.op("Add", [x, b.op("MatMul", [up, b.weight(f"{p}.down", FFN, HIDDEN)])])


NODES_PER_LAYER = 79  # what _layer adds; checked by llm_model


def llm_model(nodes: int) -> tuple[onnx.ModelProto, int]:
    """About ``nodes`` nodes of decoder layers: (model, baked constants), one baked constant per layer."""
    layers = max(1, round((nodes - 4) / NODES_PER_LAYER))
    b = _Builder()
    for name, value in (("two", 2.0), ("eps", 1e-6), ("scale", float(np.sqrt(HEAD))), ("minus_inf", -1e9)):
        b.const(name, np.array(value, dtype=np.float32))
    for name, value in (("zero", 0), ("one", 1), ("axis0s", 0), ("axis1s", 1), ("axis2s", 2)):
        b.const(name, np.array(value, dtype=np.int64))
    for name, values in (("zero1", [0]), ("one1", [1]), ("three1", [3])):
        b.ints(name, values)
    b.ints("heads", [HEADS]), b.ints("head", [HEAD]), b.ints("half", [HEAD // 2]), b.ints("big", [2**62])
    angles = np.outer(np.arange(SEQ), np.ones(HEAD)).astype(np.float32) * 0.01
    b.const("cos", np.cos(angles)), b.const("sin", np.sin(angles))
    x = b.op("Gather", [b.weight("embed", VOCAB, HIDDEN), "input_ids"], axis=0)
    start = len(b.nodes)
    for index in range(layers):
        x = _layer(b, x, index)
        if index == 0 and len(b.nodes) - start != NODES_PER_LAYER:
            raise AssertionError(f"a layer has {len(b.nodes) - start} nodes, NODES_PER_LAYER says {NODES_PER_LAYER}")
    x = _rms_norm(b, x, "final")
    b.op("MatMul", [x, b.weight("lm_head", HIDDEN, VOCAB)])
    b.nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        b.nodes,
        f"llm{layers}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, VOCAB])],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, layers
