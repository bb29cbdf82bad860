"""Run cases and the inputs made from them: what a case may say, and its arrays.

A case input is a shape list or ``{shape, dtype, fill, seed, low, high, file, value}``
(:data:`CASE_INPUT_SCHEMA`). What JSON Schema cannot say is checked by
:func:`case_input_problems` (before any model is read; against the patched model's declarations:
:mod:`patchspec.ort.case_fit`); :func:`make_feeds` then makes the arrays, deterministically.

Sizes are bounded: an input of more than ``max_elements`` elements (default
:data:`DEFAULT_MAX_ELEMENTS`) is a problem of the spec, found before anything is allocated, and
sizes are multiplied as Python integers, so ``[2**32, 2**32]`` cannot wrap around to 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from patchspec.errors import did_you_mean
from patchspec.ort.sessions import Feeds, RunFailure, TensorDecl

FILLS = ("random", "zeros", "ones", "arange")
DTYPES = (
    "float32",
    "float16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
#: default [low, high) of ``fill: random``: floats in [-1, 1), integers in [0, 10)
FLOAT_RANGE = (-1.0, 1.0)
INTEGER_RANGE = (0, 10)
#: the most elements one case input may have (the ``run`` verifier's ``max_elements``): 2**27
#: float32 values are 512 MiB, more than any test input needs and less than a CI machine holds
DEFAULT_MAX_ELEMENTS = 2**27

#: a (key path, message) pair, as ``check_params`` and ``check_model`` yield them
Problem = tuple[tuple[Any, ...], str]

_DIM = {
    "type": ["integer", "string"],
    "description": "size of one axis: a number (symbolic names are not allowed here)",
}
#: one input of a run case (and of lint's inputs): a shape list, or how to make the values
CASE_INPUT_SCHEMA: dict[str, Any] = {
    "description": "a shape list, or how to make the input: {shape, dtype, fill, seed, low, high, file, value}",
    "type": ["array", "object"],
    "items": _DIM,
    "properties": {
        "shape": {"type": "array", "items": _DIM, "description": "sizes of the input's axes (numbers)"},
        "dtype": {"type": "string", "description": f"numpy dtype; default: the model's ({', '.join(DTYPES)})"},
        "fill": {"type": "string", "description": f"how to fill it: {' | '.join(FILLS)} (default random)"},
        "seed": {
            "type": "integer",
            "description": "seed of numpy.random.default_rng for fill: random "
            "(default: the input's position among the model's inputs)",
        },
        "low": {"type": "number", "description": "lowest random value (default -1.0 for floats, 0 for integers)"},
        "high": {
            "type": "number",
            "description": "random values stay below this (default 1.0 for floats, 10 for integers)",
        },
        "file": {"type": "string", "description": ".npy file with the input, relative to the spec's folder"},
        "value": {
            "type": ["number", "boolean", "array"],
            "description": "the input's exact value: a number (a scalar, or every element of 'shape') or "
            "a nested list (its shape is the list's); e.g. sr: {value: 16000}",
        },
    },
    "additionalProperties": False,
}


# -- what a case may say ------------------------------------------------------------------------------
def case_input_problems(item: Any, key: tuple[Any, ...], max_elements: int = DEFAULT_MAX_ELEMENTS) -> Iterator[Problem]:
    """What JSON Schema cannot say about one case input: (key path, message) pairs."""
    if isinstance(item, list):
        yield from _shape_problems(item, key, max_elements)
        return
    if not {"file", "shape", "value"} & set(item):
        yield key, "give 'shape' (a list of sizes), 'value' (the exact value) or 'file' (a .npy file)"
    for source in ("file", "value"):
        if source in item and ({"fill", "seed", "low", "high"} & set(item)):
            yield key, f"'{source}' gives the values: 'fill', 'seed', 'low' and 'high' do not apply to it"
    if "file" in item and "value" in item:
        yield key, "give the values once: 'file' or 'value', not both"
    if "value" in item and isinstance(item["value"], list) and "shape" in item:
        yield key, "a list 'value' has its own shape: drop 'shape', or give one number to fill it"
    if "value" in item and value_shape(item["value"]) is None:
        yield key + ("value",), "a list 'value' must be rectangular: every row as long as the others, numbers only"
    elif "value" in item and "shape" not in item:
        yield from size_problems(value_shape(item["value"]) or (), key + ("value",), max_elements)
    yield from _shape_problems(item.get("shape") or [], key + ("shape",), max_elements)
    if "fill" in item and item["fill"] not in FILLS:
        yield (
            key + ("fill",),
            f"unknown fill '{item['fill']}'{did_you_mean(item['fill'], FILLS)}; expected one of {', '.join(FILLS)}",
        )
    if "dtype" in item and item["dtype"] not in DTYPES:
        yield (
            key + ("dtype",),
            f"unknown dtype '{item['dtype']}'{did_you_mean(item['dtype'], DTYPES)}; expected one of {', '.join(DTYPES)}",
        )
    if "low" in item and "high" in item and not item["low"] < item["high"]:
        yield key, f"low ({item['low']}) must be below high ({item['high']})"


def _shape_problems(shape: list[Any], key: tuple[Any, ...], max_elements: int) -> Iterator[Problem]:
    wrong = False
    for axis, dim in enumerate(shape):
        wrong = wrong or not isinstance(dim, int) or dim < 0
        if isinstance(dim, str) and re.fullmatch(r"-?\d+(\s+-?\d+)+", dim.strip()):
            items = ", ".join(str(v) for v in shape[:axis]) + (", " if axis else "") + ", ".join(dim.split())
            yield (
                key + (axis,),
                (
                    f"'{dim}' is one item: YAML separates the items of [...] with commas: "
                    f"[{items}{', ...' if axis + 1 < len(shape) else ''}]"
                ),
            )
        elif isinstance(dim, str):
            yield key + (axis,), f"symbolic dim '{dim}' must be given as a number here (e.g. 1)"
        elif dim < 0:
            yield key + (axis,), f"dim {dim} is negative; sizes are numbers >= 0"
    if not wrong:
        yield from size_problems(shape, key, max_elements)


def value_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a ``value`` (a number, or nested lists of them), or None when it is ragged."""
    if not isinstance(value, list):
        return () if isinstance(value, (int, float, bool)) else None
    shapes = {value_shape(item) for item in value}
    inner = shapes.pop() if len(shapes) == 1 else () if not shapes else None
    return None if inner is None else (len(value), *inner)


def size_problems(shape: Sequence[int], key: tuple[Any, ...], max_elements: int) -> Iterator[Problem]:
    """One problem when ``shape`` holds more than ``max_elements`` elements (counted exactly)."""
    count = math.prod(int(d) for d in shape)
    if count > max_elements:
        yield (
            key,
            f"{list(shape)} is {count:,} elements, over the limit of {max_elements:,} per input: give "
            "smaller sizes, or raise the run verifier's 'max_elements' if the machine holds it",
        )


def random_range_problem(dtype: str, low: float | None, high: float | None) -> str | None:
    """Why ``fill: random`` cannot draw ``dtype`` values in [low, high), or None when it can."""
    if dtype not in DTYPES or dtype == "bool":
        return None
    given = [v for v in (low, high) if v is not None]
    if any(not math.isfinite(v) for v in given):
        return f"low and high must be finite numbers; got low {low}, high {high}"
    np_dtype = np.dtype(dtype)
    if np_dtype.kind not in "iu":
        bound = float(np.finfo(np_dtype).max)
        if any(abs(v) > bound for v in given):
            return f"low and high must lie within {dtype}'s range (±{bound:g}); got low {low}, high {high}"
        return None
    info = np.iinfo(np_dtype)
    lo = INTEGER_RANGE[0] if low is None else int(low)
    hi = INTEGER_RANGE[1] if high is None else int(high)
    if lo < info.min or hi > info.max + 1:
        shown = f"low {lo if low is None else low} and high {hi if high is None else high}"
        return f"{dtype} values lie in [{info.min}, {info.max}]; {shown} (exclusive) must too"
    if lo >= hi:
        return f"no {dtype} value lies in [{lo}, {hi}) (low and high as integers): give a high above low"
    return None


def default_case(declared: list[TensorDecl]) -> dict[str, Any]:
    """The one case run when none is given: every input random at its fixed declared sizes."""
    for decl in declared:
        if not all(isinstance(d, int) for d in decl.shape):
            msg = f"no cases given and input '{decl.name}' is declared {format_shape(decl.shape)}"
            raise RunFailure(
                msg, "add cases with numbers for every symbolic dim, e.g. cases: [{inputs: {x: [1, 3, 224, 224]}}]"
            )
    return {"inputs": {}}


# -- the arrays ---------------------------------------------------------------------------------------
def make_feeds(
    case_inputs: dict[str, Any],
    declared: list[TensorDecl],
    resolve: Callable[[str], Path],
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Feeds:
    """Arrays for every declared input: from the case, or random for unlisted fully fixed inputs."""
    names = [d.name for d in declared]
    for name in case_inputs:
        if name not in names:
            msg = (
                f"case input '{name}' is not an input of the model{did_you_mean(str(name), names)}; "
                f"its inputs are: {', '.join(names)}"
            )
            raise RunFailure(msg)
    feeds = {}
    for position, decl in enumerate(declared):
        if decl.name in case_inputs:
            feeds[decl.name] = input_array(decl, case_inputs[decl.name], position, resolve, max_elements)
        elif all(isinstance(d, int) for d in decl.shape):
            shape = tuple(int(d) for d in decl.shape if d is not None)
            _refuse_oversized(decl.name, shape, max_elements)
            feeds[decl.name] = generate(shape, decl.dtype or "float32", "random", position)
        else:
            msg = f"the case gives no shape for input '{decl.name}', declared {format_shape(decl.shape)}"
            raise RunFailure(msg, f"add '{decl.name}: [sizes...]' to the case's inputs")
    return feeds


def _refuse_oversized(name: str, shape: Sequence[int], max_elements: int) -> None:
    for _, message in size_problems(shape, (), max_elements):
        raise RunFailure(f"input '{name}': {message}")


def input_array(
    decl: TensorDecl,
    item: Any,
    position: int,
    resolve: Callable[[str], Path],
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> np.ndarray:
    """One input from its case item: a shape list, or ``{shape, dtype, fill, seed, low, high, file}``."""
    item = {"shape": item} if isinstance(item, list) else dict(item)
    dtype = item.get("dtype") or decl.dtype
    if dtype is None:
        msg = f"input '{decl.name}' has a type numpy cannot hold; give 'dtype' in the case"
        raise RunFailure(msg)
    if "shape" in item:
        _refuse_oversized(decl.name, item["shape"], max_elements)
    if "value" in item:
        value = item["value"]
        array = np.full(tuple(item["shape"]), value) if "shape" in item else np.array(value)
        try:
            return array.astype(dtype)
        except (TypeError, ValueError) as exc:
            raise RunFailure(f"input '{decl.name}': value {value!r} is not a {dtype}: {exc}") from None
    if "file" in item:
        array = load_array(decl.name, resolve(item["file"]))
        expected = {"shape": list(array.shape) if item.get("shape") is None else list(item["shape"]), "dtype": dtype}
        if list(array.shape) != expected["shape"] or str(array.dtype) != dtype:
            msg = (
                f"input '{decl.name}': {item['file']} holds {array.dtype} {list(array.shape)}, "
                f"expected {dtype} {expected['shape']}"
            )
            raise RunFailure(msg, f"save it with numpy as {dtype}, e.g. np.save(path, x.astype('{dtype}'))")
        return array
    return generate(
        tuple(item["shape"]),
        dtype,
        item.get("fill", "random"),
        item.get("seed", position),
        item.get("low"),
        item.get("high"),
    )


def load_array(name: str, path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        msg = f"input '{name}': cannot read {path}: {exc}"
        raise RunFailure(msg, "give a .npy file written by numpy.save, relative to the spec's folder") from None
    if not isinstance(array, np.ndarray):
        msg = f"input '{name}': {path} is an .npz archive; 'file' takes one array saved as .npy"
        raise RunFailure(msg)
    return array


def generate(
    shape: tuple[int, ...],
    dtype: str,
    fill: str,
    seed: int = 0,
    low: float | None = None,
    high: float | None = None,
) -> np.ndarray:
    """A deterministic array: ``numpy.random.default_rng(seed)`` for ``random``."""
    np_dtype = np.dtype(dtype)
    problem = random_range_problem(dtype, low, high) if fill == "random" else None
    if problem is not None:
        raise RunFailure(problem, "set low and high in the case to values the input's type holds")
    if fill == "zeros":
        return np.zeros(shape, np_dtype)
    if fill == "ones":
        return np.ones(shape, np_dtype)
    if fill == "arange":
        values = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
        if np_dtype.kind in "iu":
            values = values % (min(int(np.iinfo(np_dtype).max), 2**31 - 1) + 1)
        return (values % 2).astype(bool) if np_dtype.kind == "b" else values.astype(np_dtype)
    rng = np.random.default_rng(seed)
    if np_dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np_dtype.kind in "iu":
        lo = INTEGER_RANGE[0] if low is None else int(low)
        hi = INTEGER_RANGE[1] if high is None else int(high)
        return rng.integers(lo, hi, size=shape, dtype=np_dtype)
    flo = FLOAT_RANGE[0] if low is None else float(low)
    fhi = FLOAT_RANGE[1] if high is None else float(high)
    return rng.uniform(flo, fhi, size=shape).astype(np_dtype)


# -- feeds against a declaration ------------------------------------------------------------------------
def feed_shape_problems(feeds: Feeds, declared: list[TensorDecl]) -> list[str]:
    """Where the feeds disagree with the fixed sizes and ranks the model declares for its inputs."""
    problems = []
    for decl in declared:
        array = feeds.get(decl.name)
        if array is not None:
            problems.extend(shape_problems("input", decl, array.shape))
    return problems


def shape_problems(kind: str, decl: TensorDecl, actual: tuple[int, ...]) -> list[str]:
    """A declared fixed size (or rank) that differs from the actual shape, one line per axis."""
    where = f"{kind} '{decl.name}' (declared {format_shape(decl.shape)}, actual {list(actual)})"
    if len(decl.shape) != len(actual):
        return [f"{where}: declared rank {len(decl.shape)}, actual rank {len(actual)}"]
    return [
        f"{where}: axis {axis} declared {want}, actual {got}"
        for axis, (want, got) in enumerate(zip(decl.shape, actual))
        if isinstance(want, int) and want != got
    ]


def format_shape(shape: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


__all__ = [
    "CASE_INPUT_SCHEMA",
    "DEFAULT_MAX_ELEMENTS",
    "DTYPES",
    "FILLS",
    "case_input_problems",
    "default_case",
    "feed_shape_problems",
    "format_shape",
    "generate",
    "make_feeds",
    "random_range_problem",
    "shape_problems",
    "size_problems",
]
