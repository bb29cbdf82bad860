"""The arrays of a run case's inputs, made deterministically by :func:`make_feeds`.

What a case may say is :mod:`patchspec.ort.run.case_inputs` (checked before any model is read, without
numpy); against the patched model's declarations: :mod:`patchspec.ort.run.case_fit`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from patchspec.errors import did_you_mean
from patchspec.ort.bfloat16 import BFLOAT16
from patchspec.ort.run.case_inputs import (
    DTYPES,
    FLOAT_RANGE,
    INTEGER_RANGE,
    is_text,
    size_problems,
)
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Feeds, TensorDecl
from patchspec.ort.settings import DEFAULT_MAX_ELEMENTS


def random_range_problem(dtype: str, low: float | None, high: float | None) -> str | None:
    """Why ``fill: random`` cannot draw ``dtype`` values in [low, high), or None when it can."""
    if dtype not in DTYPES or dtype == "bool":
        return None
    if dtype == "bfloat16":
        dtype = "float32"  # bfloat16 spans float32's range
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
    if "shape" in item:
        _refuse_oversized(decl.name, item["shape"], max_elements)
    if (decl.dtype == "bfloat16" or item.get("dtype") == "bfloat16") and not HAS_BFLOAT16:
        raise RunFailure(f"input '{decl.name}': {NO_BFLOAT16}", "upgrade onnx (pip install -U onnx)")
    if "value" in item and is_text(item["value"]):
        return text_array(item["value"], item.get("shape"))
    if "file" in item and decl.dtype is None and "dtype" not in item:  # a STRING input: a .npy of str
        return _text_file(decl.name, load_array(decl.name, resolve(item["file"])), item)
    dtype = item.get("dtype") or decl.dtype
    if dtype is None:
        msg = (
            f"input '{decl.name}' is a STRING input (or another type numpy cannot hold), and the case gives no strings"
        )
        raise RunFailure(msg, STRING_HINT)
    if "value" in item:
        return _value_array(decl.name, item["value"], item.get("shape"), dtype)
    if "file" in item:
        array = load_array(decl.name, resolve(item["file"]))
        expected = {"shape": list(array.shape) if item.get("shape") is None else list(item["shape"]), "dtype": dtype}
        if dtype == "bfloat16" and array.dtype == np.float32:  # numpy cannot save bfloat16: float32 is cast
            array = array.astype(BFLOAT16)
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


def _value_array(name: str, value: Any, shape: list[int] | None, dtype: str) -> np.ndarray:
    """A case's ``value``: one number filling ``shape``, or a list of its own shape."""
    try:
        array = np.full(tuple(shape), value) if shape is not None else np.array(value)
        return array.astype(BFLOAT16 if dtype == "bfloat16" else dtype)
    except (TypeError, ValueError) as exc:
        shaped = f" of shape {list(shape)}" if shape is not None else ""
        raise RunFailure(f"input '{name}': value {value!r} cannot make a {dtype}{shaped}: {exc}") from None


#: an older onnx (1.17) has no ml_dtypes and stores bfloat16 as uint16: casting to it would truncate
HAS_BFLOAT16 = BFLOAT16.name == "bfloat16"
NO_BFLOAT16 = "bfloat16 needs an onnx that uses ml_dtypes; this one stores bfloat16 as uint16"
#: how a case feeds a STRING input
STRING_HINT = (
    'give its strings: value: ["a", "b", "a", "c"] (nested lists for more axes; one string with '
    "'shape' repeats it), or file: x.npy saved from a numpy array of str (numpy.save)"
)


def text_array(value: Any, shape: Sequence[int] | None = None) -> np.ndarray:
    """A STRING input's array (numpy object dtype, as onnxruntime takes strings) from a ``value``; with
    ``shape``, the strings in turn until it is full."""
    if shape is None:
        return np.array(value, dtype=object)
    flat = np.array(value, dtype=object).reshape(-1)  # one string, or a list repeated to fill the shape
    return np.resize(flat, tuple(shape)) if flat.size else np.empty(tuple(shape), dtype=object)


def _text_file(name: str, array: np.ndarray, item: dict[str, Any]) -> np.ndarray:
    if array.dtype.kind not in "US":
        msg = f"input '{name}' is a STRING input; {item['file']} holds {array.dtype} {list(array.shape)}"
        raise RunFailure(msg, STRING_HINT)
    if item.get("shape") is not None and list(array.shape) != list(item["shape"]):
        msg = f"input '{name}': {item['file']} holds str {list(array.shape)}, expected {list(item['shape'])}"
        raise RunFailure(msg)
    return array.astype(str).astype(object)


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
    if dtype == "bfloat16":  # numpy has no bfloat16 of its own: made as float32, then ml_dtypes' bfloat16
        if not HAS_BFLOAT16:
            raise RunFailure(NO_BFLOAT16, "upgrade onnx (pip install -U onnx)")
        return generate(shape, "float32", fill, seed, low, high).astype(BFLOAT16)
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
    "default_case",
    "feed_shape_problems",
    "format_shape",
    "generate",
    "make_feeds",
    "random_range_problem",
    "shape_problems",
    "text_array",
]
