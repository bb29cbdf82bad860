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

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from patchspec.errors import Interrupted, UsageError, did_you_mean
from patchspec.model.external_data import is_external, iter_tensors
from patchspec.model.graph import bodies, subgraphs
from patchspec.ort.sessions import DEFAULT_TIMEOUT, RunFailure, build_session, run_bounded
from patchspec.shapes.values import input_values

#: symbolic or unknown size on axis 0 of an input (batch-like) when no shape is given
DEFAULT_BATCH = 1
#: sizes for the other symbolic or unknown input axes, one per distinct dim, in order of appearance:
#: distinct (so height and width sharing a name shows up) and multiples of 32 (so strided FPNs run)
DEFAULT_SIZES = (64, 96, 128, 160, 192, 224, 256, 288)
SHAPE_OPTION = re.compile(r"^(?P<name>[^=]+)=(?P<dims>([0-9]+(,[0-9]+)*)?)$")
VALUE_OPTION = re.compile(r"^(?P<name>[^=]+)=(?P<values>[^=]+)$")
#: what ``--value NAME=...`` gives: one number, or a list of them
OptionValue = float | int | list[float | int]


class InputOptionError(UsageError):
    """A ``--shape`` or ``--value`` that does not fit the model's input (exit 2).

    ``key`` is (option, input name) and ``detail`` the problem alone, so the ``lint`` verifier, whose
    shapes come from a spec, names the input instead of the option: ``input x: the input has 4 axes``.
    """

    def __init__(self, option: str, name: str, detail: str) -> None:
        super().__init__(detail, key=(option, name))
        self.message = f"{option} {name}: {detail}"
        self.args = (self.message,)


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


# -- shapes for the probe ------------------------------------------------------------------------------
def parse_shape_options(values: Iterable[str]) -> dict[str, list[int]]:
    """``["x=1,3,640,640"]`` -> ``{"x": [1, 3, 640, 640]}``; bad syntax is a usage error (exit 2)."""
    shapes: dict[str, list[int]] = {}
    for value in values:
        found = SHAPE_OPTION.match(value.strip())
        if not found:
            msg = f"--shape {value!r}: expected NAME=D0,D1,... with non-negative integers, e.g. --shape input.1=1,3,640,640"
            raise UsageError(msg)
        dims = found.group("dims")
        shapes[found.group("name")] = [int(d) for d in dims.split(",")] if dims else []
    return shapes


def parse_value_options(values: Iterable[str]) -> dict[str, OptionValue]:
    """``["sr=16000", "ids=1,2,3"]`` -> ``{"sr": 16000, "ids": [1, 2, 3]}``; bad syntax is exit 2."""
    parsed: dict[str, OptionValue] = {}
    for value in values:
        found = VALUE_OPTION.match(value.strip())
        parts = [_number(part) for part in found.group("values").split(",")] if found else [None]
        numbers = [number for number in parts if number is not None]
        if found is None or len(numbers) < len(parts):
            msg = f"--value {value!r}: expected NAME=V or NAME=V0,V1,... with numbers, e.g. --value sr=16000"
            raise UsageError(msg)
        parsed[found.group("name")] = numbers[0] if len(numbers) == 1 else numbers
    return parsed


def _number(text: str) -> float | int | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def feed_values(model: onnx.ModelProto, given: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The value each input is fed with, where not random: ``given`` (``--value``), else what the graph
    says an integer input needs (a sample rate compared with 16000 to choose a branch)."""
    known = {v.name: v for v in model_inputs(model)}
    chosen = {}
    for name, value in (given or {}).items():
        if name not in known:
            raise InputOptionError(
                "--value",
                name,
                f"the model has no input {name!r}{did_you_mean(name, known)}; its inputs: {', '.join(known)}",
            )
        chosen[name] = {"value": value, "origin": "given", "why": "--value"}
    for name, value in known.items():
        elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        needs = input_values(model, name, elem) if name not in chosen and elem else None
        if needs is not None and "value" in needs.item:
            chosen[name] = {"value": needs.item["value"], "origin": "graph", "why": needs.why}
    return chosen


def _value_shapes(model: onnx.ModelProto, values: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    """A list given to a rank-1 input is its shape too (``--value ids=1,2,3``: [3])."""
    dims = {v.name: _dims(v) for v in model_inputs(model)}
    return {
        name: [len(v["value"])]
        for name, v in values.items()
        if isinstance(v["value"], list) and len(dims[name]) == 1 and not isinstance(dims[name][0], int)
    }


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that must be fed (initializers listed as inputs are not)."""
    initializers = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initializers]


def probe_shapes(
    model: onnx.ModelProto, given: dict[str, list[int]] | None, split: bool = True
) -> dict[str, list[int]]:
    """Shapes to run: ``given`` ones, the rest from the declared dims with the documented defaults.

    A dim_param shared by several inputs gets one size. With ``split``, one repeated on several
    axes of the same input (``[1, 3, "?", "?"]``) gets a different size per axis, so that
    height/width aliasing shows up.
    """
    given = dict(given or {})
    inputs = model_inputs(model)
    known = {v.name: v for v in inputs}
    for name, dims in given.items():
        if name not in known:
            raise InputOptionError(
                "--shape",
                name,
                f"the model has no input {name!r}{did_you_mean(name, known)}; its inputs: {', '.join(known)}",
            )
        rank = len(_dims(known[name]))
        if len(dims) != rank:
            raise InputOptionError("--shape", name, f"the input has {rank} axes, got {len(dims)} sizes")
    chosen: dict[str, tuple[int, str]] = {}  # dim_param -> (size, input that set it)
    for name, dims in given.items():
        for dim, size in zip(_dims(known[name]), dims):
            if isinstance(dim, str):
                chosen.setdefault(dim, (size, ""))
    pool = iter(DEFAULT_SIZES)
    shapes = {}
    for value in inputs:
        if value.name in given:
            shapes[value.name] = [int(d) for d in given[value.name]]
            continue
        owner = value.name if split else ""
        shapes[value.name] = [_default_size(dim, axis, chosen, pool, owner) for axis, dim in enumerate(_dims(value))]
    return shapes


def _default_size(
    dim: int | str | None, axis: int, chosen: dict[str, tuple[int, str]], pool: Iterator[int], owner: str
) -> int:
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str) and dim in chosen and not (owner and chosen[dim][1] == owner):
        return chosen[dim][0]
    size = DEFAULT_BATCH if axis == 0 else next(pool, DEFAULT_SIZES[-1])
    if isinstance(dim, str):
        chosen.setdefault(dim, (size, owner))
    return size


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    """Declared dims: int for a fixed size, str for a dim_param, None when unknown."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return []
    dims = []
    for dim in value.type.tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:  # -1: "unknown" as some exporters write it
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


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
    shaped = {**_value_shapes(model, chosen), **(given or {})}
    attempts = [probe_shapes(model, shaped, split=True), probe_shapes(model, shaped, split=False)]
    for shapes in attempts[:1] if attempts[0] == attempts[1] else attempts:
        result = LintResult(shapes, bool(given), values=chosen)
        result.not_probed = sum(len(g.value_info) for _, g in graph_bodies(model.graph))
        for value in model_inputs(model):
            if value.name in chosen:  # a --value that does not fit its shape is exit 2, not a failed run
                _feed(value, shapes[value.name], chosen[value.name]["value"])
        try:
            actual = run_probe(model, model_dir, shapes, chosen)
            break
        except Interrupted:  # SIGTERM while the probe ran: the run ends, it did not fail
            raise
        except Exception as exc:  # ORT raises its own Fail/RuntimeException types, each with a message
            result.error = f"onnxruntime could not run the model at {_shapes_text(shapes)}: {_first_line(exc)}"
    if result.error:
        return result
    _, annotated = probe_model(model)
    bindings: dict[str, dict[int, list[Binding]]] = {}
    for value in annotated:
        _compare(value, actual.get(value.name), bindings, result)
    inputs = {v.name for v in model.graph.input}
    result.conflicts = [Conflict(p, sizes) for p, sizes in bindings.items() if _aliased(sizes, inputs)]
    return result


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
    declared = _dims(value)
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


def _shapes_text(shapes: dict[str, list[int]]) -> str:
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


__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_SIZES",
    "Conflict",
    "InputOptionError",
    "LintResult",
    "graph_bodies",
    "lint_model",
    "model_inputs",
    "parse_shape_options",
    "parse_value_options",
    "probe_shapes",
]
