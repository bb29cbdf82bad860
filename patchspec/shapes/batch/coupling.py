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
- a MatMul, Gemm, Einsum or broadcasting op whose output carries the batch on two axes where no input
  does (``x x^T``, ``x[:, None] - x[None, :]``): every sample is met with every other;
- an Einsum that sums over a letter on an axis that carries the batch (``bd,cd->bd``);
- a convolution or pooling window that slides along an axis carrying the batch (the batch moved to a
  spatial axis by a Transpose), a global pool over one, and a Conv that sums over channels that carry it;
- a Scan along an axis carrying the batch whose state a scanned element reaches: the samples are its steps;
- the batch size used as a number: float arithmetic between a tensor that carries the batch and a small
  value whose elements change with the batch size (``x / x.size(0)``, ``x + arange(B)[:, None]``), and an
  If whose condition does (``if x.shape[0] == 1``) where both branches keep the rank: a sample computes
  otherwise alone than in a batch.

A sort of the whole batch that the model inverts later (a TopK whose order a ScatterElements undoes) moves
the samples and puts them back: not a coupling.

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
_PAIRING = BROADCASTING | {"MatMul", "Gemm", "Einsum"}
#: ops with a window over the spatial axes (2 and on) of their first input, and those over all of them
_WINDOWED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"})
_GLOBAL = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
#: ops looked at whatever their first input carries (the batch may be on another input only)
_ANY_INPUT = _PAIRING | {"Scan"}
COUPLING_OPS = frozenset(
    {*_REDUCTIONS, *_ONE_AXIS, *_FLATTENING, "DynamicQuantizeLinear", "CumSum", "LayerNormalization"}
    | {"MeanVarianceNormalization", "BatchNormalization", "NonMaxSuppression", *_PAIRING, *_DYNAMIC_CONTRIB}
    | {*_WINDOWED, *_GLOBAL, "Scan", "If"}
)
_FLOATS = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
)
#: arithmetic whose operand may be the batch size as a number
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})


def coupling(
    trace: BatchTrace, sites: Sequence[NodeSite], index: ScopeIndex | None, opset: int
) -> Iterator[tuple[NodeSite, str]]:
    """Each node whose result for one sample depends on the other samples, and why."""
    inverted: set[str] | None = None  # what ScatterElements take as indices: a permutation being inverted
    for site in sites:
        node = site.node
        if node.op_type not in COUPLING_OPS or not node.input or not node.input[0]:
            continue
        if node.op_type in _ARITHMETIC and node.domain in _ONNX and (why := _counts_the_batch(trace, node)):
            yield site, why
            continue
        if node.op_type == "If" and node.domain in _ONNX and (why := _branches_on_the_batch(trace, node)):
            yield site, why
            continue
        if node.op_type in BROADCASTING and not _moves_twice(trace, node.output[0]):
            continue  # most of a graph: only an output whose two axes follow the batch can pair samples
        batch = batch_axes(trace, node.input[0])
        if not batch and node.op_type not in _ANY_INPUT:
            continue
        why = _why(trace, site, batch, index, opset)
        if why and node.op_type == "TopK":
            inverted = _inverted(trace, sites) if inverted is None else inverted
            why = None if _sorts_and_restores(trace, node, inverted) else why
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
        contracted = _contracts(trace, node) if op in ("MatMul", "Gemm") else None
        return (_einsum(trace, node) if op == "Einsum" else contracted) or _pairs(trace, node)
    if op in _WINDOWED or op in _GLOBAL:
        return _windowed(trace, node, batch)
    if op == "Scan":
        return _scan(trace, node)
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


def _batch_valued(trace: BatchTrace, name: str) -> bool:
    """Whether ``name`` is a small value whose elements change with the batch size (not only its shape:
    a mask of ones stays ones): the batch size, or a range of it, as a number."""
    knowns = trace.at(name)[:2] if name else []
    if len(knowns) < 2 or knowns[0] is knowns[1] or knowns[0].value is None or knowns[1].value is None:
        return False  # the same Known at both points (a constant: most operands with a value)
    first, second = knowns[0].value, knowns[1].value
    if first.shape == second.shape and np.array_equal(first, second):
        return False
    return set(np.unique(first).tolist()) != set(np.unique(second).tolist())


def _counts_the_batch(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """Arithmetic between a tensor that carries the batch and the batch size as a number."""
    names = [name for name in node.input[:2] if name]
    if len(names) < 2 or not any(trace.at(name)[1].value is not None for name in names):
        return None  # most arithmetic: no operand has a value
    for data, number in ((names[0], names[1]), (names[1], names[0])):
        # float data only: integer indices offset by arange(B) * stride are torch's per-sample gather
        known = trace.at(data)[1]
        if known.value is None and known.dtype in _FLOATS and _batch_valued(trace, number) and batch_axes(trace, data):
            return (
                f"computes '{data}', which carries the batch, with '{number}', whose values change with the batch "
                "size (the batch size used as a number): a sample gives another result alone than in a batch"
            )
    return None


def _branches_on_the_batch(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """An If whose condition changes with the batch size: another branch runs at another batch."""
    knowns = trace.at(node.input[0])[:2] if node.input else []
    if len(knowns) < 2 or knowns[0].value is None or knowns[1].value is None:
        return None
    first, second = (bool(np.asarray(k.value).reshape(-1)[0]) for k in knowns)
    # a branch that drops the batch's axis at batch 1 only (torch's unbatched RNN cell) keeps the values
    ranks = [trace.ranks(name)[:2] for name in node.output if name]
    if first == second or any(None in pair or pair[0] != pair[1] for pair in ranks):
        return None
    return (
        f"takes its {'then' if first else 'else'} branch at batch {trace.b1} and its {'then' if second else 'else'} "
        f"branch at batch {trace.b2} (its condition '{node.input[0]}' follows the batch size): a sample computes "
        "otherwise alone than in a batch"
    )


def _inverted(trace: BatchTrace, sites: Sequence[NodeSite]) -> set[str]:
    """The tensors ScatterElements take as indices (``inverse[perm] = arange(n)`` inverts a permutation),
    each followed back through Casts and Identities to where it is made."""
    producer = trace.evaluator.producer if trace.evaluator is not None else {}
    found = set()
    for site in sites:
        if site.node.op_type == "ScatterElements" and len(site.node.input) > 1:
            name = site.node.input[1]
            while (made := producer.get(name)) is not None and made.node.op_type in ("Cast", "Identity"):
                name = made.node.input[0]
            found.add(name)
    return found


def _sorts_and_restores(trace: BatchTrace, node: onnx.NodeProto, inverted: set[str]) -> bool:
    """A TopK that sorts the whole batch (k is the batch, at every point) whose order the model inverts
    later (torch's ``pack_padded_sequence(enforce_sorted=False)``: sort by length, run, scatter back): it
    moves the samples and puts them back, each computed alone."""
    if len(node.output) < 2 or node.output[1] not in inverted or len(node.input) < 2:
        return False
    axis = int(_attribute(node, "axis", -1))
    for data, k in zip(trace.at(node.input[0]), trace.at(node.input[1])):
        if (
            data.shape is None
            or k.value is None
            or k.value.size != 1
            or data.shape[axis] != int(k.value.reshape(-1)[0])
        ):
            return False
    return True


def _einsum(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """An Einsum whose equation sums over a letter that labels an axis carrying the batch."""
    written = _attribute(node, "equation", b"")
    equation = (written.decode() if isinstance(written, bytes) else str(written)).replace(" ", "")
    terms, arrow, output = equation.partition("->")
    operands = terms.split(",")
    if not arrow:  # implicit output: the letters used once, in order, after the broadcast ones
        letters = "".join(operands)
        output = ("..." if "..." in letters else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c != ".")
        )
    for name, term in zip(node.input, operands):
        rank = trace.ranks(name)[1] if name else None
        if rank is None:
            continue
        for axis in batch_axes(trace, name):
            letter = _letter(term, axis, rank)
            if letter is not None and letter not in output:
                return (
                    f"sums over axis {axis} of '{name}' (letter '{letter}' of '{equation}'), which carries the batch: "
                    "each sample's result depends on the others"
                )
    return None


def _letter(term: str, axis: int, rank: int) -> str | None:
    """The letter that labels ``axis`` in an Einsum operand's term ('...' for a broadcast axis)."""
    head, dots, tail = term.partition("...")
    if not dots:
        return term[axis] if axis < len(term) else None
    if axis < len(head):
        return head[axis]
    return tail[axis - rank] if axis >= rank - len(tail) else "..."


def _windowed(trace: BatchTrace, node: onnx.NodeProto, batch: set[int]) -> str | None:
    """A window (or a global pool) over a spatial axis that carries the batch; a Conv over channels
    that carry it (one group)."""
    data = node.input[0]
    op = node.op_type
    if op.startswith("Conv") and 1 in batch and int(_attribute(node, "group", 1)) == 1:
        return f"sums over the channels (axis 1) of '{data}', which carries the batch: each sample's result depends on the others"
    spatial = sorted(axis for axis in batch if axis >= 2)
    if not spatial:
        return None
    kernel = list(_attribute(node, "kernel_shape", []))
    if not kernel and op.startswith("Conv") and len(node.input) > 1:
        weight = trace.at(node.input[1])[1].shape
        kernel = list(weight[2:]) if weight is not None else []
    for axis in spatial:
        size = kernel[axis - 2] if axis - 2 < len(kernel) else None
        if op in _GLOBAL or size is None or size > 1:
            what = "pools over" if op in _GLOBAL else "slides its window along"
            return f"{what} axis {axis} of '{data}', which carries the batch: each sample's result depends on its neighbours"
    return None


def _scan(trace: BatchTrace, node: onnx.NodeProto) -> str | None:
    """A Scan with a state whose scanned input carries the batch on its scan axis."""
    scanned = int(_attribute(node, "num_scan_inputs", 0))
    states = len(node.input) - scanned
    if states <= 0:
        return None
    if not _carries_the_scanned(node, states):
        return None  # a state no scanned element reaches (a counter, a pass-through): nothing goes from step to step
    axes = list(_attribute(node, "scan_input_axes", [0] * scanned))
    for name, axis in zip(node.input[states:], axes):
        rank = trace.ranks(name)[1] if name else None
        if rank is not None and int(axis) % max(rank, 1) in batch_axes(trace, name):
            return (
                f"scans along axis {int(axis) % rank} of '{name}', which carries the batch, with a state carried "
                "from step to step: each sample's result depends on the samples before it"
            )
    return None


def _carries_the_scanned(node: onnx.NodeProto, states: int) -> bool:
    """Whether a Scan body's state outputs depend on its scanned inputs (in the body's node order)."""
    body = next((attr.g for attr in node.attribute if attr.name == "body"), None)
    if body is None:
        return True
    reached = {info.name for info in body.input[states:]}
    for inner in body.node:
        if any(name in reached for name in inner.input) or inner.op_type in ("If", "Loop", "Scan"):
            reached.update(inner.output)  # a nested body is taken to read whatever it may
    return any(info.name in reached for info in body.output[:states])


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
