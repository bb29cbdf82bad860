"""Apply what ``trace_batch`` found: rewrite shape constants, make Squeezes explicit, fix declarations.

Each function changes the model in place and returns one line per change, for the step's details.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import lru_cache

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec.model.graph import (
    ConstantSource,
    NodeSite,
    ScopeIndex,
    all_names,
    constant_value,
    default_opset,
    fresh_name,
    use_counts,
)
from patchspec.shapes.annotations import Dim, collector_paused, format_dims, read_dims, shape_dims, typed, write_dim
from patchspec.shapes.batch.trace import INT64_MAX, BatchDim, BatchTrace, Rewrite, Undecided

#: the new batch: a size, or a name for a symbolic batch
Size = int | str
Dims = list[Dim]


def rewrite_batch_constants(model: onnx.ModelProto, rewrites: list[Rewrite], label: str) -> list[str]:
    """Change the constants the trace proved; a shared constant is copied and only its reader rewired."""
    if not rewrites:
        return []
    with collector_paused():  # the trace's Knowns are still alive: a collection here would walk them all
        return _rewrite_constants(model, rewrites, label)


def _rewrite_constants(model: onnx.ModelProto, rewrites: list[Rewrite], label: str) -> list[str]:
    grouped: dict[tuple[int, int], list[Rewrite]] = {}
    for rewrite in rewrites:
        grouped.setdefault((id(rewrite.site.node), rewrite.operand), []).append(rewrite)
    details = []
    uses = use_counts(model)  # counted once: a rescan per rewrite made 1,000 rewrites quadratic
    names = _Names(model)  # built at the first new name only: constants overwritten in place need none
    index = ScopeIndex()  # one table of constants per graph, not one per rewrite
    copies: dict[tuple[int, str, str, bytes], str] = {}  # (graph, constant, new values) -> the copy made
    for group in grouped.values():
        site, operand = group[0].site, group[0].operand
        name = site.node.input[operand]
        if group[0].whole:  # a computed shape: the node reads a new constant instead
            values = np.array([value for _, value in group[0].elements], dtype=np.int64)
            values = values.reshape(group[0].shape) if group[0].shape is not None else values
            new_name = names.fresh(f"{site.node.name or site.node.output[0]}_shape_{label}")
            site.graph.initializer.append(numpy_helper.from_array(values, new_name))
            site.node.input[operand] = new_name
            details.append(f"rewrote {group[0].reason}: new initializer '{new_name}' {_shown(values)}")
            continue
        source = index.constant_source(name, site.scopes)
        old = np.asarray(constant_value(source))
        new = old.reshape(-1).copy()
        for rewrite in group:
            for element, value in rewrite.elements:
                new[element] = value
        new = new.reshape(old.shape).astype(old.dtype)
        reasons = "; ".join(r.reason for r in group)
        declared = {info.name for graph in site.scopes for info in graph.input}
        if uses.get(name, 0) == 1 and name not in declared:
            _overwrite_constant(source, numpy_helper.from_array(new, name))
            details.append(f"rewrote {reasons}: constant '{name}' {old.tolist()} -> {_shown(new)}")
            continue
        same = (id(site.graph), name, new.dtype.str, new.tobytes())  # the same rewrite of a shared constant
        if same in copies:  # one copy serves every reader that needs these values
            uses[name] -= 1
            site.node.input[operand] = copies[same]
            details.append(f"rewrote {reasons}: reads '{copies[same]}' (the copy made above)")
            continue
        new_name = names.fresh(f"{name}_{label}")
        copies[same] = new_name
        uses[name] -= 1
        site.graph.initializer.append(numpy_helper.from_array(new, new_name))
        site.node.input[operand] = new_name
        details.append(
            f"rewrote {reasons}: new initializer '{new_name}' {_shown(new)} ('{name}' is shared, left as it was)"
        )
    return details


class _Names:
    """Fresh tensor names, from a table of every name in the model made at the first one asked."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.taken: set[str] | None = None

    def fresh(self, wanted: str) -> str:
        if self.taken is None:
            self.taken = all_names(self.model)
        name = fresh_name(wanted, self.taken)
        self.taken.add(name)
        return name


def _shown(values: np.ndarray) -> list[int | str]:
    return ["end" if v == INT64_MAX else int(v) for v in np.asarray(values).reshape(-1)]


def _overwrite_constant(source: ConstantSource | None, tensor: onnx.TensorProto) -> None:
    """``source``: the initializer (TensorProto) or the Constant node (NodeProto) that holds the value."""
    if isinstance(source, onnx.TensorProto):
        source.CopyFrom(tensor)
        return
    assert source is not None, "the trace rewrites constants only"
    del source.attribute[:]
    source.attribute.append(onnx.helper.make_attribute("value", tensor))


def explicit_squeezes(model: onnx.ModelProto, squeezes: list[tuple[NodeSite, list[int]]]) -> list[str]:
    """Give each Squeeze that dropped a batch of 1 the axes it removes at the new batch."""
    if not squeezes:
        return []  # no name table to build: a walk over every node
    opset = default_opset(model)
    taken = all_names(model)
    lines = []
    for site, axes in squeezes:
        node = site.node
        label = node.name or node.output[0]
        if not axes:
            node.op_type = "Identity"
            del node.input[1:]
            del node.attribute[:]
            lines.append(
                f"replaced Squeeze '{label}' by an Identity: without axes it dropped the batch at batch 1 "
                f"and removes nothing at any other batch"
            )
            continue
        if opset >= 13:  # axes is an input from opset 13 on
            name = fresh_name(f"{node.name or node.output[0]}/axes", taken)
            taken.add(name)
            site.graph.initializer.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), name))
            del node.input[1:]
            node.input.append(name)
        else:
            node.attribute.append(onnx.helper.make_attribute("axes", axes))
        lines.append(
            f"made Squeeze '{label}' explicit (axes {axes}): without axes it "
            f"dropped the batch at batch 1, so its output's rank depended on the batch"
        )
    return lines


def keep_flattened_batch(model: onnx.ModelProto, flattens: list[NodeSite]) -> list[str]:
    """Give each Reshape to ``[-1]`` that flattened the batch into a graph output (``trace.flattens``) the
    shape ``[0, -1]``: the batch on axis 0, each sample's values after it. One line per change."""
    taken = all_names(model) if flattens else set()
    lines = []
    for site in flattens:
        node = site.node
        name = fresh_name(f"{node.name or node.output[0]}/batch_kept", taken)
        taken.add(name)
        site.graph.initializer.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), name))
        node.input[1] = name
        kept = [attr for attr in node.attribute if attr.name != "allowzero"]  # 0 copies the batch (dynamo sets 1)
        del node.attribute[:]
        node.attribute.extend(kept)
        lines.append(
            f"made Reshape '{node.name or node.output[0]}' keep the batch ([-1] -> [0, -1]): it flattened each "
            f"sample's values into output '{node.output[0]}' with the batch, which at batch 1 dropped the batch axis"
        )
    return lines


def declare_from_trace(
    model: onnx.ModelProto,
    trace: BatchTrace,
    size: Size,
    declared: Mapping[str, Dims | None],
    batch_names: Collection[str] = (),
) -> list[str]:
    """Correct output (and intermediate) declarations with what the evaluation proved.

    ONNX shape inference loses the batch at a Resize sized from Shape, and keeps a rank it cannot
    compute (a Squeeze without axes). A declared rank or size that contradicts the evaluation is
    replaced; an unknown dim that the evaluation knows is filled in. Returns one line per output
    whose declaration (``declared``: output name -> dims before the patch) was wrong; an output whose
    rank nothing derives (a custom op upstream) is added to ``trace.undecided``. A size the declaration
    stated is kept where nothing contradicts it, and an axis it declared with one of ``batch_names``
    (the inputs' batch dim_params before the patch) gets the new batch.
    """
    corrected = []
    for info in model.graph.output:
        before = declared.get(info.name)
        _reconcile(info, trace, size)
        _keep_declared_sizes(info, before, trace, size, batch_names)
        now = read_dims(info)
        ranks = trace.ranks(info.name)[:2]
        unsure = now is not None and not all(d == size or isinstance(d, int) for d in now)
        if ranks[1] is None and before is not None and unsure:
            # nothing derives it (a custom op upstream, an evaluation that failed): the rank and the sizes kept
            # are the old declaration's (the new batch where it named the batch), or names onnx made up (onnx's
            # checker wants a shape on an output); what those are is unknown, so a verifier must judge it
            trace.undecided.append(
                Undecided(
                    f"undecided: output '{info.name}' was declared {format_dims(before)}; nothing derives its "
                    f"shape at the new batch, so its rank ({len(now or ())}) is the old declaration's, unchecked"
                    + _lost_at(trace, info.name)
                )
            )
        if _contradicted(before, now, trace, info.name):
            note = ""
            if None not in ranks and ranks[0] != ranks[1]:
                note = f" (a Squeeze without axes dropped the batch at batch {trace.b1}: rank {ranks[0]} there)"
            corrected.append(f"output '{info.name}' was declared {format_dims(before)}, is {format_dims(now)}{note}")
    agrees = _Agreement(trace, size) if isinstance(size, int) else None
    with collector_paused():  # a collection would walk the trace's Knowns, tens of thousands of times
        for info in model.graph.value_info:
            if agrees is None or not agrees(info):
                _reconcile(info, trace, size)
    return corrected


def _lost_at(trace: BatchTrace, name: str, limit: int = 100_000) -> str:
    """Where the evaluation lost the shape of ``name``: the first node upstream that gets known inputs
    and gives an unknown output; '' where none is found (a custom op makes it)."""
    assert trace.evaluator is not None, "trace_batch sets the evaluator"
    producer, todo = trace.evaluator.producer, [name]
    seen: set[int] = set()
    lost = None
    while todo and len(seen) < limit:
        site = producer.get(todo.pop())
        if site is None or id(site.node) in seen:
            continue
        seen.add(id(site.node))
        inputs = [trace.at(i)[1] for i in site.node.input if i]
        if all(known.shape is not None for known in inputs) and trace.at(site.node.output[0])[1].shape is None:
            if lost is None or site.position < lost.position:
                lost = site
            continue
        todo.extend(i for i in site.node.input if i and trace.at(i)[1].shape is None)
    if lost is None or lost.node.domain not in ("", "ai.onnx"):
        return ""
    shapes = ", ".join(str(list(trace.at(i)[1].shape or ())) for i in lost.node.input if i)
    fixed = (
        "; if the model runs at one size on an input axis it declares symbolic, fix it before set_batch: "
        "rename_dims: {tensor: INPUT, axes: {AXIS: SIZE}}"
    )
    return (
        f" (the evaluation lost it at {lost.node.op_type} '{lost.node.name or lost.node.output[0]}', whose inputs "
        f"({shapes}) do not fit at the sizes tried for the other input dims{fixed if trace.moves_symbols else ''})"
    )


class _Agreement:
    """Tells, from the shapes alone, an annotation that ``_reconcile`` would leave as it is: most of a
    large graph, where inference derived what the evaluation found (a static new batch only).

    The annotation must be the evaluated shape at the new batch's point (the old batch's when that is
    the new size), every dim a size, with the same rank at the old batch (no Squeeze dropped it), and
    no dim may move with another symbolic input dim (those are declared by name). Then each dim is a
    size the trace finds, or one it cannot tell. The shape is compared as serialized bytes (a dim
    with anything else set, such as a denotation, does not match and is reconciled as before)."""

    def __init__(self, trace: BatchTrace, size: int) -> None:
        assert trace.evaluator is not None, "trace_batch sets the evaluator"
        self.known = trace.evaluator.known
        self.point = 0 if size == trace.b1 else 1
        self.moves_symbols = trace.moves_symbols
        self.far = trace.far
        self.encoded: dict[tuple[int | None, ...], bytes] = {}  # a shape -> its TensorShapeProto's bytes

    def __call__(self, info: onnx.ValueInfoProto) -> bool:
        tensor_type = info.type.tensor_type
        knowns = self.known.get(info.name)
        if knowns is None or not tensor_type.HasField("shape"):
            return False
        first, second = knowns[0].shape, knowns[1].shape
        if first is None or second is None or len(first) != len(second):
            return False
        if self.moves_symbols and knowns[2].shape != first:
            return False
        far = self.far.get(info.name)
        if far is not None and far[0].shape is not None and far[0].shape != first:
            return False  # a dim the points agree on moves at the far point: reconciled without it
        expected = second if self.point else first
        if None in expected:  # a dim the evaluation cannot tell: an unknown one in the annotation agrees
            return tuple(read_dims(info) or ()) == expected
        encoded = self.encoded.get(expected)
        if encoded is None:
            shape = onnx.TensorShapeProto()
            for size in expected:
                shape.dim.add().dim_value = size
            encoded = self.encoded[expected] = shape.SerializeToString()
        return bool(tensor_type.shape.SerializeToString() == encoded)


def _keep_declared_sizes(
    info: onnx.ValueInfoProto, before: Dims | None, trace: BatchTrace, size: Size, batch_names: Collection[str]
) -> None:
    """A size the old declaration stated is never degraded to unknown (a classifier's ``[?, 3]`` scores
    stay ``[4, 3]`` where nothing derives the 3): it is kept where the evaluation finds that size there,
    or finds nothing, the size cannot be the old batch, and no other input dim is free to move it (a
    CRNN's 19 time steps follow its input's symbolic width). An axis declared with the batch's name gets
    the new batch where nothing derives it."""
    now = read_dims(info)
    if before is None or now is None or len(before) != len(now) or not typed(info):
        return
    for axis, (old, dim) in enumerate(zip(before, shape_dims(info))):
        new = now[axis]
        if new is None and isinstance(old, str) and old in batch_names:
            write_dim(dim, size)
            continue
        if not isinstance(old, int) or isinstance(new, int) or new == size:
            continue
        found = trace.batch_dim(info.name, axis)
        if found == old or (found is None and old not in (trace.b1, 1) and not trace.moves_symbols):
            write_dim(dim, old)
        elif found is None and old not in (trace.b1, 1) and _found_at_batches(trace, info.name, axis, old):
            write_dim(dim, old)  # where the other dims moved the evaluation failed: the two batches agree with it
        elif found is None and size == trace.b1 and _found_at_batches(trace, info.name, axis, old, points=1):
            write_dim(dim, old)  # the batch stays (already at size): the model at that size agrees with it


def _found_at_batches(trace: BatchTrace, name: str, axis: int, size: int, points: int = 2) -> bool:
    """``name`` has ``size`` on ``axis`` at the old batch's point and the new one's (of the same rank);
    at the old batch's point alone with ``points=1``."""
    known = trace.at(name)[:points]
    return all(k.shape is not None and axis < len(k.shape) and k.shape[axis] == size for k in known)


def _contradicted(before: Dims | None, now: Dims | None, trace: BatchTrace, name: str) -> bool:
    """The old declaration stated a rank or a fixed size that is false (the batch's own axis aside)."""
    if before is None or now is None:
        return False
    if len(before) != len(now):
        return True
    return any(
        isinstance(old, int) and old != new and not isinstance(trace.batch_dim(name, axis), tuple)
        for axis, (old, new) in enumerate(zip(before, now))
    )


def _reconcile(info: onnx.ValueInfoProto, trace: BatchTrace, size: Size) -> bool:
    """Bring one annotation in line with the evaluation; True when a declared fact was wrong."""
    if not typed(info):
        return False  # an annotation without an element type gets no shape (onnxruntime refuses it)
    tensor_type = info.type.tensor_type
    ranks = trace.ranks(info.name)
    if isinstance(size, str) and None in ranks[:2]:
        return False
    rank = ranks[1 if isinstance(size, str) or size != trace.b1 else 0]
    if rank is None:
        return False
    found = [_at_size(dim, size) for dim in trace.batch_dims(info.name, rank)]  # dims has this rank below
    squeezed = ranks[0] != ranks[1]  # a Squeeze drops the batch at batch 1 only: declare the shape at the new batch
    if not squeezed and tensor_type.HasField("shape") and None not in found:  # most say what was found already
        if tensor_type.shape.SerializeToString() == _shape_bytes(tuple(found)):
            return False  # its dims are the ones found, each a size or a name: nothing to change
    dims: Dims | None = read_dims(info)
    contradicted = dims is not None and len(dims) != rank
    if dims is None or contradicted:
        tensor_type.shape.Clear()
        for _ in range(rank):
            tensor_type.shape.dim.add()
        dims = [None] * rank
    if squeezed:  # every dim from the new batch's shape; unknown ones cleared
        for dim, value in zip(shape_dims(info), found):
            write_dim(dim, value)
        return True
    # a dim named as one that ran at one size only keeps its name: the evaluation never saw it move
    kept = trace.fitted.key if trace.fitted is not None and trace.fitted.fixed else ()
    changed = [axis for axis, value in enumerate(found) if value not in (None, dims[axis]) and dims[axis] != kept]
    if changed:  # most annotations already say what the evaluation found: left untouched
        written = shape_dims(info)
        for axis in changed:
            contradicted = contradicted or isinstance(dims[axis], int)
            write_dim(written[axis], found[axis])
    return contradicted


@lru_cache(maxsize=4096)
def _shape_bytes(dims: tuple[int | str, ...]) -> bytes:
    """The serialized TensorShapeProto of ``dims`` (a size or a name each), as write_dim writes them."""
    shape = onnx.TensorShapeProto()
    for value in dims:
        write_dim(shape.dim.add(), value)
    return bytes(shape.SerializeToString())


def _at_size(found: BatchDim, size: Size) -> Dim:
    """A dim the trace found, at the new batch: ("batch", k) is k times the new size."""
    if not isinstance(found, tuple):
        return found
    factor = found[1]
    return size * factor if isinstance(size, int) else (size if factor == 1 else None)


__all__ = ["declare_from_trace", "explicit_squeezes", "keep_flattened_batch", "rewrite_batch_constants"]
