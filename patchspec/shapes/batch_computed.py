"""A symbolic batch where no constant can say it: the shape computed from the batch at run time.

For a symbolic batch a shape element proved to be the batch is written as ``-1`` (inferred) or
``0`` (copied from the data's dim). Neither works where the shape already holds a ``-1`` and the
batch is not at the data's own axis: a sequence-first attention reshapes ``[T*B, 16]`` to
``[-1, 1, 16]`` (``[T, B, 16]`` at batch 1), torch dynamo's head split ``[T, B, 48]`` to
``[-1, 1, 3, 16]``. The element is then computed from the batch input's dim (``dim(src, 1)``, times
the whole number of batches the element holds), compiled to ``Shape``/``Gather``/``Concat`` nodes
right before the node (``compiler.ShapeCompiler``). Only where every other element is the same at
every size tried and the model's opset computes shapes (11+); else the point stays undecided, with
the spec lines that settle it by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec.model.graph import Namer, NodeSite, all_names, default_opset
from patchspec.shapes import expressions
from patchspec.shapes.batch_operands import steady_except
from patchspec.shapes.batch_states import Deciding
from patchspec.shapes.batch_trace import Computed, PointInputs, int64_known, ints_of, with_element
from patchspec.shapes.compiler import MIN_OPSET, ShapeCompileError, ShapeCompiler, TensorIndex


def computed_element(
    tracker: Deciding, site: NodeSite, inputs: PointInputs, at: tuple[int, int, int]
) -> PointInputs | None:
    """Record element ``i`` of input ``operand`` (``at``: operand, i, the data's batch axis), proved to hold
    the batch (times a whole number), computed from the batch input's dim; returns the inputs with it at
    each point's batch, or None where it cannot be (other elements change with other dims)."""
    operand, i, _ = at
    trace, node = tracker.trace, site.node
    steady = steady_except(inputs, operand, i)
    if steady is None or not trace.batch_axes or tracker.evaluator.opset() < MIN_OPSET:
        return None
    per_batch, rest = divmod(steady[i], trace.b1)
    if rest or per_batch <= 0:
        return None
    name, axis = trace.batch_axes[0]
    dim = f"dim({expressions.quote_tensor(name)}, {axis})"
    item = dim if per_batch == 1 else f"{dim} * {per_batch}"
    items = tuple(item if j == i else value for j, value in enumerate(steady))
    label = f"{node.op_type} '{node.name or node.output[0]}'"
    reason = f"{label}: element {i} is the batch ({steady[i]} -> {item}), computed for the symbolic batch"
    trace.computed.append(Computed(site, operand, items, reason))
    tracker.decided.add(id(node))
    replaced = [list(point) for point in inputs]
    for p, point in enumerate(replaced):
        values = ints_of(point[operand].value) if point[operand].value is not None else list(steady)
        point[operand] = int64_known(with_element(values, i, per_batch * trace.sizes[p]), like=point[operand])
    return replaced


def compute_shapes(model: onnx.ModelProto, computed: Sequence[Computed], label: str) -> list[str]:
    """Apply the trace's computed shapes: nodes that compute each one, inserted before its reader."""
    if not computed:
        return []
    namer = Namer(all_names(model))
    details = []
    for entry in computed:
        site, node = entry.site, entry.site.node
        prefix = f"{node.name or node.output[0]}_shape_{label}"
        compiler = ShapeCompiler(TensorIndex(list(site.scopes)), default_opset(model), namer, prefix)
        try:
            compiled = compiler.compile(list(entry.items))
        except ShapeCompileError as exc:  # pragma: no cover - the trace checked the opset and the dims
            raise AssertionError(f"set_batch could not compute {entry.reason}: {exc.message}") from exc
        if compiled.constant is not None:
            name = namer.fresh(prefix)
            site.graph.initializer.append(numpy_helper.from_array(np.array(compiled.constant, np.int64), name))
            node.input[entry.operand] = name
        else:
            assert compiled.output is not None
            site.graph.initializer.extend(compiled.initializers)
            position = next(j for j, each in enumerate(site.graph.node) if each is node)
            for offset, made in enumerate(compiled.nodes):
                site.graph.node.insert(position + offset, made)
            node.input[entry.operand] = compiled.output
        shown = "[" + ", ".join(str(item) for item in entry.items) + "]"
        details.append(f"computed {entry.reason}: shape {shown}")
    return details


__all__ = ["compute_shapes", "computed_element"]
