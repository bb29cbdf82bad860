"""Sizes at which the original runs, where init's default case sizes do not fit it.

An export may declare an axis symbolic and still run at one size only there: RivaGAN's watermark
encoder calls its bits ``wmBits`` and multiplies them, broadcast, with 32 channels. init's default
sizes (the lint's, or 512 on a ``[batch, length]`` input's last axis) then give a case that the
original refuses, and apply refuses the patch for what the export does. So the model is evaluated at
the default sizes (weights are never read); where the evaluation stops at a node whose inputs
disagree on an axis (``[4, 32, 1, 64, 96]`` times ``[4, 512, 1, 64, 96]``), each symbolic input dim
is tried at each size of the disagreement, and the first sizes at which every output is evaluated
are the case's. Axis 0 of an input (the batch, which init sets) is never moved.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

#: at most this many evaluations are tried (each walks the whole graph)
MAX_TRIES = 12

_Place = tuple[str, int]


def fitting_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> dict[str, list[int]] | None:
    """Sizes close to ``shapes`` at which every graph output evaluates, where at ``shapes`` one does not;
    None where ``shapes`` evaluate, or no size of the disagreement fits."""
    free = _free_dims(model)
    if not free:
        return None
    sizes = _stops_at(model, shapes)
    if not sizes:
        return None
    tries = 0
    for places in free.values():
        for size in sorted(sizes - {shapes[places[0][0]][places[0][1]]}):
            tried = {name: list(shape) for name, shape in shapes.items()}
            for name, axis in places:
                tried[name][axis] = size
            if _stops_at(model, tried) is None:
                return tried
            tries += 1
            if tries >= MAX_TRIES:
                return None
    return None


def _free_dims(model: onnx.ModelProto) -> dict[object, list[_Place]]:
    """Every symbolic input axis but axis 0, by its dim name (an unnamed axis on its own)."""
    free: dict[object, list[_Place]] = {}
    for name, info in fed_inputs(model.graph).items():
        for axis, dim in enumerate(read_dims(info) or []):
            if axis and not isinstance(dim, int):
                free.setdefault(dim if isinstance(dim, str) else (name, axis), []).append((name, axis))
    return free


def _evaluator(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> ShapeEvaluator:
    inputs = fed_inputs(model.graph)
    point = {
        name: Known(inputs[name].type.tensor_type.elem_type, tuple(shape))
        for name, shape in shapes.items()
        if name in inputs
    }
    return ShapeEvaluator(model, [point]).run()


def _stops_at(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> set[int] | None:
    """None where every graph output evaluates at ``shapes``; else the sizes two inputs of the first
    node the evaluation stops at disagree on (aligned from the last axis, as broadcasting and
    MatMul's batch dims are; a MatMul's contracted pair too), empty where they agree."""
    evaluator = _evaluator(model, shapes)
    if all(evaluator.at(info.name)[0].shape is not None for info in model.graph.output):
        return None
    node = evaluator.stopped_at(0)
    if node is None:
        return set()
    return set(_disagreeing(node, [tuple(evaluator.at(name)[0].shape or ()) for name in node.input if name]))


def _disagreeing(node: onnx.NodeProto, shapes: list[tuple[int | None, ...]]) -> Iterator[int]:
    if node.op_type == "MatMul" and len(shapes) == 2 and len(shapes[0]) >= 1 and len(shapes[1]) >= 2:
        pair = {shapes[0][-1], shapes[1][-2]}
        if len(pair) == 2:
            yield from (size for size in pair if isinstance(size, int))
        shapes = [shapes[0][:-2], shapes[1][:-2]]
    longest = max((len(shape) for shape in shapes), default=0)
    for back in range(1, longest + 1):
        at = {shape[-back] for shape in shapes if len(shape) >= back and shape[-back] not in (None, 1)}
        if len(at) > 1:
            yield from (size for size in at if isinstance(size, int))


__all__ = ["MAX_TRIES", "fitting_shapes"]
