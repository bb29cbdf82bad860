"""The ``set_batch`` patch type: a static or symbolic batch, with shapes and shape constants to match.

1. Choose the batch axes: ``inputs``, or the documented detection (``patchspec.api.batch_axes``).
2. Follow the batch (``_batch_tracker.trace_batch``): the graph is evaluated, shapes and small
   values, at the old batch and at a new one (and a third point that moves other symbolic dims).
   Each Reshape, Expand, Slice and Resize whose data carries the batch is checked to keep every
   sample's elements together; a constant element proved to be the batch is rewritten (to the new
   size; for a symbolic batch to ``-1``, ``0`` or "end"), evaluating on with the rewrite. A batch
   a Reshape folds behind other dims (``[L, B, E] -> [-1, E]``) is left there and followed.
3. Refuse (exit 4, nothing written) what the evaluation proves: a node that cannot run at the new
   batch, a Slice that drops samples, an op that mixes them after a Squeeze, an If or Loop whose
   condition follows the batch. What it cannot settle is reported undecided, with the spec lines
   that settle it by hand.
4. Set the batch on the chosen axes, re-derive every other shape (``rederive_shapes``), give
   Squeezes that dropped a batch of 1 their axes, and correct output declarations from the trace.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec import PatchContext, PatchResult, PatchType, hookimpl
from patchspec.api import (
    PINNED_DIMS,
    BatchAxes,
    BatchAxesError,
    ScopeIndex,
    all_names,
    apply_pins,
    batch_axes,
    constant_value,
    default_opset,
    fed_inputs,
    format_dims,
    fresh_name,
    read_dims,
    rederive_shapes,
    shape_dims,
    typed,
    use_counts,
    write_dim,
)
from patchspec_plugins._batch_tracker import INT64_MAX, BatchTrace, Rewrite, trace_batch


class SetBatchParams(TypedDict, total=False):
    """The params as ``apply``/``verify`` receive them (schema defaults filled in); the test kit checks
    its keys against ``params_schema``."""

    size: int | str
    inputs: list[str] | dict[str, int]


class SetBatchPatch(PatchType):
    Params = SetBatchParams
    name = "set_batch"
    description = (
        "Set the batch size (static or symbolic) on the inputs that carry it, re-derive every "
        "other shape, and rewrite shape constants that provably bake in the old batch."
    )
    shorthand = "size"
    params_schema = {
        "type": "object",
        "description": description,
        "properties": {
            "size": {
                "description": "the new batch: a positive integer (static) or a name (symbolic, e.g. N)",
                "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "minLength": 1}],
            },
            "inputs": {
                "description": (
                    "inputs that carry the batch: a list of names (batch on axis 0) or a mapping "
                    "{name: axis}; default: detected from the first input"
                ),
                "anyOf": [
                    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                    {"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer"}},
                ],
            },
        },
        "required": ["size"],
        "additionalProperties": False,
    }

    def check_params(self, params: dict):
        size = params.get("size")
        if isinstance(size, str) and size.strip() != size:
            yield ("size",), f"a symbolic batch name has no surrounding spaces, got {size!r}"
        inputs = params.get("inputs")
        if isinstance(inputs, list) and len(set(inputs)) != len(inputs):
            twice = sorted({n for n in inputs if inputs.count(n) > 1})
            yield ("inputs",), f"each input is listed once, got {', '.join(map(repr, twice))} more than once"

    def apply(self, model: onnx.ModelProto, params: SetBatchParams, context: PatchContext) -> PatchResult:
        size = params["size"]
        batch = choose_batch_axes(model, params, context)
        where = ", ".join(f"{name}[{axis}]" for name, axis in batch.axes)
        inputs = fed_inputs(model.graph)
        _refuse_name_in_use(size, inputs, batch, context)
        if all(read_dims(inputs[name])[axis] == size for name, axis in batch.axes):
            return PatchResult(False, f"batch already {size} on {where}", batch.notes)
        symbolic = isinstance(size, str)
        same = not symbolic and size == batch.old_size  # constants are baked for this size already
        b2 = batch.old_size + 6 if symbolic or same else size
        trace = trace_batch(model, batch.axes, batch.old_size, b2, symbolic=symbolic)
        if trace.refusals and not same:
            refuse(trace, size, where, context)
        rewrites, undecided = ([], []) if same else (trace.rewrites, trace.undecided)
        changed = rewrite_constants(model, rewrites, f"batch_{size}")
        squeezes = [] if same else explicit_squeezes(model, trace.squeezes)
        declared = {info.name: read_dims(info) for info in model.graph.output}
        pins = context.state.get(PINNED_DIMS)
        for name, axis in batch.axes:
            write_dim(shape_dims(inputs[name])[axis], size)
            pins.get(name, {}).pop(axis, None)
        rederive_shapes(model, context.state)  # pins is the state's own dict: the batch axes popped above
        corrected = declare_from_trace(model, trace, size, declared)
        apply_pins(model.graph, pins)
        counts = f"{len(changed)} shape constant{'s' * (len(changed) != 1)} rewritten"
        if squeezes:
            counts += f", {len(squeezes)} Squeeze{'s' * (len(squeezes) != 1)} given axes"
        if undecided:
            counts += f", {len(undecided)} undecided (-v lists them, with the spec lines that fix them)"
        if corrected:
            counts += f", {len(corrected)} output declaration{'s' * (len(corrected) != 1)} corrected"
        details = batch.notes + tuple(changed) + tuple(squeezes) + tuple(corrected) + tuple(undecided)
        return PatchResult(True, f"batch {size} on {where}; {counts}", details)


def refuse(trace: BatchTrace, size, where: str, context: PatchContext) -> None:
    """Stop: the evaluation proves the model cannot run at the new batch, or drops or mixes samples there."""
    first, *others = trace.refusals
    more = "".join(f"\n  also: {line}" for line in others[:9])
    if len(others) > 9:
        more += f"\n  and {len(others) - 9} more"
    at = f"batch {size}" if isinstance(size, int) else f"a batch other than {trace.b1}"
    context.fail(
        f"{first}{more}\nthe model cannot run correctly at {at} on {where} as it was exported, so nothing is written",
        hint="fix the named nodes with patches listed before set_batch (replace_initializer "
        "for a constant that holds the batch), or keep the exported batch and run one sample at a time",
    )


def explicit_squeezes(model: onnx.ModelProto, squeezes: list) -> list[str]:
    """Give each Squeeze that dropped a batch of 1 the axes it removes at the new batch."""
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


# -- which axes carry the batch ---------------------------------------------------------------------------
def choose_batch_axes(model: onnx.ModelProto, params: dict, context: PatchContext) -> BatchAxes:
    try:
        return batch_axes(model, params.get("inputs"))
    except BatchAxesError as exc:
        context.fail(exc.message, key=exc.key, hint=exc.hint)


def _refuse_name_in_use(size, inputs: dict, batch: BatchAxes, context: PatchContext) -> None:
    """A symbolic batch named like another input axis would claim the two are equal."""
    if not isinstance(size, str):
        return
    chosen = set(batch.axes)
    clashes = [
        f"{name}[{axis}]"
        for name, info in inputs.items()
        for axis, dim in enumerate(read_dims(info) or [])
        if dim == size and (name, axis) not in chosen
    ]
    if clashes:
        context.fail(
            f"'{size}' already names {', '.join(clashes)}, which is not a batch axis here",
            key=("size",),
            hint="choose another batch name, or list those axes in 'inputs'",
        )


# -- shape constants and declarations ---------------------------------------------------------------------
def rewrite_constants(model: onnx.ModelProto, rewrites: list[Rewrite], label: str) -> list[str]:
    """Change the constants the trace proved; a shared constant is copied and only its reader rewired."""
    grouped: dict[tuple, list[Rewrite]] = {}
    for rewrite in rewrites:
        grouped.setdefault((id(rewrite.site.node), rewrite.operand), []).append(rewrite)
    details = []
    uses = use_counts(model)  # counted once: a rescan per rewrite made 1,000 rewrites quadratic
    taken = all_names(model)
    index = ScopeIndex()  # one table of constants per graph, not one per rewrite
    copies: dict[tuple, str] = {}  # (graph, constant, new values) -> the copy made for them
    for group in grouped.values():
        site, operand = group[0].site, group[0].operand
        name = site.node.input[operand]
        source = index.constant_source(name, site.scopes)
        old = constant_value(source)
        new = np.array(old).reshape(-1).copy()
        for rewrite in group:
            for element, value in rewrite.elements:
                new[element] = value
        new = new.reshape(np.shape(old)).astype(np.asarray(old).dtype)
        reasons = "; ".join(r.reason for r in group)
        declared = {info.name for graph in site.scopes for info in graph.input}
        if uses.get(name, 0) == 1 and name not in declared:
            _overwrite_constant(source, numpy_helper.from_array(new, name))
            details.append(f"rewrote {reasons}: constant '{name}' {np.asarray(old).tolist()} -> {_shown(new)}")
            continue
        same = (id(site.graph), name, new.dtype.str, new.tobytes())  # the same rewrite of a shared constant
        if same in copies:  # one copy serves every reader that needs these values
            uses[name] -= 1
            site.node.input[operand] = copies[same]
            details.append(f"rewrote {reasons}: reads '{copies[same]}' (the copy made above)")
            continue
        new_name = fresh_name(f"{name}_{label}", taken)
        taken.add(new_name)
        copies[same] = new_name
        uses[name] -= 1
        site.graph.initializer.append(numpy_helper.from_array(new, new_name))
        site.node.input[operand] = new_name
        details.append(
            f"rewrote {reasons}: new initializer '{new_name}' {_shown(new)} ('{name}' is shared, left as it was)"
        )
    return details


def _shown(values: np.ndarray) -> list:
    return ["end" if v == INT64_MAX else int(v) for v in np.asarray(values).reshape(-1)]


def _overwrite_constant(source, tensor: onnx.TensorProto) -> None:
    if isinstance(source, onnx.TensorProto):
        source.CopyFrom(tensor)
        return
    del source.attribute[:]
    source.attribute.append(onnx.helper.make_attribute("value", tensor))


def declare_from_trace(model: onnx.ModelProto, trace: BatchTrace, size, declared: dict) -> list[str]:
    """Correct output (and intermediate) declarations with what the evaluation proved.

    ONNX shape inference loses the batch at a Resize sized from Shape, and keeps a rank it cannot
    compute (a Squeeze without axes). A declared rank or size that contradicts the evaluation is
    replaced; an unknown dim that the evaluation knows is filled in. Returns one line per output
    whose declaration (``declared``: output name -> dims before the patch) was wrong.
    """
    corrected = []
    for info in model.graph.output:
        before = declared.get(info.name)
        _reconcile(info, trace, size)
        now = read_dims(info)
        if _contradicted(before, now, trace, info.name):
            note = ""
            ranks = trace.ranks(info.name)[:2]
            if None not in ranks and ranks[0] != ranks[1]:
                note = f" (a Squeeze without axes dropped the batch at batch {trace.b1}: rank {trace.ranks(info.name)[0]} there)"
            corrected.append(f"output '{info.name}' was declared {format_dims(before)}, is {format_dims(now)}{note}")
    for info in model.graph.value_info:
        _reconcile(info, trace, size)
    return corrected


def _contradicted(before, now, trace: BatchTrace, name: str) -> bool:
    """The old declaration stated a rank or a fixed size that is false (the batch's own axis aside)."""
    if before is None or now is None:
        return False
    if len(before) != len(now):
        return True
    return any(
        isinstance(old, int) and old != new and not isinstance(trace.batch_dim(name, axis), tuple)
        for axis, (old, new) in enumerate(zip(before, now))
    )


def _reconcile(info: onnx.ValueInfoProto, trace: BatchTrace, size) -> bool:
    """Bring one annotation in line with the evaluation; True when a declared fact was wrong."""
    if not typed(info):
        return False  # an annotation without an element type gets no shape (onnxruntime refuses it)
    tensor_type = info.type.tensor_type
    dims = read_dims(info)
    ranks = trace.ranks(info.name)
    if isinstance(size, str) and None in ranks[:2]:
        return False
    rank = ranks[1 if isinstance(size, str) or size != trace.b1 else 0]
    if rank is None:
        return False
    contradicted = dims is not None and len(dims) != rank
    if dims is None or contradicted:
        tensor_type.shape.Clear()
        for _ in range(rank):
            tensor_type.shape.dim.add()
        dims = [None] * rank
    squeezed = ranks[0] != ranks[1]  # a Squeeze drops the batch at batch 1 only: declare the shape at the new batch
    for axis, dim in enumerate(shape_dims(info)):
        found = trace.batch_dim(info.name, axis)
        if isinstance(found, tuple):
            factor = found[1]
            found = size * factor if isinstance(size, int) else (size if factor == 1 else None)
        if squeezed:
            write_dim(dim, found)  # every dim from the new batch's shape; unknown ones cleared
            continue
        if found is None or found == dims[axis]:
            continue
        contradicted = contradicted or isinstance(dims[axis], int)
        write_dim(dim, found)
    return contradicted or squeezed


@hookimpl
def register_patch_types(register):
    register(SetBatchPatch)
