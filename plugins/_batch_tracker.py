"""Follow the batch through a model and find the shape constants that bake in the old batch.

The model is evaluated (``shape_eval``) at two points that differ only in the batch: ``b1``, the
batch the export was traced with, and ``b2``, the new one (any other number for a symbolic batch);
a third point moves every other symbolic input dim, so dims that depend on them are told apart.
Every dim is then a number at each point, and a dim *carries the batch* when it differs between
the two batch points as ``k * b1`` -> ``k * b2``.

A shape-carrying node (Reshape, Expand, Slice, Resize) whose data carries the batch is *consistent*
when, at ``b2``, its output is its ``b1`` output with exactly one axis scaled by ``b2 / b1``, at the
same memory position as in the data (the product of the dims before it is the same): then every
sample's elements stay together, as a per-sample run of the original would give them. A node that
is not consistent bakes in the old batch. Each element of its shape operand that comes from a
constant (directly, or through Concat/Unsqueeze/Cast chains) is tried at ``b2`` in turn; one that
makes the node consistent, and only one, is proved to be the batch and is rewritten. The decision
is applied at ``b2`` before the next node is evaluated, so one pass in graph order settles every
node (no fixpoint loop). Everything else is reported as *undecided*, with the spec lines that fix
it by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto

from patchspec.api import BROADCASTING, Known, NodeSite, ScopeIndex, ShapeEvaluator, expressions, read_dims, use_counts

#: sizes given to symbolic input dims that are not the batch: distinct, divisible by the usual
#: strides (up to 64), and small enough for position tables (transformers often stop at 512)
SYMBOL_SIZES = tuple(128 * n for n in range(1, 9))
#: how far the third point moves each of them
SYMBOL_SHIFT = 64
INT64_MAX = np.iinfo(np.int64).max
#: ops that treat every element alike (broadcasting from the right): a tensor whose batch a Squeeze
#: dropped at the old batch only still means the same to them; any other op counts axes from the front
AXIS_FREE = BROADCASTING | {
    "Abs",
    "Neg",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Erf",
    "Cast",
    "CastLike",
    "Identity",
    "Clip",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "IsNaN",
    "IsInf",
    "Dropout",
    "Sin",
    "Cos",
    "ThresholdedRelu",
    "Squeeze",
}
#: ops whose output copies the elements of their first input in order (for tracing a shape back)
_COPY_OPS = {"Unsqueeze", "Squeeze", "Cast", "Identity", "Reshape", "Flatten"}


@dataclass(frozen=True)
class Rewrite:
    """Change elements of the constant that ``site.node`` reads as input ``operand``."""

    site: NodeSite
    operand: int
    elements: tuple  # ((element index, new value), ...)
    reason: str


@dataclass
class BatchTrace:
    b1: int
    b2: int
    rewrites: list[Rewrite] = field(default_factory=list)
    #: points the evaluation could not settle: warnings, with the spec lines that settle them by hand
    undecided: list[str] = field(default_factory=list)
    #: what the evaluation proves: a node that cannot run at the new batch, or drops or mixes samples
    #: there. A model with one is never written.
    refusals: list[str] = field(default_factory=list)
    symbolic: bool = False  # the new batch is a name: rewrites write -1/0/1/end, never a size
    evaluator: ShapeEvaluator | None = None
    moves_symbols: bool = False  # a third point moved the other symbolic dims
    symbols: dict = field(default_factory=dict)  # input dim_param -> its size at the first and third points
    #: Squeezes without axes that drop a batch of 1, with the axes they remove at the new batch
    squeezes: list = field(default_factory=list)  # [(NodeSite, [axis, ...]), ...]

    def batch_dim(self, name: str, axis: int):
        """What the evaluation says of one dim: a size, ("batch", k), an input's dim_param, or None."""
        knowns = self.evaluator.at(name)
        squeezed = self.squeezed_axis(name)
        if squeezed is not None:  # the per-sample axes of the other points sit one to the left after it
            if axis == squeezed:
                return ("batch", 1)
            axes = [axis if point == 1 or axis < squeezed else axis - 1 for point in range(len(knowns))]
        else:
            axes = [axis] * len(knowns)
        if any(k.shape is None or a >= len(k.shape) or k.shape[a] is None for k, a in zip(knowns, axes)):
            return None
        values = [k.shape[a] for k, a in zip(knowns, axes)]
        if self.moves_symbols and values[2] != values[0]:
            same = [name for name, sizes in self.symbols.items() if sizes == (values[0], values[2])]
            return same[0] if len(same) == 1 and values[1] == values[0] else None
        if values[0] == values[1]:
            return values[0]
        factor, rest = divmod(values[0], self.b1)
        if rest == 0 and factor * self.b2 == values[1]:
            return ("batch", factor)
        return None

    def squeezed_axis(self, name: str) -> int | None:
        """The batch axis of a tensor that has it at the new batch only (a Squeeze without axes drops a
        batch of 1): its shape there is the old batch's shape with the batch inserted."""
        first, second = self.evaluator.at(name)[:2]
        if not (first.full and second.full) or len(second.shape) != len(first.shape) + 1:
            return None
        return next(
            (
                j
                for j, d in enumerate(second.shape)
                if d == self.b2 and second.shape[:j] + second.shape[j + 1 :] == first.shape
            ),
            None,
        )

    def ranks(self, name: str) -> tuple:
        """The rank at each point (None where unknown); they differ where a Squeeze drops a batch of 1."""
        return tuple(None if k.shape is None else len(k.shape) for k in self.evaluator.at(name))


def make_points(model: onnx.ModelProto, batch_axes, b1: int, b2: int) -> tuple[list[dict], dict]:
    """Input sizes at (b1), (b2) and, when other dims are symbolic, (b1 with those dims moved).

    Also returns each named symbolic dim with its size at the first and third points.
    """
    constants = {t.name for t in model.graph.initializer}
    symbols: dict = {}
    base: dict[str, list] = {}
    for info in model.graph.input:
        dims = read_dims(info)
        if info.name in constants or dims is None:
            continue
        row = []
        for axis, dim in enumerate(dims):
            if (info.name, axis) in batch_axes:
                row.append(("batch",))
            elif isinstance(dim, int) and dim > 0:
                row.append(dim)
            else:
                key = dim if isinstance(dim, str) else (info.name, axis)
                symbols.setdefault(key, len(symbols))
                row.append(("symbol", symbols[key]))
        base[info.name] = row
    moved = bool(symbols)

    def point(batch: int, shift: int) -> dict:
        sizes = {}
        for info in model.graph.input:
            if info.name not in base:
                continue
            shape = tuple(
                batch
                if d == ("batch",)
                else SYMBOL_SIZES[d[1] % len(SYMBOL_SIZES)] + shift
                if isinstance(d, tuple)
                else d
                for d in base[info.name]
            )
            sizes[info.name] = Known(info.type.tensor_type.elem_type, shape)
        return sizes

    points = [point(b1, 0), point(b2, 0)] + ([point(b1, SYMBOL_SHIFT)] if moved else [])
    named = {
        key: (SYMBOL_SIZES[i % len(SYMBOL_SIZES)], SYMBOL_SIZES[i % len(SYMBOL_SIZES)] + SYMBOL_SHIFT)
        for key, i in symbols.items()
        if isinstance(key, str)
    }
    return points, named


def trace_batch(model: onnx.ModelProto, batch_axes, b1: int, b2: int, *, symbolic: bool = False) -> BatchTrace:
    """Evaluate ``model`` at the batch points, deciding each shape constant on the way."""
    points, symbols = make_points(model, set(batch_axes), b1, b2)
    trace = BatchTrace(b1, b2, symbolic=symbolic, moves_symbols=len(points) > 2, symbols=symbols)
    tracker = _Tracker(model, trace)
    trace.evaluator = ShapeEvaluator(model, points, hook=tracker.hook)
    tracker.evaluator = trace.evaluator
    trace.evaluator.run()
    trace.refusals.extend(tracker.conflicts())
    trace.squeezes.extend(tracker.batch_squeezes())
    return trace


class _Tracker:
    def __init__(self, model: onnx.ModelProto, trace: BatchTrace) -> None:
        self.model = model
        self.trace = trace
        self.b1, self.b2 = trace.b1, trace.b2
        self.index = ScopeIndex()
        self.evaluator: ShapeEvaluator | None = None
        self.uses = use_counts(model)
        self.decided: set[int] = set()  # ids of nodes with a rewrite or an undecided report
        #: tensors whose batch a Reshape merged into an axis behind other dims: name -> (axis, how many
        #: elements of that axis come before each sample's), so a later Reshape can split it out again
        self.folded: dict[str, tuple[int, int]] = {}
        self.not_folded: set[str] = set()  # tensors known to hold no folded batch

    # -- the hook ------------------------------------------------------------------------------------
    def hook(self, site: NodeSite, inputs: list) -> list | None:
        node = site.node
        if node.domain not in ("", "ai.onnx") or not all(self.evaluator.runs(site)[:2]):
            return None  # in a branch not taken at one of the batches: there is nothing to compare
        handler = {"Reshape": self._reshape, "Expand": self._expand, "Slice": self._slice, "Resize": self._resize}.get(
            node.op_type
        )
        return handler(site, inputs) if handler else None

    def carrier(self, first: Known, second: Known) -> tuple[int, int] | None:
        """(axis, factor) of the one axis that carries the batch; None if none or unclear."""
        if not (first.full and second.full) or len(first.shape) != len(second.shape):
            return None
        axes = [(axis, a // self.b1) for axis, (a, b) in enumerate(zip(first.shape, second.shape)) if a != b]
        if len(axes) != 1:
            return None
        axis, factor = axes[0]
        if first.shape[axis] % self.b1 or factor * self.b2 != second.shape[axis]:
            return None
        return axis, factor

    def consistent(self, out1: Known, out2: Known, batch_axis: int | None) -> bool:
        """``out2`` is ``out1`` with exactly ``batch_axis`` scaled by b2/b1."""
        if batch_axis is None or not (out1.full and out2.full) or len(out1.shape) != len(out2.shape):
            return False
        differing = [i for i, (a, b) in enumerate(zip(out1.shape, out2.shape)) if a != b]
        return differing == [batch_axis] and out1.shape[batch_axis] * self.b2 == out2.shape[batch_axis] * self.b1

    def folded_behind(
        self, data_shape: tuple, axis: int, factor: int, out1: Known, out2: Known
    ) -> tuple[int, int] | None:
        """The Reshape merges the batch into an output axis as its innermost part, behind data dims that
        come before it: ``[L, batch, E] -> [-1, E]`` (PyTorch's attention, sequence first). Each row is
        still one sample's, and the element that absorbed the batch is already right at any batch;
        making another element "the batch" would move the batch into the features. ``factor``: the batch
        axis's size per sample; a batch folded with heads before (``[L, B*heads, d]``) is their outer part."""
        if not (out1.full and out2.full) or len(out1.shape) != len(out2.shape):
            return None
        differing = [j for j, (a, b) in enumerate(zip(out1.shape, out2.shape)) if a != b]
        if len(differing) != 1 or out1.shape[differing[0]] * self.b2 != out2.shape[differing[0]] * self.b1:
            return None
        j = differing[0]
        before, after = _product(data_shape[:axis]), factor * _product(data_shape[axis + 1 :])
        outer = _product(out1.shape[:j])
        if (
            after == _product(out1.shape[j + 1 :])
            and outer < before
            and before % outer == 0
            and outer * out1.shape[j] == before * self.b1
        ):
            return j, before // outer
        return None

    def fold_of(self, name: str) -> tuple[int, int] | None:
        """Where a folded batch sits in ``name``: carried from the Reshape that folded it through ops
        that keep that axis as it is (elementwise ops, MatMul/Gemm rows, Transpose moves it)."""
        chain = []
        while name not in self.folded:
            producer = self.evaluator.producer.get(name)
            if producer is None or len(chain) > 64 or not producer.node.input or name in self.not_folded:
                self.not_folded.update(tensor for tensor, _ in chain)  # remembered: a deep chain is walked once
                return None
            chain.append((name, producer.node))
            name = producer.node.input[0]
        fold = self.folded[name]
        for tensor, node in reversed(chain):
            fold = self._carried_fold(node, name, tensor, fold)
            if fold is None:
                self.not_folded.add(tensor)
                return None
            self.folded[tensor] = fold
            name = tensor
        return fold

    def _carried_fold(self, node: onnx.NodeProto, source: str, target: str, fold: tuple[int, int]):
        axis, before = fold
        if node.op_type == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            return (perm.index(axis), before) if perm and axis in perm else None
        if node.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
            return None  # they move axes: only a Reshape of its own can say where the batch went
        points = zip(self.evaluator.at(source)[:2], self.evaluator.at(target)[:2])
        for given, made in points:
            if given.shape is None or made.shape is None or len(given.shape) != len(made.shape):
                return None
            if axis >= len(made.shape) or given.shape[axis] != made.shape[axis]:
                return None
        return fold

    def _carried(self, site: NodeSite, inputs: list) -> tuple[int, int, list[int]] | None:
        """(the data's batch axis, its size per sample, the shape operand's values) when the data carries
        the batch."""
        if len(site.node.input) < 2 or inputs[0][1].value is None:
            return None
        found = self.carrier(inputs[0][0], inputs[1][0])
        if found is None:
            return None
        return found[0], found[1], [int(v) for v in np.asarray(inputs[0][1].value).reshape(-1)]

    # -- Reshape ---------------------------------------------------------------------------------------
    def _reshape(self, site: NodeSite, inputs: list) -> list | None:
        carried = self._carried(site, inputs)
        if carried is None:
            return None
        axis, factor, values = carried
        (data1, shape1), (data2, shape2) = inputs[0][:2], inputs[1][:2]
        out1 = self._eval(site, [data1, shape1])
        prefix = list(data1.shape[:axis])
        fold = self.fold_of(site.node.input[0])
        if fold is not None and fold[0] == axis:
            prefix = [_product(prefix) * fold[1]]  # the batch sits behind part of its axis
        i = batch_position(prefix, out1.shape) if out1.full else None
        out2 = self._eval(site, [data2, shape2])
        if self.consistent(out1, out2, i):
            return None
        behind = self.folded_behind(data1.shape, axis, factor, out1, out2) if fold is None else None
        if behind is not None:
            self.folded[site.node.output[0]] = behind
            return None
        proved = i is not None and i < len(values) and values[i] not in (0, -1) and values[i] % self.b1 == 0
        new_static = values[i] // self.b1 * self.b2 if proved else None
        if not proved or not self.consistent(out1, self._eval(site, [data2, _int64(_with(values, i, new_static))]), i):
            suggestion = (
                self._suggest(site, values, axis) if self._suggestion_works(site, values, axis, data1, data2) else ""
            )
            return self._unsettled(
                site,
                [data2, shape2],
                values,
                f"its data carries the batch on axis {axis}, and no element of its shape can be proved to be the batch",
                suggestion,
            )
        written = self._written_value(site, values, i, data1, out1, axis)
        if written is None:
            return self._undecided(
                site,
                values,
                f"element {i} is the batch, but a symbolic batch there needs a computed shape",
                self._suggest(site, values, axis, i),
            )
        return self._rewrite_element(site, 1, values, i, new_static, written, inputs, axis)

    def _written_value(self, site, values, i, data1, out1, axis):
        """For a symbolic batch: -1 (infer) or 0 (copy the data's dim); None when neither expresses it."""
        if not self.symbolic:
            return values[i] // self.b1 * self.b2
        if -1 not in values:
            return -1
        allowzero = any(a.name == "allowzero" and a.i for a in site.node.attribute)
        if i == axis and not allowzero and out1.shape[i] == data1.shape[axis]:
            return 0
        return None

    # -- Expand, Slice, Resize -------------------------------------------------------------------------
    def _expand(self, site: NodeSite, inputs: list) -> list | None:
        carried = self._carried(site, inputs)
        if carried is None:
            return None
        axis, _, values = carried
        (data1, shape1), (data2, shape2) = inputs[0][:2], inputs[1][:2]
        out1 = self._eval(site, [data1, shape1])
        aligned = axis + max(len(values), len(data1.shape)) - len(data1.shape)
        if self.consistent(out1, self._eval(site, [data2, shape2]), aligned):
            return None
        slot = axis + len(values) - len(data1.shape)
        proved = 0 <= slot < len(values) and values[slot] % self.b1 == 0
        new_static = values[slot] // self.b1 * self.b2 if proved else None
        if not proved or not self.consistent(
            out1, self._eval(site, [data2, _int64(_with(values, slot, new_static))]), aligned
        ):
            return self._unsettled(
                site, [data2, shape2], values, "its data carries the batch, which its shape does not let through"
            )
        return self._rewrite_element(site, 1, values, slot, new_static, 1 if self.symbolic else new_static, inputs)

    def _slice(self, site: NodeSite, inputs: list) -> list | None:
        node = site.node
        if len(node.input) < 3 or any(k.value is None for k in inputs[0][1 : len(node.input)] if k.dtype):
            return None
        (data1, data2) = inputs[0][0], inputs[1][0]
        found = self.carrier(data1, data2)
        if found is None:
            return None
        axis, _ = found
        out1 = self._eval(site, inputs[0])
        if self.consistent(out1, self._eval(site, inputs[1]), axis):
            return None
        starts = [int(v) for v in inputs[0][1].value.reshape(-1)]
        ends = [int(v) for v in inputs[0][2].value.reshape(-1)]
        axes = (
            [int(v) for v in inputs[0][3].value.reshape(-1)]
            if len(node.input) > 3 and node.input[3]
            else list(range(len(starts)))
        )
        steps = (
            [int(v) for v in inputs[0][4].value.reshape(-1)]
            if len(node.input) > 4 and node.input[4]
            else [1] * len(starts)
        )
        rank = len(data1.shape)
        entry = next((j for j, a in enumerate(axes) if a % rank == axis), None)
        if entry is None:
            return None  # the batch axis is not sliced: whatever changed, it is not this constant
        if starts[entry] != 0 or steps[entry] != 1 or out1.shape[axis] != data1.shape[axis]:
            return self._refuse(
                site,
                f"drops samples at batch {self.b2}: it slices axis {axis}, which carries the "
                f"batch, with constant bounds (starts {starts}, ends {ends}), so it keeps only part of "
                "the batch and every later sample is lost or read as the first one's",
            )
        trial = [list(point) for point in inputs]
        trial[1][2] = _int64(_with(ends, entry, INT64_MAX))
        if not self.consistent(out1, self._eval(site, trial[1]), axis):
            return None
        return self._rewrite_element(site, 2, ends, entry, INT64_MAX, INT64_MAX, inputs)

    def _resize(self, site: NodeSite, inputs: list) -> list | None:
        node = site.node
        if len(node.input) < 4 or not node.input[3] or inputs[0][3].value is None:
            return None
        data1, data2 = inputs[0][0], inputs[1][0]
        found = self.carrier(data1, data2)
        if found is None:
            return None
        axis, _ = found
        values = [int(v) for v in inputs[0][3].value.reshape(-1)]
        if axis >= len(values) or values[axis] % self.b1:
            return None
        out1 = self._eval(site, inputs[0])
        if self.consistent(out1, self._eval(site, inputs[1]), axis):
            return None
        new_static = values[axis] // self.b1 * self.b2
        if self.symbolic:
            return self._undecided(
                site,
                values,
                f"its sizes hold the batch at axis {axis}, and a symbolic batch there needs a computed shape",
                self._suggest(site, values, axis, axis, operand=3),
            )
        return self._rewrite_element(site, 3, values, axis, new_static, new_static, inputs)

    def _rewrite_element(self, site, operand, values, i, new_static, written, inputs, axis=None):
        """Record that element ``i`` of input ``operand`` becomes ``written``; evaluate on with ``new_static``."""
        node = site.node
        sources = self.sources(site, operand)
        source = sources[i] if sources and i < len(sources) else None
        if source is None:
            suggestion = self._suggest(site, values, axis, i, operand) if axis is not None else ""
            return self._undecided(
                site,
                values,
                f"element {i} of input {operand} is the batch, but it is computed "
                "at run time, or its constant is shared along the way",
                suggestion,
            )
        reader, reader_operand, element = source
        label = f"{node.op_type} '{node.name or node.output[0]}'"
        shown = "end" if written == INT64_MAX else written
        self.trace.rewrites.append(
            Rewrite(
                reader,
                reader_operand,
                ((element, written),),
                f"{label}: element {i} is the batch ({values[i]} -> {shown})",
            )
        )
        self.decided.add(id(node))
        replaced = [list(point) for point in inputs]
        replaced[1][operand] = _int64(_with(values, i, new_static), like=inputs[1][operand])
        return replaced

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def symbolic(self) -> bool:
        return self.trace.symbolic

    def _eval(self, site: NodeSite, inputs: list[Known]) -> Known:
        return self.evaluator.evaluate(site.node, list(inputs))[0]

    def sources(self, site: NodeSite, operand: int) -> list | None:
        """Per element of ``site.node``'s input: (reader site, operand, element) of the constant it copies."""
        name = site.node.input[operand]
        if self.index.constant_source(name, site.scopes) is not None:
            value = self.index.constant(name, site.scopes)
            size = 0 if value is None else int(np.asarray(value).size)
            return [(site, operand, j) for j in range(size)]
        producer = self.evaluator.producer.get(name)
        if producer is None or self.uses.get(name, 0) > 1 or producer.node.domain not in ("", "ai.onnx"):
            return None
        op = producer.node.op_type
        if op in _COPY_OPS:
            return self.sources(producer, 0)
        if op == "Concat":
            found = []
            for j, part in enumerate(producer.node.input):
                value = self.evaluator.at(part)[0].value
                length = 0 if value is None else int(np.asarray(value).size)
                found.extend(self.sources(producer, j) or [None] * length)
            return found
        return None

    def _unsettled(self, site: NodeSite, inputs2: list, values: list[int], why: str, suggestion: str = "") -> None:
        """Undecided, or refused when the node as exported cannot run at the new batch at all."""
        if self._eval(site, inputs2).shape is None:
            fix = f"; to fix it, add before set_batch:\n{suggestion}" if suggestion else ""
            return self._refuse(site, f"cannot run at batch {self.b2} with its constant shape {values}: {why}{fix}")
        return self._undecided(site, values, why, suggestion)

    def _refuse(self, site: NodeSite, why: str) -> None:
        node = site.node
        label = f"{node.op_type} '{node.name or node.output[0]}'{self.evaluator.where(site)}"
        self.trace.refusals.append(f"{label} {why}")
        self.decided.add(id(node))
        return None

    def _undecided(self, site: NodeSite, values: list[int], why: str, suggestion: str = "") -> None:
        node = site.node
        label = f"{node.op_type} '{node.name or node.output[0]}'{self.evaluator.where(site)}"
        text = f"undecided: {label} has constant shape {values}; {why}"
        self.trace.undecided.append(text + (f"; to fix it by hand, add:\n{suggestion}" if suggestion else ""))
        self.decided.add(id(node))
        return None

    def _suggestion_works(self, site, values, axis, data1, data2) -> bool:
        """Whether the suggested shape (the data's batch dim where the old batch was) keeps the samples
        apart at the new batch: a hint that cannot work is not printed."""
        i = next((j for j, v in enumerate(values) if v == self.b1), axis)
        if not 0 <= i < len(values) or not data2.full:
            return False
        trial = self._eval(site, [data2, _int64(_with(values, i, data2.shape[axis]))])
        at_old = self._eval(site, [data1, _int64(_with(values, i, data1.shape[axis]))])
        return at_old.full and self.consistent(at_old, trial, i)

    def _suggest(self, site: NodeSite, values: list[int], axis: int, i: int | None = None, operand: int = 1) -> str:
        """Spec lines for replace_initializer that put the data's batch dim at element ``i``."""
        node = site.node
        data = node.input[0]
        if i is None:
            i = next((j for j, v in enumerate(values) if v == self.b1), axis)
        items = [str(v) for v in values]
        if 0 <= i < len(items):
            items[i] = json.dumps(f"dim({expressions.quote_tensor(data)}, {axis})")
        selector = f"{{name: {json.dumps(node.name)}}}" if node.name else f"{{produces: {json.dumps(node.output[0])}}}"
        return (
            "  - replace_initializer:\n"
            f"      select: {selector}\n"
            f"      input: {operand}\n"
            f"      shape: [{', '.join(items)}]"
        )

    def conflicts(self) -> list[str]:
        """Nodes that run at the old batch and not at the new one, each with the likely reason."""
        found = []
        for name, site in self.evaluator.producer.items():
            node = site.node
            if id(node) in self.decided or name != next((o for o in node.output if o), None):
                continue
            if node.domain not in ("", "ai.onnx") or not self.evaluator.runs(site)[1]:
                continue  # a node in a branch not taken at the new batch never runs there
            condition = self._condition_follows_batch(site)
            if condition:
                found.append(condition)
                continue
            shifted = next((n for n in node.input if n and self.trace.squeezed_axis(n) is not None), None)
            if shifted is not None and node.op_type not in AXIS_FREE:
                found.append(self._conflict(site, self._shifted_axes(shifted), "runs, but mixes samples,"))
                continue
            first, second = self.evaluator.at(name)[:2]
            if node.op_type == "If":
                continue
            if first.shape is None or second.shape is not None:
                continue
            if any(
                self.evaluator.at(n)[1].shape is None and self.evaluator.at(n)[0].shape is not None
                for n in node.input
                if n
            ):
                continue  # an input already failed upstream: that node is the one reported
            inputs = ", ".join(f"{n} {_shape_text(self.evaluator.at(n)[1])}" for n in node.input if n)
            if node.op_type in BROADCASTING and self._meets_a_free_dim(node):
                self.trace.undecided.append(
                    "undecided: "
                    + self._conflict(
                        site,
                        (
                            f"its inputs ({inputs}) do not fit together at the sizes tried; one of the dims that disagree "
                            "follows another symbolic input dim, which may be the batch under another name: list every "
                            "input that carries the batch in 'inputs'"
                        ),
                    )
                )
                continue
            why = (
                f"it removes axes that are 1 only at batch {self.b1}: a batched model keeps the batch there"
                if node.op_type == "Squeeze"
                else f"its inputs ({inputs}) do not fit together; a constant upstream probably holds the old batch "
                f"{self.b1}"
            )
            found.append(self._conflict(site, why))
        return found

    def _meets_a_free_dim(self, node: onnx.NodeProto) -> bool:
        """Whether the axes on which a broadcasting node's inputs disagree at the new batch include a dim
        that moves with another symbolic input dim (the evaluation chose its size, the model did not)."""
        if not self.trace.moves_symbols:
            return False
        shapes = [
            (self.evaluator.at(n)[1].shape, self.evaluator.at(n)[2].shape, self.evaluator.at(n)[0].shape)
            for n in node.input
            if n
        ]
        if any(None in (new, moved, old) for new, moved, old in shapes):
            return True  # too little is known to call it a proof
        rank = max(len(new) for new, _, _ in shapes)
        for back in range(1, rank + 1):
            sizes = {new[-back] for new, _, _ in shapes if back <= len(new)} - {1}
            if len(sizes) > 1 and any(back <= len(new) and moved[-back] != old[-back] for new, moved, old in shapes):
                return True
        return False

    def _condition_follows_batch(self, site: NodeSite) -> str | None:
        """An If or Loop whose condition is computed from a tensor that carries the batch."""
        node = site.node
        operand = {"If": 0, "Loop": 1}.get(node.op_type)
        if operand is None or len(node.input) <= operand or not node.input[operand]:
            return None
        name = node.input[operand]
        first, second = self.evaluator.at(name)[:2]
        before = self._before_squeeze(name)
        if before is not None:
            first, second = self.evaluator.at(before)[:2]
        if second.shape is None or not second.full or _product(second.shape) == _product(first.shape or ()):
            return None
        article = "an" if node.op_type == "If" else "a"
        return self._conflict(
            site,
            f"its condition '{name}' is computed from the batch ({_shape_text(first)} at batch "
            f"{self.b1}, {_shape_text(second)} at batch {self.b2}); {article} {node.op_type} takes "
            "one condition for the whole batch, so the model cannot run batched as it is",
        )

    def _before_squeeze(self, name: str) -> str | None:
        """The input of the Squeeze that made ``name`` a scalar, if one did."""
        producer = self.evaluator.producer.get(name)
        if producer is not None and producer.node.op_type in ("Squeeze", "Reshape", "Identity") and producer.node.input:
            return producer.node.input[0]
        return None

    def batch_squeezes(self) -> list:
        """Squeezes without axes whose output loses the batch at the old batch of 1 only.

        Given the axes they remove at the new batch, they keep the batch at every size, so the
        output's declared rank holds at batch 1 too (and older onnx releases, which squeeze a
        symbolic dim away, infer the same rank).
        """
        found = []
        for name, site in self.evaluator.producer.items():
            node = site.node
            if node.op_type != "Squeeze" or node.domain not in ("", "ai.onnx") or name != node.output[0]:
                continue
            if (len(node.input) > 1 and node.input[1]) or any(a.name == "axes" for a in node.attribute):
                continue
            if not self.evaluator.runs(site)[1] or self.trace.squeezed_axis(name) is None:
                continue
            if any(self._condition_follows_batch(consumer) for consumer in self._consumers(name)):
                continue  # a condition that follows the batch: the model is refused, not repaired
            data = self.evaluator.at(node.input[0])[1]
            if data.full:  # no axes at all: at the new batch it removes nothing (an Identity)
                found.append((site, [axis for axis, size in enumerate(data.shape) if size == 1]))
        return found

    def _consumers(self, name: str) -> list[NodeSite]:
        return [
            site
            for output, site in self.evaluator.producer.items()
            if output == next((o for o in site.node.output if o), None) and name in site.node.input
        ]

    def _shifted_axes(self, name: str) -> str:
        first, second = self.evaluator.at(name)[:2]
        squeeze = self.evaluator.producer.get(name)
        while squeeze is not None and squeeze.node.op_type != "Squeeze" and squeeze.node.input:
            squeeze = self.evaluator.producer.get(squeeze.node.input[0])
        origin = f"Squeeze '{squeeze.node.name or squeeze.node.output[0]}'" if squeeze is not None else "a Squeeze"
        return (
            f"its input '{name}' is {_shape_text(first)} at batch {self.b1}, where {origin} drops the batch, and "
            f"{_shape_text(second)} at batch {self.b2}, so its axes, counted from the front, point at other dims "
            f"there; shift them by one past the batch, or count them from the end"
        )

    def _conflict(self, site: NodeSite, why: str, problem: str = "cannot run") -> str:
        node = site.node
        label = f"{node.op_type} '{node.name or node.output[0]}'{self.evaluator.where(site)}"
        return f"{label} {problem} at batch {self.b2}: {why}"


def batch_position(data_prefix, out_shape) -> int | None:
    """The output axis that holds the batch, given the data dims before the batch axis."""
    prefix = list(data_prefix)
    for j in range(len(out_shape)):
        if list(out_shape[:j]) == prefix:
            return j
    wanted = _product(prefix)
    return next((j for j in range(len(out_shape)) if _product(out_shape[:j]) == wanted), None)


def _product(dims) -> int:
    return int(np.prod(list(dims), dtype=np.int64)) if len(dims) else 1


def _with(values: list[int], index: int, value: int) -> list[int]:
    return values[:index] + [value] + values[index + 1 :]


def _int64(values: list[int], like: Known | None = None) -> Known:
    dtype = np.int32 if like is not None and like.dtype == TensorProto.INT32 else np.int64
    array = np.array(values, dtype=dtype) if dtype == np.int64 else np.clip(values, -(2**31), 2**31 - 1).astype(dtype)
    return Known(TensorProto.INT64 if dtype == np.int64 else TensorProto.INT32, array.shape, array)


def _shape_text(known: Known) -> str:
    if known.shape is None:
        return "[?]" if known.dtype else "(unknown)"
    return "[" + ", ".join("?" if d is None else str(d) for d in known.shape) + "]"


__all__ = ["SYMBOL_SIZES", "BatchTrace", "Rewrite", "make_points", "trace_batch"]
