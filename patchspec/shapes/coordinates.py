"""Where an integer input is an index: its bounds from the axis it indexes.

``lengths - 1`` into a Gather's axis, a GatherElements' or ScatterElements' indices, a column of a
GatherND's coordinates (``h[arange(B), lengths - 1]``): followed through copies, shifts by a
constant and a Concat into coordinates, and bounded by the size of the axis it indexes, as shape
inference gives it at the declared input sizes. ``values`` asks it, among its other rules.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex, node_label

#: an index on its way to where it is read: (tensor, constant added so far, its column of coordinates)
Coordinate = tuple[str, int, int | None]
#: an input's bounds, and why: (low, high, reason), low <= value < high
Bounds = tuple[int, int, str]


class Uses(Protocol):
    """What of ``values._Uses`` (the input's uses in the graph) this module reads."""

    model: onnx.ModelProto
    consumers: dict[str, list[tuple[NodeSite, int]]]
    producers: dict[str, onnx.NodeProto]
    index: ScopeIndex

    def constant(self, site: NodeSite, operand: int) -> np.ndarray[Any, Any] | None: ...

    def dims(self, name: str) -> list[int | None] | None: ...


def coordinates(uses: Uses, name: str) -> Bounds | None:
    """Indices, shifted by a constant (``lengths - 1``), into an axis of a tensor: a Gather's (a
    GatherElements', a ScatterElements') indices, or a column of a GatherND's coordinates
    (``h[arange(B), lengths - 1]``). They are bounded by that axis's size, as shape inference gives
    it at the declared input sizes."""
    bounds: list[tuple[int, int, str]] = []
    todo: list[Coordinate] = [(name, 0, None)]
    seen: set[str] = set()
    while todo:
        tensor, offset, column = todo.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for site, operand in uses.consumers.get(tensor, []):
            bound = _coordinate_bound(uses, site, operand, offset, column)
            onward = None if bound else _coordinate_onward(uses, site, operand, offset, column)
            bounds.extend([bound] if bound else [])
            todo.extend([onward] if onward else [])
    if not bounds:
        return None
    low, high = max(b[0] for b in bounds), min(b[1] for b in bounds)
    if low >= high:
        return None
    readers = ", ".join(sorted({b[2] for b in bounds}))
    return low, high, f"indices into {readers}: {low} <= value < {high}"


def _coordinate_onward(uses: Uses, site: NodeSite, operand: int, offset: int, column: int | None) -> Coordinate | None:
    """Where an index goes on: through a copy, a shift by a constant, or a Concat into coordinates."""
    node = site.node
    if node.op_type in ("Cast", "Identity", "Unsqueeze", "Squeeze") and operand == 0:
        return node.output[0], offset, column
    if node.op_type in ("Reshape", "Flatten", "Expand") and operand == 0 and column is None:  # not yet coordinates
        return node.output[0], offset, column
    if node.op_type in ("Add", "Sub") and operand < 2 and len(node.input) == 2:
        other = uses.constant(site, 1 - operand)
        other = _folded_zero(uses, node.input[1 - operand]) if other is None else other
        if other is None or other.size != 1 or other.dtype.kind not in "iu" or (node.op_type, operand) == ("Sub", 1):
            return None
        shift = int(other.reshape(-1)[0])
        return node.output[0], offset + (shift if node.op_type == "Add" else -shift), column
    if node.op_type == "Concat" and column is None:
        widths = [uses.dims(part) for part in node.input[:operand]]
        own = uses.dims(node.input[operand])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if own is None or axis % len(own) != len(own) - 1 or any(w is None or w[-1] is None for w in widths):
            return None
        return node.output[0], offset, sum(int(w[-1] or 0) for w in widths if w)
    return None


def _folded_zero(uses: Uses, name: str) -> np.ndarray[Any, Any] | None:
    """``[0]`` where ``name`` is a Mul of a constant of zeros by anything (TorchScript's ``arange(B) * T``
    folded at batch 1: ``[0] * T``): no shift at the declared sizes."""
    producer = uses.producers.get(name)
    if producer is None or producer.op_type != "Mul":
        return None
    for tensor in producer.input:
        value = uses.index.constant(tensor, (uses.model.graph,))
        if value is not None and np.asarray(value).dtype.kind in "iu" and np.size(value) and not np.any(value):
            return np.zeros(1, np.asarray(value).dtype)
    return None


def _coordinate_bound(
    uses: Uses, site: NodeSite, operand: int, offset: int, column: int | None
) -> tuple[int, int, str] | None:
    """(low, high, reader) for an index read by a Gather, GatherElements, ScatterElements or GatherND, shifted
    by ``offset`` on the way."""
    node = site.node
    if operand != 1 or node.op_type not in ("Gather", "GatherND", "GatherElements", "ScatterElements"):
        return None
    data = uses.dims(node.input[0])
    if node.op_type != "GatherND":  # one index per element, along the op's axis
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        at = None if column is not None or not data else axis % len(data)
    else:
        batch_dims = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
        at = batch_dims + (column or 0)
    size = data[at] if data is not None and at is not None and at < len(data) else None
    if not size:
        return None
    return max(0, -offset), size - offset, f"axis {at} (size {size}) of the data {node_label(node)} reads"


__all__ = ["Bounds", "Coordinate", "Uses", "coordinates"]
