"""The values of shape arithmetic: ONNX ops computed in numpy on small, fully known inputs.

``values_of`` is the one entry point: the evaluator calls it for every node of the default
domain, and it answers with the outputs' values, or None where the node is not shape arithmetic
(an op without a kernel here, an input whose value is unknown, a result of more than ``SMALL``
elements). Each kernel follows the ONNX operator at the model's opset (axes as an attribute or an
input, Slice's clamped bounds); ``tests/shapes/test_kernels.py`` holds them to onnx's reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

from patchspec.model.graph import constant_value

#: tensors with at most this many elements get a value (shape arithmetic, scales, small constants)
SMALL = 1024

Array = np.ndarray[Any, Any]
#: a kernel's inputs: one array per input of the node, None for an omitted optional input (Any: a
#: kernel indexes the inputs its operator requires without a check, as the operator guarantees them)
Args = list[Any]
#: a node's attributes by name, as ``helper.get_attribute_value`` reads them
Attrs = dict[str, Any]
Kernel = Callable[[Args, Attrs, int], Any]


class _HasValue(Protocol):
    """What a kernel reads of an input: the evaluator's ``Known``."""

    @property
    def shape(self) -> tuple[int | None, ...] | None: ...

    @property
    def value(self) -> Array | None: ...


def _attrs(node: onnx.NodeProto) -> Attrs:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def values_of(node: onnx.NodeProto, inputs: Sequence[_HasValue], opset: int) -> list[Array] | None:
    """Output values of ``node`` when it is shape arithmetic on known values; None otherwise.

    ``inputs`` holds one entry per input of the node, each with a ``shape`` (one int or None per
    axis; None: rank unknown) and a ``value`` (an array, or None when unknown): the evaluator's
    ``Known``. ``opset`` is the model's default-domain opset."""
    op = node.op_type
    if op == "Constant":  # a large constant is a weight, not shape arithmetic: it is never read
        if any(a.name == "value" and int(np.prod(a.t.dims, dtype=np.int64)) > SMALL for a in node.attribute):
            return None
        value = constant_value(node)
        return None if value is None or value.size > SMALL else [value]
    attrs = _attrs(node)
    if op in ("Shape", "Size"):
        given = inputs[0].shape if inputs else None
        if given is None or None in given:
            return None
        shape = [int(d) for d in given if d is not None]
        if op == "Size":
            return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
        start, end = attrs.get("start", 0), attrs.get("end", None)
        return [np.array(shape[start:end] if end is not None else shape[start:], dtype=np.int64)]
    function = VALUE_OPS.get(op)
    present = [k for name, k in zip(node.input, inputs) if name]
    if function is None or any(k.value is None for k in present):
        return None
    args = [None if not name else np.asarray(k.value) for name, k in zip(node.input, inputs)]
    if op == "Split":  # an even split makes as many parts as the node has outputs
        attrs.setdefault("num_outputs", len(node.output))
    if _output_size(op, args) > SMALL:
        return None  # a large constant-filled tensor: its shape comes from inference
    result = function(args, attrs, opset)
    if result is None:
        return None
    results = result if isinstance(result, list) else [result]
    if any(np.asarray(r).size > SMALL for r in results):
        return None
    return [np.asarray(r) for r in results]


def _output_size(op: str, args: Args) -> int:
    """Elements an op that can grow its input would make, before making them."""
    if op == "Expand":
        return int(np.prod(np.broadcast_shapes(args[0].shape, tuple(int(s) for s in args[1])), dtype=np.int64))
    if op == "Tile":
        return int(np.prod([d * int(r) for d, r in zip(args[0].shape, args[1])], dtype=np.int64))
    if op == "ConstantOfShape":
        return int(np.prod([int(s) for s in args[0]], dtype=np.int64))
    if op == "Range":
        start, limit, delta = (float(a.reshape(-1)[0]) for a in args)
        return int(max(np.ceil((limit - start) / delta), 0)) if delta else SMALL + 1
    return 0


def _axes(args: Args, attrs: Attrs, position: int, opset_axes_input: bool) -> list[int] | None:
    if opset_axes_input:
        if len(args) > position and args[position] is not None:
            return [int(a) for a in args[position].reshape(-1)]
        return None
    return list(attrs["axes"]) if "axes" in attrs else None


def _slice(args: Args, attrs: Attrs, opset: int) -> Any:
    data = args[0]
    if opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes = attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = args[1].tolist(), args[2].tolist()
        axes = args[3].tolist() if len(args) > 3 and args[3] is not None else list(range(len(starts)))
        steps = args[4].tolist() if len(args) > 4 and args[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        size = data.shape[axis]
        start = max(min(start, size), -size - 1)
        end = max(min(end, size), -size - 1)
        index[axis] = slice(start, end, step)
    return data[tuple(index)]


def _squeeze(args: Args, attrs: Attrs, opset: int) -> Any:
    axes = _axes(args, attrs, 1, opset >= 13)
    return np.squeeze(args[0]) if axes is None else np.squeeze(args[0], axis=tuple(axes))


def _unsqueeze(args: Args, attrs: Attrs, opset: int) -> Any:
    axes = _axes(args, attrs, 1, opset >= 13)
    if axes is None:  # required by the operator: the evaluator falls back to inference
        raise ValueError("Unsqueeze without axes")
    rank = args[0].ndim + len(axes)
    result = args[0]
    for axis in sorted(a % rank for a in axes):
        result = np.expand_dims(result, axis)
    return result


def _reduce(function: Callable[..., Any]) -> Kernel:
    def reduce(args: Args, attrs: Attrs, opset: int) -> Any:
        axes = attrs.get("axes")
        if len(args) > 1 and args[1] is not None:
            axes = [int(a) for a in args[1].reshape(-1)]
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return args[0]
            axes = None
        result = function(args[0], axis=None if axes is None else tuple(axes), keepdims=keep)
        return result.astype(args[0].dtype)  # numpy sums and multiplies int32 as int64; ONNX keeps int32

    return reduce


def _int_divide(a: Array, b: Array) -> Array:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        quotient = np.abs(a) // np.abs(b)
        return (quotient * np.sign(a) * np.sign(b)).astype(np.result_type(a, b))
    return np.divide(a, b).astype(np.result_type(a, b))


def _mod(args: Args, attrs: Attrs, opset: int) -> Any:
    a, b = args
    return np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)


def _cast(args: Args, attrs: Attrs, opset: int) -> Any:
    return args[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))


def _range(args: Args, attrs: Attrs, opset: int) -> Any:
    start, limit, delta = (a.reshape(-1)[0] for a in args)
    return np.arange(start, limit, delta, dtype=args[0].dtype)


def _reshape(args: Args, attrs: Attrs, opset: int) -> Any:
    data, shape = args[0], [int(s) for s in args[1].reshape(-1)]
    allowzero = attrs.get("allowzero", 0)
    shape = [data.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
    return data.reshape(shape)


def _concat(args: Args, attrs: Attrs, opset: int) -> Any:
    return np.concatenate([a for a in args if a is not None], axis=attrs.get("axis", 0))


def _gather(args: Args, attrs: Attrs, opset: int) -> Any:
    return np.take(args[0], args[1].astype(np.int64), axis=attrs.get("axis", 0))


def _where(args: Args, attrs: Attrs, opset: int) -> Any:
    return np.where(args[0], args[1], args[2])


def _binary(function: Callable[[Any, Any], Any]) -> Kernel:
    return lambda args, attrs, opset: function(args[0], args[1])


def _split(args: Args, attrs: Attrs, opset: int) -> list[Any] | None:
    """Split: sizes an attribute before opset 13, an input from then; without them, even parts (from
    opset 18 the last may be smaller, as ``num_outputs`` allows). No value where a part is empty: tf2onnx
    frames a signal so (``split [0, 1, 0]`` of a shape), and at the sizes the evaluation tries for a
    symbolic signal length the frames counted from it can be 0, where a Reshape with -1 then fails."""
    data, axis = args[0], int(attrs.get("axis", 0))
    sizes = attrs.get("split") if opset < 13 else (args[1] if len(args) > 1 and args[1] is not None else None)
    if sizes is not None and 0 in [int(size) for size in sizes]:
        return None
    if sizes is None:
        count, length = int(attrs["num_outputs"]), data.shape[axis]
        part = -(-length // count)  # ceil: equal parts, the last smaller (onnx >= 18)
        sizes = [min(part, max(length - part * k, 0)) for k in range(count)]
    bounds = np.cumsum([int(size) for size in sizes])[:-1]
    return list(np.split(data, bounds, axis=axis))


def _variadic(function: Callable[[Any, Any], Any]) -> Kernel:
    def apply(args: Args, attrs: Attrs, opset: int) -> Any:
        result = args[0]
        for other in args[1:]:
            result = function(result, other)
        return result

    return apply


VALUE_OPS: dict[str, Kernel] = {
    "Identity": lambda args, attrs, opset: args[0],
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "Slice": _slice,
    "Split": _split,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
    "Flatten": lambda args, attrs, opset: args[0].reshape(
        int(np.prod(args[0].shape[: attrs.get("axis", 1)], dtype=np.int64)), -1
    ),
    "Expand": lambda args, attrs, opset: args[0] * np.ones([int(s) for s in args[1]], dtype=args[0].dtype),
    "Tile": lambda args, attrs, opset: np.tile(args[0], [int(r) for r in args[1]]),
    "ConstantOfShape": lambda args, attrs, opset: np.full(
        [int(s) for s in args[0]],
        numpy_helper.to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs else 0.0,
        dtype=numpy_helper.to_array(attrs["value"]).dtype if "value" in attrs else np.float32,
    ),
    "Range": _range,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_int_divide),
    "Mod": _mod,
    "Neg": lambda args, attrs, opset: np.negative(args[0]),
    "Abs": lambda args, attrs, opset: np.abs(args[0]),
    "Floor": lambda args, attrs, opset: np.floor(args[0]),
    "Ceil": lambda args, attrs, opset: np.ceil(args[0]),
    "Sqrt": lambda args, attrs, opset: np.sqrt(args[0]),
    "Min": _variadic(np.minimum),
    "Max": _variadic(np.maximum),
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "Greater": _binary(np.greater),
    "LessOrEqual": _binary(np.less_equal),
    "GreaterOrEqual": _binary(np.greater_equal),
    "Not": lambda args, attrs, opset: np.logical_not(args[0]),
    "And": _binary(np.logical_and),
    "Or": _binary(np.logical_or),
    "Where": _where,
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
    "Transpose": lambda args, attrs, opset: np.transpose(args[0], attrs.get("perm")),
}

__all__ = ["SMALL", "values_of"]
