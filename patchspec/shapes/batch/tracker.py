"""Follow the batch through a model and find the shape constants that bake in the old batch.

``trace_batch`` (set_batch calls it through ``patchspec.api``) evaluates the model at the points
``new_trace`` gives; each op in ``RULES`` is decided before it is evaluated.

Decisions are made at two *witnesses*: points whose batches are both above 1 and differ (the new batch,
or the old one when the new is 1, and a third size). At batch 1 a channel of 1 and the batch look alike,
so batch 1 never proves anything. A shape-carrying node whose data carries the batch is *consistent*
when its output at the second witness is its output at the first with exactly one axis scaled by the
batches' ratio, at the same memory position as in the data (the product of the dims before it is the
same): then every sample's elements stay together, as a per-sample run of the original would give them.
A node that is not consistent bakes in the old batch. Each element of its shape operand that comes from
a constant (directly, or through Concat/Unsqueeze/Cast chains) is tried scaled with the batch at every
point; one that makes the node consistent, and only one, is proved to be the batch and is rewritten
before the next node is evaluated: one pass in graph order settles every node; the rest is undecided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx

from patchspec.model.graph import NodeSite
from patchspec.shapes.annotations import collector_paused
from patchspec.shapes.batch.computed import computed_element
from patchspec.shapes.batch.counts import count_rows
from patchspec.shapes.batch.findings import BatchFindings
from patchspec.shapes.batch.fitting import fit_other_dims
from patchspec.shapes.batch.folds import Folds, kept_whole
from patchspec.shapes.batch.joins import settle_join
from patchspec.shapes.batch.operands import Operands, steady_except
from patchspec.shapes.batch.ranges import ARITHMETIC, counting_candidates, settle_arithmetic
from patchspec.shapes.batch.scatters import SCATTERS, settle_scatter
from patchspec.shapes.batch.states import RECURRENT, settle_states
from patchspec.shapes.batch.trace import (
    INT64_MAX,
    BatchTrace,
    PointInputs,
    Rewrite,
    Undecided,
    batch_position,
    int64_known,
    ints_of,
    new_trace,
    product,
    sizes_of,
    with_element,
)
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known
from patchspec.shapes.spec_lines import SpecFix, spec_lines


def trace_batch(
    model: onnx.ModelProto,
    batch_axes: Iterable[tuple[str, int]],
    b1: int,
    b2: int,
    *,
    symbolic: bool = False,
    decide: bool = True,
) -> BatchTrace:
    """Evaluate ``model`` at the batch points, deciding each shape constant on the way.

    ``decide=False`` evaluates the model as it is: no constant is decided, and ``refusals`` says
    whether it runs at ``b2`` unchanged (set_batch asks first when the batch is already dynamic)."""
    axes = tuple(batch_axes)
    trace, points = new_trace(model, axes, b1, b2, symbolic)
    _follow(model, trace, points, decide)
    if trace.moves_symbols and trace.evaluator is not None:  # the export may stop at another dim's usual sizes
        fitted = fit_other_dims(model, trace.evaluator, points[0], axes)
        if fitted is not None:
            trace, points = new_trace(model, axes, b1, b2, symbolic, fitted)
            _follow(model, trace, points, decide)
    return trace


def _follow(model: onnx.ModelProto, trace: BatchTrace, points: list[dict[str, Known]], decide: bool) -> None:
    """Evaluate ``model`` at ``points``, deciding each shape constant on the way (with ``decide``)."""
    tracker = _Tracker(model, trace, points)
    tracker.deciding = decide
    with collector_paused():  # the evaluation's Knowns hold no cycles: each collection would walk them all
        tracker.evaluator.run()
        trace.evaluate_far(model, points)
        tracker.evaluator.hook = None  # the bound method held the tracker: a cycle only the collector frees
        findings = BatchFindings(trace, tracker.evaluator, tracker.decided, tracker.operands.index)
        trace.refusals.extend(findings.pinned())
        trace.refusals.extend(findings.conflicts())
        findings.record_repairs(decide)


#: an element's value at one point, from the point's index and the element's value there
NewValue = Callable[[int, int], int]


class _Tracker:
    """Decides each shape-carrying node at two witnesses: points whose batches are both above 1 and
    differ (the new batch, or the old one when the new is 1, and a third size), so that a dim of 1
    is never taken for the batch. The old batch's point gives the constants' baked-in values."""

    def __init__(self, model: onnx.ModelProto, trace: BatchTrace, points: list[dict[str, Known]]) -> None:
        self.model = model
        self.trace = trace
        self.b1, self.b2, self.sizes = trace.b1, trace.b2, trace.sizes
        self.a, self.b = (1 if self.b2 > 1 else 0), len(points) - 1
        self.wa, self.wb = self.sizes[self.a], self.sizes[self.b]
        counts = ARITHMETIC if counting_candidates(model) else frozenset()  # where a Range may count the batch
        self.evaluator = ShapeEvaluator(model, points, hook=self.hook, hook_ops=_HANDLED | counts)
        trace.evaluator = self.evaluator
        self.operands = Operands(model, self.evaluator)
        self.folds = Folds(self.evaluator, (self.a, self.b), (self.wa, self.wb), self.operands.index)
        self.decided: set[int] = set()  # ids of nodes with a rewrite or an undecided report
        self.deciding = True  # False: the hook leaves every node as it is

    # -- the hook ------------------------------------------------------------------------------------
    def hook(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        """Called for the ops in ``RULES`` only (the evaluator's ``hook_ops``)."""
        node = site.node
        if not self.deciding or node.domain not in ("", "ai.onnx") or not all(self.evaluator.runs(site)):
            return None  # in a branch not taken at one of the batches: there is nothing to compare
        rule = RULES.get(node.op_type)
        return rule(self, site, inputs) if rule is not None else None

    def carrier(self, inputs: PointInputs) -> tuple[int, int] | None:
        """(axis, size per sample) of the one axis of the data (input 0) that carries the batch at the
        witnesses; None if none or unclear."""
        first, second = sizes_of(inputs[self.a][0]), sizes_of(inputs[self.b][0])
        if first is None or second is None:
            return None
        old = inputs[0][0].shape
        if len(first) != len(second) or old is None or len(old) != len(first):
            return None  # a Squeeze dropped the batch at the old batch of 1: batch_findings judges it
        axes = [axis for axis, (x, y) in enumerate(zip(first, second)) if x != y]
        if len(axes) != 1:
            return None
        axis = axes[0]
        factor, rest = divmod(first[axis], self.wa)
        if rest or factor * self.wb != second[axis]:
            return None
        return axis, factor

    def consistent(self, first: Known, second: Known, batch_axis: int | None) -> bool:
        """The output at the second witness is the first's with exactly ``batch_axis`` scaled."""
        one, two = sizes_of(first), sizes_of(second)
        if batch_axis is None or one is None or two is None or len(one) != len(two):
            return False
        differing = [i for i, (x, y) in enumerate(zip(one, two)) if x != y]
        return differing == [batch_axis] and one[batch_axis] * self.wb == two[batch_axis] * self.wa

    def _outputs(self, site: NodeSite, inputs: PointInputs) -> tuple[Known, Known]:
        """The node's first output at the two witnesses."""
        return self._eval(site, inputs[self.a]), self._eval(site, inputs[self.b])

    def _trial(self, site: NodeSite, inputs: PointInputs, operand: int, i: int, new: NewValue) -> PointInputs:
        """``inputs`` with element ``i`` of input ``operand`` set to ``new(point, its value there)``."""
        replaced = [list(point) for point in inputs]
        for p, point in enumerate(replaced):
            given = point[operand]
            if given.value is not None:
                values = ints_of(given.value)
                point[operand] = int64_known(with_element(values, i, new(p, values[i])), like=given)
        return replaced

    def _scaled(self, p: int, value: int) -> int:
        """Element ``i`` (baked for the old batch) at each point's batch."""
        return value // self.b1 * self.sizes[p]

    # -- Reshape ---------------------------------------------------------------------------------------
    def _reshape(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        if len(site.node.input) < 2 or inputs[0][1].value is None:
            return None
        carried = self.carrier(inputs)
        if carried is None:
            return None
        axis, factor = carried
        values = ints_of(inputs[0][1].value)
        data = sizes_of(inputs[self.a][0])
        assert data is not None  # the carrier has a full shape
        prefix = list(data[:axis])
        fold = self.folds.fold_of(site.node.input[0])
        if fold is not None and fold[0] == axis:
            prefix = [product(prefix) * fold[1]]  # the batch sits behind part of its axis
        first, second = self._outputs(site, inputs)
        out = sizes_of(first)
        if out is not None and self.consistent(first, second, batch_position(prefix, out)):
            return None
        tried: dict[int, tuple[Known, Known]] = {}

        def trials(j: int) -> tuple[Known, Known]:  # the outputs with element j scaled with the batch
            if j not in tried:  # asked by the proof and by the folds alike
                tried[j] = self._outputs(site, self._trial(site, inputs, 1, j, self._scaled))
            return tried[j]

        whole = kept_whole(inputs[0][0], self._eval(site, inputs[0]), axis) if fold is None else None
        if fold is None and (whole is None or not self._proves(values, whole, prefix, trials)):
            behind = self.folds.folded_behind(data, axis, factor, first, second)
            if behind is not None:
                self.folds.folded[site.node.output[0]] = behind
                return None
        proved = [i for i in range(len(values)) if self._proves(values, i, prefix, trials)]
        proved = self.folds.placed(site, proved, values, prefix, lambda j: self.consistent(*trials(j), j))

        folds = {} if fold is not None else self.folds.candidates(values, self.b1, data, axis, factor, trials)
        per_sample = factor * product(data[axis + 1 :])
        if len(folds) == 1 and all(values[i] // self.b1 == per_sample for i in proved):
            # [L, B*h, d] -> [L, 192]: the batch joins the rows (torch's view(L * B, E)), not one sample's features
            (j, behind), written = next(iter(folds.items())), -1 if -1 not in values else None
            if written is not None:
                self.folds.folded[site.node.output[0]] = behind
                return self._rewrite_element(site, 1, values, j, self._scaled, written, inputs, axis)
        return self._settle(site, inputs, values, axis, proved)

    def _settle(
        self, site: NodeSite, inputs: PointInputs, values: list[int], axis: int, proved: list[int]
    ) -> PointInputs | None:
        """Rewrite the one element proved to be the batch; else report the Reshape, with a fix that works."""
        if len(proved) != 1:
            why = (
                f"its data carries the batch on axis {axis}, and no element of its shape can be proved to be the batch"
                if not proved
                else f"its data carries the batch on axis {axis}, and elements {proved} of its shape each fit it"
            )
            works = self._suggestion_works(site, inputs, values, axis)
            return self._unsettled(site, inputs, values, why, self._suggest(site, values, axis) if works else None)
        i = proved[0]
        written = self._written_value(site, inputs, values, i, axis)
        if written is None:
            why = f"element {i} is the batch, but a symbolic batch there needs a computed shape"
            computed = computed_element(self, site, inputs, (1, i, axis))
            return computed or self._undecided(site, values, why, self._suggest(site, values, axis, i))
        return self._rewrite_element(site, 1, values, i, self._scaled, written, inputs, axis)

    def _proves(
        self, values: list[int], i: int, prefix: list[int], trials: Callable[[int], tuple[Known, Known]]
    ) -> bool:
        """Element ``i``, scaled with the batch at both witnesses (``trials(i)``), keeps samples together."""
        if values[i] in (0, -1) or values[i] % self.b1:
            return False
        first, second = trials(i)
        out = sizes_of(first)
        return out is not None and batch_position(prefix, out) == i and self.consistent(first, second, i)

    def _written_value(self, site: NodeSite, inputs: PointInputs, values: list[int], i: int, axis: int) -> int | None:
        """For a symbolic batch: -1 (infer) or 0 (copy the data's dim); None when neither expresses it."""
        if not self.trace.symbolic:
            return values[i] // self.b1 * self.b2
        if -1 not in values:
            return -1
        allowzero = any(a.name == "allowzero" and a.i for a in site.node.attribute)
        data = inputs[self.a][0]
        assert data.shape is not None
        if i == axis and not allowzero and values[i] // self.b1 * self.wa == data.shape[axis]:
            return 0
        return None

    # -- Expand, Slice, Resize -------------------------------------------------------------------------
    def _expand(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        if len(site.node.input) < 2 or inputs[0][1].value is None:
            return None
        carried = self.carrier(inputs)
        if carried is None:
            return None
        axis = carried[0]
        values = ints_of(inputs[0][1].value)
        data = inputs[self.a][0]
        assert data.shape is not None
        aligned = axis + max(len(values), len(data.shape)) - len(data.shape)
        if self.consistent(*self._outputs(site, inputs), aligned):
            return None
        slot = axis + len(values) - len(data.shape)
        why = "its data carries the batch, which its shape does not let through"
        if not 0 <= slot < len(values) or values[slot] % self.b1:
            return self._unsettled(site, inputs, values, why)
        trial = self._trial(site, inputs, 1, slot, self._scaled)
        if not self.consistent(*self._outputs(site, trial), aligned):
            return self._unsettled(site, inputs, values, why)
        written = 1 if self.trace.symbolic else values[slot] // self.b1 * self.b2
        return self._rewrite_element(site, 1, values, slot, self._scaled, written, inputs)

    def _slice(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        node = site.node
        if len(node.input) < 3 or any(k.value is None for k in inputs[0][1 : len(node.input)] if k.dtype):
            return None
        found = self.carrier(inputs)
        data = inputs[0][0]
        if found is None or data.shape is None:
            return None
        axis, _ = found
        if self.consistent(*self._outputs(site, inputs), axis):
            return None
        starts, ends = ints_of(inputs[0][1].value), ints_of(inputs[0][2].value)
        given = len(node.input) > 3 and node.input[3]
        axes = ints_of(inputs[0][3].value) if given else list(range(len(starts)))
        stepped = len(node.input) > 4 and node.input[4]
        steps = ints_of(inputs[0][4].value) if stepped else [1] * len(starts)
        entry = next((j for j, a in enumerate(axes) if a % len(data.shape) == axis), None)
        if entry is None:
            return None  # the batch axis is not sliced: whatever changed, it is not this constant
        at_old = self._eval(site, inputs[0])  # at the export's batch, where the bounds were traced
        if starts[entry] != 0 or steps[entry] != 1 or at_old.shape is None or at_old.shape[axis] != data.shape[axis]:
            return self._refuse(
                site,
                f"drops samples at batch {self.b2}: it slices axis {axis}, which carries the "
                f"batch, with constant bounds (starts {starts}, ends {ends}), so it keeps only part of "
                "the batch and every later sample is lost or read as the first one's",
            )
        trial = self._trial(site, inputs, 2, entry, lambda p, v: INT64_MAX)
        if not self.consistent(*self._outputs(site, trial), axis):
            return None
        return self._rewrite_element(site, 2, ends, entry, lambda p, v: INT64_MAX, INT64_MAX, inputs)

    def _resize(self, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
        node = site.node
        if len(node.input) < 4 or not node.input[3] or inputs[0][3].value is None:
            return None
        found = self.carrier(inputs)
        if found is None:
            return None
        axis, _ = found
        values = ints_of(inputs[0][3].value)
        if axis >= len(values) or values[axis] % self.b1:
            return None
        if self.consistent(*self._outputs(site, inputs), axis):
            return None
        if self.trace.symbolic:
            why = f"its sizes hold the batch at axis {axis}, and a symbolic batch there needs a computed shape"
            computed = computed_element(self, site, inputs, (3, axis, axis))
            return computed or self._undecided(site, values, why, self._suggest(site, values, axis, axis, operand=3))
        written = values[axis] // self.b1 * self.b2
        return self._rewrite_element(site, 3, values, axis, self._scaled, written, inputs)

    def _rewrite_element(
        self,
        site: NodeSite,
        operand: int,
        values: list[int],
        i: int,
        new: NewValue,
        written: int,
        inputs: PointInputs,
        axis: int | None = None,
    ) -> PointInputs | None:
        """Record that element ``i`` of input ``operand`` becomes ``written``; evaluate on with ``new(point)``."""
        node = site.node
        sources = self.operands.sources(site, operand)
        source = sources[i] if sources and i < len(sources) else None
        label = f"{node.op_type} '{node.name or node.output[0]}'"
        shown = "end" if written == INT64_MAX else written
        reason = f"{label}: element {i} is the batch ({values[i]} -> {shown})"
        if source is None:
            steady = steady_except(inputs, operand, i)
            if steady is None or (written == -1 and -1 in steady[:i] + steady[i + 1 :]):
                suggestion = self._suggest(site, values, axis, i, operand) if axis is not None else None
                return self._undecided(
                    site,
                    values,
                    f"element {i} of input {operand} is the batch, but it is computed at run time from "
                    "sizes that change with other input dims",
                    suggestion,
                    operand,
                )
            whole = tuple(enumerate(with_element(steady, i, written)))
            computed = self.operands.producer_label(site, operand)
            reason += f"; the shape {computed} computed becomes a constant"
            self.trace.rewrites.append(Rewrite(site, operand, whole, reason, whole=True))
        else:
            reader, reader_operand, element = source
            self.trace.rewrites.append(Rewrite(reader, reader_operand, ((element, written),), reason))
        self.decided.add(id(node))
        return self._trial(site, inputs, operand, i, new)

    # -- helpers -----------------------------------------------------------------------------------------
    def _eval(self, site: NodeSite, inputs: list[Known]) -> Known:
        """The node's first output; unknown for a Reshape whose shape does not hold its data's elements
        (ONNX's inference gives the shape asked for, onnxruntime refuses to run it)."""
        out = self.evaluator.evaluate(site.node, list(inputs))[0]
        data, made = (sizes_of(inputs[0]) if inputs else None), sizes_of(out)
        if site.node.op_type == "Reshape" and data is not None and made is not None and product(made) != product(data):
            return Known()
        return out

    def _unsettled(
        self, site: NodeSite, inputs: PointInputs, values: list[int], why: str, fix: SpecFix | None = None
    ) -> PointInputs | None:
        """Undecided, or refused when the node as exported cannot run at the new batch at all."""
        if self._eval(site, inputs[1]).shape is None:
            how = f"; to fix it, add before set_batch:\n{spec_lines(fix)}" if fix else ""
            shape = self.operands.shape_words(site, 1, values)
            return self._refuse(site, f"cannot run at batch {self.b2} with its {shape}: {why}{how}")
        return self._undecided(site, values, why, fix)

    def _label(self, site: NodeSite) -> str:
        return f"{site.node.op_type} '{site.node.name or site.node.output[0]}'{self.evaluator.where(site)}"

    def _refuse(self, site: NodeSite, why: str) -> PointInputs | None:
        """Record a refusal; returns no replacement inputs, as the hook's handlers do."""
        self.trace.refusals.append(f"{self._label(site)} {why}")
        self.decided.add(id(site.node))
        return None

    def _undecided(
        self, site: NodeSite, values: list[int], why: str, fix: SpecFix | None = None, operand: int = 1
    ) -> PointInputs | None:
        """Record an undecided point; returns no replacement inputs, as the hook's handlers do."""
        text = f"undecided: {self._label(site)} has {self.operands.shape_words(site, operand, values)}; {why}"
        self.trace.undecided.append(Undecided(text, fix))
        self.decided.add(id(site.node))
        return None

    def _suggestion_works(self, site: NodeSite, inputs: PointInputs, values: list[int], axis: int) -> bool:
        """Whether the suggested shape (the data's batch dim where the old batch was) keeps the samples
        together at both witnesses: a hint that cannot work is not printed."""
        i = next((j for j, v in enumerate(values) if v == self.b1), axis)
        if not 0 <= i < len(values):
            return False
        dims = [point[0].shape[axis] if point[0].shape is not None else None for point in inputs]
        if None in dims:
            return False
        trial = self._trial(site, inputs, 1, i, lambda p, v: int(dims[p] or 0))
        first, second = self._outputs(site, trial)
        data, out = sizes_of(inputs[self.a][0]), sizes_of(first)
        if data is None or out is None:
            return False
        return batch_position(list(data[:axis]), out) == i and self.consistent(first, second, i)

    def _suggest(
        self, site: NodeSite, values: list[int], axis: int, i: int | None = None, operand: int = 1
    ) -> SpecFix | None:
        """The replace_initializer fix for a constant operand, at element ``i`` (by default where the old batch is)."""
        at = next((j for j, v in enumerate(values) if v == self.b1), axis) if i is None else i
        return self.operands.constant_fix(site, values, axis, at, operand)


#: per op the tracker decides (the hook is called for these only): (tracker, node, inputs) -> inputs or None
RULES: dict[str, Callable[[_Tracker, NodeSite, PointInputs], PointInputs | None]] = {
    "Reshape": _Tracker._reshape,
    "Expand": _Tracker._expand,
    "Slice": _Tracker._slice,
    "Resize": _Tracker._resize,
    "Concat": settle_join,
    **dict.fromkeys(("Gather", "GatherND"), count_rows),
    **dict.fromkeys(SCATTERS, settle_scatter),
    **dict.fromkeys(RECURRENT, settle_states),
    **dict.fromkeys(ARITHMETIC, settle_arithmetic),
}
_HANDLED = frozenset(RULES) - ARITHMETIC  # arithmetic only where a Range or a small integer constant is

__all__ = ["RULES", "trace_batch"]
