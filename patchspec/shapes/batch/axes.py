"""Which input axes carry the batch: given by the user, or found the way the contract says.

Given: a list of input names (batch on axis 0) or a mapping ``{name: axis}``. Found: every input
axis that carries the batch's dim_param (the dim_param on axis 0 of the first input, wherever else
it appears), or, when the model was exported at a fixed batch or with unnamed dims, axis 0 of every
input whose axis 0 is that batch or unknown; and axis 0 of every input no node reads whose axis 0 is
not a fixed size (it takes the batch with the others). ``set_batch`` and ``patchspec init`` both ask here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from patchspec.errors import did_you_mean
from patchspec.model.graph import walk_nodes
from patchspec.shapes.annotations import read_dims


@dataclass(frozen=True)
class BatchAxes:
    """Where the batch is: (input name, axis) pairs, the old batch, and notes for the details."""

    axes: tuple[tuple[str, int], ...]
    old_size: int  # the batch value baked into constants by the export (1 when it was symbolic)
    notes: tuple[str, ...] = ()
    #: inputs among ``axes`` that no node reads, given the batch only so that every input has it
    unread: tuple[str, ...] = ()


class BatchAxesError(ValueError):
    """The batch axes cannot be given or found; ``key`` is where in the params, ``hint`` what to do."""

    def __init__(self, message: str, key: tuple[Any, ...] = (), hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.key, self.hint = message, key, hint


def fed_inputs(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    """Graph inputs that must be fed, by name (an initializer listed as an input is not one)."""
    constants = {t.name for t in graph.initializer}
    return {info.name: info for info in graph.input if info.name not in constants}


#: the batch axes as set_batch's ``inputs`` param gives them: a list of names (axis 0), or {name: axis}
Given = Sequence[str] | Mapping[str, int]


def batch_axes(model: onnx.ModelProto, given: Given | None = None) -> BatchAxes:
    """The batch axes ``given`` (a list of names, or ``{name: axis}``), or else the detected ones."""
    inputs = fed_inputs(model.graph)
    if not inputs:
        raise BatchAxesError("the model has no graph inputs to set a batch on")
    if given is not None:
        return _given_axes(inputs, given)
    return _with_unread(_detected_axes(inputs), inputs, model.graph)


def _with_unread(found: BatchAxes, inputs: dict[str, onnx.ValueInfoProto], graph: onnx.GraphProto) -> BatchAxes:
    """Add axis 0 of every input no node reads whose axis 0 is not a fixed size (a paddle2onnx
    ``length [DynamicDimension.2]``): nothing proves it is the batch, nothing can contradict it, and
    a model set to a static batch is then static on every input."""
    chosen = {name for name, _ in found.axes}
    free = [
        name
        for name, info in inputs.items()
        if name not in chosen and (dims := read_dims(info)) and not isinstance(dims[0], int)
    ]
    if not free:  # the walk over every node below is for these only (most models have none)
        return found
    read = {name for site in walk_nodes(graph) for name in site.node.input}
    read |= {info.name for info in graph.output}
    unread = [name for name in free if name not in read]
    if not unread:
        return found
    notes = tuple(
        f"'{name}'[0] ({(read_dims(inputs[name]) or ['?'])[0] or 'unnamed'}): no node reads it; it takes the batch "
        "with the other inputs, so a static batch is static on every input (any values do)"
        for name in unread
    )
    axes = found.axes + tuple((name, 0) for name in unread)
    return BatchAxes(axes, found.old_size, found.notes + notes, tuple(unread))


def _given_axes(inputs: dict[str, onnx.ValueInfoProto], given: Given) -> BatchAxes:
    pairs: list[tuple[str, int, tuple[Any, ...]]] = (
        [(name, axis, ("inputs", name)) for name, axis in given.items()]
        if isinstance(given, Mapping)
        else [(name, 0, ("inputs", i)) for i, name in enumerate(given)]
    )
    chosen = []
    for name, axis, key in pairs:
        if name not in inputs:
            msg = f"input '{name}' is not a graph input of this model" + did_you_mean(name, inputs)
            raise BatchAxesError(msg, key, f"the model's inputs are: {', '.join(inputs)}")
        dims = read_dims(inputs[name])
        if dims is None or not -len(dims) <= axis < len(dims):
            rank = "unknown rank" if dims is None else f"rank {len(dims)}"
            raise BatchAxesError(
                f"input '{name}' has {rank}; axis {axis} does not exist",
                key,
                "give the axis that carries the batch as {name: axis}",
            )
        chosen.append((name, axis % len(dims)))
    return BatchAxes(tuple(chosen), _old_size(inputs, chosen))


def _old_size(inputs: dict[str, onnx.ValueInfoProto], chosen: list[tuple[str, int]]) -> int:
    sizes = {(read_dims(inputs[name]) or [])[axis] for name, axis in chosen}
    static = [s for s in sizes if isinstance(s, int)]
    return static[0] if len(static) == 1 and len(sizes) == 1 else 1


def _detected_axes(inputs: dict[str, onnx.ValueInfoProto]) -> BatchAxes:
    first_name, first = next(iter(inputs.items()))
    dims = read_dims(first)
    if not dims:
        raise BatchAxesError(
            f"cannot find the batch: the first input '{first_name}' has no axis 0 "
            f"({'unknown rank' if dims is None else 'a scalar'})",
            hint="name the inputs and axes that carry the batch: inputs: {name: axis}",
        )
    batch_name = dims[0]
    if isinstance(batch_name, str) and batch_name not in dims[1:]:
        chosen = [
            (name, axis)
            for name, info in inputs.items()
            for axis, dim in enumerate(read_dims(info) or [])
            if dim == batch_name
        ]
        return BatchAxes(tuple(chosen), 1)
    if isinstance(batch_name, str):
        chosen = [(name, 0) for name, info in inputs.items() if (read_dims(info) or [None])[0] == batch_name]
        others = [str(axis) for axis, dim in enumerate(dims) if dim == batch_name and axis]
        note = (
            f"'{batch_name}' also names axes {', '.join(others)} of '{first_name}': took axis 0 only; "
            f"tell them apart with rename_dims (tensor: {first_name}, axes: {{...}})"
        )
        return BatchAxes(tuple(chosen), 1, (note,))
    old = batch_name if isinstance(batch_name, int) else 1
    chosen = [(name, 0) for name, info in inputs.items() if (read_dims(info) or [])[:1] in ([old], [None])]
    return BatchAxes(tuple(chosen), old)


__all__ = ["BatchAxes", "BatchAxesError", "batch_axes", "fed_inputs"]
