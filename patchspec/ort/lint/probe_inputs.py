"""The input shapes and values of the shape lint's probe: ``--shape``/``--value`` as given, and
the documented defaults for the rest (:func:`probe_shapes`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import onnx

from patchspec.errors import UsageError, did_you_mean
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


def value_shapes(model: onnx.ModelProto, values: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    """A list given to a rank-1 input is its shape too (``--value ids=1,2,3``: [3])."""
    dims = {v.name: declared_dims(v) for v in model_inputs(model)}
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
        rank = len(declared_dims(known[name]))
        if len(dims) != rank:
            raise InputOptionError("--shape", name, f"the input has {rank} axes, got {len(dims)} sizes")
    chosen: dict[str, tuple[int, str]] = {}  # dim_param -> (size, input that set it)
    for name, dims in given.items():
        for dim, size in zip(declared_dims(known[name]), dims):
            if isinstance(dim, str):
                chosen.setdefault(dim, (size, ""))
    pool = iter(DEFAULT_SIZES)
    shapes = {}
    for value in inputs:
        if value.name in given:
            shapes[value.name] = [int(d) for d in given[value.name]]
            continue
        owner = value.name if split else ""
        shapes[value.name] = [
            _default_size(dim, axis, chosen, pool, owner) for axis, dim in enumerate(declared_dims(value))
        ]
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


def declared_dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
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


__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_SIZES",
    "InputOptionError",
    "OptionValue",
    "declared_dims",
    "feed_values",
    "model_inputs",
    "parse_shape_options",
    "parse_value_options",
    "probe_shapes",
    "value_shapes",
]
