"""A Range that counts the exported batch: its limit found and rewritten.

``torch.arange(x.size(0))`` exported at a static batch (or without constant folding) is a Range of
three constants, ``Range(0, 1, 1)``: one index per sample of the exported batch. It then meets the
tensors that carry the batch: joined with per-sample indices by a Concat on another axis (advanced
indexing ``x[torch.arange(B), lengths - 1]`` builds the GatherND indices that way), or combined with
them by arithmetic (``torch.arange(B) * T + lengths``, a flat index). At batch 4 the Concat cannot
run; the arithmetic runs and is wrong (every sample reads the first one's rows). A Range's length
is a count, and a count of exactly the exported batch that meets the batch axis is the batch: its
limit is rewritten so that it counts the new batch. A symbolic batch, or a limit computed at run
time, is undecided (apply --no-verify refuses it). Where the exporter folded the Range into an
integer constant (``[0]``), ``counts`` finds its step from the rows it indexes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from patchspec.model.graph import NodeSite
from patchspec.shapes.batch.counts import settle_folded
from patchspec.shapes.batch.operands import Operands
from patchspec.shapes.batch.states import Deciding, follow_batch_at
from patchspec.shapes.batch.trace import BatchTrace, PointInputs, Rewrite, Undecided, ints_of, sizes_of
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

#: arithmetic that keeps a count's elements where they are (the other operand is one number)
ARITHMETIC = frozenset({"Add", "Sub", "Mul"})
_COPIES = frozenset({"Cast", "Identity"})
_INTEGERS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})
#: at most this many elements in a folded arange the tracker looks at (one per sample of the exported batch)
_SMALL = 64


@dataclass(frozen=True)
class Chain:
    """A Range of constants (``maker``) and the tensors that hold its elements, the last first: each
    with the axis the elements lie along."""

    maker: NodeSite
    tensors: list[tuple[str, int]]

    @property
    def axis(self) -> int:
        return self.tensors[0][1]

    def through(self, name: str, axis: int) -> Chain:
        return Chain(self.maker, [(name, axis), *self.tensors])


def counting_candidates(model: onnx.ModelProto) -> bool:
    """Whether the main graph has a Range of constants, or a small integer constant that an Add, Sub or
    Mul reads (an arange the exporter folded): then the tracker looks at arithmetic too. Elsewhere it has
    no reason to, and a large graph's every Add is spared a call."""
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    small = {t.name for t in graph.initializer if _small_ints(t)}  # names, so that a node costs a set test
    for node in graph.node:
        if node.op_type == "Constant" and node.output:  # a later Constant of the same name wins
            name = node.output[0]
            constants.add(name)
            tensor = next((a.t for a in node.attribute if a.name == "value"), onnx.TensorProto())
            (small.add if _small_ints(tensor) else small.discard)(name)
    for node in graph.node:
        op = node.op_type
        if op == "Range" and all(i in constants for i in node.input):
            return True
        if op in ARITHMETIC and small and not small.isdisjoint(node.input):
            return True
    return False


def _small_ints(tensor: onnx.TensorProto | None) -> bool:
    return tensor is not None and tensor.data_type in _INTEGERS and math.prod(tensor.dims) <= _SMALL


def range_behind(evaluator: ShapeEvaluator, operands: Operands, name: str) -> Chain | None:
    """The Range of constants whose elements ``name`` holds, with the tensors from ``name`` back to it
    and the axis of each that the elements lie along; followed through Unsqueeze, Cast and arithmetic
    with one number. None where there is none."""
    producer = evaluator.producer.get(name)
    if producer is None or producer.node.domain not in ("", "ai.onnx"):
        return None
    node, op = producer.node, producer.node.op_type
    if op == "Range":
        constant = len(node.input) == 3 and all(operands.is_constant(producer, j) for j in range(3))
        return Chain(producer, [(name, 0)]) if constant else None
    if op in _COPIES and node.input:
        inner = range_behind(evaluator, operands, node.input[0])
        return None if inner is None else inner.through(name, inner.axis)
    if op == "Unsqueeze" and node.input:
        return _through_unsqueeze(evaluator, operands, producer)
    if op in ARITHMETIC and len(node.input) == 2:
        return _through_arithmetic(evaluator, operands, producer)
    return None


def ranges_met(model: onnx.ModelProto, trace: BatchTrace, operands: Operands) -> list[str]:
    """For a model evaluated as it is: each Range of constants that counts the exported batch and that
    an Add, Sub, Mul or Concat meets with a tensor carrying the batch (then set_batch decides it)."""
    assert trace.evaluator is not None, "trace_batch sets the evaluator"
    found = []
    sites = {id(site.node): site for site in trace.evaluator.producer.values()}
    for site in sites.values():
        node = site.node
        if node.op_type not in ARITHMETIC | {"Concat"} or len(site.scopes) > 1 or len(node.input) < 2:
            continue
        for j, name in enumerate(node.input):
            chain = range_behind(trace.evaluator, operands, name)
            if chain is None or _count(trace.evaluator, chain.maker) != trace.b1:
                continue
            others = [n for k, n in enumerate(node.input) if k != j and n]
            if any(isinstance(d, tuple) for n in others for d in trace.batch_dims(n, trace.ranks(n)[1] or 0)):
                made = f"Range '{chain.maker.node.name or chain.maker.node.output[0]}'"
                found.append(
                    f"{made} counts the exported batch and {node.op_type} '{node.name or node.output[0]}' meets it with the batch"
                )
    return found


def rewrite_range(tracker: Deciding, site: NodeSite, name: str, axis: int) -> bool:
    """Record the rewrite of the limit of the Range behind ``name``, where ``name`` holds one of its
    elements per sample of the exported batch along ``axis`` (an axis of ``name``); False where no
    such Range is found (an undecided point is recorded where one is found and cannot be rewritten).
    The tensors from the Range to ``name`` are evaluated again with the count at each point's batch,
    so that their declarations follow the batch."""
    chain = range_behind(tracker.evaluator, tracker.operands, name)
    trace = tracker.trace
    if chain is None or chain.axis != axis or _count(tracker.evaluator, chain.maker) != trace.b1:
        return False
    maker = chain.maker
    start, limit, delta = (_scalar(tracker.evaluator, maker.node.input[j]) or 0 for j in range(3))
    made = f"Range '{maker.node.name or maker.node.output[0]}'"
    met = f"{site.node.op_type} '{site.node.name or site.node.output[0]}'"
    sources = tracker.operands.sources(maker, 1)
    source = sources[0] if sources else None
    if source is None or trace.symbolic:
        why = "a computed limit" if source is None else "a symbolic batch"
        trace.undecided.append(
            Undecided(
                f"undecided: {made} counts the exported batch ({start} to {limit} by {delta}), and {met} "
                f"meets it with the batch; {why} there needs the count taken at run time from the batch: "
                "export the model with arange over the batch dynamic"
            )
        )
        tracker.decided.add(id(site.node))
        return False
    written = start + delta * trace.b2
    reason = f"{made}: its limit counts the batch ({limit} -> {written}), met with the batch by {met}"
    reader, operand, element = source
    trace.rewrites.append(Rewrite(reader, operand, ((element, written),), reason))
    _recount(tracker, chain)
    return True


def _recount(tracker: Deciding, chain: Chain) -> None:
    """Each tensor of the chain, at each point, with the count along its axis at that point's batch
    (values unknown): what the model computes once the limit counts the batch."""
    for name, axis in chain.tensors:
        follow_batch_at(tracker, name, axis)


def settle_arithmetic(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
    """An Add, Sub or Mul of a tensor that carries the batch and a count of the exported batch along the
    same axis: the count's Range is rewritten, and the evaluation goes on with it at each batch."""
    if len(site.node.input) != 2 or id(site.node) in tracker.decided:
        return None
    first = [sizes_of(k) for k in inputs[tracker.a]]
    second = [sizes_of(k) for k in inputs[tracker.b]]
    if any(s is None for s in (*first, *second)):
        return None
    rank = max(len(s or ()) for s in first)
    for carrier in (0, 1):
        axis = _moving_axis(tracker, first[carrier], second[carrier])
        other, dims = 1 - carrier, first[1 - carrier] or ()
        if axis is None or dims != second[other]:
            continue  # nothing carries the batch, or the other operand follows it too
        at = axis + rank - len(first[carrier] or ())  # broadcasting aligns from the right
        own = at - (rank - len(dims))
        if not 0 <= own < len(dims) or dims[own] != tracker.trace.b1:
            continue
        if rewrite_range(tracker, site, site.node.input[other], own):
            tracker.decided.add(id(site.node))
            return _following(inputs, (other, own), (carrier, axis))
        if settle_folded(tracker, site, other, own):
            return _following(inputs, (other, own), (carrier, axis))
    return None


def _following(inputs: PointInputs, count: tuple[int, int], carrier: tuple[int, int]) -> PointInputs:
    """``inputs`` with the count's axis (input, axis) sized as the carrier's batch axis at each point
    (its values, which counted the old batch, unknown)."""
    (operand, own), (source, axis) = count, carrier
    replaced = [list(point) for point in inputs]
    for p, point in enumerate(replaced):
        carried, known = sizes_of(inputs[p][source]), point[operand]
        if carried is None or known.shape is None:
            continue
        dims = list(known.shape)
        dims[own] = carried[axis]
        point[operand] = Known(known.dtype, tuple(dims), None)
    return replaced


def _moving_axis(tracker: Deciding, one: tuple[int, ...] | None, two: tuple[int, ...] | None) -> int | None:
    """The one axis that scales with the batch between the witnesses, counted from the front."""
    if one is None or two is None or len(one) != len(two):
        return None
    wa, wb = tracker.trace.sizes[tracker.a], tracker.trace.sizes[tracker.b]
    moving = [t for t, (x, y) in enumerate(zip(one, two)) if x != y]
    if len(moving) != 1 or one[moving[0]] * wb != two[moving[0]] * wa:
        return None
    return moving[0]


def _through_unsqueeze(evaluator: ShapeEvaluator, operands: Operands, site: NodeSite) -> Chain | None:
    node = site.node
    inner = range_behind(evaluator, operands, node.input[0])
    rank = _rank(evaluator, node.output[0])
    if inner is None or rank is None:
        return None
    axes: list[int] = next((list(a.ints) for a in node.attribute if a.name == "axes"), [])
    if len(node.input) > 1 and node.input[1]:
        value = evaluator.at(node.input[1])[0].value
        if value is None:
            return None
        axes = ints_of(value)
    kept = [t for t in range(rank) if t not in {a % rank for a in axes}]
    return inner.through(node.output[0], kept[inner.axis]) if inner.axis < len(kept) else None


def _through_arithmetic(evaluator: ShapeEvaluator, operands: Operands, site: NodeSite) -> Chain | None:
    """Through ``count * T`` or ``count + 1``: the other operand is one number."""
    node = site.node
    rank = _rank(evaluator, node.output[0])
    for j in (0, 1):
        other = evaluator.at(node.input[1 - j])[0].shape
        inner_rank = _rank(evaluator, node.input[j])
        if other is None or math.prod(d or 0 for d in other) != 1 or inner_rank is None or rank is None:
            continue
        inner = range_behind(evaluator, operands, node.input[j])
        if inner is not None:
            return inner.through(node.output[0], inner.axis + rank - inner_rank)
    return None


def _count(evaluator: ShapeEvaluator, maker: NodeSite) -> int | None:
    """How many elements a Range of constants makes (at the exported batch)."""
    start, limit, delta = (_scalar(evaluator, maker.node.input[j]) for j in range(3))
    if start is None or limit is None or not delta:
        return None
    return max(0, math.ceil((limit - start) / delta))


def _rank(evaluator: ShapeEvaluator, name: str) -> int | None:
    shape = evaluator.at(name)[0].shape
    return None if shape is None else len(shape)


def _scalar(evaluator: ShapeEvaluator, name: str) -> int | None:
    """The one integer a Range input holds at the exported batch; None where it is not one integer."""
    value = evaluator.at(name)[0].value
    if value is None or np.asarray(value).size != 1 or not np.issubdtype(np.asarray(value).dtype, np.integer):
        return None
    return int(np.asarray(value).reshape(-1)[0])


__all__ = [
    "ARITHMETIC",
    "Chain",
    "counting_candidates",
    "range_behind",
    "ranges_met",
    "rewrite_range",
    "settle_arithmetic",
]
