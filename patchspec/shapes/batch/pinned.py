"""Constants that pin the batch to the exported samples: proof that a model is not batchable.

Two families, both in real exports (a streaming speech enhancer has both):

- constant coordinates into an axis that carries the batch: a ScatterND or GatherND whose
  constant indices address sample 0 (a cache update), a Gather on the batch axis with constant
  indices, a Slice before opset 10 (its bounds are attributes) that cuts the batch axis (PyTorch's
  ``x[0]``). At any batch they still read or write only the samples the export saw.
- a recurrent op (RNN, GRU, LSTM) that starts from a constant state (``initial_h``, ``initial_c``)
  of several exported samples, which may differ (``[2, 2, 4]`` cannot start four sequences), or of
  one sample before opset 11 at a symbolic batch (elsewhere ``states`` repeats it: every sample
  starts alike);
- a recurrent op whose *sequence* axis carries the batch (silero's sequence models take
  ``input [sequence_length, 576]``): the samples would be steps of one sequence, each starting from
  the state the one before left.

What is not a proof but still ties samples together (a DynamicQuantizeLinear's one scale for the
whole batch) is :mod:`.batch_coupling`'s.

Rewriting a number cannot fix either: the model must be exported again (the state fed as an
input, the cache indexed by sample). set_batch refuses them, naming the node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import numpy as np

from patchspec.model.graph import NodeSite, ScopeIndex
from patchspec.shapes.batch.trace import BatchTrace

#: recurrent ops, with the inputs that hold a starting state ([directions, batch, hidden] in layout 0)
_STATES = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6)}
_STATE_NAMES = {5: "initial_h", 6: "initial_c"}
#: every op pinned_batch looks at
_PINNING = frozenset({"ScatterND", "GatherND", "Gather", "Slice", *_STATES})


def pinned_batch(
    trace: BatchTrace, sites: list[NodeSite], index: ScopeIndex | None = None, decided: Collection[int] = ()
) -> Iterator[tuple[NodeSite, str]]:
    """Each node that pins the batch to the exported samples, with why (for a refusal). ``index``: the
    tracker's table of constants, when it has one (the model is unchanged since); ``decided``: the ids
    of nodes the tracker decided (a Gather whose indices it counts again is not judged here)."""
    index = index or ScopeIndex()
    for site in sites:
        node = site.node
        if node.op_type not in _PINNING or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if node.op_type in ("ScatterND", "GatherND", "Gather"):
            why = _constant_coordinates(trace, index, site) or _fixed_coordinates(trace, site)
            if why is None and node.op_type == "Gather" and id(node) not in decided:
                why = _constant_rows(trace, index, site)
        elif node.op_type in _STATES:
            why = _along_the_sequence(trace, site) or _constant_state(trace, index, site)
        elif node.op_type == "Slice":
            why = _attribute_slice(trace, site)
        else:
            continue
        if why:
            yield site, why


def _batch_axes(trace: BatchTrace, name: str) -> list[int]:
    """The axes of ``name`` that hold the batch alone (not folded with another factor)."""
    old, new = (known.shape for known in trace.at(name)[:2])
    if old == new:
        return []  # the same shape at both batches (a shape tensor, a weight): no axis holds the batch
    rank = len(new) if new is not None else 0
    return [axis for axis, dim in enumerate(trace.batch_dims(name, rank)) if dim == ("batch", 1)]


def _constant_coordinates(trace: BatchTrace, index: ScopeIndex, site: NodeSite) -> str | None:
    node = site.node
    if len(node.input) < 2:
        return None
    batch = _batch_axes(trace, node.input[0])
    if not batch or index.constant_source(node.input[1], site.scopes) is None:
        return None  # the batch asked first: most Gathers read a shape, whose indices need no look-up
    indices = np.asarray(index.constant(node.input[1], site.scopes))
    if indices.size == 0:
        return None
    if node.op_type == "Gather":
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        rank = trace.ranks(node.input[0])[1] or 1
        if axis % rank not in batch:
            return None
        samples = sorted({int(v) for v in indices.reshape(-1)})
        what = f"picks samples {samples} of axis {axis % rank}"
    else:
        batch_dims = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
        depth = indices.shape[-1] if indices.ndim else 0
        addressed = [axis for axis in batch if batch_dims <= axis < batch_dims + depth]
        if not addressed:
            return None
        column = indices.reshape(-1, depth)[:, addressed[0] - batch_dims]
        samples = sorted({int(v) for v in column})
        verb = "writes" if node.op_type == "ScatterND" else "reads"
        what = (
            f"{verb} through constant indices '{node.input[1]}' that address samples {samples} of axis {addressed[0]}"
        )
    return (
        f"{what}, which carries the batch: at any batch it still addresses only the samples the export "
        "saw, so the model is not batchable as exported (export it with indices computed per sample)"
    )


def _constant_rows(trace: BatchTrace, index: ScopeIndex, site: NodeSite) -> str | None:
    """A Gather of constant indices along an axis that holds the batch folded with other rows (a
    waveform reshaped to ``[200 * batch, 80]`` and framed by a table of row indices, as tf2onnx writes
    a TFLite log-mel): at any batch it reads only the rows the export saw, and its output keeps one
    size. Indices one per exported sample in steps of the rows are counted again by the tracker."""
    node = site.node
    if len(node.input) < 2 or index.constant_source(node.input[1], site.scopes) is None:
        return None
    rank = trace.ranks(node.input[0])[1] or 1
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % rank
    old, new = (known.shape for known in trace.at(node.input[0])[:2])
    if old is None or new is None or old == new or len(new) <= axis:
        return None
    found = trace.batch_dims(node.input[0], len(new))[axis]
    if not (isinstance(found, tuple) and found[0] == "batch" and isinstance(found[1], int) and found[1] > 1):
        return None
    rows = sorted({int(v) for v in np.asarray(index.constant(node.input[1], site.scopes)).reshape(-1)})
    shown = f"{rows[:6]}"[:-1] + (", ...]" if len(rows) > 6 else "]")
    return (
        f"picks rows {shown} of axis {axis}, which holds the batch with {found[1]} rows per sample, through "
        f"constant indices '{node.input[1]}': at any batch it reads only the rows the export saw, so the model "
        "is not batchable as exported (export it with the batch kept apart, or the indices computed per sample)"
    )


def _fixed_coordinates(trace: BatchTrace, site: NodeSite) -> str | None:
    """Computed indices into an axis that carries the batch whose shape stays the same at every batch
    (a count of the exported samples baked upstream): the node reads or writes as many samples as the
    export saw, whatever the batch."""
    node = site.node
    if len(node.input) < 2 or not _addressed(trace, site) or _per_iteration(trace, site):
        return None
    shapes = {known.shape for known in trace.at(node.input[1])}
    shape = shapes.pop() if len(shapes) == 1 else None
    if shape is None or None in shape:
        return None  # the indices follow the batch (or are unknown): nothing proved
    verb = "writes" if node.op_type == "ScatterND" else "reads"
    return (
        f"{verb} through indices '{node.input[1]}' of shape {list(shape)} at every batch into an "
        f"axis that carries the batch: at batch {trace.b2} it still addresses as many samples as the export saw, "
        "so the model is not batchable as exported (a count of the exported batch upstream, such as an arange "
        "folded to a constant, makes those indices: export the model with the batch dynamic there)"
    )


def _per_iteration(trace: BatchTrace, site: NodeSite) -> bool:
    """Whether the node is in a Loop's body and its indices are made from the body's inputs (the
    iteration number, a carried counter): ``tf.map_fn`` reads sample ``i`` at iteration ``i``, one at a
    time at any batch, and the Loop's condition (or count) says how many; a Loop over a count of the
    exported batch is refused where no output then follows the batch."""
    if len(site.scopes) < 2 or trace.evaluator is None:
        return False
    body, producers = site.graph, trace.evaluator.producer
    inputs = {info.name for info in body.input}
    todo, seen = [site.node.input[1]], set()
    while todo:
        name = todo.pop()
        if name in inputs:
            return True
        producer = producers.get(name)
        if name not in seen and producer is not None and producer.graph is body:
            seen.add(name)
            todo.extend(n for n in producer.node.input if n)
    return False


def _addressed(trace: BatchTrace, site: NodeSite) -> bool:
    """Whether the node's indices address an axis of its data that carries the batch."""
    node = site.node
    batch = _batch_axes(trace, node.input[0])
    if not batch:
        return False
    if node.op_type == "Gather":
        rank = trace.ranks(node.input[0])[1] or 1
        return next((a.i for a in node.attribute if a.name == "axis"), 0) % rank in batch
    batch_dims = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
    shape = trace.at(node.input[1])[0].shape
    depth = shape[-1] if shape else None
    return depth is not None and any(batch_dims <= axis < batch_dims + depth for axis in batch)


def _attribute_slice(trace: BatchTrace, site: NodeSite) -> str | None:
    """A Slice before opset 10, whose bounds are attributes set_batch cannot rewrite, that keeps only
    some samples at the new batch (from opset 10 the bounds are inputs: the tracker rewrites them)."""
    node = site.node
    old_rank, rank = trace.ranks(node.input[0])[:2]
    if len(node.input) != 1 or old_rank != rank:
        return None  # a Squeeze dropped a batch of 1 upstream: batch_findings names the shifted axes
    batch = _batch_axes(trace, node.input[0])
    attributes = {a.name: list(a.ints) for a in node.attribute}
    starts, ends = attributes.get("starts", []), attributes.get("ends", [])
    rank = rank or 1
    cut = [(a % rank, s, e) for a, s, e in zip(attributes.get("axes") or range(len(starts)), starts, ends)]
    given, kept = (trace.at(name)[1].shape for name in (node.input[0], node.output[0]))
    for axis, start, end in cut:
        if axis in batch and given is not None and kept is not None and kept[axis] != given[axis]:
            return (
                f"slices axis {axis}, which carries the batch, with bounds in its attributes (starts {start}, "
                f"ends {end}: a Slice before opset 10), so at batch {trace.b2} it keeps {kept[axis]} of "
                f"{given[axis]} samples: the model is not batchable as exported (export it at opset 10 or later, "
                "where the bounds are inputs set_batch can rewrite, if the slice is meant to keep every sample)"
            )
    return None


def _along_the_sequence(trace: BatchTrace, site: NodeSite) -> str | None:
    node = site.node
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    sequence = 1 if layout else 0
    if sequence not in _batch_axes(trace, node.input[0]):
        return None
    return (
        f"runs along axis {sequence} of its input '{node.input[0]}', its sequence, which carries the batch: the "
        "samples would be steps of one sequence, each starting from the state the one before left, so the model "
        "is not batchable on that axis (if the batch is elsewhere, name its inputs and axes in 'inputs')"
    )


def _repeated(trace: BatchTrace, site: NodeSite, operand: int) -> bool:
    """Whether the tracker repeats that input to the new batch (a constant state of one sample)."""
    return any(t.site.node is site.node and t.operand == operand for t in trace.tilings)


def _constant_state(trace: BatchTrace, index: ScopeIndex, site: NodeSite) -> str | None:
    node = site.node
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if (0 if layout else 1) not in _batch_axes(trace, node.input[0]):
        return None
    for operand in _STATES[node.op_type]:
        if len(node.input) <= operand or not node.input[operand]:
            continue
        name = node.input[operand]
        if index.constant_source(name, site.scopes) is None or _repeated(trace, site, operand):
            continue
        value = index.constant(name, site.scopes)
        shape = list(np.shape(value)) if value is not None else "?"
        return (
            f"starts from the constant state '{name}' ({_STATE_NAMES[operand]}, {shape}) that holds "
            f"{trace.b1} sample{'s' * (trace.b1 != 1)}: it cannot start a batch of {trace.b2}, so the model is "
            "not batchable as exported (export it with the state as an input, or without one to start from zeros)"
        )
    return None


__all__ = ["pinned_batch"]
