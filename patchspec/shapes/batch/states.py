"""The starting state of a recurrent op, made at the exported batch: found and rewritten.

A recurrent op (RNN, GRU, LSTM) reads its starting state as ``[directions, batch, hidden]`` (layout
0; ``[batch, directions, hidden]`` in layout 1). TorchScript traces ``torch.zeros(layers,
x.size(0), hidden)`` as a ConstantOfShape of the constant shape ``[layers, 1, hidden]``: the batch of
the export, baked. At batch 4 onnxruntime then refuses the op ("Input initial_h must have shape
{1,4,16}"). The batch element of that shape constant is rewritten to the new batch; a symbolic batch,
or a shape computed at run time, is undecided (apply --no-verify refuses it). A state that is itself
a constant of one sample (dynamo folds the zeros) is repeated to the new batch by a Tile (by the
batch input's dim at run time for a symbolic batch); one of several samples is no shape to rewrite:
``pinned`` refuses it.
"""

from __future__ import annotations

from typing import Protocol

import onnx

from patchspec.model.graph import NodeSite, bodies
from patchspec.shapes import expressions
from patchspec.shapes.batch.operands import Operands
from patchspec.shapes.batch.trace import BatchTrace, PointInputs, Rewrite, Tiling, Undecided, ints_of, sizes_of
from patchspec.shapes.batch.transposes import Walked
from patchspec.shapes.compiler import MIN_OPSET
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

#: recurrent ops, with the inputs that hold a starting state
RECURRENT = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6)}
_STATE_NAMES = {5: "initial_h", 6: "initial_c"}
#: the input of RNN, GRU and LSTM that holds each sample's sequence length ([batch])
LENGTHS = 4


class Deciding(Protocol):
    """What of the tracker (``batch_tracker._Tracker``) this module reads and records into."""

    trace: BatchTrace
    evaluator: ShapeEvaluator
    operands: Operands
    decided: set[int]
    a: int
    b: int

    def carrier(self, inputs: PointInputs) -> tuple[int, int] | None: ...


def batch_expression(tracker: Deciding) -> str | None:
    """The symbolic batch as an expression of the first batch input's dim (``dim(x, 0)``), where the
    model's opset computes shapes; None otherwise."""
    if not tracker.trace.batch_axes or tracker.evaluator.opset() < MIN_OPSET:
        return None
    name, axis = tracker.trace.batch_axes[0]
    return f"dim({expressions.quote_tensor(name)}, {axis})"


def follow_batch_at(tracker: Deciding, name: str, axis: int) -> None:
    """``name`` at each point with that point's batch along ``axis`` (values unknown): what the model
    computes once a constant made for one sample is counted or made for the batch, so that its
    declaration follows the batch."""
    row = tracker.evaluator.known.get(name)
    if row is None:
        return
    followed = []
    for size, point in zip(tracker.trace.sizes, row):
        dims = list(point.shape) if point.shape is not None else None
        if dims is not None and 0 <= axis < len(dims):
            dims[axis] = size
        followed.append(Known(point.dtype, None if dims is None else tuple(dims), None))
    tracker.evaluator.known[name] = followed


def maker_values(tracker: Deciding, maker: NodeSite, operand: int) -> list[int]:
    """The shape (or repeats) ``maker`` reads as input ``operand``, at the exported batch; [] if unknown."""
    value = tracker.evaluator.at(maker.node.input[operand])[0].value
    return [] if value is None else ints_of(value)


def rewrite_maker_element(
    tracker: Deciding, maker: NodeSite, where: tuple[int, int], use: str, tail: str, remedy: str
) -> str | None:
    """Rewrite element ``where[1]`` of the constant that ``maker`` (a ConstantOfShape, Expand or Tile)
    reads as input ``where[0]``, from the exported batch to the new one: "rewritten"; "undecided" (recorded)
    where it holds the exported batch but no constant can say the new one (a computed shape, a symbolic
    batch); None where it is not the exported batch. ``use`` names what the maker makes, ``tail`` ends the
    rewrite's reason, ``remedy`` is what an undecided point needs."""
    operand, element = where
    trace, values = tracker.trace, maker_values(tracker, maker, operand)
    if not 0 <= element < len(values) or values[element] != trace.b1:
        return None
    sources = tracker.operands.sources(maker, operand)
    source = sources[element] if sources and element < len(sources) else None
    made = f"{maker.node.op_type} '{maker.node.name or maker.node.output[0]}'"
    if source is None or trace.symbolic:
        why = "a computed shape" if source is None else "a symbolic batch"
        trace.undecided.append(
            Undecided(
                f"undecided: {made} makes {use} at the exported batch ({values}, element {element}); "
                f"{why} there needs {remedy}"
            )
        )
        return "undecided"
    reader, reader_operand, at = source
    written = values[element] // trace.b1 * trace.b2
    reason = f"{made}: element {element} is the batch ({values[element]} -> {written}){tail}"
    trace.rewrites.append(Rewrite(reader, reader_operand, ((at, written),), reason))
    return "rewritten"


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
    for operand in RECURRENT[node.op_type]:
        if len(node.input) <= operand or not node.input[operand]:
            continue
        first, second = sizes_of(inputs[tracker.a][operand]), sizes_of(inputs[tracker.b][operand])
        producer = tracker.evaluator.producer.get(node.input[operand])
        if first is None or second is None or len(first) != 3 or first[at] != second[at]:
            continue  # the state follows the batch
        state = f"the starting state {_STATE_NAMES[operand]} of {node.op_type} '{node.name or node.output[0]}'"
        if (
            producer is None
            or producer.node.op_type != "ConstantOfShape"
            or producer.node.domain not in ("", "ai.onnx")
        ):
            _repeat_constant_state(tracker, site, operand, (at, first[at]), state)
            continue
        values = maker_values(tracker, producer, 0)
        remedy = "the state sized from the input at run time: export the model with the state as an input"
        if len(values) == 3 and rewrite_maker_element(tracker, producer, (0, at), state, f", making {state}", remedy):
            tracker.decided.add(id(node))
    _repeat_lengths(tracker, site, inputs)
    return None


def _repeat_lengths(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> None:
    """``sequence_lens`` ([batch]) that keeps its size at every batch: a static export folds the one
    sample's full length into a constant ``[T]``, which onnxruntime refuses at batch 4 ("Input
    sequence_lens must have shape {4}"). One sample's length made from constants is repeated like a
    starting state; several samples' are undecided."""
    node = site.node
    if len(node.input) <= LENGTHS or not node.input[LENGTHS]:
        return
    first, second = sizes_of(inputs[tracker.a][LENGTHS]), sizes_of(inputs[tracker.b][LENGTHS])
    if first is None or second is None or len(first) != 1 or first != second:
        return  # the lengths follow the batch
    lengths = f"the sequence lengths (sequence_lens) of {node.op_type} '{node.name or node.output[0]}'"
    _repeat_constant_state(tracker, site, LENGTHS, (0, first[0]), lengths, rank=1)


def _repeat_constant_state(
    tracker: Deciding, site: NodeSite, operand: int, at: tuple[int, int], state: str, rank: int = 3
) -> None:
    """A starting state made from constants alone is one sample's state, repeated to the new batch by a
    Tile: dynamo folds ``torch.zeros(1, B, H)`` at batch 1 into a constant ``[1, 1, H]``, TorchScript
    keeps ``h0.expand(-1, B, -1)`` of a parameter as an Expand of constants. A state of several
    samples at every batch, or one computed from an input, is undecided: onnxruntime refuses a state
    whose batch is not the input's (at a symbolic batch before opset 11 ``pinned`` refuses it)."""
    trace, node = tracker.trace, site.node
    axis, samples = at
    if samples == 1 and trace.b1 == 1 and not tracker.operands.reads_an_input(site, node.input[operand]):
        repeats = batch_expression(tracker) if trace.symbolic else trace.b2
        if repeats is None:
            return  # before opset 11 nothing computes the batch: batch_pinned refuses it
        source = "constant" if tracker.operands.is_constant(site, operand) else "tensor made from constants"
        what = "lengths" if operand == LENGTHS else "state"
        reason = f"{state}: the {source} '{node.input[operand]}' holds one sample's {what}; repeated {repeats} times"
        trace.tilings.append(Tiling(site, operand, axis, rank, repeats, reason))
        tracker.decided.add(id(node))
        return
    trace.undecided.append(
        Undecided(
            f"undecided: {state} holds {samples} sample(s) at every batch (axis {axis} of "
            f"'{node.input[operand]}'), but the op needs the input's batch there; "
            "export the model with the state as an input, or sized from the input (torch.zeros(1, x.size(0), H))"
        )
    )


def repeat_loop_states(findings: Walked) -> None:
    """A Loop's carried value that starts as a constant of one sample (tf2onnx folds a Keras RNN's zero
    state at a static batch 1 into ``[1, H]``) while the body's next value follows the batch, or fails
    at every batch but the old one (a Gemm whose bias follows the batch and whose state does not): the
    state is repeated to the batch by a Tile, as for an RNN op's starting state, and set_batch follows
    the batch again. A state whose shape changes after the first step fails in onnxruntime where the
    body's declared shapes let it reuse a buffer ("Shape mismatch attempting to re-use buffer {1,18}
    != {4,18}"). Before opset 11 a symbolic batch has nothing to size the Tile: undecided."""
    trace, index = findings.trace, findings.index
    if trace.b1 != 1 or index is None or not trace.batch_axes:
        return
    for _, site in findings.sites:
        node = site.node
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue  # told by the type first: reading attributes of every node costs a walk of them all
        body = dict(bodies(node)).get("body")
        if body is None:
            continue
        passed = {info.name for info in body.input}  # a value the body passes on unchanged is no state
        for k, start in enumerate(node.input[2:]):
            after = body.output[1 + k].name if 1 + k < len(body.output) else None
            axis = _state_axis(findings, start, after) if after is not None and after not in passed else None
            if axis is not None and index.constant_source(start, site.scopes) is not None:
                _tile_loop_state(findings, site, 2 + k, axis)


def _state_axis(findings: Walked, start: str, after: str) -> tuple[int, int, bool] | None:
    """(axis, rank, whether the body runs) of the one sample's axis of 1 in ``start`` that the body's next
    value ``after`` gives the batch, or fails on at the witnesses (then ``start`` has one axis of 1); None
    otherwise."""
    first, second = findings.at_witnesses(start)
    if first is None or first != second or 1 not in first:
        return None
    axis = follows = findings.batch_axis(after)
    if axis is None and findings.at_witnesses(after) == (None, None) and first.count(1) == 1:
        at_one = sizes_of(findings.evaluator.at(after)[0])
        axis = first.index(1) if at_one == first else None  # the next state, like the start, at batch 1
    if axis is None or axis >= len(first) or first[axis] != 1:
        return None
    return axis, len(first), follows is not None


def _tile_loop_state(findings: Walked, site: NodeSite, operand: int, where: tuple[int, int, bool]) -> None:
    """Record the Tile of the Loop's starting value ``operand`` (``where``: axis, rank, and whether the body
    follows the batch without it) to the batch: by the batch input's dim at run time, so that the model
    is followed again at any batch; before opset 11, where nothing computes that dim, by the new batch
    after the last walk where the body runs without it, and undecided where it does not."""
    trace, (axis, rank, runs) = findings.trace, where
    name, label = site.node.input[operand], f"Loop '{site.node.name or site.node.output[0]}'"
    reason = f"the starting value '{name}' that {label} carries holds one sample's state"
    first, at = trace.batch_axes[0]
    if findings.evaluator.opset() >= MIN_OPSET:
        repeats = f"dim({expressions.quote_tensor(first)}, {at})"
        trace.loop_states.append(Tiling(site, operand, axis, rank, repeats, f"{reason}; repeated {repeats} times"))
    elif runs and not trace.symbolic:
        trace.tilings.append(Tiling(site, operand, axis, rank, trace.b2, f"{reason}; repeated {trace.b2} times"))
    else:
        trace.undecided.append(
            Undecided(
                f"undecided: {reason}, and its body needs the batch there; before opset {MIN_OPSET} nothing "
                "can size a Tile to the batch at run time: export the model with a dynamic batch or a newer opset"
            )
        )


__all__ = [
    "RECURRENT",
    "batch_expression",
    "follow_batch_at",
    "layout_axes",
    "maker_values",
    "repeat_loop_states",
    "rewrite_maker_element",
    "settle_states",
]
