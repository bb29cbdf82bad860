"""How a run case fits the patched model: its inputs against the model's declarations (before
anything runs), the inputs it leaves out, the outputs against what the model declares for them,
and, for a run that failed, what the graph says an integer input needs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx

from patchspec.ort.run.case_inputs import Problem, size_problems, value_shape
from patchspec.ort.run.feeds import format_shape, random_range_problem, shape_problems
from patchspec.ort.sessions import Feeds, TensorDecl
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs
from patchspec.shapes.values import input_values


def case_fit_problems(info: onnx.ValueInfoProto, item: Any, key: tuple[Any, ...]) -> Iterator[Problem]:
    """A case input's rank, fixed sizes and element type against the model's declaration."""
    dims = read_dims(info)
    shape = item if isinstance(item, list) else item.get("shape")
    if shape is None and isinstance(item, dict) and "value" in item:
        found = value_shape(item["value"])
        if found is None:
            return  # a ragged value: check_params says so
        shape = list(found)
    if dims is not None and shape is not None:
        if len(shape) != len(dims):
            yield (
                key,
                (
                    f"a shape of rank {len(shape)} ({list(shape)}) for an input of rank {len(dims)}, declared "
                    f"{format_shape(tuple(dims))}"
                ),
            )
        else:
            wrong = [
                f"axis {axis} is fixed at {want}, the case gives {got}"
                for axis, (want, got) in enumerate(zip(dims, shape))
                if isinstance(want, int) and want != got
            ]
            if wrong:
                yield key, f"{'; '.join(wrong)} (declared {format_shape(tuple(dims))})"
    dtype = item.get("dtype") if isinstance(item, dict) else None
    declared = numpy_name(info.type.tensor_type.elem_type)
    if dtype and declared and dtype != declared:
        yield key + ("dtype",), f"the patched model's input is {declared}, the case gives {dtype}"
    elif isinstance(item, dict) and (dtype or declared) and item.get("fill", "random") == "random":
        problem = random_range_problem(str(dtype or declared), item.get("low"), item.get("high"))
        if problem is not None and not {"file", "value"} & set(item):
            yield key, problem


def unlisted_input_problems(
    model: onnx.ModelProto, given: dict[str, Any], key: tuple[Any, ...], max_elements: int
) -> Iterator[Problem]:
    """The inputs a case leaves out: each needs fixed sizes (random values are made), within the limit."""
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info)
        if name in given or dims is None:
            continue
        sizes = [d for d in dims if isinstance(d, int)]
        if len(sizes) < len(dims):
            yield (
                key,
                f"the case gives no shape for input '{name}', declared {format_shape(tuple(dims))}: "
                f"add '{name}: [sizes...]'",
            )
        else:
            yield from size_problems(sizes, key, max_elements)


def value_notes(model: onnx.ModelProto, feeds: Feeds | None) -> list[str]:
    """For a run that failed: integer inputs whose values the graph says something about, and do not fit."""
    notes = []
    for name, info in fed_inputs(model.graph).items():
        array = (feeds or {}).get(name)
        if array is None or array.dtype.kind not in "iub":
            continue
        wanted = input_values(model, name, info.type.tensor_type.elem_type)
        if wanted is None or wanted.flag:
            continue
        item = wanted.item
        if "value" in item and not np.all(array == item["value"]):
            notes.append(
                f"input '{name}' is {array.reshape(-1)[:4].tolist()}, but {wanted.why}: "
                f"give it {{value: {item['value']}}}"
            )
        elif "high" in item and array.size and (array.min() < item.get("low", 0) or array.max() >= item["high"]):
            notes.append(
                f"input '{name}' has values from {array.min()} to {array.max()}, but it {wanted.why}: "
                f"give it {{low: {item.get('low', 0)}, high: {item['high']}}}"
            )
    return notes


def numpy_name(elem_type: int) -> str | None:
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return None


def declared_shape_problems(model: onnx.ModelProto, outputs: Feeds) -> list[str]:
    """Outputs whose rank or fixed sizes, as the model file declares them, differ from the run's.

    Read from the file, not from the session: onnxruntime reports its own inferred shape where
    the declaration disagrees with it (a declared [N, 3] that is [N, 2] reads [N, None] there).
    Only ranks and fixed sizes: a dim_param shared by tensors of different sizes is the lint
    verifier's business (exporters write '?' for "unknown" on several axes).
    """
    problems = []
    for info in model.graph.output:
        dims = read_dims(info)
        if dims is not None and info.name in outputs:
            problems += shape_problems("output", TensorDecl(info.name, None, tuple(dims)), outputs[info.name].shape)
    return [f"the output declares a shape it does not produce: {p}" for p in problems]


__all__ = ["case_fit_problems", "declared_shape_problems", "numpy_name", "unlisted_input_problems", "value_notes"]
