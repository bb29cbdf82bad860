"""The ``set_batch`` patch type: a static or symbolic batch, with shapes and shape constants to match.

1. Choose the batch axes (``inputs``, or the contract's default detection).
2. Trace the batch through the graph: the batch axes get a marker name and ONNX shape inference
   carries it. A Reshape whose data carries the marker on axis ``a``, whose output lost it, and
   whose constant shape holds the old batch at ``a`` after a prefix equal to the data's own dims,
   provably keeps the batch at ``a``: that element is rewritten (to the new size, or to ``0`` =
   "copy the input's dim" for a symbolic batch). Expand is handled the same way (the element
   becomes the new size, or ``1`` = broadcast). Repeat until nothing changes.
3. Set the batch on the chosen input axes and re-derive every other shape (``shapes.rederive_shapes``).

A shape constant downstream of the batch that lost it but could not be proved is left as it is
and reported as undecided, with a hint to use ``replace_initializer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec import PatchContext, PatchResult, PatchType, hookimpl
from patchspec.errors import did_you_mean
from patchspec.shapes import (NodeSite, ScopeIndex, all_names, constant_value, dim_params, drop_derived_shapes,
                              fresh_name, graph_only_copy, infer_graph_only, read_dims, rederive_shapes,
                              shape_dims, subgraphs, uses_of, walk_nodes, write_dim)

MARKER = "__patchspec_batch__"
MAX_ROUNDS = 16


@dataclass(frozen=True)
class BatchAxes:
    """Where the batch is: (input name, axis) pairs, the old batch, and notes for the details."""

    axes: tuple[tuple[str, int], ...]
    old_size: int  # the batch value baked into constants by the export (1 when it was symbolic)
    notes: tuple[str, ...] = ()


class SetBatchPatch(PatchType):
    name = "set_batch"
    description = ("Set the batch size (static or symbolic) on the inputs that carry it, re-derive every "
                   "other shape, and rewrite shape constants that provably bake in the old batch.")
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
                "description": ("inputs that carry the batch: a list of names (batch on axis 0) or a mapping "
                                "{name: axis}; default: detected from the first input"),
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

    def apply(self, model: onnx.ModelProto, params: dict, context: PatchContext) -> PatchResult:
        size = params["size"]
        batch = choose_batch_axes(model, params, context)
        where = ", ".join(f"{name}[{axis}]" for name, axis in batch.axes)
        inputs = _inputs_by_name(model.graph)
        _refuse_name_in_use(size, inputs, batch, context)
        if all(read_dims(inputs[name])[axis] == size for name, axis in batch.axes):
            return PatchResult(False, f"batch already {size} on {where}", batch.notes)
        trace = trace_batch_constants(model, batch, size)
        changed = [apply_rewrite(model, rewrite) for rewrite in trace.rewrites]
        for name, axis in batch.axes:
            write_dim(shape_dims(inputs[name])[axis], size)
            context.pinned_dims.get(name, {}).pop(axis, None)
        rederive_shapes(model, context.pinned_dims)
        counts = f"{len(trace.rewrites)} shape constant{'s' * (len(trace.rewrites) != 1)} rewritten"
        if trace.undecided:
            counts += f", {len(trace.undecided)} undecided"
        details = batch.notes + tuple(changed) + tuple(trace.undecided)
        return PatchResult(True, f"batch {size} on {where}; {counts}", details)


# -- which axes carry the batch ---------------------------------------------------------------------------
def _inputs_by_name(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    constants = {t.name for t in graph.initializer}
    return {info.name: info for info in graph.input if info.name not in constants}


def choose_batch_axes(model: onnx.ModelProto, params: dict, context: PatchContext) -> BatchAxes:
    inputs = _inputs_by_name(model.graph)
    if not inputs:
        context.fail("the model has no graph inputs to set a batch on")
    if "inputs" in params:
        return _given_axes(inputs, params["inputs"], context)
    return _detected_axes(inputs, context)


def _given_axes(inputs: dict, given, context: PatchContext) -> BatchAxes:
    pairs = [(name, 0, ("inputs", i)) for i, name in enumerate(given)] if isinstance(given, list) else \
        [(name, axis, ("inputs", name)) for name, axis in given.items()]
    chosen = []
    for name, axis, key in pairs:
        if name not in inputs:
            msg = f"input '{name}' is not a graph input of this model" + did_you_mean(name, inputs)
            context.fail(msg, key=key, hint=f"the model's inputs are: {', '.join(inputs)}")
        dims = read_dims(inputs[name])
        if dims is None or not -len(dims) <= axis < len(dims):
            rank = "unknown rank" if dims is None else f"rank {len(dims)}"
            context.fail(f"input '{name}' has {rank}; axis {axis} does not exist", key=key,
                         hint="give the axis that carries the batch as {name: axis}")
        chosen.append((name, axis % len(dims)))
    return BatchAxes(tuple(chosen), _old_size(inputs, chosen))


def _refuse_name_in_use(size, inputs: dict, batch: BatchAxes, context: PatchContext) -> None:
    """A symbolic batch named like another input axis would claim the two are equal."""
    if not isinstance(size, str):
        return
    chosen = set(batch.axes)
    clashes = [f"{name}[{axis}]" for name, info in inputs.items()
               for axis, dim in enumerate(read_dims(info) or []) if dim == size and (name, axis) not in chosen]
    if clashes:
        context.fail(f"'{size}' already names {', '.join(clashes)}, which is not a batch axis here",
                     key=("size",), hint="choose another batch name, or list those axes in 'inputs'")


def _old_size(inputs: dict, chosen) -> int:
    sizes = {read_dims(inputs[name])[axis] for name, axis in chosen}
    static = [s for s in sizes if isinstance(s, int)]
    return static[0] if len(static) == 1 and len(sizes) == 1 else 1


def _detected_axes(inputs: dict, context: PatchContext) -> BatchAxes:
    first_name, first = next(iter(inputs.items()))
    dims = read_dims(first)
    if not dims:
        context.fail(f"cannot find the batch: the first input '{first_name}' has no axis 0 "
                     f"({'unknown rank' if dims is None else 'a scalar'})",
                     hint="name the inputs and axes that carry the batch: inputs: {name: axis}")
    batch_name = dims[0]
    if isinstance(batch_name, str) and batch_name not in dims[1:]:
        chosen = [(name, axis) for name, info in inputs.items()
                  for axis, dim in enumerate(read_dims(info) or []) if dim == batch_name]
        return BatchAxes(tuple(chosen), 1)
    if isinstance(batch_name, str):
        chosen = [(name, 0) for name, info in inputs.items() if (read_dims(info) or [None])[0] == batch_name]
        others = [str(axis) for axis, dim in enumerate(dims) if dim == batch_name and axis]
        note = (f"'{batch_name}' also names axes {', '.join(others)} of '{first_name}': took axis 0 only; "
                f"tell them apart with rename_dims (tensor: {first_name}, axes: {{...}})")
        return BatchAxes(tuple(chosen), 1, (note,))
    old = batch_name if isinstance(batch_name, int) else 1
    chosen = [(name, 0) for name, info in inputs.items()
              if (read_dims(info) or [])[:1] in ([old], [None])]
    return BatchAxes(tuple(chosen), old)


# -- shape constants -------------------------------------------------------------------------------------
def trace_batch_constants(model: onnx.ModelProto, batch: BatchAxes, size) -> BatchTrace:
    """Find, on a graph-only copy, the shape constants that provably bake in the old batch."""
    light = graph_only_copy(model)
    marker = MARKER
    while marker in dim_params(model):
        marker += "_"
    light_inputs = _inputs_by_name(light.graph)
    for name, axis in batch.axes:
        write_dim(shape_dims(light_inputs[name])[axis], marker)
    trace = BatchTrace()
    for _ in range(MAX_ROUNDS):
        drop_derived_shapes(light.graph, {})
        inferred = infer_graph_only(light)
        found = find_batch_constants(inferred, marker, batch.old_size, size, {n for n, _ in batch.axes})
        trace.undecided = found.undecided
        if not found.rewrites:
            break
        for rewrite in found.rewrites:
            apply_rewrite(light, rewrite)
        trace.rewrites.extend(found.rewrites)
    return trace


SHAPE_OPERAND = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}
UNDECIDED_HINT = "if it bakes in the batch, replace it with replace_initializer (a `shape:` expression)"


@dataclass(frozen=True)
class Rewrite:
    """One shape constant to change: the node (by walk position), its operand, old and new values."""

    position: int
    operand: int
    new_values: tuple[int, ...]
    label: str  # readable suffix for a rewired copy: batch_32, batch_N


@dataclass
class BatchTrace:
    rewrites: list[Rewrite] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)


def find_batch_constants(inferred: onnx.ModelProto, marker: str, old: int, size, batch_inputs) -> BatchTrace:
    """Shape constants of ``inferred`` (batch axes named ``marker``) that bake in the old batch."""
    index = ScopeIndex()
    reached = reachable(inferred.graph, batch_inputs)
    sites = list(walk_nodes(inferred.graph))
    trace = BatchTrace()
    for site in sites:
        node = site.node
        if node.op_type not in SHAPE_OPERAND or node.domain not in ("", "ai.onnx"):
            continue
        operand = SHAPE_OPERAND[node.op_type]
        if len(node.input) <= operand or not node.input[operand]:
            continue
        values = index.constant(node.input[operand], site.scopes)
        if values is None or values.ndim != 1:
            continue
        values = [int(v) for v in values]
        if node.op_type == "ConstantOfShape":
            if old in values and _feeds_batch(node.output[0], sites, index, marker):
                trace.undecided.append(_undecided(site, values, "its output meets the batch"))
            continue
        data = node.input[0]
        data_dims = index.dims(data, site.scopes) or []
        out_dims = index.dims(node.output[0], site.scopes) or []
        if marker in out_dims or (marker not in data_dims and data not in reached):
            continue
        new_values = _proved_batch_values(node, values, data_dims, marker, old, size)
        if new_values is not None:
            trace.rewrites.append(Rewrite(site.position, operand, tuple(new_values), f"batch_{size}"))
        elif _may_bake_batch(node, values, data_dims, marker, old):
            trace.undecided.append(_undecided(site, values, "it follows the batch, which its output lost"))
    return trace


def _proved_batch_values(node, values, data_dims, marker, old, size) -> list[int] | None:
    allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
    for axis, dim in enumerate(data_dims):
        if dim != marker:
            continue
        if node.op_type == "Reshape" and axis < len(values) and values[axis] == old:
            prefix_ok = all(v == d or (v == 0 and not allowzero) for v, d in zip(values[:axis], data_dims))
            new = size if isinstance(size, int) else (0 if not allowzero else (-1 if -1 not in values else None))
            if prefix_ok and new is not None:
                return values[:axis] + [new] + values[axis + 1:]
        if node.op_type == "Expand" and old != 1:
            slot = axis + len(values) - len(data_dims)
            if 0 <= slot < len(values) and values[slot] == old:
                new = size if isinstance(size, int) else 1
                return values[:slot] + [new] + values[slot + 1:]
    return None


def _may_bake_batch(node, values, data_dims, marker, old) -> bool:
    """The old batch sits where the batch is, or a Reshape's size is fixed while its input's is not."""
    axes = [axis for axis, dim in enumerate(data_dims) if dim == marker] or [0]
    if node.op_type == "Reshape":
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        copies_batch = not allowzero and any(axis < len(values) and values[axis] == 0 for axis in axes)
        fixed_size = -1 not in values and not copies_batch
        return fixed_size or any(axis < len(values) and values[axis] == old for axis in axes)
    return old != 1 and old in values


def _feeds_batch(name: str, sites: list[NodeSite], index: ScopeIndex, marker: str) -> bool:
    for site in sites:
        if name in site.node.input:
            others = [index.dims(n, site.scopes) or [] for n in site.node.input if n and n != name]
            if any(marker in dims for dims in others):
                return True
    return False


def _undecided(site: NodeSite, values: list[int], why: str) -> str:
    node = site.node
    label = node.name or node.output[0]
    return f"undecided: {node.op_type} '{label}' has constant shape {values}; {why}; {UNDECIDED_HINT}"


def reachable(graph: onnx.GraphProto, starts) -> set[str]:
    """Names of the tensors computed from ``starts`` (through If/Loop/Scan bodies too)."""
    reached = set(starts)

    def visit(each: onnx.GraphProto) -> None:
        for node in each.node:
            hit = any(name in reached for name in node.input if name)
            for sub in subgraphs(node):
                if hit:
                    reached.update(info.name for info in sub.input)
                visit(sub)
                hit = hit or any(info.name in reached for info in sub.output)
            if hit:
                reached.update(name for name in node.output if name)

    visit(graph)
    return reached


def apply_rewrite(model: onnx.ModelProto, rewrite: Rewrite) -> str:
    """Change one shape constant of ``model``; a shared constant is copied, only this use rewired."""
    site = next(s for s in walk_nodes(model.graph) if s.position == rewrite.position)
    name = site.node.input[rewrite.operand]
    source = ScopeIndex().constant_source(name, site.scopes)
    old_values = constant_value(source)
    new_array = np.array(rewrite.new_values, dtype=old_values.dtype)
    label = f"{site.node.op_type} '{site.node.name or site.node.output[0]}'"
    change = f"{old_values.tolist()} -> {list(rewrite.new_values)}"
    declared = {info.name for graph in site.scopes for info in graph.input}
    if uses_of(model, name) == 1 and name not in declared:
        _overwrite_constant(source, numpy_helper.from_array(new_array, name))
        return f"rewrote {label}: shape constant '{name}' {change}"
    new_name = fresh_name(f"{name}_{rewrite.label}", all_names(model))
    site.graph.initializer.append(numpy_helper.from_array(new_array, new_name))
    site.node.input[rewrite.operand] = new_name
    return f"rewrote {label}: shape {change} in new initializer '{new_name}' ('{name}' is shared, left as it was)"


def _overwrite_constant(source, tensor: onnx.TensorProto) -> None:
    if isinstance(source, onnx.TensorProto):
        source.CopyFrom(tensor)
        return
    del source.attribute[:]
    source.attribute.append(onnx.helper.make_attribute("value", tensor))


@hookimpl
def register_patch_types(register):
    register(SetBatchPatch)
