"""Follow the batch through a model and find the shape constants that bake in the old batch.

``trace_batch`` is the entry point (set_batch calls it through ``patchspec.api``). The model is
evaluated at the points ``batch_trace.make_points`` gives; a hook sees every Reshape, Expand, Slice
and Resize before it is evaluated.

A shape-carrying node whose data carries the batch is *consistent* when, at ``b2``, its output is
its ``b1`` output with exactly one axis scaled by ``b2 / b1``, at the same memory position as in
the data (the product of the dims before it is the same): then every sample's elements stay
together, as a per-sample run of the original would give them. A node that is not consistent
bakes in the old batch. Each element of its shape operand that comes from a constant (directly,
or through Concat/Unsqueeze/Cast chains) is tried at ``b2`` in turn; one that makes the node
consistent, and only one, is proved to be the batch and is rewritten. The decision is applied at
``b2`` before the next node is evaluated, so one pass in graph order settles every node (no
fixpoint loop). Everything else is reported as *undecided*, with the patch that fixes it by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex, use_counts
from patchspec.shapes import expressions
from patchspec.shapes.batch_findings import BatchFindings
from patchspec.shapes.batch_folds import Folds
from patchspec.shapes.batch_trace import (
    INT64_MAX,
    BatchTrace,
    PointInputs,
    Rewrite,
    Undecided,
    batch_position,
    int64_known,
    make_points,
    product,
    with_element,
)
from patchspec.shapes.evaluate import Known, ShapeEvaluator
from patchspec.shapes.spec_lines import FlowValue, SpecFix, spec_lines

#: ops whose output copies the elements of their first input in order (for tracing a shape back)
_COPY_OPS = {"Unsqueeze", "Squeeze", "Cast", "Identity", "Reshape", "Flatten"}
#: per element of a shape operand: (reader site, operand, element) of the constant it copies
Source = tuple[NodeSite, int, int]


def trace_batch(
    model: onnx.ModelProto, batch_axes: Iterable[tuple[str, int]], b1: int, b2: int, *, symbolic: bool = False
) -> BatchTrace:
    """Evaluate ``model`` at the batch points, deciding each shape constant on the way."""
    points, symbols = make_points(model, batch_axes, b1, b2)
    trace = BatchTrace(b1, b2, symbolic=symbolic, moves_symbols=len(points) > 2, symbols=symbols)
    tracker = _Tracker(model, trace, points)
    tracker.evaluator.run()
    findings = BatchFindings(trace, tracker.evaluator, tracker.decided)
    trace.refusals.extend(findings.conflicts())
    trace.squeezes.extend(findings.batch_squeezes())
    return trace


class _Tracker:
    def __init__(self, model: onnx.ModelProto, trace: BatchTrace, points: list[dict[str, Known]]) -> None:
        self.model = model
        self.trace = trace
        self.b1, self.b2 = trace.b1, trace.b2
        self.index = ScopeIndex()
        self.evaluator = ShapeEvaluator(model, points, hook=self.hook)
        trace.evaluator = self.evaluator
        self.folds = Folds(self.evaluator, self.b1, self.b2)
        self.uses = use_counts(model)
        self.decided: set[int] = set()  # ids of nodes with a rewrite or an undecided report

    # -- the hook ------------------------------------------------------------------------------------
    def hook(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        node = site.node
        if node.domain not in ("", "ai.onnx") or not all(self.evaluator.runs(site)[:2]):
            return None  # in a branch not taken at one of the batches: there is nothing to compare
        handlers: dict[str, Callable[[NodeSite, PointInputs], PointInputs | None]] = {
            "Reshape": self._reshape,
            "Expand": self._expand,
            "Slice": self._slice,
            "Resize": self._resize,
        }
        handler = handlers.get(node.op_type)
        return handler(site, inputs) if handler else None

    def carrier(self, first: Known, second: Known) -> tuple[int, int] | None:
        """(axis, factor) of the one axis that carries the batch; None if none or unclear."""
        if first.shape is None or second.shape is None or not (first.full and second.full):
            return None
        if len(first.shape) != len(second.shape):
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
        if batch_axis is None or out1.shape is None or out2.shape is None or not (out1.full and out2.full):
            return False
        if len(out1.shape) != len(out2.shape):
            return False
        differing = [i for i, (a, b) in enumerate(zip(out1.shape, out2.shape)) if a != b]
        return differing == [batch_axis] and out1.shape[batch_axis] * self.b2 == out2.shape[batch_axis] * self.b1

    def _carried(self, site: NodeSite, inputs: PointInputs) -> tuple[int, int, list[int]] | None:
        """(the data's batch axis, its size per sample, the shape operand's values) when the data carries
        the batch."""
        if len(site.node.input) < 2 or inputs[0][1].value is None:
            return None
        found = self.carrier(inputs[0][0], inputs[1][0])
        if found is None:
            return None
        return found[0], found[1], _ints(inputs[0][1].value)

    # -- Reshape ---------------------------------------------------------------------------------------
    def _reshape(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        carried = self._carried(site, inputs)
        if carried is None:
            return None
        axis, factor, values = carried
        (data1, shape1), (data2, shape2) = inputs[0][:2], inputs[1][:2]
        assert data1.shape is not None  # the carrier has a full shape
        out1 = self._eval(site, [data1, shape1])
        prefix = list(data1.shape[:axis])
        fold = self.folds.fold_of(site.node.input[0])
        if fold is not None and fold[0] == axis:
            prefix = [product(prefix) * fold[1]]  # the batch sits behind part of its axis
        i = batch_position(prefix, out1.shape) if out1.shape is not None and out1.full else None
        out2 = self._eval(site, [data2, shape2])
        if self.consistent(out1, out2, i):
            return None
        behind = self.folds.folded_behind(data1.shape, axis, factor, out1, out2) if fold is None else None
        if behind is not None:
            self.folds.folded[site.node.output[0]] = behind
            return None
        if (
            i is None
            or i >= len(values)
            or values[i] in (0, -1)
            or values[i] % self.b1
            or not self.consistent(
                out1, self._eval(site, [data2, int64_known(with_element(values, i, values[i] // self.b1 * self.b2))]), i
            )
        ):
            works = self._suggestion_works(site, values, axis, data1, data2)
            return self._unsettled(
                site,
                [data2, shape2],
                values,
                f"its data carries the batch on axis {axis}, and no element of its shape can be proved to be the batch",
                self._suggest(site, values, axis) if works else None,
            )
        new_static = values[i] // self.b1 * self.b2
        written = self._written_value(site, values, i, data1, out1, axis)
        if written is None:
            return self._undecided(
                site,
                values,
                f"element {i} is the batch, but a symbolic batch there needs a computed shape",
                self._suggest(site, values, axis, i),
            )
        return self._rewrite_element(site, 1, values, i, new_static, written, inputs, axis)

    def _written_value(
        self, site: NodeSite, values: list[int], i: int, data1: Known, out1: Known, axis: int
    ) -> int | None:
        """For a symbolic batch: -1 (infer) or 0 (copy the data's dim); None when neither expresses it."""
        if not self.trace.symbolic:
            return values[i] // self.b1 * self.b2
        if -1 not in values:
            return -1
        allowzero = any(a.name == "allowzero" and a.i for a in site.node.attribute)
        assert out1.shape is not None and data1.shape is not None
        if i == axis and not allowzero and out1.shape[i] == data1.shape[axis]:
            return 0
        return None

    # -- Expand, Slice, Resize -------------------------------------------------------------------------
    def _expand(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        carried = self._carried(site, inputs)
        if carried is None:
            return None
        axis, _, values = carried
        (data1, shape1), (data2, shape2) = inputs[0][:2], inputs[1][:2]
        assert data1.shape is not None
        out1 = self._eval(site, [data1, shape1])
        aligned = axis + max(len(values), len(data1.shape)) - len(data1.shape)
        if self.consistent(out1, self._eval(site, [data2, shape2]), aligned):
            return None
        slot = axis + len(values) - len(data1.shape)
        if not 0 <= slot < len(values) or values[slot] % self.b1:
            return self._unsettled(
                site, [data2, shape2], values, "its data carries the batch, which its shape does not let through"
            )
        new_static = values[slot] // self.b1 * self.b2
        if not self.consistent(
            out1, self._eval(site, [data2, int64_known(with_element(values, slot, new_static))]), aligned
        ):
            return self._unsettled(
                site, [data2, shape2], values, "its data carries the batch, which its shape does not let through"
            )
        written = 1 if self.trace.symbolic else new_static
        return self._rewrite_element(site, 1, values, slot, new_static, written, inputs)

    def _slice(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        node = site.node
        if len(node.input) < 3 or any(k.value is None for k in inputs[0][1 : len(node.input)] if k.dtype):
            return None
        data1, data2 = inputs[0][0], inputs[1][0]
        found = self.carrier(data1, data2)
        if found is None or data1.shape is None:
            return None
        axis, _ = found
        out1 = self._eval(site, inputs[0])
        if self.consistent(out1, self._eval(site, inputs[1]), axis):
            return None
        starts, ends = _ints(inputs[0][1].value), _ints(inputs[0][2].value)
        given = len(node.input) > 3 and node.input[3]
        axes = _ints(inputs[0][3].value) if given else list(range(len(starts)))
        stepped = len(node.input) > 4 and node.input[4]
        steps = _ints(inputs[0][4].value) if stepped else [1] * len(starts)
        rank = len(data1.shape)
        entry = next((j for j, a in enumerate(axes) if a % rank == axis), None)
        if entry is None:
            return None  # the batch axis is not sliced: whatever changed, it is not this constant
        if starts[entry] != 0 or steps[entry] != 1 or out1.shape is None or out1.shape[axis] != data1.shape[axis]:
            return self._refuse(
                site,
                f"drops samples at batch {self.b2}: it slices axis {axis}, which carries the "
                f"batch, with constant bounds (starts {starts}, ends {ends}), so it keeps only part of "
                "the batch and every later sample is lost or read as the first one's",
            )
        trial = [list(point) for point in inputs]
        trial[1][2] = int64_known(with_element(ends, entry, INT64_MAX))
        if not self.consistent(out1, self._eval(site, trial[1]), axis):
            return None
        return self._rewrite_element(site, 2, ends, entry, INT64_MAX, INT64_MAX, inputs)

    def _resize(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        node = site.node
        if len(node.input) < 4 or not node.input[3] or inputs[0][3].value is None:
            return None
        found = self.carrier(inputs[0][0], inputs[1][0])
        if found is None:
            return None
        axis, _ = found
        values = _ints(inputs[0][3].value)
        if axis >= len(values) or values[axis] % self.b1:
            return None
        out1 = self._eval(site, inputs[0])
        if self.consistent(out1, self._eval(site, inputs[1]), axis):
            return None
        new_static = values[axis] // self.b1 * self.b2
        if self.trace.symbolic:
            return self._undecided(
                site,
                values,
                f"its sizes hold the batch at axis {axis}, and a symbolic batch there needs a computed shape",
                self._suggest(site, values, axis, axis, operand=3),
            )
        return self._rewrite_element(site, 3, values, axis, new_static, new_static, inputs)

    def _rewrite_element(
        self,
        site: NodeSite,
        operand: int,
        values: list[int],
        i: int,
        new_static: int,
        written: int,
        inputs: PointInputs,
        axis: int | None = None,
    ) -> PointInputs | None:
        """Record that element ``i`` of input ``operand`` becomes ``written``; evaluate on with ``new_static``."""
        node = site.node
        sources = self.sources(site, operand)
        source = sources[i] if sources and i < len(sources) else None
        if source is None:
            suggestion = self._suggest(site, values, axis, i, operand) if axis is not None else None
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
        reason = f"{label}: element {i} is the batch ({values[i]} -> {shown})"
        self.trace.rewrites.append(Rewrite(reader, reader_operand, ((element, written),), reason))
        self.decided.add(id(node))
        replaced = [list(point) for point in inputs]
        replaced[1][operand] = int64_known(with_element(values, i, new_static), like=inputs[1][operand])
        return replaced

    # -- helpers -----------------------------------------------------------------------------------------
    def _eval(self, site: NodeSite, inputs: list[Known]) -> Known:
        return self.evaluator.evaluate(site.node, list(inputs))[0]

    def sources(self, site: NodeSite, operand: int) -> list[Source | None] | None:
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
            found: list[Source | None] = []
            for j, part in enumerate(producer.node.input):
                value = self.evaluator.at(part)[0].value
                length = 0 if value is None else int(np.asarray(value).size)
                found.extend(self.sources(producer, j) or [None] * length)
            return found
        return None

    def _unsettled(
        self, site: NodeSite, inputs2: list[Known], values: list[int], why: str, fix: SpecFix | None = None
    ) -> PointInputs | None:
        """Undecided, or refused when the node as exported cannot run at the new batch at all."""
        if self._eval(site, inputs2).shape is None:
            how = f"; to fix it, add before set_batch:\n{spec_lines(fix)}" if fix else ""
            return self._refuse(site, f"cannot run at batch {self.b2} with its constant shape {values}: {why}{how}")
        return self._undecided(site, values, why, fix)

    def _label(self, site: NodeSite) -> str:
        node = site.node
        return f"{node.op_type} '{node.name or node.output[0]}'{self.evaluator.where(site)}"

    def _refuse(self, site: NodeSite, why: str) -> PointInputs | None:
        """Record a refusal; returns no replacement inputs, as the hook's handlers do."""
        self.trace.refusals.append(f"{self._label(site)} {why}")
        self.decided.add(id(site.node))
        return None

    def _undecided(self, site: NodeSite, values: list[int], why: str, fix: SpecFix | None = None) -> PointInputs | None:
        """Record an undecided point; returns no replacement inputs, as the hook's handlers do."""
        text = f"undecided: {self._label(site)} has constant shape {values}; {why}"
        self.trace.undecided.append(Undecided(text, fix))
        self.decided.add(id(site.node))
        return None

    def _suggestion_works(self, site: NodeSite, values: list[int], axis: int, data1: Known, data2: Known) -> bool:
        """Whether the suggested shape (the data's batch dim where the old batch was) keeps the samples
        apart at the new batch: a hint that cannot work is not printed."""
        i = next((j for j, v in enumerate(values) if v == self.b1), axis)
        if not 0 <= i < len(values) or data2.shape is None or data1.shape is None or not data2.full:
            return False
        trial = self._eval(site, [data2, int64_known(with_element(values, i, data2.shape[axis]))])
        at_old = self._eval(site, [data1, int64_known(with_element(values, i, data1.shape[axis]))])
        return at_old.full and self.consistent(at_old, trial, i)

    def _suggest(self, site: NodeSite, values: list[int], axis: int, i: int | None = None, operand: int = 1) -> SpecFix:
        """replace_initializer with the data's batch dim at element ``i`` of input ``operand``."""
        node = site.node
        if i is None:
            i = next((j for j, v in enumerate(values) if v == self.b1), axis)
        items: list[FlowValue] = list(values)
        if 0 <= i < len(items):
            items[i] = f"dim({expressions.quote_tensor(node.input[0])}, {axis})"
        selector: dict[str | int, FlowValue] = {"name": node.name} if node.name else {"produces": node.output[0]}
        return SpecFix("replace_initializer", (("select", selector), ("input", operand), ("shape", items)))


def _ints(value: np.ndarray | None) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


__all__ = ["trace_batch"]
