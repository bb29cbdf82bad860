"""The ``rename_dims`` patch type: name, fix, or tell apart the dims of chosen tensors.

Targets: ``tensor`` (name patterns, graph inputs and outputs included) or ``select`` (a node
selector) with ``tensors: outputs | inputs | all``; without a target, ``map`` and ``unique`` apply
to every annotation of the model. Actions, in this order: ``map`` (rename a dim_param), ``axes``
(set an axis to a name or size), ``unique`` (a fresh name for every other symbolic or unknown dim).

Renamed dims are pinned (``PINNED_DIMS`` in the run's ``context.state``), so a later patch that re-derives shapes
keeps them. When a graph input changed, the intermediate shapes are re-derived at once so the new
names propagate through the graph.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

from patchspec import Param, ParamProblem, PatchContext, PatchResult, PatchType, api, hookimpl

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # annotations only: onnx and numpy are imported where a model is patched
    import onnx

NAME_OR_SIZE = {
    "description": "a symbolic name (string) or a fixed size (integer)",
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0}],
}
MAX_DETAILS = 40


class RenameDimsParams(TypedDict):
    tensor: NotRequired[
        Annotated[
            str | list[str],
            Param(
                "tensors to change: a name pattern (glob, or 're:' + a regex matched in full) or a "
                "list of them; graph inputs, outputs and annotated intermediates",
                schema={
                    "anyOf": [
                        {"type": "string", "minLength": 1},
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                    ]
                },
            ),
        ]
    ]
    select: NotRequired[
        Annotated[dict[str, Any], Param(api.SELECTOR_SCHEMA["description"], schema=api.SELECTOR_SCHEMA)]
    ]
    tensors: NotRequired[
        Annotated[
            Literal["outputs", "inputs", "all"],
            Param("with select: which tensors of the selected nodes (default outputs)"),
        ]
    ]
    axes: NotRequired[
        Annotated[
            dict[int, int | str],
            Param(
                "{AXIS: NAME_OR_SIZE}: set that axis of each targeted tensor (negative counts from the end)",
                schema={"type": "object", "minProperties": 1, "additionalProperties": NAME_OR_SIZE},
            ),
        ]
    ]
    map: NotRequired[
        Annotated[
            dict[str, int | str],
            Param(
                "{OLD: NAME_OR_SIZE}: rename the dim_param OLD wherever it appears on the targets",
                schema={"type": "object", "minProperties": 1, "additionalProperties": NAME_OR_SIZE},
            ),
        ]
    ]
    unique: NotRequired[Annotated[bool, Param("give every symbolic or unknown dim of the targets its own fresh name")]]


class RenameDimsPatch(PatchType[RenameDimsParams]):
    name = "rename_dims"
    description = (
        "Rename, fix or tell apart dims of chosen tensors (or of the whole model): "
        "axes, map and unique; renamed dims survive later shape re-derivation."
    )

    def check_params(self, params: RenameDimsParams) -> Iterator[ParamProblem]:
        yield from _check_target(params)
        if not params.get("axes") and not params.get("map") and not params.get("unique"):
            yield (), "nothing to do: give one or more of 'axes', 'map', 'unique: true'"
        for axis in params.get("axes") or {}:
            if not isinstance(axis, int) or isinstance(axis, bool):
                yield ("axes", axis), f"an axis is an integer (0, 1, ..., or -1 for the last), got {axis!r}"
        for old in params.get("map") or {}:
            if not isinstance(old, str):
                yield ("map", old), f"'map' renames api.dim_params (strings), got {old!r}; set fixed sizes with 'axes'"

    def apply(self, model: onnx.ModelProto, params: RenameDimsParams, context: PatchContext) -> PatchResult:
        targets = target_annotations(model, params, context)
        before = {id(info): api.read_dims(info) for info in targets}
        renamed = Renamer(model, context)
        if mapping := params.get("map"):
            renamed.map_params(targets, mapping)
        if axes := params.get("axes"):
            renamed.set_axes(targets, axes)
        if params.get("unique"):
            renamed.make_unique(targets)
        changed = [info for info in targets if api.read_dims(info) != before[id(info)]]
        if not changed:
            return PatchResult(False, "every targeted dim already has that name or size")
        inputs_changed = {info.name for info in model.graph.input} & {info.name for info in changed}
        if inputs_changed:
            api.rederive_shapes(model, context.state)
        details = [
            f"{info.name}: {api.format_dims(before[id(info)])} -> {api.format_dims(api.read_dims(info))}"
            for info in changed[:MAX_DETAILS]
        ]
        if len(changed) > MAX_DETAILS:
            details.append(f"... and {len(changed) - MAX_DETAILS} more tensors")
        summary = f"{renamed.count} dim{'s' * (renamed.count != 1)} on {len(changed)} tensor{'s' * (len(changed) != 1)}"
        if inputs_changed:
            summary += "; shapes re-derived from the new inputs"
        return PatchResult(True, summary, tuple(details))


def _check_target(params: RenameDimsParams) -> Iterator[ParamProblem]:
    if "tensor" in params and "select" in params:
        yield (), "give either 'tensor' or 'select' as the target, not both"
    if "tensors" in params and "select" not in params:
        yield ("tensors",), "'tensors' chooses among the inputs/outputs of selected nodes: it needs 'select'"
    if "axes" in params and "tensor" not in params and "select" not in params:
        yield ("axes",), "'axes' needs a target ('tensor' or 'select'): axis numbers differ from tensor to tensor"
    if "select" in params:
        for key, message in api.check_selector(params["select"]):
            yield ("select", *key), message
    patterns = params.get("tensor")
    for index, pattern in enumerate(patterns if isinstance(patterns, list) else [patterns] if patterns else []):
        if isinstance(pattern, str) and pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as exc:
                key = ("tensor", index) if isinstance(patterns, list) else ("tensor",)
                yield key, f"invalid regular expression {pattern[3:]!r}: {exc}"


# -- targets ---------------------------------------------------------------------------------------------
def target_annotations(
    model: onnx.ModelProto, params: RenameDimsParams, context: PatchContext
) -> list[onnx.ValueInfoProto]:
    """The annotations (with shapes) of the targeted tensors; every one of their copies in any graph."""
    if "tensor" in params:
        names = _names_from_patterns(model, params["tensor"], context)
    elif "select" in params:
        names = _names_from_selection(model, params["select"], params.get("tensors", "outputs"), context)
    else:
        return [info for info in api.all_annotations(model.graph) if api.has_shape(info)]
    found = _annotations_named(model, names)
    if any(not found.get(name) for name in names):
        api.rederive_shapes(model, context.state)  # intermediates without annotations: derive them
        found = _annotations_named(model, names)
    return [info for name in names for info in found.get(name, [])]


def _annotations_named(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, list[onnx.ValueInfoProto]]:
    wanted = set(names)
    found: dict[str, list[onnx.ValueInfoProto]] = {}
    for info in api.all_annotations(model.graph):
        if info.name in wanted and api.has_shape(info):
            found.setdefault(info.name, []).append(info)
    return found


def _tensor_names(model: onnx.ModelProto) -> list[str]:
    """Names of non-constant tensors, in graph order: inputs, node outputs, outputs, annotations."""
    names: dict[str, None] = {}
    for graph in api.all_graphs(model.graph):
        constants = {t.name for t in graph.initializer}
        constants |= {n.output[0] for n in graph.node if n.op_type == "Constant" and n.output}
        for name in (
            [i.name for i in graph.input]
            + [o for n in graph.node for o in n.output]
            + [o.name for o in graph.output]
            + [v.name for v in graph.value_info]
        ):
            if name and name not in constants:
                names.setdefault(name)
    return list(names)


def _names_from_patterns(model: onnx.ModelProto, patterns: str | list[str], context: PatchContext) -> list[str]:
    listed = patterns if isinstance(patterns, list) else [patterns]
    candidates = _tensor_names(model)
    chosen: dict[str, None] = {}
    for index, pattern in enumerate(listed):
        matched = [name for name in candidates if _matches(pattern, name)]
        if not matched:
            key = ("tensor", index) if isinstance(patterns, list) else ("tensor",)
            near = api.did_you_mean(pattern.removeprefix("re:"), candidates)
            context.fail(
                f"no tensor of this model matches '{pattern}'{near}",
                key=key,
                hint="'patchspec inspect MODEL' lists the tensors",
            )
        chosen.update(dict.fromkeys(matched))
    return list(chosen)


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def _names_from_selection(
    model: onnx.ModelProto, selector: dict[str, Any], which: str, context: PatchContext
) -> list[str]:
    constants = {t.name for g in api.all_graphs(model.graph) for t in g.initializer}
    constants |= {
        n.output[0] for g in api.all_graphs(model.graph) for n in g.node if n.op_type == "Constant" and n.output
    }
    names: dict[str, None] = {}
    for ref in api.select_nodes(model, selector, context, key=("select",)):
        picked = (list(ref.node.input) if which in ("inputs", "all") else []) + (
            list(ref.node.output) if which in ("outputs", "all") else []
        )
        names.update(dict.fromkeys(n for n in picked if n and n not in constants))
    return list(names)


def _dims(info: onnx.ValueInfoProto) -> list[int | str | None]:
    """The dims of a target (targets always have a shape)."""
    return api.read_dims(info) or []


# -- actions ---------------------------------------------------------------------------------------------
class Renamer:
    """Applies map/axes/unique to annotations, counts changed dims and pins them in the context."""

    def __init__(self, model: onnx.ModelProto, context: PatchContext) -> None:
        self.context = context
        self.inputs = {info.name for info in model.graph.input}
        self.taken = api.dim_params(model)
        self.touched: set[tuple[str, int]] = set()
        self.fresh: dict[tuple[str, int], str] = {}
        self.count = 0

    def set(self, info: onnx.ValueInfoProto, axis: int, value: int | str, *, pin: bool = True) -> None:
        dim = api.shape_dims(info)[axis]
        self.touched.add((info.name, axis))
        if api.read_dim(dim) != value:
            api.write_dim(dim, value)
            self.count += 1
        if pin:
            self.context.state.get(api.PINNED_DIMS).setdefault(info.name, {})[axis] = value

    def map_params(self, targets: list[onnx.ValueInfoProto], mapping: dict[str, int | str]) -> None:
        seen = {d for info in targets for d in _dims(info) if isinstance(d, str)}
        for old in mapping:
            if old not in seen:
                msg = f"no targeted tensor has a dim named '{old}'" + api.did_you_mean(old, seen)
                self.context.fail(
                    msg, key=("map", old), hint=f"dim names on the targets: {', '.join(sorted(seen)) or 'none'}"
                )
        for info in targets:
            for axis, dim in enumerate(_dims(info)):
                if isinstance(dim, str) and dim in mapping:
                    self.set(info, axis, mapping[dim])

    def set_axes(self, targets: list[onnx.ValueInfoProto], axes: dict[int, int | str]) -> None:
        for info in targets:
            rank = len(api.shape_dims(info))
            for axis, value in axes.items():
                if not -rank <= axis < rank:
                    self.context.fail(
                        f"tensor '{info.name}' has rank {rank} {api.format_dims(api.read_dims(info))}; "
                        f"axis {axis} does not exist",
                        key=("axes", axis),
                    )
                self.set(info, axis % rank, value)

    def make_unique(self, targets: list[onnx.ValueInfoProto]) -> None:
        named_by_hand = set(self.touched)  # set by map or axes in this step: keep those names
        for info in targets:
            for axis, dim in enumerate(_dims(info)):
                if isinstance(dim, int) or (info.name, axis) in named_by_hand:
                    continue
                key = (info.name, axis)
                if key not in self.fresh:
                    self.fresh[key] = api.fresh_name(f"{info.name}_dim{axis}", self.taken)
                    self.taken.add(self.fresh[key])
                # only graph inputs are pinned: re-derived intermediates get unique names anyway
                self.set(info, axis, self.fresh[key], pin=info.name in self.inputs)


@hookimpl
def register_patch_types(register: Callable[[type], None]) -> None:
    register(RenameDimsPatch)
