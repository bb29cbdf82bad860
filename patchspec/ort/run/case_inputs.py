"""What a run case's input may say, checked before any model is read and without numpy or onnx (so
that ``validate`` stays light).

A case input is a shape list or ``{shape, dtype, fill, seed, low, high, file, value}``
(:data:`CASE_INPUT_SCHEMA`). What JSON Schema cannot say is checked by :func:`case_input_problems`.
Sizes are bounded: an input of more than ``max_elements`` elements (default
:data:`DEFAULT_MAX_ELEMENTS`) is a problem of the spec, found before anything is allocated, and
sizes are multiplied as Python integers, so ``[2**32, 2**32]`` cannot wrap around to 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

from patchspec import limits
from patchspec.errors import did_you_mean
from patchspec.ort.settings import DEFAULT_MAX_ELEMENTS

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
    "bfloat16",
)
#: a STRING input takes its values from ``value`` (strings) or a ``file`` of str: no dtype, no fill
#: default [low, high) of ``fill: random``: floats in [-1, 1), integers in [0, 10)
FLOAT_RANGE = (-1.0, 1.0)
INTEGER_RANGE = (0, 10)

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
            "type": ["number", "boolean", "string", "array"],
            "description": "the input's exact value: a number or a string (a scalar, or every element of "
            "'shape') or a nested list (its shape is the list's); e.g. sr: {value: 16000}, "
            'letters: {value: ["a", "b", "c", "a"]} for a STRING input',
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
    if "value" in item and isinstance(item["value"], list) and "shape" in item and not is_text(item["value"]):
        yield key, "a list 'value' has its own shape: drop 'shape', or give one number to fill it"
    if "value" in item and value_shape(item["value"]) is None:
        yield (
            key + ("value",),
            "a list 'value' must be rectangular: every row as long as the others, all numbers or all strings",
        )
    elif "value" in item and is_text(item["value"]) and {"dtype"} & set(item):
        yield key + ("dtype",), "a 'value' of strings feeds a STRING input: drop 'dtype'"
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
    """The shape of a ``value`` (a number or a string, or nested lists of them), or None when it is
    ragged or mixes strings and numbers."""
    if _leaves(value) is None:
        return None
    return _shape(value)


def _shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return () if isinstance(value, (int, float, bool, str)) else None
    shapes = {_shape(item) for item in value}
    inner = shapes.pop() if len(shapes) == 1 else () if not shapes else None
    return None if inner is None else (len(value), *inner)


def is_text(value: Any) -> bool:
    """Whether a ``value`` holds strings (then it feeds a STRING input)."""
    return _leaves(value) == "text"


def _leaves(value: Any) -> str | None:
    """ "text", "number" or "empty" for a value of one kind; None for one that mixes them."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return "number"
    kinds = {_leaves(item) for item in value} - {"empty"}
    return "empty" if not kinds else kinds.pop() if len(kinds) == 1 and None not in kinds else None


def size_problems(shape: Sequence[int], key: tuple[Any, ...], max_elements: int) -> Iterator[Problem]:
    """One problem when ``shape`` holds more than ``max_elements`` elements (counted exactly)."""
    count = math.prod(int(d) for d in shape)
    if count > max_elements:
        allowed = limits.current()
        raise_it = f"raise the run verifier's 'max_elements' to {count:,}"
        if count > allowed.max_elements:  # over what the caller allows too: both, in one round
            raise_it += f" and pass --limit max-elements={count} (the caller allows {allowed.max_elements:,})"
        yield (
            key,
            f"{list(shape)} is {count:,} elements, over the limit of {max_elements:,} per input: give "
            f"smaller sizes, or {raise_it} if the machine holds it",
        )


__all__ = [
    "CASE_INPUT_SCHEMA",
    "DTYPES",
    "FILLS",
    "FLOAT_RANGE",
    "INTEGER_RANGE",
    "Problem",
    "case_input_problems",
    "is_text",
    "size_problems",
    "value_shape",
]
