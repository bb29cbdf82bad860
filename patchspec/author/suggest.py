"""``patchspec inspect --suggest``: constants that bake an export-time size, and the lines that free them.

A tracer writes the sizes it saw into shape constants: a Reshape to ``[1, 85, 96]`` for a 64x96 image
seen at stride 8. Here each integer entry of the shape operand of a Reshape, Expand, Tile,
ConstantOfShape, Slice (starts, ends) and Resize (``sizes``) is matched against the input dims the
model declares (the export's sizes): ``dim(x, a)``, ``dim(x, a) // s`` (s a power of two, a stride),
``dim(x, a) * dim(y, b) // s`` (a flattened ``H*W``), ``dim(x, a) * k``. Each constant with a match
gets the ``replace_initializer`` lines that compute it at run time, and the ``rename_dims`` line
that frees the input dims it follows. An entry no expression explains from one export is said so:
``patchspec derive`` with a second export tells sizes from constants.

A symbolic dim has no size in the model; ``--shape x=...`` gives the size the export was traced at,
and the dim is matched at that size (it needs no rename_dims: it is free already).

Only the graph is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from patchspec.errors import UsageError, did_you_mean
from patchspec.model.graph import ScopeIndex, walk_nodes
from patchspec.model.io import load_model
from patchspec.shapes.annotations import collector_paused, format_dims, read_dims
from patchspec.shapes.batch.axes import BatchAxesError, batch_axes, fed_inputs
from patchspec.shapes.expressions import quote_tensor

#: which operands of which ops are shapes (or bounds) that a tracer bakes
SHAPE_OPERANDS = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Slice": (1, 2),
    "Resize": (3,),
}
STRIDES = (2, 4, 8, 16, 32, 64)
#: an input dim smaller than this is not taken for a size (a batch of 1, 3 colour channels)
SMALLEST_SIZE = 8
#: entries this small are not matched: a 2x2 merge, a pair of coordinates
SMALLEST_ENTRY = 3


@dataclass(frozen=True)
class Dim:
    tensor: str
    axis: int
    size: int
    symbolic: bool = False  # sized by --shape: free already

    @property
    def text(self) -> str:
        return f"dim({quote_tensor(self.tensor)}, {self.axis})"


@dataclass
class Suggestion:
    """One baked constant: where it is read, its values, and the expression found for each entry."""

    node: str  # "Reshape '/head/Reshape'"
    selector: dict[str, str]
    operand: int
    values: list[int]
    expressions: dict[int, str] = field(default_factory=dict)
    ambiguous: dict[int, str] = field(default_factory=dict)  # entry -> the other dim it could be
    dims: set[tuple[str, int]] = field(default_factory=set)  # (input, axis) pairs the expressions read
    free: set[tuple[str, int]] = field(default_factory=set)  # those of them symbolic already (no rename_dims)

    @property
    def items(self) -> list[int | str]:
        return [self.expressions.get(i, v) for i, v in enumerate(self.values)]

    def spec_lines(self) -> list[str]:
        return [
            "  - replace_initializer:",
            f"      select: {_flow(self.selector)}",
            f"      input: {self.operand}",
            f"      shape: {_flow_list(self.items)}",
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "select": self.selector,
            "input": self.operand,
            "values": self.values,
            "shape": self.items,
            "ambiguous": {str(k): v for k, v in self.ambiguous.items()},
        }


def suggest(model: onnx.ModelProto, given: dict[str, list[int]] | None = None) -> tuple[list[Suggestion], list[str]]:
    """The constants whose entries follow the declared input dims (or the ``given`` sizes of symbolic
    ones), and notes on what cannot be told."""
    given = _checked_sizes(model, given or {})
    dims, symbolic, features = [], [], set()
    try:
        batch = set(batch_axes(model).axes)
    except BatchAxesError:
        batch = set()
    for name, info in fed_inputs(model.graph).items():
        declared = read_dims(info) or []
        for axis, size in enumerate(declared):
            if axis == _feature_axis(len(declared)):
                features.add(size)
                continue  # channels and hidden sizes belong to the weights, not to the input's size
            if isinstance(size, int) and size >= SMALLEST_SIZE:
                dims.append(Dim(name, axis, size))
            elif not isinstance(size, int) and name in given and given[name][axis] >= SMALLEST_SIZE:
                dims.append(Dim(name, axis, given[name][axis], symbolic=True))
            elif not isinstance(size, int) and (name, axis) not in batch and name not in given:
                symbolic.append(f"{name}[{axis}]")
    index = ScopeIndex()
    found, notes = [], []
    if symbolic:
        notes.append(
            f"{', '.join(symbolic)} {'is' if len(symbolic) == 1 else 'are'} symbolic: the size the export saw "
            "there is not in the model, so constants that follow it cannot be told from one export; "
            "give the sizes it was traced at (--shape NAME=D0,D1,...), or run "
            "'patchspec derive A.onnx B.onnx', which finds them from two exports at two sizes"
        )
    for site in walk_nodes(model.graph):
        node = site.node
        for operand in SHAPE_OPERANDS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ():
            if operand >= len(node.input) or not node.input[operand]:
                continue
            value = index.constant(node.input[operand], site.scopes)
            if value is None or np.asarray(value).dtype.kind not in "iu" or np.asarray(value).ndim != 1:
                continue
            suggestion = _match(node, operand, [int(v) for v in np.asarray(value)], dims, features)
            if suggestion is not None and suggestion.expressions:
                found.append(suggestion)
    return found, notes


def freeing_lines(suggestions: list[Suggestion], model: onnx.ModelProto) -> list[str]:
    """rename_dims lines that make the input dims the expressions read symbolic (their names: the
    input's name and axis), so the model accepts other sizes."""
    used: dict[str, dict[int, str]] = {}
    for suggestion in suggestions:
        for tensor, axis in sorted(suggestion.dims - suggestion.free):
            used.setdefault(tensor, {})[axis] = {2: "height", 3: "width"}.get(axis, f"{tensor}_{axis}")
    lines = []
    for tensor, axes in used.items():
        lines += [
            "  - rename_dims:",
            f"      tensor: {json.dumps(tensor)}",
            f"      axes: {{{', '.join(f'{a}: {n}' for a, n in sorted(axes.items()))}}}",
        ]
    return lines


def suggest_report(path: Path, given: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """What ``inspect --suggest`` prints (as JSON): the inputs, the suggestions, their spec lines."""
    with collector_paused():  # linear in the graph: no collection walks the whole graph's facts
        return _report(path, given)


def _report(path: Path, given: dict[str, list[int]] | None) -> dict[str, Any]:
    model = load_model(path)
    suggestions, notes = suggest(model, given)
    lines = freeing_lines(suggestions, model) + [line for s in suggestions for line in s.spec_lines()]
    return {
        "model": str(path),
        "inputs": [{"name": name, "dims": read_dims(info)} for name, info in fed_inputs(model.graph).items()],
        "suggestions": [s.to_json() for s in suggestions],
        "spec_lines": lines,
        "notes": notes,
    }


def format_suggestions(data: dict[str, Any]) -> str:
    lines = [f"{data['model']}: inputs as exported:"]
    lines += [f"  {i['name']}  {format_dims(i['dims'])}" for i in data["inputs"]]
    notes = [f"note: {n}" for n in data["notes"]]
    if not data["suggestions"]:
        lines.append("no shape constant follows the declared input sizes: nothing to suggest")
        return "\n".join(lines + notes)
    lines.append(f"{len(data['suggestions'])} constant(s) bake an export-time size:")
    for s in data["suggestions"]:
        lines.append(f"  {s['node']} input {s['input']}: {_flow_list(s['values'])} -> {_flow_list(s['shape'])}")
        lines += [f"    entry {k}: ambiguous, could also be {v}; check it" for k, v in s["ambiguous"].items()]
    lines.append("add to the spec's patches (after set_batch, if there is one):")
    lines += data["spec_lines"]
    return "\n".join(lines + notes)


def _flow_list(items: list[Any]) -> str:
    """``[1, 3, "dim(image, 2) // 2"]``: a list as a spec writes it (not Python's repr)."""
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def _checked_sizes(model: onnx.ModelProto, given: dict[str, list[int]]) -> dict[str, list[int]]:
    inputs = fed_inputs(model.graph)
    for name, sizes in given.items():
        if name not in inputs:
            msg = f"--shape {name}: the model has no input {name!r}{did_you_mean(name, inputs)}"
            raise UsageError(msg, f"its inputs: {', '.join(inputs)}")
        rank = len(read_dims(inputs[name]) or [])
        if len(sizes) != rank:
            raise UsageError(f"--shape {name}: the input has {rank} axes, got {len(sizes)} sizes")
    return given


def _feature_axis(rank: int) -> int | None:
    """The axis that holds features: 1 in [N, C, H, W] (and 5-D), the last in [N, C], [N, T, C]."""
    if rank >= 4:
        return 1
    return rank - 1 if rank >= 2 else None


def _match(
    node: onnx.NodeProto, operand: int, values: list[int], dims: list[Dim], features: set[int | str | None]
) -> Suggestion | None:
    label = f"{node.op_type} '{node.name or node.output[0]}'"
    selector = {"name": node.name} if node.name else {"produces": node.output[0]}
    suggestion = Suggestion(label, selector, operand, values)
    heads = {k + j for k in range(len(values) - 1) if values[k] * values[k + 1] in features for j in (0, 1)}
    for entry, value in enumerate(values):
        if value < SMALLEST_ENTRY or value >= 2**31 or value in features or entry in heads:
            continue  # a channel count is the weights', not the input size's; so are heads x head size
        matches = _expressions(value, dims)
        if not matches:
            continue
        (text, used), *others = matches
        suggestion.expressions[entry] = text
        suggestion.dims.update(used)
        suggestion.free.update((d.tensor, d.axis) for d in dims if d.symbolic and (d.tensor, d.axis) in used)
        if others:
            suggestion.ambiguous[entry] = others[0][0]
    return suggestion


def _expressions(value: int, dims: list[Dim]) -> list[tuple[str, set[tuple[str, int]]]]:
    """Every expression that gives ``value`` at the export's sizes, simplest first (more than one: ambiguous,
    and one export cannot tell which; ``patchspec derive`` can)."""
    levels = [
        [(d.text, {(d.tensor, d.axis)}) for d in dims if d.size == value],
        [
            (f"{d.text} // {s}", {(d.tensor, d.axis)})
            for d in dims
            for s in STRIDES
            if d.size % s == 0 and d.size // s == value
        ],
        [
            (
                f"{a.text} * {b.text} // {s * s}" if s > 1 else f"{a.text} * {b.text}",
                {(a.tensor, a.axis), (b.tensor, b.axis)},
            )
            for a, b in combinations(dims, 2)
            for s in (1, *STRIDES)
            if a.size % s == 0 and b.size % s == 0 and (a.size // s) * (b.size // s) == value
        ],
        [(f"{d.text} * {k}", {(d.tensor, d.axis)}) for d in dims for k in (2, 3, 4) if d.size * k == value],
    ]
    return [match for level in levels for match in level]  # the simplest first; any other is an ambiguity


def _flow(mapping: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in mapping.items()) + "}"


__all__ = ["Suggestion", "format_suggestions", "freeing_lines", "suggest", "suggest_report"]
