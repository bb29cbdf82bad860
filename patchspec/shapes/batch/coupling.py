"""Ops that couple the samples of a batch: one sample's result depends on the others.

A batch is N independent samples only where no op computes across them. The trace knows which axes
of each tensor carry the batch; an op couples the samples when it reads across such an axis:

- a DynamicQuantizeLinear (and onnxruntime's fused dynamic quantizers) computes one scale and zero
  point for its whole input: each sample moves with the others by up to a quantization step;
- a reduction (ReduceMean, ArgMax, ...), a Softmax, a CumSum, a TopK, a LayerNormalization or
  MeanVarianceNormalization whose axes include the batch axis;
- a BatchNormalization in training mode (statistics over the batch);
- a MatMul or Gemm that contracts the batch axis (``x^T x`` over the samples);
- a NonMaxSuppression whose boxes carry the batch on their boxes axis (torchvision's ``batched_nms`` after
  ``boxes.reshape(-1, 4)``): the samples' boxes suppress each other;
- a MatMul, Gemm or broadcasting op whose output carries the batch on two axes where no input does
  (``x x^T``, ``x[:, None] - x[None, :]``): every sample is met with every other.

None of this is a proof that the model is wrong: it is what a per-sample comparison then measures,
and what set_batch tells the user at the default verbosity.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex
from patchspec.shapes.batch.trace import BatchTrace
from patchspec.shapes.evaluate import BROADCASTING

_ONNX = ("", "ai.onnx")
_REDUCTIONS = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    }
)
#: ops over one axis (attribute ``axis``), with its default
_ONE_AXIS = {"ArgMax": 0, "ArgMin": 0, "TopK": -1, "LpNormalization": -1, "Softmax": -1, "LogSoftmax": -1}
_FLATTENING = frozenset({"Softmax", "LogSoftmax", "Hardmax"})  # before opset 13: [:axis] x [axis:] rows
#: onnxruntime's contrib ops that quantize their input dynamically, per tensor
_DYNAMIC_CONTRIB = frozenset({"DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QAttention"})
#: ops that can meet each sample with every other (their output then carries the batch on two axes)
_PAIRING = BROADCASTING | {"MatMul", "Gemm"}
COUPLING_OPS = frozenset(
    {*_REDUCTIONS, *_ONE_AXIS, *_FLATTENING, "DynamicQuantizeLinear", "CumSum", "LayerNormalization"}
    | {"MeanVarianceNormalization", "BatchNormalization", "NonMaxSuppression", *_PAIRING, *_DYNAMIC_CONTRIB}
)


def coupling(
    trace: BatchTrace, sites: Sequence[NodeSite], index: ScopeIndex | None, opset: int
) -> Iterator[tuple[NodeSite, str]]:
    """Each node whose result for one sample depends on the other samples, and why."""
    for site in sites:
        node = site.node
        if node.op_type not in COUPLING_OPS or not node.input or not node.input[0]:
            continue
        if node.op_type in BROADCASTING and not _moves_twice(trace, node.output[0]):
            continue  # most of a graph: only an output whose two axes follow the batch can pair samples
        batch = batch_axes(trace, node.input[0])
        if not batch and node.op_type not in _PAIRING:
            continue
        why = _why(trace, site, batch, index, opset)
        if why:
            yield site, why


def batch_axes(trace: BatchTrace, name: str) -> set[int]:
    """The axes of ``name`` whose size follows the batch (alone, or folded with other dims)."""
    rank = trace.ranks(name)[1]
    if rank is None:
        return set()
    return {
        axis for axis, dim in enumerate(trace.batch_dims(name, rank)) if isinstance(dim, tuple) and dim[0] == "batch"
    }


def _why(trace: BatchTrace, site: NodeSite, batch: set[int], index: ScopeIndex | None, opset: int) -> str | None:
    node = site.node
    op, data = node.op_type, node.input[0]
    if (op == "DynamicQuantizeLinear" and node.domain in _ONNX) or (
        op in _DYNAMIC_CONTRIB and node.domain == "com.microsoft"
    ):
        return (
            f"computes one scale and zero point for its whole input '{data}', which carries the batch: each sample's "
            "result moves with the others by up to a quantization step"
        )
    if node.domain not in _ONNX:
        return None
    if op in _PAIRING:
        return (_contracts(trace, node) if op in ("MatMul", "Gemm") else None) or _pairs(trace, node)
    rank = trace.ranks(data)[1] or 0
    if op == "NonMaxSuppression":  # boxes [images, boxes, 4]: one suppression over the boxes of each image
        return (
            f"suppresses boxes across axis 1 of '{data}', which carries the batch: one sample's boxes suppress "
            "another's (the boxes of the batch were flattened into one image's)"
            if 1 in batch
            else None
        )
    if op == "BatchNormalization":
        training = _attribute(node, "training_mode", 0)
        return (
            f"runs in training mode: its mean and variance are taken over the batch of '{data}'" if training else None
        )
    axes = _axes(node, rank, index, site, opset)
    if axes is None or not axes & batch:
        return None
    return f"works across axis {min(axes & batch)} of '{data}', which carries the batch: each sample's result depends on the others"


def _axes(node: onnx.NodeProto, rank: int, index: ScopeIndex | None, site: NodeSite, opset: int) -> set[int] | None:
    """The axes the node reads across (normalized), or None when they are not known."""
    op = node.op_type
    if op in _REDUCTIONS:
        listed = _attribute(node, "axes", None)
        if listed is None and len(node.input) > 1 and node.input[1]:
            listed = _constant(index, node.input[1], site)
            if listed is None:
                return None
        if listed is None or len(listed) == 0:
            return set() if _attribute(node, "noop_with_empty_axes", 0) else set(range(rank))
        return {int(a) % rank for a in listed} if rank else set()
    if op in _FLATTENING and opset < 13:
        axis = int(_attribute(node, "axis", 1)) % max(rank, 1)
        return set(range(axis, rank))
    if op in _ONE_AXIS or op in _FLATTENING:
        return {int(_attribute(node, "axis", _ONE_AXIS.get(op, -1))) % max(rank, 1)}
    if op == "CumSum":
        found = _constant(index, node.input[1], site) if len(node.input) > 1 else None
        return None if found is None or len(found) != 1 else {int(found[0]) % max(rank, 1)}
    if op == "LayerNormalization":
        return set(range(int(_attribute(node, "axis", -1)) % max(rank, 1), rank))
    if op == "MeanVarianceNormalization":
        return {int(a) % max(rank, 1) for a in _attribute(node, "axes", [0, 2, 3])}
    return None


def _contracts(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """A MatMul or Gemm whose contracted axis carries the batch."""
    if len(node.input) < 2:
        return None
    left, right = node.input[0], node.input[1]
    ranks = trace.ranks(left)[1], trace.ranks(right)[1]
    if ranks[0] is None or ranks[1] is None:
        return None
    if node.op_type == "Gemm":
        inner = (0 if _attribute(node, "transA", 0) else 1, 1 if _attribute(node, "transB", 0) else 0)
    else:
        inner = (ranks[0] - 1, max(ranks[1] - 2, 0))
    for name, axis in ((left, inner[0]), (right, inner[1])):
        if axis in batch_axes(trace, name):
            return f"sums over axis {axis} of '{name}', which carries the batch: each sample's result depends on the others"
    return None


def _moves_twice(trace: BatchTrace, name: str) -> bool:
    """Whether ``name`` differs on two axes or more between the last two points (two batches, every
    other dim alike): a cheap look before ``batch_axes`` says which axes follow the batch."""
    knowns = trace.at(name) if name else []
    if len(knowns) < 2 or knowns[1].shape is None or knowns[-1].shape is None:
        return False
    return sum(one != two for one, two in zip(knowns[1].shape, knowns[-1].shape)) >= 2


def _pairs(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """An output that carries the batch on two axes, from inputs that carry it on one at most."""
    if not node.output or not _moves_twice(trace, node.output[0]):
        return None
    out = batch_axes(trace, node.output[0])
    if len(out) < 2 or any(len(batch_axes(trace, name)) > 1 for name in node.input if name):
        return None
    first, second = sorted(out)[:2]
    return (
        f"gives '{node.output[0]}' the batch on axes {first} and {second}: each sample's result is made with every "
        "other sample"
    )


def _attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def _constant(index: ScopeIndex | None, name: str, site: NodeSite) -> list[int] | None:
    if index is None or not name:
        return None
    value = index.constant(name, site.scopes)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


__all__ = ["COUPLING_OPS", "batch_axes", "coupling"]
