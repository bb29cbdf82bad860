"""Inputs for a corpus model at a batch, built from the manifest's per-sample description of each input."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

BATCH = "B"


def parse_shape(text: str) -> tuple[list[int], int | None]:
    """``"B,3,64,96"`` -> ([1, 3, 64, 96], 0): the shape at one sample and the batch axis (None: no B)."""
    dims: list[int] = []
    axis = None
    for index, item in enumerate(part.strip() for part in text.split(",")):
        if item == BATCH:
            axis = index
            dims.append(1)
        else:
            dims.append(int(item))
    return dims, axis


def _describe(spec: Any) -> dict[str, Any]:
    if isinstance(spec, str):
        return {"shape": spec}
    return dict(spec)


def batch_axes(inputs: dict[str, Any]) -> dict[str, int | None]:
    """The batch axis of each input (None where the input has no batch, or is a scalar value)."""
    axes: dict[str, int | None] = {}
    for name, spec in inputs.items():
        described = _describe(spec)
        axes[name] = parse_shape(described["shape"])[1] if "shape" in described else None
    return axes


def shapes_at(inputs: dict[str, Any], batch: int) -> dict[str, list[int]]:
    """Each input's shape at a batch (value inputs: their value's shape)."""
    shapes = {}
    for name, spec in inputs.items():
        described = _describe(spec)
        if "value" in described:
            shapes[name] = list(np.shape(described["value"]))
            continue
        dims, axis = parse_shape(described["shape"])
        if axis is not None:
            dims[axis] = batch
        shapes[name] = dims
    return shapes


def input_types(model: onnx.ModelProto) -> dict[str, np.dtype[Any]]:
    initializers = {i.name for i in model.graph.initializer}
    types = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        types[value.name] = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
    return types


def make_feeds(model: onnx.ModelProto, inputs: dict[str, Any], batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Arrays for every input at ``batch``; the same seed gives the same samples whatever the batch's order."""
    types = input_types(model)
    missing = sorted(set(types) - set(inputs))
    if missing:
        raise SystemExit(f"corpus: the manifest lists no value for input(s) {missing}")
    shapes = shapes_at(inputs, batch)
    feeds = {}
    for offset, (name, spec) in enumerate(inputs.items()):
        described = _describe(spec)
        dtype = types[name]
        if "value" in described:
            feeds[name] = np.array(described["value"], dtype=dtype)
            continue
        rng = np.random.default_rng(seed + offset)
        shape = shapes[name]
        fill = described.get("fill")
        if dtype == np.object_:  # STRING: the manifest names the strings to draw from
            if "choices" not in described:
                raise SystemExit(f"corpus: STRING input {name!r} needs choices = [...] in the manifest")
            array = rng.choice(np.array(described["choices"], dtype=object), size=shape)
        elif fill == "ones":
            array = np.ones(shape, dtype=dtype)
        elif fill == "zeros":
            array = np.zeros(shape, dtype=dtype)
        elif dtype == np.bool_:
            array = rng.integers(0, 2, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            array = rng.integers(described.get("low", 0), described.get("high", 10), size=shape).astype(dtype)
        else:
            array = rng.uniform(described.get("low", -1.0), described.get("high", 1.0), size=shape).astype(dtype)
        feeds[name] = array
    return feeds
