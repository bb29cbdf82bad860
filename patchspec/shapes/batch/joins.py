"""A Concat that meets a tensor made at the exported batch: the constant that made it, found and rewritten.

A vision transformer prepends its class token to the patches: ``cls.expand(B, -1, -1)`` traced at
batch 1 is an Expand of ``[1, 1, D]`` to the constant ``[1, 1, D]`` (or a Tile by ``[1, 1, 1]``, or a
ConstantOfShape ``[1, 1, D]`` for padding), then a Concat with the patches ``[B, P, D]`` on axis 1.
At batch 4 the Concat cannot run: ``[1, 1, D]`` against ``[4, P, D]``. The element of the Expand's
shape (the Tile's repeats, the ConstantOfShape's shape) on the batch axis is the exported batch, and
is rewritten to the new one. Where no op made it (the exporter folded the class token into a constant
``[1, 1, D]``), a Tile repeats it to the new batch before the Concat (by the batch input's dim,
computed at run time, for a symbolic batch). A maker's shape at a symbolic batch, or computed at run
time, is undecided (apply --no-verify refuses it).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.model.graph import NodeSite, all_names, bodies, fresh_name
from patchspec.shapes.annotations import shape_dims, write_dim
from patchspec.shapes.batch.computed import compiled_before
from patchspec.shapes.batch.counts import arange_coordinates, indexes_the_batch
from patchspec.shapes.batch.ranges import rewrite_range
from patchspec.shapes.batch.states import (
    Deciding,
    batch_expression,
    follow_batch_at,
    maker_values,
    rewrite_maker_element,
)
from patchspec.shapes.batch.trace import PointInputs, Tiling, Undecided, sizes_of
from patchspec.shapes.known import Known

#: element types a folded token may have: an integer one read as coordinates may be a folded arange
_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})
#: ops that make a tensor of a shape they are given: the operand that holds it
_MAKERS = {"Expand": 1, "Tile": 1, "ConstantOfShape": 0}


def settle_join(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
    """Rewrite the maker of each Concat input that stays at the exported batch where another carries
    the batch; returns the inputs as they are after the rewrite, so that the evaluation goes on."""
    node = site.node
    first = [sizes_of(k) for k in inputs[tracker.a]]
    second = [sizes_of(k) for k in inputs[tracker.b]]
    if len(node.input) < 2 or any(s is None or len(s) < 2 for s in (*first, *second)):
        return None
    rank = len(first[0] or ())
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % rank
    found = _batch_axis(tracker, first, second, axis)
    if found is None:
        return None
    batch_axis, carrier = found
    old = [sizes_of(k) for k in inputs[0]]
    replaced = [list(point) for point in inputs]
    for i, name in enumerate(node.input):
        dims_a, dims_b, dims_old = first[i], second[i], old[i]
        if i == carrier or dims_a is None or dims_b is None or dims_old is None:
            continue
        if dims_a[batch_axis] != dims_b[batch_axis] or dims_a[batch_axis] != (old[carrier] or ())[batch_axis]:
            continue  # follows the batch, or never fitted the carrier: not made at the exported batch
        if not (
            rewrite_maker(tracker, site, name, batch_axis, rank)
            or rewrite_range(tracker, site, name, batch_axis)
            or repeat_one_sample(tracker, site, i, batch_axis, rank)
        ):
            return None
        for p, point in enumerate(replaced):
            size = sizes_of(inputs[p][carrier])
            if size is None:
                return None
            dims = list(sizes_of(point[i]) or ())
            dims[batch_axis] = size[batch_axis]
            point[i] = Known(point[i].dtype, tuple(dims), None)
        tracker.decided.add(id(node))
    return replaced if id(node) in tracker.decided else None


def _batch_axis(
    tracker: Deciding, first: list[tuple[int, ...] | None], second: list[tuple[int, ...] | None], axis: int
) -> tuple[int, int] | None:
    """(the axis, the input) where one input of the Concat carries the batch, other than the Concat's own."""
    wa, wb = tracker.trace.sizes[tracker.a], tracker.trace.sizes[tracker.b]
    for i, (one, two) in enumerate(zip(first, second)):
        if one is None or two is None or len(one) != len(two):
            continue
        moving = [t for t, (x, y) in enumerate(zip(one, two)) if x != y]
        if len(moving) == 1 and moving[0] != axis and one[moving[0]] * wb == two[moving[0]] * wa:
            return moving[0], i
    return None


def repeat_one_sample(tracker: Deciding, site: NodeSite, operand: int, batch_axis: int, rank: int) -> bool:
    """Record a Tile of input ``operand`` of ``site.node`` (a Concat, a ScatterElements, ...) to the new
    batch, where it holds one sample's rows computed from constants alone (the old batch is 1); False
    otherwise (an undecided was recorded if it applies)."""
    trace, node = tracker.trace, site.node
    if id(node) in tracker.decided or trace.b1 != 1:
        return False  # a maker was found and could not be rewritten: undecided already says why
    if tracker.operands.reads_an_input(site, node.input[operand]):
        return False  # one sample's rows computed from the inputs (sample 0's?): repeating them could be wrong
    joined = f"{node.op_type} '{node.name or node.output[0]}'"
    if node.op_type == "Concat" and arange_coordinates(tracker, site, operand, batch_axis):
        return True
    if tracker.evaluator.at(node.input[operand])[0].dtype not in _FLOATS and indexes_the_batch(tracker, node.output[0]):
        trace.undecided.append(
            Undecided(
                f"undecided: {joined} joins '{node.input[operand]}', an integer constant of one sample's rows, "
                "with a tensor that carries the batch; it may be indices (an arange over the batch folded at "
                "the exported batch), which repeating would make wrong: export the model with the batch dynamic "
                "there, or without constant folding"
            )
        )
        tracker.decided.add(id(node))
        return False
    repeats = batch_expression(tracker) if trace.symbolic else trace.b2
    if repeats is None:
        trace.undecided.append(
            Undecided(
                f"undecided: {joined} joins '{node.input[operand]}', one sample's rows, with a tensor that "
                "carries the batch; a symbolic batch there needs it repeated by the batch at run time, which "
                "needs opset 11 or later: export the model with the batch dynamic there"
            )
        )
        tracker.decided.add(id(node))
        return False
    reason = f"{joined}: input '{node.input[operand]}' holds one sample's rows; repeated {repeats} times on axis {batch_axis}"
    trace.tilings.append(Tiling(site, operand, batch_axis, rank, repeats, reason))
    return True


def tile_inputs(model: onnx.ModelProto, tilings: list[Tiling], label: str) -> list[str]:
    """Apply the trace's tilings: a Tile (and its repeats) right before each Concat; one line each."""
    if not tilings:
        return []
    taken = all_names(model)
    graphs: dict[int, tuple[onnx.GraphProto, list[tuple[onnx.NodeProto, onnx.NodeProto]]]] = {}
    details = []
    for tiling in tilings:
        node, source = tiling.site.node, tiling.site.node.input[tiling.operand]
        repeats: list[int | str] = [1] * tiling.rank
        repeats[tiling.axis] = tiling.repeats
        names = [fresh_name(wanted, taken) for wanted in (f"{source}_repeats_{label}", f"{source}_{label}")]
        taken.update(names)
        if isinstance(tiling.repeats, str):  # a symbolic batch: the repeats computed before the reader
            names[0] = compiled_before(model, tiling.site, repeats, names[0])
            taken.update(all_names(model))
        else:
            tiling.site.graph.initializer.append(numpy_helper.from_array(np.array(repeats, np.int64), names[0]))
        node.input[tiling.operand] = names[1]  # before the nodes are copied below
        _undeclare_carried(node, tiling)
        tile = helper.make_node("Tile", [source, names[0]], [names[1]], name=names[1])
        graphs.setdefault(id(tiling.site.graph), (tiling.site.graph, []))[1].append((node, tile))
        details.append(f"tiled {tiling.reason}: Tile '{tile.name}' {repeats}")
    for graph, additions in graphs.values():
        for reader, tile in additions:  # found by identity: a NodeSite's position counts subgraph nodes too
            graph.node.insert(next(j for j, node in enumerate(graph.node) if node is reader), tile)
    return details


def _undeclare_carried(node: onnx.NodeProto, tiling: Tiling) -> None:
    """A Loop's carried state now repeated to the batch: its body declared the one sample's size on that
    axis (``[1, 6]``), which onnxruntime would trust; the dim is made unknown there and in the body's
    output of the next state."""
    body = dict(bodies(node)).get("body") if node.op_type == "Loop" else None
    if body is None or tiling.operand < 2:
        return
    for infos, at in ((body.input, tiling.operand), (body.output, tiling.operand - 1)):
        dims = shape_dims(infos[at]) if at < len(infos) and infos[at].type.HasField("tensor_type") else []
        if tiling.axis < len(dims):
            write_dim(dims[tiling.axis], None)


def rewrite_maker(tracker: Deciding, site: NodeSite, name: str, batch_axis: int, rank: int) -> bool:
    """Record the rewrite of the batch element of what made ``name``; False where none can be made. A
    maker of constants alone whose shape no constant can say (a symbolic batch, a shape computed from
    constants) made one sample's rows: ``repeat_one_sample`` repeats them instead."""
    producer = tracker.evaluator.producer.get(name)
    if producer is None or producer.node.op_type not in _MAKERS or producer.node.domain not in ("", "ai.onnx"):
        return False
    operand = _MAKERS[producer.node.op_type]
    if len(producer.node.input) <= operand:
        return False
    values = maker_values(tracker, producer, operand)
    element = batch_axis + len(values) - rank if producer.node.op_type == "Expand" else batch_axis
    sources = tracker.operands.sources(producer, operand)
    source = sources[element] if sources and 0 <= element < len(sources) else None
    if (source is None or tracker.trace.symbolic) and not tracker.operands.reads_an_input(site, name):
        return False  # a constant of one sample: repeated, not undecided
    met = f"{site.node.op_type} '{site.node.name or site.node.output[0]}'"
    verb = "joined" if site.node.op_type == "Concat" else "met"
    remedy = f"the size taken at run time from the tensor that carries the batch, which {met} meets it with"
    done = rewrite_maker_element(tracker, producer, (operand, element), f"'{name}'", f", {verb} by {met}", remedy)
    if done == "undecided":
        tracker.decided.add(id(site.node))
    if done == "rewritten":
        follow_batch_at(tracker, name, batch_axis)
    return done == "rewritten"


__all__ = ["repeat_one_sample", "rewrite_maker", "settle_join", "tile_inputs"]
