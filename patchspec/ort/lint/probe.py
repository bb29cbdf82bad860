"""``patchspec inspect`` and the ``lint`` verifier: what a model declares, and where it lies.

The lint runs ONNX Runtime on a graph-only copy of the model whose annotated tensors (value_info)
are exposed as extra outputs, reads the sizes every tensor actually has for the given input shapes,
and reports each dim_param bound to different sizes: the cause of ONNX Runtime's "Shape mismatch
attempting to re-use buffer". The copy drops every shape annotation (ORT would trip over the very
aliasing being looked for); the list of annotated names maps the results back. External weights
are read by ORT from the model's own folder (the probe itself stays in memory): nothing is
written, and the input is never modified or loaded whole.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from patchspec.model.external_data import is_external, iter_tensors
from patchspec.model.graph import bodies, subgraphs
from patchspec.ort.lint.probe_inputs import (
    InputOptionError,
    declared_dims,
    feed_values,
    model_inputs,
    probe_shapes,
    value_shapes,
)
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import build_session, run_bounded
from patchspec.ort.settings import DEFAULT_MAX_ELEMENTS, DEFAULT_TIMEOUT


@dataclass
class Binding:
    """A dim_param (or a fixed size) on one axis of one annotated tensor, and its size at run time."""

    tensor: str
    axis: int
    size: int


@dataclass
class Conflict:
    """One dim_param that ran at several sizes: {size: [tensor[axis], ...]}, in order of appearance."""

    dim_param: str
    sizes: dict[int, list[Binding]]

    def parts(self, limit: int = 4) -> list[str]:
        """``80 on /lat.0/Conv_output_0 (axes 2, 3), c3 (axes 2, 3) and 3 more``, one per size."""
        parts = []
        for size, bindings in self.sizes.items():
            shown = _tensor_axes(bindings)
            more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
            parts.append(f"{size} on {', '.join(shown[:limit])}{more}")
        return parts

    def text(self, limit: int = 4) -> str:
        return f"'{self.dim_param}': " + "; ".join(self.parts(limit))


@dataclass
class LintResult:
    """Sizes found by running the model, and what the annotations got wrong about them."""

    input_shapes: dict[str, list[int]]
    shapes_given: bool
    conflicts: list[Conflict] = field(default_factory=list)
    wrong_sizes: list[str] = field(default_factory=list)  # fixed annotations that ran differently
    probed: int = 0  # annotated tensors whose sizes were read
    not_probed: int = 0  # annotations inside subgraphs (cannot be exposed as outputs)
    #: inputs fed chosen values instead of random ones: {name: {"value", "origin": given|graph, "why"}}
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None  # ONNX Runtime could not run the probe

    @property
    def clean(self) -> bool:
        return self.error is None and not self.conflicts and not self.wrong_sizes

    def suggestions(self) -> list[str]:
        if not self.conflicts:
            return []
        lines = ["- rename_dims: {unique: true}    # every symbolic dim gets its own name"]
        for conflict in self.conflicts:
            groups: dict[tuple[str, ...], dict[int, int]] = {}  # tensors -> {axis: size}
            for size, bindings in conflict.sizes.items():
                for axis in sorted({b.axis for b in bindings}):
                    names = tuple(sorted({b.tensor for b in bindings if b.axis == axis}))
                    groups.setdefault(names, {})[axis] = size
            for names, axes in groups.items():
                renames = ", ".join(
                    f"{axis}: {_yaml_str(_dim_name(conflict.dim_param, size, axis))}"
                    for axis, size in sorted(axes.items())
                )
                lines.append(f"- rename_dims: {{tensor: [{', '.join(map(_yaml_str, names))}], axes: {{{renames}}}}}")
        return lines

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["conflicts"] = [
            {
                "dim_param": c.dim_param,
                "sizes": {str(size): [asdict(b) for b in bindings] for size, bindings in c.sizes.items()},
            }
            for c in self.conflicts
        ]
        data["suggested_patches"] = self.suggestions()
        data["clean"] = self.clean
        return data


def _tensor_axes(bindings: list[Binding]) -> list[str]:
    axes: dict[str, list[int]] = {}
    for binding in bindings:
        axes.setdefault(binding.tensor, []).append(binding.axis)
    return [
        f"{name} (axis {', '.join(map(str, found))})"
        if len(found) == 1
        else f"{name} (axes {', '.join(map(str, found))})"
        for name, found in axes.items()
    ]


def _dim_name(dim_param: str, size: int, axis: int) -> str:
    stem = re.sub(r"[^0-9A-Za-z_]", "", dim_param) or "dim"
    return f"{stem}_axis{axis}_{size}"


def _yaml_str(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z_][0-9A-Za-z_.]*", text) else '"' + text.replace('"', '\\"') + '"'


# -- the probe --------------------------------------------------------------------------------------
def probe_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.ValueInfoProto]]:
    """A copy without any shape annotation whose annotated main-graph tensors are extra outputs."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    graph = probe.graph
    annotated = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    produced = {out for node in graph.node for out in node.output if out}
    outputs = {v.name for v in graph.output}
    extra = [
        v
        for v in model.graph.value_info
        if v.name in produced and v.name not in outputs and v.type.HasField("tensor_type")
    ]
    _strip_annotations(graph)
    for value in graph.output:
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
    for value in extra:
        graph.output.append(helper.make_tensor_value_info(value.name, value.type.tensor_type.elem_type, None))
    return probe, annotated


def _strip_annotations(graph: onnx.GraphProto) -> None:
    del graph.value_info[:]
    for node in graph.node:
        for sub in subgraphs(node):
            _strip_annotations(sub)


def run_probe(
    model: onnx.ModelProto,
    model_dir: Path,
    shapes: dict[str, list[int]],
    values: dict[str, dict[str, Any]] | None = None,
) -> dict[str, list[int]]:
    """Actual sizes of every output of the probe (and of the inputs fed), by tensor name.

    ``values`` (:func:`feed_values`) fills the inputs it names; the others get random floats or zeros.
    """
    probe, _ = probe_model(model)
    external = any(is_external(t) for t in iter_tensors(model.graph))
    session = build_session(
        probe.SerializeToString(), "CPUExecutionProvider", "disabled", (), model_dir if external else None
    )
    values = values or {}
    feeds = {v.name: _feed(v, shapes[v.name], values.get(v.name, {}).get("value")) for v in model_inputs(model)}
    names = [o.name for o in session.get_outputs()]
    results = run_bounded(session, feeds, DEFAULT_TIMEOUT, names)
    found = {name: list(np.shape(value)) for name, value in zip(names, results)}
    found.update({name: list(value.shape) for name, value in feeds.items()})
    return found


def _feed(value: onnx.ValueInfoProto, shape: list[int], fill: Any = None) -> np.ndarray:
    dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    if fill is not None:
        data = np.asarray(fill, dtype=dtype)
        if data.ndim == 0:
            return np.full(shape, data, dtype=dtype)
        if data.size != int(np.prod(shape, dtype=np.int64)):
            msg = f"{data.size} values for shape {shape}; give one value or {np.prod(shape)}"
            raise InputOptionError("--value", value.name, msg)
        return data.reshape(shape)
    if np.issubdtype(dtype, np.floating):
        return np.random.default_rng(0).random(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)  # zeros are valid token ids, indices and flags


def lint_model(
    model: onnx.ModelProto,
    model_dir: Path,
    given: dict[str, list[int]] | None = None,
    values: dict[str, Any] | None = None,
) -> LintResult:
    """Run the probe and compare every annotation with the sizes the tensors actually had.

    ``values`` (``--value``: ``{"sr": 16000}``) feeds those inputs; an integer input the graph says
    needs one value (:func:`patchspec.shapes.values.input_values`) gets it by default.
    """
    chosen = feed_values(model, values)
    shaped = {**value_shapes(model, chosen), **(given or {})}
    attempts = [probe_shapes(model, shaped, split=True), probe_shapes(model, shaped, split=False)]
    for shapes in attempts[:1] if attempts[0] == attempts[1] else attempts:
        result = LintResult(shapes, bool(given), values=chosen)
        result.not_probed = sum(len(g.value_info) for _, g in graph_bodies(model.graph))
        for value in model_inputs(model):
            if value.name in chosen:  # a --value that does not fit its shape is exit 2, not a failed run
                _feed(value, shapes[value.name], chosen[value.name]["value"])
        oversized = _oversized(shapes)
        if oversized:  # the model's own fixed sizes, or given ones: never allocated past the limit
            result.error = oversized
            return result
        try:
            actual = run_probe(model, model_dir, shapes, chosen)
            break
        except Exception as exc:  # ORT raises its own Fail/RuntimeException types, each with a message
            result.error = f"onnxruntime could not run the model at {shapes_text(shapes)}: {_first_line(exc)}"
    if result.error:
        return result
    _, annotated = probe_model(model)
    bindings: dict[str, dict[int, list[Binding]]] = {}
    for value in annotated:
        _compare(value, actual.get(value.name), bindings, result)
    inputs = {v.name for v in model.graph.input}
    result.conflicts = [Conflict(p, sizes) for p, sizes in bindings.items() if _aliased(sizes, inputs)]
    return result


def _oversized(shapes: dict[str, list[int]]) -> str | None:
    """Why the probe will not run at these shapes: an input over the run cases' element limit."""
    for name, dims in shapes.items():
        count = math.prod(dims)
        if count > DEFAULT_MAX_ELEMENTS:
            return (
                f"input {name} at {dims} is {count:,} elements, over the limit of {DEFAULT_MAX_ELEMENTS:,} "
                "per input: give smaller sizes (--shape, or lint's inputs)"
            )
    return None


def _first_line(exc: Exception) -> str:
    """What onnxruntime said, on one line: the builder's own words for a session it could not build."""
    if isinstance(exc, RunFailure):
        return exc.detail
    if isinstance(exc, TimeoutError):
        return f"the probe did not finish within {DEFAULT_TIMEOUT:g} s and was stopped"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _aliased(sizes: dict[int, list[Binding]], inputs: set[str]) -> bool:
    """Two sizes, at least one of them on a computed tensor: inputs differing among themselves are
    what the caller chose to feed (the default shapes give each axis its own size on purpose)."""
    computed = {size for size, bindings in sizes.items() if any(b.tensor not in inputs for b in bindings)}
    return bool(computed) and len(sizes) > 1


def _compare(
    value: onnx.ValueInfoProto,
    sizes: list[int] | None,
    bindings: dict[str, dict[int, list[Binding]]],
    result: LintResult,
) -> None:
    declared = declared_dims(value)
    if sizes is None or not declared:
        return
    result.probed += 1
    if len(declared) != len(sizes):
        result.wrong_sizes.append(f"{value.name}: declared rank {len(declared)}, ran with shape {sizes}")
        return
    for axis, (dim, size) in enumerate(zip(declared, sizes)):
        if isinstance(dim, str):
            bindings.setdefault(dim, {}).setdefault(size, []).append(Binding(value.name, axis, size))
        elif isinstance(dim, int) and dim != size:
            result.wrong_sizes.append(f"{value.name}: axis {axis} declared {dim}, ran as {size}")


def shapes_text(shapes: dict[str, list[int]]) -> str:
    """``x=1,3,64,96 sr=[]``: the shapes a probe ran at (a scalar as ``[]``)."""
    return " ".join(f"{name}={','.join(map(str, dims)) if dims else '[]'}" for name, dims in shapes.items())


# -- the graphs inside ------------------------------------------------------------------------------
def graph_bodies(graph: onnx.GraphProto, path: str = "main") -> Iterator[tuple[str, onnx.GraphProto]]:
    """(path, body) of every If/Loop/Scan body below ``graph``, depth first: ``main/If_0.then_branch``."""
    for position, node in enumerate(graph.node):
        for attr_name, sub in bodies(node):
            sub_path = f"{path}/{node.name or f'{node.op_type}#{position}'}.{attr_name}"
            yield sub_path, sub
            yield from graph_bodies(sub, sub_path)


__all__ = ["Conflict", "LintResult", "graph_bodies", "lint_model", "shapes_text"]
