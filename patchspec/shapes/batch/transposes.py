"""Reshapes that are a transpose at the exported batch of 1: found after the walk, and made transposes.

A transpose that moves only an axis of 1 moves no bytes, so exporters and optimizers write it as a
Reshape: tf2onnx does for the time-major input of a Keras RNN (``[1, 7, 5]`` to ``[7, 1, 5]``), and
onnxruntime's transpose optimizer does too. At another batch no Reshape is that transpose: rewriting
its batch element, or a ``-1`` beside it, folds the batch into time, and a Loop over the 7 steps reads
sample 0's. The cases, each the same op at batch 1 and the batched one everywhere else:

- the Reshape moves the batch's axis of 1 and keeps the other dims in order: it becomes a Transpose;
- the Reshape moves the batch's axis of 1 and drops or adds other axes of 1 (TFLite's Conv1D output
  ``[1, 1, 10, 8]`` to ``[10, 1, 8]``): a Transpose before it puts the batch where the output's one 1 is;
- the Reshape drops the batch's axis of 1 (``[1, 24]`` to ``[24]``) and what reads it broadcasts it back
  against the batch (TFLite's LSTM adds it as a Gemm's C): it becomes an Identity;
- in a model where one such Reshape was found, a Reshape that reads the batch off axis 0 (an RNN's
  time-major output, ``[7, 1, 6]`` to ``[7, 6]``) read a transpose back to the batch first, folded
  into it: a Transpose that puts the batch first is put before it, and the walk then decides the
  Reshape's constant as for any Reshape of batch-first data.

set_batch replaces what one walk finds and walks the model again: a Reshape whose data a folded
Reshape upstream made is found in the next walk. The Transposes written carry :data:`MARK` as their
doc_string, which is also how a later walk knows the model folds transposes.
"""

from __future__ import annotations

from typing import Protocol

import onnx

from patchspec.model.graph import NodeSite, ScopeIndex, all_graphs, all_names, fresh_name
from patchspec.shapes.batch.trace import BatchTrace, Transposition, sizes_of
from patchspec.shapes.evaluate import ShapeEvaluator

#: the doc_string of each Transpose written here
MARK = "patchspec set_batch: a Reshape that was a transpose at batch 1"
#: the doc_string of each Identity written here (a Reshape that dropped the batch's axis of 1)
KEPT = "patchspec set_batch: a Reshape that dropped the batch's axis of 1"
#: elementwise ops of two operands that broadcast them against each other
_BROADCASTS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"})


class Walked(Protocol):
    """What of a finished walk (``findings.BatchFindings``) the repairs read."""

    b1: int
    trace: BatchTrace
    evaluator: ShapeEvaluator
    index: ScopeIndex | None

    @property
    def sites(self) -> list[tuple[str, NodeSite]]: ...

    def at_witnesses(self, name: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]: ...

    def batch_axis(self, name: str) -> int | None: ...


def batch_transposes(findings: Walked) -> list[Transposition]:
    """Every Reshape of the walk that is a transpose at the old batch of 1 (the module's cases).

    A Reshape that makes a graph output nothing reads, from data with the batch on axis 0, is left to
    a rewrite of its first element alone: each sample's rows then lie side by side on axis 0."""
    if findings.b1 != 1:
        return []
    sites = [site for _, site in findings.sites if _is_reshape(site.node)]
    folds = any(site.node.doc_string == MARK for _, site in findings.sites)
    outputs = {info.name for info in findings.evaluator.model.graph.output}
    read: set[str] | None = None  # what the nodes read, gathered where a Reshape makes a graph output
    readers: dict[str, list[tuple[NodeSite, int]]] | None = None  # who reads what, where a Reshape drops the batch
    found = []
    # a batch moved among other 1s is a guess (``[1, 2, 1, 5]`` to ``[2, 1, 5]`` merges attention heads with
    # the batch): made only where the walk as it is refused or left a point undecided
    troubled = bool(findings.trace.refusals or findings.trace.undecided)
    for site in sites:
        node = site.node
        if node.output[0] in outputs:
            read = read if read is not None else {name for _, each in findings.sites for name in each.node.input}
            if node.output[0] not in read and _leads(findings, site):
                continue
        data, out = (sizes_of(findings.evaluator.at(name)[0]) for name in (node.input[0], node.output[0]))
        axis = findings.batch_axis(node.input[0])
        if data is None or out is None or axis is None:
            continue
        perm = _moved_one(data, out, axis)
        before = _moved_among_ones(data, out, axis) if perm is None and troubled else None
        if perm is not None or before is not None:
            found.append(Transposition(site, perm) if perm is not None else Transposition(site, before or (), True))
            folds = True
        elif _dropped(data, out, axis):
            readers = readers if readers is not None else _readers(findings)
            if _broadcast_back(findings, readers.get(node.output[0], []), len(data)):
                found.append(Transposition(site, ()))
    if folds:
        replaced = {id(t.site.node) for t in found}
        found += [t for site in sites if id(site.node) not in replaced and (t := _batch_first(findings, site))]
    return found


def _is_reshape(node: onnx.NodeProto) -> bool:
    return node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and bool(node.input[0])


def _moved_one(data: tuple[int, ...], out: tuple[int, ...], axis: int) -> tuple[int, ...] | None:
    """The permutation that is ``data`` -> ``out`` where both have one axis of 1, ``data``'s on the batch
    ``axis``, and the other dims keep their order; None where the Reshape is no such transpose."""
    if axis >= len(data) or len(data) != len(out) or data.count(1) != 1 or out.count(1) != 1 or data[axis] != 1:
        return None
    if out.index(1) == axis:
        return None
    rest = [k for k in range(len(data)) if k != axis]
    if [data[k] for k in rest] != [d for d in out if d != 1]:
        return None
    rest.insert(out.index(1), axis)
    return tuple(rest)


def _moved_among_ones(data: tuple[int, ...], out: tuple[int, ...], axis: int) -> tuple[int, ...] | None:
    """The Transpose to put before a Reshape that, at batch 1, moves the batch's axis of 1 past other dims and
    drops or adds other axes of 1 (TFLite's Conv1D output ``[1, 1, 10, 8]`` to the RNN's time-major
    ``[10, 1, 8]``): the batch placed among the data's other dims where the output has its one 1, so the
    Reshape then keeps the batch where it is; None where the output has no single 1, or other dims differ."""
    others = [k for k in range(len(data)) if k != axis]
    big = [k for k in others if data[k] != 1]
    if (
        axis >= len(data)
        or data[axis] != 1
        or out.count(1) != 1
        or [data[k] for k in big] != [d for d in out if d != 1]
    ):
        return None
    before = sum(1 for d in out[: out.index(1)] if d != 1)  # the output's dims before the batch
    if before == sum(1 for k in big if k < axis):
        return None  # the batch among the same dims already (YOLOv8's [1, 1, 4, 2100] to [1, 4, 2100])
    place = others.index(big[before - 1]) + 1 if before else (others.index(big[0]) if big else 0)
    perm = (*others[:place], axis, *others[place:])
    return None if perm == tuple(range(len(data))) else perm


def _dropped(data: tuple[int, ...], out: tuple[int, ...], axis: int) -> bool:
    """``out`` is ``data`` without its batch ``axis`` of 1 (a Squeeze written as a Reshape)."""
    return axis < len(data) and data[axis] == 1 and list(out) == [d for k, d in enumerate(data) if k != axis]


def _readers(findings: Walked) -> dict[str, list[tuple[NodeSite, int]]]:
    readers: dict[str, list[tuple[NodeSite, int]]] = {}
    for _, site in findings.sites:
        for operand, name in enumerate(site.node.input):
            readers.setdefault(name, []).append((site, operand))
    return readers


def _broadcast_back(findings: Walked, readers: list[tuple[NodeSite, int]], rank: int) -> bool:
    """Every reader broadcasts the dropped axis back against an operand of the data's ``rank`` or more that
    carries the batch: a Gemm's C (TFLite's LSTM adds the recurrent product so), an elementwise op."""
    if not readers:
        return False
    for site, operand in readers:
        node = site.node
        transposed = any(a.name == "transA" and a.i for a in node.attribute)
        if node.op_type == "Gemm" and operand == 2 and not transposed:
            others = [node.input[0]]  # A's rows are the output's: the batch on them
        elif node.op_type in _BROADCASTS and len(node.input) == 2:
            others = [node.input[1 - operand]]
        else:
            return False
        for other in others:
            shape = sizes_of(findings.evaluator.at(other)[0])
            if shape is None or len(shape) < rank or findings.batch_axis(other) != len(shape) - rank:
                return False
    return True


def _batch_first(findings: Walked, site: NodeSite) -> Transposition | None:
    """A Reshape that reads data with the batch (of 1) on an axis other than 0: read it batch first."""
    data = sizes_of(findings.evaluator.at(site.node.input[0])[0])
    axis = findings.batch_axis(site.node.input[0])
    if data is None or axis is None or axis == 0 or data[axis] != 1:
        return None
    made = findings.evaluator.producer.get(site.node.input[0])
    if made is not None and made.node.doc_string == MARK:
        return None  # its data was put in the order it reads already
    return Transposition(site, (axis, *(k for k in range(len(data)) if k != axis)), before=True)


def _leads(findings: Walked, site: NodeSite) -> bool:
    """Whether the Reshape at ``site`` reads data with the batch on axis 0 and is rewritten in its first
    element alone: its output then has each sample's rows side by side on axis 0."""
    rewritten = [
        at for r in findings.trace.rewrites if r.site.node is site.node and r.operand == 1 for at, _ in r.elements
    ]
    return findings.batch_axis(site.node.input[0]) == 0 and rewritten == [0]


def transpose_batch_reshapes(model: onnx.ModelProto, transposes: list[Transposition]) -> list[str]:
    """Make each Reshape of ``transposes`` (``trace.transposes``) the Transpose it is at batch 1, or give
    it one before it. One line per change."""
    taken = all_names(model) if any(t.before for t in transposes) else set()
    lines: list[str] = []
    detached: list[tuple[onnx.GraphProto, str]] = []  # (graph, shape) of each Reshape replaced
    for change in transposes:
        node, perm = change.site.node, list(change.perm)
        label = node.name or node.output[0]
        if change.before:
            name = fresh_name(f"{node.input[0]}/batch_first", taken)
            taken.add(name)
            first = onnx.helper.make_node("Transpose", [node.input[0]], [name], name=name, perm=perm, doc_string=MARK)
            nodes = change.site.graph.node
            nodes.insert(next(k for k, other in enumerate(nodes) if other is node), first)
            node.input[0] = name
            lines.append(
                f"gave Reshape '{label}' a Transpose before it (perm {perm}), so that it reads the batch where its "
                "shape has it: a transpose that only moved the batch of 1 had been folded into it"
            )
            continue
        shape = node.input[1]
        detached.append((change.site.graph, shape))
        if not perm:
            node.op_type = "Identity"
            del node.input[1:]
            node.doc_string = KEPT
            lines.append(
                f"replaced Reshape '{label}' (shape '{shape}') by an Identity: at batch 1 it dropped the batch's "
                "axis of 1, which what reads it broadcasts back; batched, each sample keeps its own row"
            )
            continue
        node.op_type = "Transpose"
        del node.input[1:]
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("perm", perm))
        node.doc_string = MARK
        lines.append(
            f"replaced Reshape '{label}' (shape '{shape}') by a Transpose (perm {perm}): at batch 1 it moved "
            f"the batch's axis, a transpose that no Reshape is at another batch"
        )
    _drop_unread(model, detached)
    return lines


def _drop_unread(model: onnx.ModelProto, detached: list[tuple[onnx.GraphProto, str]]) -> None:
    """Remove the shape initializers the replaced Reshapes no longer read, where nothing else does
    (onnxruntime warns of each unused initializer at every session)."""
    if not detached:
        return
    read = {name for graph in all_graphs(model.graph) for node in graph.node for name in node.input}
    read |= {info.name for info in model.graph.output}
    for graph, name in detached:
        unread = [t for t in graph.initializer if t.name == name and name not in read]
        for tensor in unread:
            graph.initializer.remove(tensor)


__all__ = ["KEPT", "MARK", "Walked", "batch_transposes", "transpose_batch_reshapes"]
