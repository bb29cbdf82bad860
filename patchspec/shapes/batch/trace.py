"""What following the batch through a model finds: the evaluation points and the trace's results.

The model is evaluated (``evaluate.ShapeEvaluator``) at two points that differ only in the batch:
``b1``, the batch the export was traced with, and ``b2``, the new one (any other number for a
symbolic batch); a third point moves every other symbolic input dim, so dims that depend on them
are told apart, and a last point at a third batch ``b3`` (above 1, apart from both) is the
tracker's second witness. Every dim is then a number at each point, and a dim *carries the batch*
when it differs between the two batch points as ``k * b1`` -> ``k * b2``. ``tracker`` follows; this
module holds what it returns (``BatchTrace``) and the helpers it shares with ``findings``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import onnx
from onnx import TensorProto

from patchspec.model.graph import NodeSite
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.fitting import FittedDim, symbol_sizes
from patchspec.shapes.evaluate import BROADCASTING, ShapeEvaluator
from patchspec.shapes.known import Known, Shape
from patchspec.shapes.spec_lines import SpecFix

#: how many times larger the far point makes each of them: at the small sizes a 400-sample window or a
#: reflection pad turns every length into the same one frame, which looked like a fixed size
FAR_FACTOR = 16
INT64_MAX = int(np.iinfo(np.int64).max)
#: ops that treat every element alike (broadcasting from the right): a tensor whose batch a Squeeze
#: dropped at the old batch only still means the same to them; any other op counts axes from the front
AXIS_FREE = BROADCASTING | {
    "Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil",
    "Round", "Sign", "Erf", "Cast", "CastLike", "Identity", "Clip", "LeakyRelu", "Elu", "Selu", "Celu",
    "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "IsNaN", "IsInf", "Dropout",
    "Sin", "Cos", "ThresholdedRelu", "Squeeze",
}  # fmt: skip

#: what a dim is across the points: a size, ("batch", k), an input's dim_param, or None (unclear)
BatchDim = int | tuple[str, int] | str | None
#: per point, one Known per node input (what the evaluator hands its hook)
PointInputs = list[list[Known]]


@dataclass(frozen=True)
class Rewrite:
    """Change elements of the constant that ``site.node`` reads as input ``operand``."""

    site: NodeSite
    operand: int
    elements: tuple[tuple[int, int], ...]  # ((element index, new value), ...)
    reason: str
    #: the operand is computed (a Concat of pieces that change with nothing): ``elements`` are all of its
    #: values, given to the node as a new constant
    whole: bool = False
    #: with ``whole``: the new constant's shape (None: one axis, as a shape operand is)
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Tiling:
    """Repeat input ``operand`` of ``site.node`` ``repeats`` times along ``axis``: a tensor with one
    sample's rows (a class token folded to a constant at batch 1) that a Concat joins with the batch.
    ``repeats`` is a number, or for a symbolic batch the expression of the batch (``dim(x, 0)``)."""

    site: NodeSite
    operand: int
    axis: int
    rank: int
    repeats: int | str
    reason: str


@dataclass(frozen=True)
class Transposition:
    """A Reshape that is a transpose at batch 1, to replace by a Transpose of ``perm`` (or, with
    ``before``, to give one before it): ``transposes``."""

    site: NodeSite
    perm: tuple[int, ...]
    before: bool = False


@dataclass(frozen=True)
class Computed:
    """Give input ``operand`` of ``site.node`` the shape ``items``, computed at run time (expressions):
    a symbolic batch no constant can say (``computed``)."""

    site: NodeSite
    operand: int
    items: tuple[int | str, ...]
    reason: str


@dataclass(frozen=True)
class Counting:
    """Give input ``operand`` of ``site.node`` the samples counted along ``axis``, ``arange(size) * step``
    in a tensor of the constant's ``shape`` (its size at ``axis`` made ``size``) and ``dtype``: an arange
    over the batch the exporter folded into a constant (``counts``). ``size`` is the new batch, or
    for a symbolic batch its expression (``dim(x, 0)``), counted at run time by a Range."""

    site: NodeSite
    operand: int
    axis: int
    shape: tuple[int, ...]
    step: int
    size: int | str
    dtype: str
    reason: str


@dataclass(frozen=True)
class Undecided:
    """A point the evaluation could not settle: what it is, and the patch that settles it by hand."""

    message: str
    fix: SpecFix | None = None


@dataclass
class BatchTrace:
    b1: int
    b2: int
    rewrites: list[Rewrite] = field(default_factory=list)
    #: points the evaluation could not settle, with the spec lines that settle them by hand
    undecided: list[Undecided] = field(default_factory=list)
    #: what the evaluation proves: a node that cannot run at the new batch, or drops or mixes samples
    #: there. A model with one is never written.
    refusals: list[str] = field(default_factory=list)
    #: inputs of a Concat to repeat along the batch (``joins``): no constant made them at the old batch
    tilings: list[Tiling] = field(default_factory=list)
    #: shapes computed from the data at run time, for a symbolic batch no constant can say
    computed: list[Computed] = field(default_factory=list)
    #: folded aranges over the batch counted again at the new batch (``counts``)
    countings: list[Counting] = field(default_factory=list)
    #: nodes whose result for one sample depends on the other samples (batch_coupling): told, not refused
    coupled: list[str] = field(default_factory=list)
    symbolic: bool = False  # the new batch is a name: rewrites write -1/0/1/end, never a size
    evaluator: ShapeEvaluator | None = None
    moves_symbols: bool = False  # a third point moved the other symbolic dims
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)  # dim_param -> its size at points 1 and 3
    #: the old batch with every other symbolic dim far larger (``far_point``), evaluated once: a size the
    #: points agree on and this contradicts depends on those dims after all, and is never declared
    far: dict[str, list[Known]] = field(default_factory=dict)
    #: Squeezes without axes that drop a batch of 1, with the axes they remove at the new batch
    squeezes: list[tuple[NodeSite, list[int]]] = field(default_factory=list)
    #: Reshapes to [-1] that make a graph output and flatten the batch with each sample's values
    flattens: list[NodeSite] = field(default_factory=list)
    #: Reshapes that are a transpose at the old batch of 1 (``transposes``), and constant starting values
    #: of one sample that a Loop carries (``states``): set_batch repairs them, then follows the batch again
    transposes: list[Transposition] = field(default_factory=list)
    loop_states: list[Tiling] = field(default_factory=list)
    #: the batch at each point: b1, b2, (b1 again where other dims move), then the second witness
    sizes: tuple[int, ...] = ()
    #: (input, axis) of each input axis that carries the batch
    batch_axes: tuple[tuple[str, int], ...] = ()
    #: another symbolic input dim evaluated at sizes the export runs at, not the usual ones (``fitting``)
    fitted: FittedDim | None = None
    #: squeezed_axis of every tensor that has one, found at its first call
    _squeezed: dict[str, int] | None = field(default=None, repr=False)
    #: batch_dims of tensors no Squeeze shifted, by their Knowns at the points compared and the rank
    _dims_of: dict[tuple[Known | int, ...], list[BatchDim]] = field(default_factory=dict, repr=False)

    def at(self, name: str) -> list[Known]:
        assert self.evaluator is not None, "trace_batch sets the evaluator"
        return self.evaluator.at(name)

    def reached(self, name: str, everywhere: bool = False) -> bool:
        """Whether the evaluation found the tensor's shape at any point, or with ``everywhere`` at every
        point (it stops where a node fails)."""
        found = [sizes_of(known) is not None for known in self.at(name)]
        return all(found) if everywhere else any(found)

    def batch_dim(self, name: str, axis: int) -> BatchDim:
        """What the evaluation says of one dim: a size, ("batch", k), an input's dim_param, or None."""
        squeezed = self.squeezed_axis(name)
        found = self._dim_at(self.at(name)[: 3 if self.moves_symbols else 2], squeezed, axis)
        return None if squeezed is None and self._far_differs(name, axis, found) else found

    def batch_dims(self, name: str, rank: int) -> list[BatchDim]:
        """:meth:`batch_dim` of every axis of one tensor, its points and squeeze looked up once."""
        knowns, squeezed = self.at(name)[: 3 if self.moves_symbols else 2], self.squeezed_axis(name)
        if squeezed is not None:
            return [self._dim_at(knowns, squeezed, axis) for axis in range(rank)]
        # by the Knowns themselves (compared by identity, never changed, kept alive by the key): the
        # tensors of a deep network's layers share them, as the evaluation remembers its results
        key: tuple[Known | int, ...] = (*knowns, rank)
        found = self._dims_of.get(key)
        if found is None:
            found = self._dims_of[key] = self._unsqueezed_dims([known.shape for known in knowns], rank)
        if not self.far:
            return list(found)
        return [None if self._far_differs(name, axis, dim) else dim for axis, dim in enumerate(found)]

    def evaluate_far(self, model: onnx.ModelProto, points: Sequence[dict[str, Known]]) -> None:
        """Evaluate ``model`` at :func:`far_point` (where the third point moves other symbolic dims)."""
        if self.moves_symbols:
            self.far = ShapeEvaluator(model, [far_point(points)]).run().known

    def _far_differs(self, name: str, axis: int, found: BatchDim) -> bool:
        """Whether a size the points found is another size at the far point (unknown there: no evidence)."""
        if not isinstance(found, int) or not self.far:
            return False
        far = self.far.get(name)
        shape = far[0].shape if far else None
        return shape is not None and axis < len(shape) and shape[axis] is not None and shape[axis] != found

    def _unsqueezed_dims(self, shapes: list[Shape | None], rank: int) -> list[BatchDim]:
        """:meth:`_dim_at` of axes ``0 .. rank-1`` of a tensor no Squeeze shifted, from its shapes at the
        points compared: the same answers, without a call per axis (declarations ask of every tensor)."""
        known = [shape for shape in shapes if shape is not None]
        if len(known) < len(shapes):
            return [None] * rank
        first = known[0]
        if all(shape == first for shape in known):  # the same at every point: each dim is its size
            return [first[axis] if axis < len(first) else None for axis in range(rank)]
        if len(known) == 2 and len(first) == len(known[1]) >= rank:  # the usual case: two points, one rank
            return [self._two_sizes(one, two) for one, two in zip(first, known[1])][:rank]
        found: list[BatchDim] = []
        for axis in range(rank):
            values = [shape[axis] if axis < len(shape) else None for shape in known]
            found.append(None if None in values else self._dim_of(cast(list[int], values)))
        return found

    def _two_sizes(self, one: int | None, two: int | None) -> BatchDim:
        """:meth:`_dim_of` of a dim at the two batch points (no other symbolic dim moves)."""
        if one is None or two is None:
            return None
        if one == two:
            return one
        factor, rest = divmod(one, self.b1)
        return ("batch", factor) if rest == 0 and factor * self.b2 == two else None

    def _dim_of(self, values: list[int]) -> BatchDim:
        """What one dim is, from its sizes at the points compared (all known)."""
        if self.moves_symbols and values[2] != values[0]:
            same = [key for key, sizes in self.symbols.items() if sizes == (values[0], values[2])]
            return same[0] if len(same) == 1 and values[1] == values[0] else None
        if values[0] == values[1]:
            return values[0]
        factor, rest = divmod(values[0], self.b1)
        if rest == 0 and factor * self.b2 == values[1]:
            return ("batch", factor)
        return None

    def _dim_at(self, knowns: list[Known], squeezed: int | None, axis: int) -> BatchDim:
        if squeezed is not None:  # the per-sample axes of the other points sit one to the left after it
            if axis == squeezed:
                return ("batch", 1)
            axes = [axis if point == 1 or axis < squeezed else axis - 1 for point in range(len(knowns))]
        else:
            axes = [axis] * len(knowns)
        values: list[int] = []
        for known, a in zip(knowns, axes):
            size = known.shape[a] if known.shape is not None and a < len(known.shape) else None
            if size is None:
                return None
            values.append(size)
        return self._dim_of(values)

    def squeezed_axis(self, name: str) -> int | None:
        """The batch axis of a tensor that has it at the new batch only (a Squeeze without axes drops a
        batch of 1): its shape there is the old batch's shape with the batch inserted.

        Asked after the walk only: the first call finds them all in one pass (a few per model at most),
        and each later one is a lookup (the findings and the declarations ask of every tensor)."""
        return self._squeezed_table().get(name)

    def squeezed_names(self) -> frozenset[str]:
        """The tensors :meth:`squeezed_axis` finds an axis for (after the walk)."""
        return frozenset(self._squeezed_table())

    def _squeezed_table(self) -> dict[str, int]:
        if self._squeezed is None:
            assert self.evaluator is not None, "trace_batch sets the evaluator"
            self._squeezed = {}
            for each, knowns in self.evaluator.known.items():
                first, second = knowns[0].shape, knowns[1].shape
                if first is not None and second is not None and len(second) == len(first) + 1:
                    axis = self._inserted_batch(first, second)
                    if axis is not None:
                        self._squeezed[each] = axis
        return self._squeezed

    def _inserted_batch(self, first: Shape, second: Shape) -> int | None:
        if None in first or None in second:
            return None
        return next(
            (j for j, d in enumerate(second) if d == self.b2 and second[:j] + second[j + 1 :] == first),
            None,
        )

    def ranks(self, name: str) -> tuple[int | None, ...]:
        """The rank at each point (None where unknown); they differ where a Squeeze drops a batch of 1."""
        return tuple([None if k.shape is None else len(k.shape) for k in self.at(name)])


#: an input dim as the points see it: ("batch",), ("symbol", i) or a fixed size
_Slot = tuple[str] | tuple[str, int] | int


def _input_slots(
    model: onnx.ModelProto, chosen: set[tuple[str, int]]
) -> tuple[dict[str, list[_Slot]], dict[str | tuple[str, int], int]]:
    """Per fed input, what each axis holds: ("batch",), a size, or ("symbol", i); and each other symbolic
    dim (its name, or (input, axis) when unnamed) with its index i."""
    constants = {t.name for t in model.graph.initializer}
    symbols: dict[str | tuple[str, int], int] = {}
    base: dict[str, list[_Slot]] = {}
    for info in model.graph.input:
        dims = read_dims(info)
        if info.name in constants or dims is None:
            continue
        row: list[_Slot] = []
        for axis, dim in enumerate(dims):
            if (info.name, axis) in chosen:
                row.append(("batch",))
            elif isinstance(dim, int) and dim > 0:
                row.append(dim)
            else:
                key = dim if isinstance(dim, str) else (info.name, axis)
                symbols.setdefault(key, len(symbols))
                row.append(("symbol", symbols[key]))
        base[info.name] = row
    return base, symbols


def make_points(
    model: onnx.ModelProto,
    batch_axes: Iterable[tuple[str, int]],
    batches: tuple[int, int, int],
    fitted: FittedDim | None = None,
) -> tuple[list[dict[str, Known]], dict[str, tuple[int, int]]]:
    """Input sizes at (b1), (b2), when other dims are symbolic (b1 with those dims moved), and (b3),
    for ``batches`` (b1, b2, b3); a ``fitted`` dim at the sizes it evaluates at.

    Also returns each named symbolic dim with its size at the first and third points.
    """
    base, symbols = _input_slots(model, set(batch_axes))
    pairs = [symbol_sizes(i) for i in range(len(symbols))]  # (size, moved) per symbol
    if fitted is not None and fitted.key in symbols:
        pairs[symbols[fitted.key]] = (fitted.size, fitted.moved)

    def size(slot: _Slot, batch: int, moved: bool) -> int:
        if isinstance(slot, int):
            return slot
        if len(slot) == 1:
            return batch
        return pairs[int(slot[1])][moved]

    def point(batch: int, moved: bool) -> dict[str, Known]:
        return {
            info.name: Known(info.type.tensor_type.elem_type, tuple(size(s, batch, moved) for s in base[info.name]))
            for info in model.graph.input
            if info.name in base
        }

    b1, b2, b3 = batches
    points = [point(b1, False), point(b2, False)] + ([point(b1, True)] if symbols else []) + [point(b3, False)]
    named = {key: pairs[i] for key, i in symbols.items() if isinstance(key, str) and pairs[i][0] != pairs[i][1]}
    return points, named


def new_trace(
    model: onnx.ModelProto,
    axes: tuple[tuple[str, int], ...],
    b1: int,
    b2: int,
    symbolic: bool,
    fitted: FittedDim | None = None,
) -> tuple[BatchTrace, list[dict[str, Known]]]:
    """An empty trace for the batch on ``axes`` going from ``b1`` to ``b2``, and the points to evaluate."""
    witness = max(b1, b2) + 3  # above 1 and apart from both: a size-1 channel never looks like the batch
    points, symbols = make_points(model, axes, (b1, b2, witness), fitted)
    sizes = (b1, b2) + ((b1,) if len(points) > 3 else ()) + (witness,)
    trace = BatchTrace(b1, b2, symbolic=symbolic, moves_symbols=len(points) > 3, symbols=symbols, sizes=sizes)
    trace.batch_axes = axes
    trace.fitted = fitted
    return trace, points


def far_point(points: Sequence[dict[str, Known]]) -> dict[str, Known]:
    """The first point with every dim the third point moves (the other symbolic dims) FAR_FACTOR times larger."""
    first, moved = points[0], points[2]
    far = {}
    for name, known in first.items():
        shape, other = known.shape or (), moved[name].shape or ()
        dims = tuple(d * FAR_FACTOR if d is not None and d != o else d for d, o in zip(shape, other))
        far[name] = Known(known.dtype, dims)
    return far


def batch_position(data_prefix: Sequence[int], out_shape: Sequence[int]) -> int | None:
    """The output axis that holds the batch, given the data dims before the batch axis."""
    prefix = list(data_prefix)
    for j in range(len(out_shape)):
        if list(out_shape[:j]) == prefix:
            return j
    wanted = product(prefix)
    return next((j for j in range(len(out_shape)) if product(out_shape[:j]) == wanted), None)


def ints_of(value: np.ndarray | None) -> list[int]:
    """A constant's elements as Python ints, flattened."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def sizes_of(known: Known) -> tuple[int, ...] | None:
    """The shape when every dim is a known size (``Known.full``), typed as such; else None."""
    shape = known.shape
    if shape is None or None in shape:
        return None
    return cast(tuple[int, ...], shape)  # no None left (every Known's dims are Python ints or None)


def product(dims: Sequence[int]) -> int:
    return math.prod(dims)


def with_element(values: list[int], index: int, value: int) -> list[int]:
    return values[:index] + [value] + values[index + 1 :]


def int64_known(values: list[int], like: Known | None = None) -> Known:
    """A small integer tensor as the evaluator knows it (int32 when ``like`` is int32)."""
    if like is not None and like.dtype == TensorProto.INT32:
        narrow = np.clip(values, -(2**31), 2**31 - 1).astype(np.int32)
        return Known(TensorProto.INT32, narrow.shape, narrow)
    array = np.array(values, dtype=np.int64)
    return Known(TensorProto.INT64, array.shape, array)


def shape_text(known: Known) -> str:
    if known.shape is None:
        return "[?]" if known.dtype else "(unknown)"
    return "[" + ", ".join("?" if d is None else str(d) for d in known.shape) + "]"


__all__ = [
    "AXIS_FREE", "INT64_MAX", "BatchTrace", "Computed", "Counting", "Rewrite", "Tiling", "Transposition",
    "Undecided", "batch_position", "far_point", "ints_of", "make_points", "new_trace",
]  # fmt: skip
