"""What the evaluation knows of one tensor at one point: element type, shape, and small value.

``Known`` is the evaluator's unit (``evaluate.ShapeEvaluator`` holds one per tensor and point). It
is made from an array, an initializer, a Constant node or a type annotation; a weight's bytes are
never read (only tensors of at most ``kernels.SMALL`` elements get a value). ``merge`` keeps what
two possible values of a tensor have in common (an If's branches, a loop's first and later trips).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.model.graph import constant_value
from patchspec.shapes.annotations import read_dim
from patchspec.shapes.kernels import SMALL

#: one dim per axis, each a size or None (unknown)
Shape = tuple[int | None, ...]


class _once:  # a decorator, named like functools.cached_property
    """``functools.cached_property`` without its lock (Python 3.11 takes one at each first use, and the
    evaluation asks the signature of every new Known): computed once, then an instance attribute."""

    def __init__(self, compute: Callable[[Known], Hashable]) -> None:
        self.compute = compute
        self.name = compute.__name__

    def __get__(self, known: Known, owner: type[Known]) -> Hashable:
        value = known.__dict__[self.name] = self.compute(known)  # the instance's dict: frozen does not apply
        return value


@dataclass(frozen=True, eq=False)
class Known:
    """What is known of one tensor at one point: element type (0 unknown), shape, small value."""

    dtype: int = 0
    shape: Shape | None = None  # one int (or None: unknown) per axis; None: rank unknown
    value: np.ndarray[Any, Any] | None = None

    @property
    def full(self) -> bool:
        """Every dim is a known size."""
        return self.shape is not None and None not in self.shape

    @_once
    def signature(self) -> Hashable:
        """What ONNX's inference of a node reading this tensor depends on: type, shape, small value."""
        if self.value is None:
            return self.dtype, self.shape
        value = np.asarray(self.value)
        return self.dtype, self.shape, value.dtype.str, value.tobytes()


UNKNOWN = Known()


def known_of_array(array: np.ndarray[Any, Any] | np.generic | int | float) -> Known:
    array = np.asarray(array)
    dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
    return Known(dtype, tuple(int(d) for d in array.shape), array if array.size <= SMALL else None)


def known_of_tensor(tensor: TensorProto) -> Known:
    """An initializer: its value when small and stored inline (a weight is never read, nor copied)."""
    shape = tuple(int(d) for d in tensor.dims)
    small = math.prod(shape) <= SMALL  # exact: an int64 product wraps [2**32, 2**32] round to 0
    if small and tensor.data_location != TensorProto.EXTERNAL:
        try:
            return Known(tensor.data_type, shape, numpy_helper.to_array(tensor))
        except Exception:  # an exotic type numpy cannot hold: the shape is still known
            pass
    return Known(tensor.data_type, shape)


def known_of_type(type_proto: onnx.TypeProto) -> Known:
    if not type_proto.HasField("tensor_type"):
        return UNKNOWN
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return Known(tensor_type.elem_type)
    dims = tuple(size if isinstance(size := read_dim(d), int) else None for d in tensor_type.shape.dim)  # -1: unknown
    return Known(tensor_type.elem_type, dims)


def type_proto(known: Known) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(known.dtype, None if known.shape is None else list(known.shape))


def constant_known(node: onnx.NodeProto) -> Known | None:
    """A Constant node's output from its attribute: dims and type always, the value only when small
    (a weight held in a Constant is never converted); None for a form read by inference."""
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return known_of_tensor(attr.t)
    value = constant_value(node)  # value_int(s), value_float(s): attribute lists, small
    return None if value is None else known_of_array(value)


def merge(a: Known, b: Known) -> Known:
    """What two possible values of one tensor have in common."""
    same_value = (a.value is None and b.value is None) or (
        a.value is not None and b.value is not None and np.array_equal(a.value, b.value)
    )
    if a is b or (a.dtype == b.dtype and a.shape == b.shape and same_value):
        return a
    dtype = a.dtype if a.dtype == b.dtype else 0
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return Known(dtype)
    return Known(dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def shape_only(known: Known) -> Known:
    return Known(known.dtype, known.shape)


def stacked(known: Known, length: int | None, axis: int) -> Known:
    if known.shape is None:
        return Known(known.dtype)
    axis %= len(known.shape) + 1
    return Known(known.dtype, known.shape[:axis] + (length,) + known.shape[axis:])


__all__ = [
    "UNKNOWN",
    "Known",
    "Shape",
    "constant_known",
    "known_of_array",
    "known_of_tensor",
    "known_of_type",
    "merge",
    "shape_only",
    "stacked",
    "type_proto",
]
