"""Sizes for an export's other symbolic input dims at which the model, as exported, evaluates.

An export may declare an axis symbolic and still run at some sizes only. RivaGAN's watermark encoder
calls its bits ``wmBits`` and multiplies them, broadcast, with 32 channels (it runs at 32 only);
PP-OCRv4's recognizer calls its height ``?`` and joins pooled rows with a learned one (it runs from 16
to 80, not at 128). Both init's default case sizes and set_batch's evaluation points then give sizes the
original refuses, and nothing downstream of that node can be judged.

So the model is evaluated at the sizes asked (weights are never read); where the evaluation stops at a
node, each symbolic dim is tried at each size two inputs of that node disagree on, then at smaller
sizes (those alone where a Squeeze, a Reshape or a Split stops it: PP-OCRv2 squeezes a height pooled
by 32), and the first size at which every graph output evaluates is kept. set_batch also needs the dim
to move (its third point tells which dims follow which input dims): a second size is tried;
where none evaluates either, the dim keeps one size at every point (``FittedDim.fixed``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import onnx

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

#: sizes given to symbolic input dims that are not the batch: distinct, divisible by the usual
#: strides (up to 64), and small enough for position tables (transformers often stop at 512)
SYMBOL_SIZES = tuple(128 * n for n in range(1, 9))
#: how far the third point moves each of them
SYMBOL_SHIFT = 64
#: at most this many evaluations are tried (each walks the whole graph)
MAX_TRIES = 12
#: below the sizes asked, these fractions of them are tried (a height pooled to a few rows)
SMALLER = (2, 4, 8)
#: ops that stop at a size too large though no two inputs disagree, tried at the smaller sizes alone (a
#: height pooled by 32 and squeezed, which must be 1 there: PP-OCRv2's recognizer)
_SHRINKS = frozenset({"Squeeze", "Reshape", "Split"})
#: disagreeing sizes below this are tried last
TINY = 16

#: (input name, axis)
Place = tuple[str, int]
#: a symbolic dim: its dim_param, or (input, axis) for an unnamed one
SymbolKey = str | tuple[str, int]
Shapes = dict[str, list[int]]
#: where an evaluation stopped: the sizes the node's inputs disagree on, the node for messages, its op
Stopped = tuple[set[int], str, str]


@dataclass(frozen=True)
class FittedDim:
    """A symbolic input dim moved to sizes at which the model evaluates: ``size`` at the evaluation's
    points, ``moved`` where the other symbolic dims move (``size`` again when no other size fits)."""

    key: SymbolKey
    places: tuple[Place, ...]
    asked: int  # the size first tried, at which the model stopped
    size: int
    moved: int
    stopped: str  # where the model stopped at ``asked``: "Concat 'p2o.Concat.7' ([1, 480, 2, 32], ...)"

    @property
    def fixed(self) -> bool:
        return self.size == self.moved

    def note(self) -> str:
        """What set_batch's details say of it."""
        where = ", ".join(f"{name}[{axis}]" for name, axis in self.places)
        named = f" ('{self.key}')" if isinstance(self.key, str) else ""
        sizes = f"at {self.size} only" if self.fixed else f"at {self.size} and {self.moved}"
        return (
            f"{where}{named} is declared symbolic, but at {self.asked} the model as exported stops at "
            f"{self.stopped}: that dim was evaluated {sizes}"
        )


def symbol_sizes(index: int) -> tuple[int, int]:
    """The sizes the ``index``-th other symbolic input dim takes: at the points, and where they move."""
    size = SYMBOL_SIZES[index % len(SYMBOL_SIZES)]
    return size, size + SYMBOL_SHIFT


def fit_other_dims(
    model: onnx.ModelProto, evaluated: ShapeEvaluator, point: Mapping[str, Known], axes: Collection[Place]
) -> FittedDim | None:
    """For set_batch, whose evaluation (``evaluated``, its first point ``point``, the batch on ``axes``)
    stopped before an output: the other symbolic dim to evaluate elsewhere. An input's axis 0 is never
    moved: there another input may name the batch apart (set_batch's ``other_batch_names`` settles those)."""
    shapes = {name: [dim or 0 for dim in known.shape or ()] for name, known in point.items()}  # all sizes
    free = free_dims(model, {*axes, *((name, 0) for name in shapes)})
    return fit_dim(model, shapes, free, shift=SYMBOL_SHIFT, evaluated=evaluated)


def free_dims(model: onnx.ModelProto, kept: Collection[Place]) -> dict[SymbolKey, list[Place]]:
    """Every symbolic input axis but those in ``kept`` (the batch's), by its dim name (an unnamed axis
    on its own), in the order the inputs declare them."""
    free: dict[SymbolKey, list[Place]] = {}
    for name, info in fed_inputs(model.graph).items():
        for axis, dim in enumerate(read_dims(info) or []):
            if (name, axis) not in kept and not (isinstance(dim, int) and dim > 0):
                free.setdefault(dim if isinstance(dim, str) else (name, axis), []).append((name, axis))
    return free


def fit_dim(
    model: onnx.ModelProto,
    shapes: Shapes,
    free: Mapping[SymbolKey, list[Place]],
    shift: int | None = None,
    evaluated: ShapeEvaluator | None = None,
) -> FittedDim | None:
    """The first symbolic dim of ``free`` that, moved alone, makes the model evaluate where at ``shapes``
    it stops; None where it evaluates there already, or no dim tried fits (within ``MAX_TRIES``).

    Dims whose size is one the stopping node's inputs disagree on are tried first. Each is tried at the
    disagreeing sizes, then at halves, quarters and eighths of its size (see :func:`_candidates`). With ``shift``, a fitting size
    is then tried ``shift`` larger, half and a quarter of itself larger, and a quarter smaller, for the
    point where dims move (without, ``moved`` is ``size``)."""
    found = _stop(model, shapes) if evaluated is None else _stop_in(model, evaluated, 0)
    if found is None or not free:
        return None
    sizes, stopped, op = found
    if not sizes and op not in _SHRINKS:
        return None  # no two inputs disagree (a custom op, a shape from data): no size would help
    tries = 0
    for key in sorted(free, key=lambda k: _size_at(shapes, free[k]) not in sizes):
        asked = _size_at(shapes, free[key])
        for size in _candidates(sizes, asked):
            tries += 1
            tried = _moved(shapes, free[key], size)
            if tries > MAX_TRIES:
                return None
            if _stop(model, tried) is not None:
                continue
            moved = size
            others = () if shift is None else (size + shift, size + size // 2, size + size // 4, size - size // 4)
            for other in dict.fromkeys(others):
                tries += 1
                if other not in (size, 1) and _stop(model, _moved(shapes, free[key], other)) is None:
                    moved = other
                    break
            return FittedDim(key, tuple(free[key]), asked, size, moved, stopped)
    return None


def _candidates(disagreeing: set[int], asked: int) -> Iterator[int]:
    """The disagreeing sizes from the largest, then the smaller ones, with those below ``TINY`` last (a
    height of 2 runs a recognizer, but a typical size decides its constants more like its users')."""
    usual = sorted((size for size in disagreeing if size >= TINY), reverse=True)
    tiny = sorted((size for size in disagreeing if size < TINY), reverse=True)
    seen = {asked}
    for size in [*usual, *(asked // part for part in SMALLER), *tiny]:
        if size > 1 and size not in seen:
            seen.add(size)
            yield size


def _size_at(shapes: Shapes, places: list[Place]) -> int:
    name, axis = places[0]
    return shapes[name][axis]


def fitting_shapes(model: onnx.ModelProto, shapes: Shapes) -> Shapes | None:
    """``shapes`` with one symbolic dim (never an input's axis 0, the batch) moved to a size at which
    every output evaluates, where at ``shapes`` one does not; None where they evaluate, or none fits."""
    fitted = fit_dim(model, shapes, free_dims(model, {(name, 0) for name in shapes}))
    return None if fitted is None else _moved(shapes, list(fitted.places), fitted.size)


def _moved(shapes: Shapes, places: list[Place], size: int) -> Shapes:
    moved = {name: list(shape) for name, shape in shapes.items()}
    for name, axis in places:
        moved[name][axis] = size
    return moved


def _stop(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> Stopped | None:
    """None where every graph output evaluates at ``shapes``; else the disagreeing sizes of the node the
    evaluation stops at, that node with its inputs' shapes for messages, and its op ("" if unknown)."""
    inputs = fed_inputs(model.graph)
    point = {
        name: Known(inputs[name].type.tensor_type.elem_type, tuple(shape))
        for name, shape in shapes.items()
        if name in inputs
    }
    return _stop_in(model, ShapeEvaluator(model, [point]).run(), 0)


def _stop_in(model: onnx.ModelProto, evaluator: ShapeEvaluator, point: int) -> Stopped | None:
    """:func:`_stop` of an evaluation already made, at its ``point``."""
    if all(evaluator.at(info.name)[point].shape is not None for info in model.graph.output):
        return None
    node = evaluator.stopped_at(point)
    if node is None:
        return set(), "a node it cannot evaluate", ""
    shapes_in = [tuple(evaluator.at(name)[point].shape or ()) for name in node.input if name]
    label = f"{node.op_type} '{node.name or node.output[0]}' ({', '.join(str(list(s)) for s in shapes_in)})"
    return set(_disagreeing(node, shapes_in)), label, node.op_type


def _disagreeing(node: onnx.NodeProto, shapes: list[tuple[int | None, ...]]) -> Iterator[int]:
    if node.op_type == "Concat" and shapes and all(len(shape) == len(shapes[0]) for shape in shapes):
        joined = next((a.i for a in node.attribute if a.name == "axis"), 0) % max(len(shapes[0]), 1)
        for axis in range(len(shapes[0])):  # every axis but the joined one must agree, 1 included
            at = {shape[axis] for shape in shapes}
            if axis != joined and len(at) > 1:
                yield from (size for size in at if isinstance(size, int))
        return
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


__all__ = [
    "MAX_TRIES",
    "SYMBOL_SHIFT",
    "SYMBOL_SIZES",
    "FittedDim",
    "Place",
    "SymbolKey",
    "fit_dim",
    "fit_other_dims",
    "fitting_shapes",
    "free_dims",
    "symbol_sizes",
]
