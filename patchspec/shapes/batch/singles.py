"""The axes of a tensor that what reads it keeps one element of: none of them can be the batch.

A Squeeze removes an axis of 1, a Slice ``[-1:]`` keeps the last element, a Gather of one constant
index picks one. TFLite's RNNs write each step as ``[1, 1, H]``: the first 1 is a list of one step
(squeezed, or carried out of the Loop and sliced to its last element), the second the batch. Where a
Reshape's output has several axes of 1 that each fit the batch, the tracker asks here which it is not.
A Loop's carried value is followed out of its body to what reads the Loop's output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex
from patchspec.shapes.evaluate import ShapeEvaluator

#: the ops that can keep one element of an axis
_READERS = frozenset({"Squeeze", "Slice", "Gather"})
#: an end at or past this (INT32_MAX, INT64_MAX) is "to the end" in a Slice
_TO_THE_END = 2**31 - 1


class Singles:
    """The axes that readers keep one element of, per graph, read once each."""

    def __init__(self, evaluator: ShapeEvaluator, index: ScopeIndex) -> None:
        """``index``: the constants by scope (the tracker's, shared with its operands)."""
        self.evaluator, self.index = evaluator, index
        self.by_graph: dict[int, dict[str, list[int]]] = {}

    def axes(self, site: NodeSite, tensor: str, rank: int) -> set[int]:
        """The axes of ``tensor`` (made at ``site``, of ``rank``) that a reader keeps one element of: in
        ``site``'s graph, and where it is a Loop body's next value of a carried state, in the Loop's."""
        found = {axis % rank for axis in self._in(site.scopes).get(tensor, ())}
        outputs = [info.name for info in site.graph.output]
        owner, _ = self.evaluator.owners.get(id(site.graph), (None, ""))
        if owner is None or owner.op_type != "Loop" or tensor not in outputs[1:] or len(site.scopes) < 2:
            return found
        k = outputs.index(tensor) - 1  # the carried state k: the Loop's output k
        if k < len(owner.input) - 2 and k < len(owner.output):
            found |= {axis % rank for axis in self._in(site.scopes[:-1]).get(owner.output[k], ())}
        return found

    def _in(self, scopes: Sequence[onnx.GraphProto]) -> dict[str, list[int]]:
        """The table of the innermost of ``scopes`` (its constants looked up outwards), read once."""
        if id(scopes[-1]) not in self.by_graph:
            self.by_graph[id(scopes[-1])] = _singles(scopes, self.index)
        return self.by_graph[id(scopes[-1])]


def _singles(scopes: Sequence[onnx.GraphProto], index: ScopeIndex) -> dict[str, list[int]]:
    """By the tensor read, the axes each Squeeze, Slice or Gather of the innermost of ``scopes`` keeps one
    element of, where its axes, bounds or index are constant (an initializer or a Constant node)."""
    found: dict[str, list[int]] = {}
    for node in scopes[-1].node:
        if node.op_type not in _READERS or not node.input:
            continue
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        given = [index.constant(name, scopes) if name else None for name in node.input[1:]]
        if node.op_type == "Squeeze":
            axes = attributes.get("axes") if not given else given[0]
            kept = [] if axes is None else [int(axis) for axis in np.reshape(axes, -1)]
        elif node.op_type == "Gather":
            index_value = given[0] if given else None
            one = index_value is not None and index_value.size == 1 and index_value.ndim == 0
            kept = [int(attributes.get("axis", 0))] if one else []
        else:
            kept = _one_element_slices(given)
        found.setdefault(node.input[0], []).extend(kept)
    return found


def _one_element_slices(given: list[np.ndarray | None]) -> list[int]:
    """The axes a Slice (opset 10 and later: starts, ends, axes as inputs) keeps one element of: ``[-1:]``,
    or ``[k:k+1]``."""
    if len(given) < 3 or any(value is None for value in given[:3]):
        return []
    starts, ends, axes = (np.reshape(value, -1).tolist() for value in given[:3])  # type: ignore[arg-type]
    return [
        int(axis)
        for start, end, axis in zip(starts, ends, axes)
        if (start == -1 and end >= _TO_THE_END) or (start >= 0 and end == start + 1)
    ]


__all__ = ["Singles"]
