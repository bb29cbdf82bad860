"""Where the elements of a shape operand come from, and how a patch may replace them.

A Reshape's shape is a constant, or a Concat of pieces (torch dynamo builds every one that way):
constants, some shared by several Concats, and pieces computed from ``Shape``. ``Operands.sources``
follows each element to the constant it copies, so the tracker rewrites that piece (a shared piece
is copied for this use by ``rewrite``). An element computed at run time has no constant to
rewrite; when every other element is the same at every point, the whole operand can become a new
constant (``steady_except``). ``replace_fix`` is the hand-written fix for a constant operand only:
``replace_initializer`` refuses a computed one.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex, use_counts
from patchspec.shapes import expressions
from patchspec.shapes.batch.trace import PointInputs
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.spec_lines import FlowValue, SpecFix

#: ops whose output copies the elements of their first input in order (for tracing a shape back)
_COPY_OPS = {"Unsqueeze", "Squeeze", "Cast", "Identity", "Reshape", "Flatten"}
#: per element of a shape operand: (reader site, operand, element) of the constant it copies
Source = tuple[NodeSite, int, int]


class Operands:
    def __init__(self, model: onnx.ModelProto, evaluator: ShapeEvaluator) -> None:
        self.evaluator = evaluator
        self.model = model
        self.index = ScopeIndex()

    @cached_property
    def uses(self) -> dict[str, int]:
        """Counted at the first computed operand only: a walk over every node, which a model whose
        shape operands are all constants never needs."""
        return use_counts(self.model)

    def is_constant(self, site: NodeSite, operand: int) -> bool:
        return self.index.constant_source(site.node.input[operand], site.scopes) is not None

    def reads_an_input(self, site: NodeSite, name: str, limit: int = 10_000) -> bool:
        """Whether ``name`` (read in ``site``'s scopes) is computed from a graph input, not from constants
        alone; True when unsure (more than ``limit`` tensors upstream)."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if not current or current in seen:
                continue
            seen.add(current)
            if len(seen) > limit:
                return True
            producer = self.evaluator.producer.get(current)
            if producer is None:
                if self.index.constant_source(current, site.scopes) is None:
                    return True  # neither made by a node nor a constant: a graph input
                continue
            todo.extend(producer.node.input)
        return False

    def sources(self, site: NodeSite, operand: int) -> list[Source | None] | None:
        """Per element of ``site.node``'s input: (reader site, operand, element) of the constant it copies."""
        name = site.node.input[operand]
        if self.is_constant(site, operand):
            value = self.index.constant(name, site.scopes)
            size = 0 if value is None else int(np.asarray(value).size)
            return [(site, operand, j) for j in range(size)]
        producer = self.evaluator.producer.get(name)
        shared = self.uses.get(name, 0) > 1 and not self._only_reshape_shapes(name)
        if producer is None or shared or producer.node.domain not in ("", "ai.onnx"):
            return None
        op = producer.node.op_type
        if op in _COPY_OPS:
            return self.sources(producer, 0)
        if op == "Concat":
            found: list[Source | None] = []
            for j, part in enumerate(producer.node.input):
                value = self.evaluator.at(part)[0].value
                length = 0 if value is None else int(np.asarray(value).size)
                found.extend(self.sources(producer, j) or [None] * length)
            return found
        return None

    @cached_property
    def _readers(self) -> dict[str, list[tuple[str, int]]]:
        """Per tensor: (op type, input index) of every node that reads it, subgraphs included."""
        found: dict[str, list[tuple[str, int]]] = {}
        stack = [self.model.graph]
        while stack:
            graph = stack.pop()
            for node in graph.node:
                for index, name in enumerate(node.input):
                    found.setdefault(name, []).append((node.op_type, index))
                stack.extend(a.g for a in node.attribute if a.HasField("g"))
                stack.extend(g for a in node.attribute for g in a.graphs)
        return found

    @cached_property
    def consumers(self) -> dict[str, list[onnx.NodeProto]]:
        """Per tensor: the nodes of the main graph that read it (built at the first question)."""
        found: dict[str, list[onnx.NodeProto]] = {}
        for node in self.model.graph.node:
            for name in set(node.input):
                found.setdefault(name, []).append(node)
        return found

    def _only_reshape_shapes(self, name: str) -> bool:
        """Whether every reader of a shared computed shape is a Reshape reading it as its shape (torch
        dynamo's attention reuses one Concat for several): each one's decision rewrites the same piece
        to the same value, so the shared pieces may be rewritten for all."""
        readers = self._readers.get(name, [])
        outputs = {o.name for o in self.model.graph.output}
        return bool(readers) and name not in outputs and all(r == ("Reshape", 1) for r in readers)

    def producer_label(self, site: NodeSite, operand: int) -> str:
        """``Concat 'shape_3'``: the node that computes a computed operand."""
        producer = self.evaluator.producer.get(site.node.input[operand])
        if producer is None:
            return f"'{site.node.input[operand]}'"
        return f"{producer.node.op_type} '{producer.node.name or producer.node.output[0]}'"

    def shape_words(self, site: NodeSite, operand: int, values: list[int]) -> str:
        """``constant shape [1, 64]``, or for a computed one what computes it (its values are the sizes tried)."""
        if self.is_constant(site, operand):
            return f"constant shape {values}"
        return f"shape {values} (computed by {self.producer_label(site, operand)}, at the sizes tried)"

    def constant_fix(self, site: NodeSite, values: list[int], axis: int, at: int, operand: int = 1) -> SpecFix | None:
        """:func:`replace_fix` for a constant operand (a computed one has none: it is refused)."""
        return replace_fix(site, values, axis, at, operand) if self.is_constant(site, operand) else None


def steady_except(inputs: PointInputs, operand: int, i: int) -> list[int] | None:
    """The operand's values when every element but ``i`` is the same at every point (then a constant
    in their place is right at any size); None when one follows the batch or another input dim."""
    rows = []
    for point in inputs:
        value = point[operand].value
        if value is None:
            return None
        rows.append([int(v) for v in np.asarray(value).reshape(-1)])
    first = rows[0]
    if any(len(row) != len(first) or any(a != b for j, (a, b) in enumerate(zip(row, first)) if j != i) for row in rows):
        return None
    return first


def replace_fix(site: NodeSite, values: list[int], axis: int, i: int, operand: int = 1) -> SpecFix:
    """replace_initializer with the data's batch dim (``dim(data, axis)``) at element ``i``."""
    node = site.node
    items: list[FlowValue] = list(values)
    if 0 <= i < len(items):
        items[i] = f"dim({expressions.quote_tensor(node.input[0])}, {axis})"
    selector: dict[str | int, FlowValue] = {"name": node.name} if node.name else {"produces": node.output[0]}
    return SpecFix("replace_initializer", (("select", selector), ("input", operand), ("shape", items)))


__all__ = ["Operands", "Source", "replace_fix", "steady_except"]
