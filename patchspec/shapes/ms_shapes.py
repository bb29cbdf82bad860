"""Output shapes of onnxruntime's contrib ops (``com.microsoft``) that quantized and optimized models use.

ONNX's inference knows no ``com.microsoft`` op, so the batch was lost at the first one: a model from
``onnxruntime.quantization.quantize_static`` (QOperator) ends in a QGemm whose ``[1, 5]`` output
nothing derived, and set_batch left it undecided. The ops here are the ones onnxruntime's quantizer
and transformers optimizer write, with the rules their kernels follow (onnxruntime's
``contrib_defs.cc``): a GEMM or MatMul, a broadcast of two operands, a shape kept, a global pool,
a concatenation of quantized inputs. Any other contrib op says nothing, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from patchspec.shapes.known import Known, Shape

Rule = Callable[[onnx.NodeProto, Sequence[Known]], list[Known] | None]


def ms_outputs(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """The outputs of one ``com.microsoft`` node, or None where this module says nothing of it."""
    rule = _RULES.get(node.op_type)
    if rule is None or not inputs or inputs[0].shape is None:
        return None
    return rule(node, inputs)


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _element(inputs: Sequence[Known], zero_point: int) -> int:
    """A quantized op's output type: its output zero point's, or float where it has none."""
    known = inputs[zero_point] if len(inputs) > zero_point else None
    return known.dtype if known is not None and known.dtype else onnx.TensorProto.FLOAT


def _qgemm(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    a, b = inputs[0].shape, inputs[3].shape if len(inputs) > 3 else None
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    (rows, inner), (outer, columns) = (
        a[:: -1 if _attr(node, "transA", 0) else 1],
        b[:: -1 if _attr(node, "transB", 0) else 1],
    )
    if inner is not None and outer is not None and inner != outer:
        return None  # the operands do not multiply: nothing to say
    return [Known(_element(inputs, 8), (rows, columns))]


def _matmul(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """DynamicQuantizeMatMul, MatMulIntegerToFloat, FusedMatMul: numpy's matmul of inputs 0 and 1."""
    a, b = inputs[0].shape, inputs[1].shape if len(inputs) > 1 else None
    if a is None or b is None or len(a) < 2 or len(b) < 2 or None in a[:-2] or None in b[:-2]:
        return None
    if node.op_type == "FusedMatMul":
        a = (*a[:-2], a[-1], a[-2]) if _attr(node, "transA", 0) else a
        b = (*b[:-2], b[-1], b[-2]) if _attr(node, "transB", 0) else b
    try:
        batch = np.broadcast_shapes(tuple(int(d or 0) for d in a[:-2]), tuple(int(d or 0) for d in b[:-2]))
    except ValueError:
        return None
    return [Known(onnx.TensorProto.FLOAT, (*batch, a[-2], b[-1]))]


def _broadcast(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """QLinearAdd, QLinearMul: inputs 0 and 3 broadcast together."""
    a, b = inputs[0].shape, inputs[3].shape if len(inputs) > 3 else None
    if a is None or b is None or None in a or None in b:
        return None
    try:
        shape: Shape = tuple(np.broadcast_shapes(tuple(int(d or 0) for d in a), tuple(int(d or 0) for d in b)))
    except ValueError:
        return None
    return [Known(_element(inputs, 7), shape)]


def _same(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """Elementwise and normalizing ops: the output is shaped and typed as input 0."""
    return [Known(inputs[0].dtype, inputs[0].shape)]


def _global_pool(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    shape = inputs[0].shape
    if shape is None or len(shape) < 3:
        return None
    if _attr(node, "channels_last", 0):
        return [Known(inputs[0].dtype, (shape[0], *[1] * (len(shape) - 2), shape[-1]))]
    return [Known(inputs[0].dtype, (shape[0], shape[1], *[1] * (len(shape) - 2)))]


def _concat(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """QLinearConcat: Y_scale, Y_zero_point, then (X, scale, zero point) per input."""
    parts = [known.shape for known in inputs[2::3]]
    if not parts or any(p is None for p in parts) or len({len(p or ()) for p in parts}) != 1:
        return None
    rank = len(parts[0] or ())
    axis = _attr(node, "axis", 0) % rank
    along = [p[axis] for p in parts if p is not None]
    joined = None if None in along else sum(int(d or 0) for d in along)
    first = parts[0] or ()
    return [Known(_element(inputs, 1), tuple(joined if i == axis else d for i, d in enumerate(first)))]


_RULES: dict[str, Rule] = {
    "QGemm": _qgemm,
    "QLinearAdd": _broadcast,
    "QLinearMul": _broadcast,
    "QLinearSigmoid": _same,
    "QLinearLeakyRelu": _same,
    "QLinearSoftmax": _same,
    "QLinearGlobalAveragePool": _global_pool,
    "QLinearConcat": _concat,
    "DynamicQuantizeMatMul": _matmul,
    "MatMulIntegerToFloat": _matmul,
    "FusedMatMul": _matmul,
    "Gelu": _same,
    "FastGelu": _same,
    "BiasGelu": _same,
    "QuickGelu": _same,
    "SkipLayerNormalization": _same,
    "SkipSimplifiedLayerNormalization": _same,
}
#: the contrib ops this module gives output shapes for
MS_OPS = frozenset(_RULES)

__all__ = ["MS_OPS", "ms_outputs"]
