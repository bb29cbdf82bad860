"""Whether a model whose batch is already dynamic runs at a new batch as exported.

set_batch leaves the constants of a dynamic-batch model alone when it runs at the new batch as it
is (at batch 1 a channel of 1 looks like the batch). "Runs" is not enough: an export can declare a
dynamic batch and still bake the exported one into a Slice's bounds (``x[:1]``), a Resize's
``sizes``, a recurrent op's starting state or a Reshape's shape built from pieces (sequence-first
attention: ``Concat(Shape(x)[1:2], [1], [3], [192])``) or an arange over the batch (a Range of
constants), and run at batch 4 giving one sample, or be
refused by onnxruntime only. This finds those from the evaluation as it is: then set_batch decides each
constant.
"""

from __future__ import annotations

from collections.abc import Collection

import onnx

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.operands import Operands
from patchspec.shapes.batch.ranges import ranges_met
from patchspec.shapes.batch.states import RECURRENT, layout_axes
from patchspec.shapes.batch.trace import BatchTrace, product, sizes_of


def not_as_exported(model: onnx.ModelProto, trace: BatchTrace, batch_names: Collection[str]) -> list[str]:
    """Why the model, evaluated as it is (``trace_batch(..., decide=False)``), does not carry the batch
    through: an output declared with a batch name that stays one size, a recurrent op whose starting
    state does not follow its input's batch. Empty: it runs at the new batch as exported."""
    found = []
    for output in model.graph.output:
        for axis, dim in enumerate(read_dims(output) or []):
            if dim in batch_names and isinstance(trace.batch_dim(output.name, axis), int):
                found.append(f"output '{output.name}' declares '{dim}' on axis {axis} but keeps one size there")
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and _loses_elements(trace, node):
            found.append(f"Reshape '{node.name or node.output[0]}' asks for another number of elements than it gets")
        if node.op_type not in RECURRENT or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        x_axis, at = layout_axes(node)
        if not isinstance(trace.batch_dim(node.input[0], x_axis), tuple):
            continue
        for operand in RECURRENT[node.op_type]:
            if len(node.input) > operand and node.input[operand]:
                if isinstance(trace.batch_dim(node.input[operand], at), int):
                    found.append(f"{node.op_type} '{node.name or node.output[0]}' starts from a state of one batch")
    if trace.evaluator is not None:
        found.extend(ranges_met(model, trace, Operands(model, trace.evaluator)))
    return found


def _loses_elements(trace: BatchTrace, node: onnx.NodeProto) -> bool:
    """A Reshape whose output, as ONNX's inference gives it, holds as many elements as its data at the
    exported batch and another number at another batch: onnxruntime refuses it there (a batch baked
    into a Concat of shape pieces). Where the counts differ at the exported batch too, the sizes the
    evaluation chose for other dims do not fit the model, which says nothing of the batch."""
    if len(node.input) < 2 or not node.output:
        return False
    fits = []
    for data, made in zip(trace.at(node.input[0]), trace.at(node.output[0])):
        one, two = sizes_of(data), sizes_of(made)
        if one is None or two is None:
            return False
        fits.append(product(one) == product(two))
    # the exported batch, the new one and the witness: the point where other dims moved says nothing
    batch_points = [fits[0], fits[1], fits[-1]] if len(fits) > 2 else fits
    return bool(batch_points) and batch_points[0] and not all(batch_points)


__all__ = ["not_as_exported"]
