"""A symbolic batch where no constant can say it: the shape computed from the batch at run time.

For a symbolic batch a shape element proved to be the batch is written as ``-1`` (inferred) or
``0`` (copied from the data's dim). Neither works where the shape already holds a ``-1`` and the
batch is not at the data's own axis: a sequence-first attention reshapes ``[T*B, 16]`` to
``[-1, 1, 16]`` (``[T, B, 16]`` at batch 1), torch dynamo's head split ``[T, B, 48]`` to
``[-1, 1, 3, 16]``. The element is then computed from the batch input's dim (``dim(src, 1)``, times
the whole number of batches the element holds), compiled to ``Shape``/``Gather``/``Concat`` nodes
right before the node (``compiler.ShapeCompiler``). Every other element is a number, or an input's
dim where it moves with one (``[dim(x, 0), 6, -1, dim(x, 1)]``: torch dynamo's attention with a
dynamic sequence); where one follows no input dim, or the opset computes no shapes (before 11), the
point stays undecided, with the spec lines that settle it by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec.model.graph import Namer, NodeSite, all_names, default_opset
from patchspec.shapes import expressions
from patchspec.shapes.batch.states import Deciding
from patchspec.shapes.batch.trace import Computed, PointInputs, int64_known, ints_of, with_element
from patchspec.shapes.compiler import MIN_OPSET, ShapeCompileError, ShapeCompiler, TensorIndex


def computed_element(
    tracker: Deciding, site: NodeSite, inputs: PointInputs, at: tuple[int, int, int]
) -> PointInputs | None:
    """Record element ``i`` of input ``operand`` (``at``: operand, i, the data's batch axis), proved to hold
    the batch (times a whole number), computed from the batch input's dim; returns the inputs with it at
    each point's batch, or None where it cannot be (another element follows no input dim)."""
    operand, i, _ = at
    trace, node = tracker.trace, site.node
    rows = [ints_of(point[operand].value) if point[operand].value is not None else None for point in inputs]
    if any(row is None or len(row) != len(rows[0] or ()) for row in rows) or not trace.batch_axes:
        return None
    if tracker.evaluator.opset() < MIN_OPSET:
        return None
    first = rows[0] or []
    per_batch, rest = divmod(first[i], trace.b1)
    if rest or per_batch <= 0:
        return None
    name, axis = trace.batch_axes[0]
    dim = f"dim({expressions.quote_tensor(name)}, {axis})"
    item = dim if per_batch == 1 else f"{dim} * {per_batch}"
    items: list[int | str] = []
    for j in range(len(first)):
        found = item if j == i else _expressed(tracker, [row[j] for row in rows if row is not None])
        if found is None:
            return None  # an element that follows no input dim: nothing to compute it from
        items.append(found)
    steady = first
    label = f"{node.op_type} '{node.name or node.output[0]}'"
    reason = f"{label}: element {i} is the batch ({steady[i]} -> {item}), computed for the symbolic batch"
    trace.computed.append(Computed(site, operand, tuple(items), reason))
    tracker.decided.add(id(node))
    replaced = [list(point) for point in inputs]
    for p, point in enumerate(replaced):
        values = ints_of(point[operand].value) if point[operand].value is not None else list(steady)
        point[operand] = int64_known(with_element(values, i, per_batch * trace.sizes[p]), like=point[operand])
    return replaced


def _expressed(tracker: Deciding, column: list[int]) -> int | str | None:
    """One element of a shape across the points: a number where it is the same at all of them, else a
    whole multiple of a graph input's dim that moves the same way (``dim(x, 1)``: the sequence), else None."""
    if len(set(column)) == 1:
        return column[0]
    graph = tracker.evaluator.model.graph
    for info in graph.input:
        shapes = [known.shape for known in tracker.evaluator.at(info.name)]
        for axis in range(min((len(s) for s in shapes if s is not None), default=0)):
            sizes = [s[axis] if s is not None else None for s in shapes]
            if None in sizes or 0 in sizes or column[0] % int(sizes[0] or 1):
                continue
            times = column[0] // int(sizes[0] or 1)
            if times > 0 and all(value == times * int(size or 0) for value, size in zip(column, sizes)):
                dim = f"dim({expressions.quote_tensor(info.name)}, {axis})"
                return dim if times == 1 else f"{dim} * {times}"
    return None


def compiled_before(model: onnx.ModelProto, site: NodeSite, items: list[int | str], prefix: str) -> str:
    """The int64 tensor ``items`` computed at run time by nodes inserted before ``site.node`` (or a new
    constant where every item folds); returns its name."""
    namer = Namer(all_names(model))
    compiler = ShapeCompiler(TensorIndex(list(site.scopes)), default_opset(model), namer, prefix)
    try:
        compiled = compiler.compile(items)
    except ShapeCompileError as exc:  # pragma: no cover - the trace checked the opset and the dims
        raise AssertionError(f"set_batch could not compute {items} before {site.node.name!r}: {exc.message}") from exc
    if compiled.constant is not None:
        name = namer.fresh(prefix)
        site.graph.initializer.append(numpy_helper.from_array(np.array(compiled.constant, np.int64), name))
        return name
    assert compiled.output is not None
    site.graph.initializer.extend(compiled.initializers)
    position = next(j for j, each in enumerate(site.graph.node) if each is site.node)
    for offset, made in enumerate(compiled.nodes):
        site.graph.node.insert(position + offset, made)
    return compiled.output


def compute_shapes(model: onnx.ModelProto, computed: Sequence[Computed], label: str) -> list[str]:
    """Apply the trace's computed shapes: nodes that compute each one, inserted before its reader."""
    details = []
    for entry in computed:
        node = entry.site.node
        prefix = f"{node.name or node.output[0]}_shape_{label}"
        node.input[entry.operand] = compiled_before(model, entry.site, list(entry.items), prefix)
        shown = "[" + ", ".join(str(item) for item in entry.items) + "]"
        details.append(f"computed {entry.reason}: shape {shown}")
    return details


__all__ = ["compiled_before", "compute_shapes", "computed_element"]
