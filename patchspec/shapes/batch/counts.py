"""An arange over the batch that the exporter folded into a constant: counted again at the new batch.

``h[torch.arange(B), i]`` exported at batch 1 holds ``arange(1)`` as the constant ``[0]``.
TorchScript indexes the flattened rows, ``Flatten(h)[[0] * T + i]``, with ``T`` still taken from a
Shape; a flat index written by hand (``h.reshape(B * T, D)[torch.arange(B) * T + i]``) folds the
step too (``[0] + i``, TorchScript and dynamo alike); dynamo's GatherND joins a coordinate column
``[[0]]`` with ``i``. At batch 4 the models run, and every sample reads sample 0's rows.

The step is recovered from the rows the index reads. Where the indexed axis holds the samples'
rows one sample after another (a Reshape or Flatten merged ``[B, T, ...]`` batch first, so ``B * T``
rows at every batch tried), sample ``s``'s rows start at ``s * T``: the constant becomes
``arange(B) * T / m`` (``m``: the size a Mul on its way multiplies it by; 1 where none). Rows in any
other order (a sequence-first ``[T, B]`` merged), or an index that reaches no such rows, stay
undecided: apply --no-verify refuses them. For a symbolic batch the count is a Range up to the
batch input's dim, computed at run time (``count_samples``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from patchspec.model.graph import Namer, NodeSite, all_names, uses_of
from patchspec.shapes.batch.computed import compiled_before
from patchspec.shapes.batch.states import Deciding, batch_expression, follow_batch_at
from patchspec.shapes.batch.trace import Counting, PointInputs, Undecided, sizes_of
from patchspec.shapes.known import Known

#: ops that read coordinates into their data (input 0) from input 1; ops an index passes through on the way
_INDEXING = frozenset({"Gather", "GatherND", "GatherElements", "ScatterND", "ScatterElements"})
_ON_THE_WAY = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Add", "Sub", "Mul"})
#: ops that merge a tensor's leading axes into one (the samples' rows, one sample after another)
_MERGING = frozenset({"Reshape", "Flatten"})


def settle_folded(tracker: Deciding, site: NodeSite, operand: int, axis: int) -> bool:
    """An Add or Sub of indices that carry the batch and input ``operand``, an integer tensor of one element
    per sample of the exported batch along ``axis`` in steps from 0 (``[0]`` at batch 1) at every size tried,
    read as coordinates into the batch: an arange over the batch folded at the exported batch. Counted
    again where its step is found (True); recorded undecided where not. False where it is no such tensor."""
    node, trace = site.node, tracker.trace
    if node.op_type not in ("Add", "Sub"):
        return False
    values = [known.value for known in tracker.evaluator.at(node.input[operand])]
    if any(v is None or v.dtype.kind not in "iu" or v.ndim <= axis or v.shape[axis] != trace.b1 for v in values):
        return False  # not a small integer tensor known at every size tried, one element per sample
    if not all(_stepped(np.asarray(value), axis) is not None for value in values):
        return False
    if not indexes_the_batch(tracker, node.output[0]):
        return False
    tracker.decided.add(id(node))
    counting = _counting(tracker, site, operand, axis)
    if counting is not None:
        trace.countings.append(counting)
        if counting.site is not site:  # a Mul on the way: its product follows the batch too
            follow_batch_at(tracker, counting.site.node.output[0], axis)
        return True
    shown = np.asarray(values[0]).reshape(-1).tolist()[:8]
    trace.undecided.append(
        Undecided(
            f"undecided: {node.op_type} '{node.name or node.output[0]}' adds '{node.input[operand]}' ({shown}), one "
            "element per sample of the exported batch, to indices into the batch: an arange over the batch folded "
            "at the exported batch (arange(B) * T + i), and the indices read no rows merged one sample after "
            "another that would give its step T, so no constant can be rewritten: export the model with the "
            "batch dynamic"
        )
    )
    return False


def _counting(tracker: Deciding, site: NodeSite, operand: int, axis: int) -> Counting | None:
    """The count that replaces the folded constant behind input ``operand``, or None where its step is
    not found (no merged rows, a Sub's subtrahend, a constant not of this form, no batch to count by)."""
    trace, node = tracker.trace, site.node
    rows = _rows_per_sample(tracker, node.output[0])
    behind = _constant_behind(tracker, site, operand)
    if rows is None or behind is None or (node.op_type == "Sub" and operand != 0):
        return None
    holder, slot, times = behind
    constant = tracker.operands.index.constant(holder.node.input[slot], holder.scopes)
    added = tracker.evaluator.at(node.input[operand])[0].value
    if constant is None or added is None or rows % times or np.ndim(constant) != np.ndim(added):
        return None
    array, step = np.asarray(constant), rows // times
    if _stepped(array, axis) != (-1 if trace.b1 == 1 else step):
        return None  # zeros at batch 1; at a batch above 1 the constant shows its own step, and it must be this one
    size = batch_expression(tracker) if trace.symbolic else trace.b2
    others = [d for k, d in enumerate(array.shape) if k != axis]
    if size is None or (isinstance(size, str) and any(d != 1 for d in others)):
        return None  # a symbolic batch is counted by a Range, reshaped: no other axis to broadcast along
    on_its_way = f" and {holder.node.op_type} '{holder.node.name or holder.node.output[0]}' multiplies it by {times}"
    counted = f"arange({size})" + (f" * {step}" if step != 1 else "")
    reason = (
        f"{node.op_type} '{node.name or node.output[0]}': '{holder.node.input[slot]}' is an arange over the batch "
        f"folded at the exported batch ({array.reshape(-1).tolist()[:8]}); the indices read {rows} rows per sample"
        f"{on_its_way if holder is not site else ''}, so it counts {counted}"
    )
    return Counting(holder, slot, axis, tuple(array.shape), step, size, array.dtype.str, reason)


def _stepped(array: np.ndarray, axis: int) -> int | None:
    """The step of ``array``, ``r * step`` in row ``r`` along ``axis`` (any step where it has one row);
    -1 for one row, None where it is not of that form."""
    rows = np.moveaxis(array, axis, 0).reshape(array.shape[axis], -1).astype(np.int64)
    if rows.shape[0] == 1:
        return -1 if not np.any(rows) else None
    step = rows[1] - rows[0]
    if not np.all(step == step[0]) or not all(np.array_equal(row, r * step) for r, row in enumerate(rows)):
        return None
    return int(step[0])


def _constant_behind(tracker: Deciding, site: NodeSite, operand: int) -> tuple[NodeSite, int, int] | None:
    """(the node that reads the folded constant, the input it reads it as, the size it is multiplied by
    on its way): the operand itself (times 1), or a Mul of it by one size known at every point."""
    name = site.node.input[operand]
    if tracker.operands.index.constant_source(name, site.scopes) is not None:
        return site, operand, 1
    producer = tracker.evaluator.producer.get(name)
    if producer is None or producer.node.op_type != "Mul" or producer.node.domain not in ("", "ai.onnx"):
        return None
    for j, other in ((0, 1), (1, 0)):
        if tracker.operands.index.constant_source(producer.node.input[j], producer.scopes) is None:
            continue
        sizes = {_one_int(known.value) for known in tracker.evaluator.at(producer.node.input[other])}
        times = sizes.pop() if len(sizes) == 1 else None
        if times is not None and times > 0:
            return producer, j, times
    return None


def _one_int(value: np.ndarray | None) -> int | None:
    if value is None or np.size(value) != 1 or np.asarray(value).dtype.kind not in "iu":
        return None
    return int(np.asarray(value).reshape(-1)[0])


def _rows_per_sample(tracker: Deciding, name: str) -> int | None:
    """How many rows each sample holds in the axis that the indices ``name`` read (followed through copies
    and offsets to a Gather, or a GatherND with one coordinate column): the same whole number ``T`` at
    every point, the rows ``B * T`` merged batch first from a tensor whose leading axis is the batch."""
    found: set[int | None] = set()
    todo: list[tuple[str, onnx.NodeProto | None]] = [(name, None)]  # (a tensor, the node on the way that made it)
    seen = set()
    while todo:
        current, made = todo.pop()
        seen.add(current)
        for reader in tracker.operands.consumers.get(current, []):
            if reader.op_type in ("Gather", "GatherND") and len(reader.input) > 1 and reader.input[1] == current:
                found.add(_rows_read(tracker, reader, made))
            elif reader.op_type in _ON_THE_WAY:
                todo.extend((o, reader) for o in reader.output if o not in seen)
    return found.pop() if len(found) == 1 else None


def _rows_read(tracker: Deciding, reader: onnx.NodeProto, made: onnx.NodeProto | None) -> int | None:
    attributes = {a.name: a.i for a in reader.attribute}
    if attributes.get("axis", 0) != 0 or attributes.get("batch_dims", 0) != 0:
        return None
    if reader.op_type == "GatherND" and not _one_coordinate(tracker, reader.input[1], made):
        return None  # coordinates into more than the rows' axis
    data, merger = tracker.evaluator.known.get(reader.input[0]), tracker.evaluator.producer.get(reader.input[0])
    if data is None or merger is None or merger.node.op_type not in _MERGING:
        return None
    merged = tracker.evaluator.known.get(merger.node.input[0])
    per_sample: set[int] = set()
    for size, point, source in zip(tracker.trace.sizes, data, merged or []):
        rows, dims = (sizes_of(point) or (0,))[:1], sizes_of(source)
        if not rows or not dims or dims[0] != size or size <= 0 or rows[0] % size:
            return None
        if rows[0] // size != math.prod(dims[1 : len(dims) - len(sizes_of(point) or ()) + 1]):
            return None  # the rows are not the batch and the axes after it, merged in order
        per_sample.add(rows[0] // size)
    return per_sample.pop() if len(per_sample) == 1 and len(set(tracker.trace.sizes)) > 1 else None


def count_rows(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
    """A Gather (axis 0) or GatherND (one coordinate column) of constant indices, one per sample of the
    exported batch in steps of the rows each sample holds (``[0]`` at batch 1), into rows merged batch
    first: ``x.flatten(0, 1)[torch.arange(B) * T]``, each sample's first row, folded at the exported
    batch (TorchScript: ``Gather(Flatten(x), [0])``; dynamo: ``GatherND(Reshape(x), [[0]])``). At batch 4
    the model ran and gave sample 0's row alone. Counted again, ``arange(B) * T``; returns the inputs with
    the count at every point, so that the evaluation goes on. One row per sample is the batch axis
    itself: ``pinned`` judges constant indices there."""
    node, trace = site.node, tracker.trace
    if id(node) in tracker.decided or len(node.input) < 2:
        return None
    constant = tracker.operands.index.constant(node.input[1], site.scopes)
    array = None if constant is None else np.asarray(constant)
    if array is None or array.dtype.kind not in "iu" or array.ndim < 1 or array.shape[0] != trace.b1:
        return None
    if node.op_type == "GatherND" and array.shape[1:] != (1,):
        return None
    rows = _rows_read(tracker, node, None)
    size = batch_expression(tracker) if trace.symbolic else trace.b2
    if rows is None or rows < 2 or size is None or _stepped(array, 0) != (-1 if trace.b1 == 1 else rows):
        return None
    reason = (
        f"{node.op_type} '{node.name or node.output[0]}': its indices '{node.input[1]}' "
        f"({array.reshape(-1).tolist()[:8]}) pick each sample's first row of the {rows} rows per sample it "
        f"reads (an arange over the batch folded at the exported batch), so they count arange({size}) * {rows}"
    )
    trace.countings.append(Counting(site, 1, 0, tuple(array.shape), rows, size, array.dtype.str, reason))
    tracker.decided.add(id(node))
    replaced = [list(point) for point in inputs]
    for point, samples in zip(replaced, trace.sizes):
        counted = (np.arange(samples) * rows).reshape((samples,) + (1,) * (array.ndim - 1)).astype(array.dtype)
        point[1] = Known(point[1].dtype, tuple(counted.shape), counted)
    return replaced


def arange_coordinates(tracker: Deciding, site: NodeSite, operand: int, batch_axis: int) -> bool:
    """Record the count of input ``operand`` of a Concat, a folded arange (``[[0]]`` at batch 1) that the
    Concat joins as one column of GatherND coordinates into an axis that is the batch itself (one row per
    sample): at the new batch it counts the samples, ``[[0], [1], [2], [3]]`` (torch dynamo's
    ``h[arange(B), i]``). False where that is not so (a flat index's offset is ``settle_folded``'s)."""
    node, trace = site.node, tracker.trace
    value = tracker.operands.index.constant(node.input[operand], site.scopes)
    array = None if value is None else np.asarray(value)
    if trace.b1 != 1 or array is None or array.dtype.kind not in "iu" or array.ndim < 2:
        return False
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % array.ndim
    if axis != array.ndim - 1 or batch_axis == axis or array.shape[-1] != 1 or np.any(array != 0):
        return False  # not one column of coordinates made of zeros
    widths = [known.shape[-1] if known.shape else None for known in (tracker.evaluator.at(n)[0] for n in node.input)]
    if any(width is None for width in widths[:operand]):
        return False
    column = sum(int(width or 0) for width in widths[:operand])
    readers = tracker.operands.consumers.get(node.output[0], [])
    if not readers or not all(_counts_samples(tracker, reader, node.output[0], column) for reader in readers):
        return False
    size = batch_expression(tracker) if trace.symbolic else trace.b2
    if size is None or (isinstance(size, str) and any(d != 1 for k, d in enumerate(array.shape) if k != batch_axis)):
        return False
    reason = (
        f"Concat '{node.name or node.output[0]}': input '{node.input[operand]}' is the coordinate of each sample "
        f"(an arange over the batch folded at batch 1), counting {size}"
    )
    trace.countings.append(Counting(site, operand, batch_axis, tuple(array.shape), 1, size, array.dtype.str, reason))
    return True


def _counts_samples(tracker: Deciding, reader: onnx.NodeProto, coordinates: str, column: int) -> bool:
    """A GatherND (batch_dims 0) that reads ``coordinates`` as its indices, whose column ``column`` is
    an axis of the data holding one row per sample at every size tried."""
    if reader.op_type != "GatherND" or len(reader.input) < 2 or reader.input[1] != coordinates:
        return False
    if any(a.name == "batch_dims" and a.i for a in reader.attribute):
        return False
    data = tracker.evaluator.known.get(reader.input[0])
    if data is None:
        return False
    dims = [known.shape[column] if known.shape and len(known.shape) > column else None for known in data]
    return dims == list(tracker.trace.sizes)


def _one_coordinate(tracker: Deciding, indices: str, made: onnx.NodeProto | None) -> bool:
    """Whether GatherND ``indices`` hold one coordinate each (last axis 1): known at every point, or (when
    the question comes before the evaluation reaches them) ``made`` by an Unsqueeze of the last axis."""
    shapes = [known.shape for known in tracker.evaluator.at(indices)]
    if all(shape is not None for shape in shapes):
        return all(shape and shape[-1] == 1 for shape in shapes)
    if made is None or made.op_type != "Unsqueeze":
        return False
    axes = next((list(a.ints) for a in made.attribute if a.name == "axes"), None)
    if axes is None and len(made.input) > 1:
        value = tracker.operands.index.constant(made.input[1], (tracker.evaluator.model.graph,))
        axes = None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    return axes == [-1]


def indexes_the_batch(tracker: Deciding, name: str) -> bool:
    """Whether ``name`` is read, directly or on its way (a copy, an offset), as the indices into a
    tensor that carries the batch (a GatherND's coordinates): ids into a table of weights are not."""
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        seen.add(current)
        for reader in tracker.operands.consumers.get(current, []):
            if reader.op_type in _INDEXING and len(reader.input) > 1 and reader.input[1] == current:
                data = tracker.evaluator.known.get(reader.input[0])
                if data is None:  # later in the graph than the question: computed, or a constant table
                    main = (tracker.evaluator.model.graph,)
                    return tracker.operands.index.constant_source(reader.input[0], main) is None
                if sizes_of(data[tracker.a]) != sizes_of(data[tracker.b]):
                    return True
            elif reader.op_type in _ON_THE_WAY:
                todo.extend(o for o in reader.output if o not in seen)
    return False


def count_samples(model: onnx.ModelProto, countings: Sequence[Counting], label: str) -> list[str]:
    """Apply the trace's countings: each folded constant replaced by the samples counted at the new batch
    (a new constant; for a symbolic batch a Range computed before its reader); one line each."""
    details = []
    for counting in countings:
        node, old = counting.site.node, counting.site.node.input[counting.operand]
        node.input[counting.operand] = _counted(model, counting, f"{old}_{label}")
        if not uses_of(model, old):  # the folded constant nothing reads any more
            _drop_constant(counting.site.graph, old)
        details.append(f"counted {counting.reason}")
    return details


def _drop_constant(graph: onnx.GraphProto, name: str) -> None:
    """Remove the initializer (and its graph input, before IR 4) or the Constant node that made ``name``."""
    for listed in (graph.initializer, graph.input):
        kept = [each for each in listed if each.name != name]
        if len(kept) != len(listed):
            del listed[:]
            listed.extend(kept)
    for j, node in enumerate(graph.node):
        if node.op_type == "Constant" and list(node.output) == [name]:
            del graph.node[j]
            break


def _counted(model: onnx.ModelProto, counting: Counting, prefix: str) -> str:
    namer = Namer(all_names(model))
    graph, shape = counting.site.graph, list(counting.shape)
    if isinstance(counting.size, int):
        shape[counting.axis] = counting.size
        moved = shape[: counting.axis] + shape[counting.axis + 1 :] + [counting.size]
        values = np.moveaxis(np.broadcast_to(np.arange(counting.size) * counting.step, moved), -1, counting.axis)
        name = namer.fresh(prefix)
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values).astype(counting.dtype), name))
        return name
    limit_item = counting.size if counting.step == 1 else f"{counting.size} * {counting.step}"
    limit = compiled_before(model, counting.site, [limit_item], f"{prefix}_limit")
    namer.taken.update(all_names(model))
    shape[counting.axis] = -1
    constants = {"start": 0, "step": counting.step, "scalar": [], "shape": shape}
    named = {part: namer.fresh(f"{prefix}_{part}") for part in constants}
    graph.initializer.extend(numpy_helper.from_array(np.array(constants[p], np.int64), named[p]) for p in constants)
    end, counted, out = (namer.fresh(f"{prefix}_{part}") for part in ("end", "range", "counted"))
    nodes = [
        helper.make_node("Reshape", [limit, named["scalar"]], [end], name=end),
        helper.make_node("Range", [named["start"], end, named["step"]], [counted], name=counted),
        helper.make_node("Reshape", [counted, named["shape"]], [out], name=out),
    ]
    if np.dtype(counting.dtype) != np.int64:
        cast = namer.fresh(f"{prefix}_cast")
        nodes.append(
            helper.make_node(
                "Cast", [out], [cast], name=cast, to=helper.np_dtype_to_tensor_dtype(np.dtype(counting.dtype))
            )
        )
        out = cast
    position = next(j for j, each in enumerate(graph.node) if each is counting.site.node)
    for offset, made in enumerate(nodes):
        graph.node.insert(position + offset, made)
    return out


__all__ = ["arange_coordinates", "count_rows", "count_samples", "indexes_the_batch", "settle_folded"]
