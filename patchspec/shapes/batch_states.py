"""The starting state of a recurrent op, made at the exported batch: found and rewritten.

A recurrent op (RNN, GRU, LSTM) reads its starting state as ``[directions, batch, hidden]`` (layout
0; ``[batch, directions, hidden]`` in layout 1). TorchScript traces ``torch.zeros(layers,
x.size(0), hidden)`` as a ConstantOfShape of the constant shape ``[layers, 1, hidden]``: the batch of
the export, baked. At batch 4 onnxruntime then refuses the op ("Input initial_h must have shape
{1,4,16}"). The batch element of that shape constant is rewritten to the new batch; a symbolic batch,
or a shape computed at run time, is undecided (apply --no-verify refuses it). A state that is itself
a constant is no shape to rewrite: ``batch_pinned`` refuses it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx

from patchspec.model.graph import NodeSite
from patchspec.shapes.batch_operands import Operands
from patchspec.shapes.batch_trace import BatchTrace, PointInputs, Rewrite, Undecided, sizes_of
from patchspec.shapes.evaluate import ShapeEvaluator

#: recurrent ops, with the inputs that hold a starting state
RECURRENT = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6)}
_STATE_NAMES = {5: "initial_h", 6: "initial_c"}


class Deciding(Protocol):
    """What of the tracker (``batch_tracker._Tracker``) this module reads and records into."""

    trace: BatchTrace
    evaluator: ShapeEvaluator
    operands: Operands
    decided: set[int]
    a: int
    b: int

    def carrier(self, inputs: PointInputs) -> tuple[int, int] | None: ...


def layout_axes(node: onnx.NodeProto) -> tuple[int, int]:
    """(the input's batch axis, the state's batch axis) in the node's layout."""
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    return (0, 0) if layout else (1, 1)


def settle_states(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
    """Rewrite, or report as undecided, each starting state made by a ConstantOfShape at the old batch.
    Returns no replacement inputs, as the tracker's handlers do: the op's outputs follow its input."""
    node = site.node
    x_axis, at = layout_axes(node)
    carried = tracker.carrier(inputs)
    if carried is None or carried[0] != x_axis:
        return None  # the batch runs along the sequence, or nowhere: batch_pinned judges it
    trace = tracker.trace
    for operand in RECURRENT[node.op_type]:
        if len(node.input) <= operand or not node.input[operand]:
            continue
        first, second = sizes_of(inputs[tracker.a][operand]), sizes_of(inputs[tracker.b][operand])
        producer = tracker.evaluator.producer.get(node.input[operand])
        if first is None or second is None or len(first) != 3 or first[at] != second[at] or producer is None:
            continue  # the state follows the batch, or is not made here
        if producer.node.op_type != "ConstantOfShape" or producer.node.domain not in ("", "ai.onnx"):
            continue
        shape = tracker.evaluator.at(producer.node.input[0])[0].value
        values = [] if shape is None else [int(v) for v in np.asarray(shape).reshape(-1)]
        if len(values) != 3 or values[at] != trace.b1:
            continue
        sources = tracker.operands.sources(producer, 0)
        source = sources[at] if sources and at < len(sources) else None
        made = f"ConstantOfShape '{producer.node.name or producer.node.output[0]}'"
        state = f"the starting state {_STATE_NAMES[operand]} of {node.op_type} '{node.name or node.output[0]}'"
        tracker.decided.add(id(node))
        if source is None or trace.symbolic:
            why = "a computed shape" if source is None else "a symbolic batch"
            trace.undecided.append(
                Undecided(
                    f"undecided: {made} makes {state} with shape {values}, element {at} the exported batch; "
                    f"{why} there needs the state sized from the input at run time: export the model with "
                    "the state as an input, or without one (zeros)"
                )
            )
            continue
        reader, reader_operand, element = source
        written = values[at] // trace.b1 * trace.b2
        reason = f"{made}: element {at} is the batch ({values[at]} -> {written}), making {state}"
        trace.rewrites.append(Rewrite(reader, reader_operand, ((element, written),), reason))
    return None


__all__ = ["RECURRENT", "layout_axes", "settle_states"]
