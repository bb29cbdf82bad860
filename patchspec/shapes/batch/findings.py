"""What the trace proves after the walk: nodes that cannot run at the new batch, and Squeezes to fix.

After ``tracker`` has walked the graph, every node that runs at the old batch and not at the
new one is named with its likely reason: an If or Loop whose condition follows the batch, an op
whose axes a batch-of-1 Squeeze shifted, inputs that no longer fit. Squeezes without axes that drop
a batch of 1 are found here too, with the axes they remove at the new batch.
"""

from __future__ import annotations

from functools import cached_property

import onnx

from patchspec.model.graph import NodeSite, ScopeIndex
from patchspec.shapes.batch.coupling import coupling
from patchspec.shapes.batch.pinned import pinned_batch
from patchspec.shapes.batch.states import repeat_loop_states
from patchspec.shapes.batch.trace import AXIS_FREE, BatchTrace, Undecided, product, shape_text, sizes_of
from patchspec.shapes.batch.transposes import batch_transposes
from patchspec.shapes.evaluate import BROADCASTING, ShapeEvaluator

#: what a rewritten Reshape that is a transpose at batch 1 (``_transposing_reshapes``) means
_TRANSPOSE = (
    "moves the batch's axis at batch 1, a transpose there that no Reshape can be at another batch: export "
    "the model with a dynamic batch"
)


#: ops whose later inputs a Squeeze's shift leaves alike: Gather's indices keep their order, Gemm's C
#: broadcasts from the right
_POSITIONAL = {"Gather": 1, "Gemm": 2}


class BatchFindings:
    """Reads a finished trace; ``decided`` holds the ids of nodes the walk already reported."""

    def __init__(
        self, trace: BatchTrace, evaluator: ShapeEvaluator, decided: set[int], index: ScopeIndex | None = None
    ) -> None:
        self.trace = trace
        self.index = index  # the tracker's table of constants
        self.evaluator = evaluator
        self.decided = decided
        self.b1, self.b2 = trace.b1, trace.b2

    def pinned(self) -> list[str]:
        """Nodes whose constants pin the batch to the exported samples (``pinned``)."""
        sites = [site for _, site in self.sites]
        found = []
        for site, why in pinned_batch(self.trace, sites, self.index, self.decided):
            found.append(f"{self.label(site)} {why}")
            self.decided.add(id(site.node))
        for site, why in coupling(self.trace, sites, self.index, self.evaluator.opset()):
            self.trace.coupled.append(f"{self.label(site)} {why}")
        return found

    def conflicts(self) -> list[str]:
        """Nodes that run at the old batch and not at the new one, each with the likely reason; outputs
        that are not the samples' side by side; and a Reshape that was a transpose, where it is the cause."""
        found = self._node_conflicts() + self.uneven_outputs()
        lost = self.lost_batch()
        moved = self._transposing_reshapes()
        if moved and not lost and (found or self.trace.refusals):  # the likely cause of what is refused
            found.append(f"{moved[0]} {_TRANSPOSE}")
        return found + lost

    def _node_conflicts(self) -> list[str]:
        """Nodes that run at the old batch and not at the new one, each with the likely reason."""
        found = []
        known, squeezed, decided = self.evaluator.known, self.trace.squeezed_names(), self.decided
        for name, site in self.sites:
            node = site.node
            row = known[name]
            if (
                row[1].shape is not None or row[0].shape is None  # it runs at the new batch, or not even at the old
            ) and not (node.op_type in ("If", "Loop") or (squeezed and not squeezed.isdisjoint(node.input))):
                continue  # neither a condition nor a shifted input: nothing to report (most nodes)
            if id(node) in decided:
                continue
            if node.domain not in ("", "ai.onnx") or not self.evaluator.runs(site)[1]:
                continue  # a node in a branch not taken at the new batch never runs there
            condition = self.condition_follows_batch(site)
            if condition:
                found.append(condition)
                continue
            positional = node.input[: _POSITIONAL.get(node.op_type, len(node.input))]  # indices keep their order
            shifted = next((n for n in positional if n and self.trace.squeezed_axis(n) is not None), None)
            if shifted is not None and node.op_type not in AXIS_FREE:
                found.append(self.conflict(site, self._shifted_axes(shifted), "runs, but mixes samples,"))
                continue
            first, second = self.evaluator.at(name)[:2]
            if node.op_type == "If" or first.shape is None or second.shape is not None:
                continue
            if any(
                self.evaluator.at(n)[1].shape is None and self.evaluator.at(n)[0].shape is not None
                for n in node.input
                if n
            ):
                continue  # an input already failed upstream: that node is the one reported
            inputs = ", ".join(f"{n} {shape_text(self.evaluator.at(n)[1])}" for n in node.input if n)
            if node.op_type in BROADCASTING and self._meets_a_free_dim(node):
                why = (
                    f"its inputs ({inputs}) do not fit together at the sizes tried; one of the dims that disagree "
                    "follows another symbolic input dim, which may be the batch under another name: list every "
                    "input that carries the batch in 'inputs'"
                )
                self.trace.undecided.append(Undecided("undecided: " + self.conflict(site, why)))
                continue
            why = (
                f"it removes axes that are 1 only at batch {self.b1}: a batched model keeps the batch there"
                if node.op_type == "Squeeze"
                else f"its inputs ({inputs}) do not fit together; a constant upstream probably holds the old batch "
                f"{self.b1}"
            )
            found.append(self.conflict(site, why))
        return found

    @cached_property
    def witnesses(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The two points whose batches are both above 1 (as the tracker decides at), and those batches."""
        a, b = (1 if self.b2 > 1 else 0), len(self.trace.sizes) - 1
        return (a, b), (self.trace.sizes[a], self.trace.sizes[b])

    def at_witnesses(self, name: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
        """The sizes of ``name`` at the two witnesses (None where unknown)."""
        (a, b), _ = self.witnesses
        knowns = self.evaluator.at(name)
        return sizes_of(knowns[a]), sizes_of(knowns[b])

    def lost_batch(self) -> list[str]:
        """Every graph output known at both witnesses and the same there: the batch reaches none of them.
        The samples' outputs side by side would have each sample's rows, so such a model, as evaluated,
        is not batchable (tf2onnx writes a transpose of a batch of 1 as a Reshape, ``[1, 7, 5]`` to
        ``[7, 1, 5]``; a rewrite then folds the batch into the time axis, and a Loop over 7 steps reads
        sample 0's)."""
        if not self.trace.batch_axes or self.trace.coupled:
            return []  # an op that couples the samples (a mean over the batch) is told, not refused
        shapes = []
        for info in self.evaluator.model.graph.output:
            first, second = self.at_witnesses(info.name)
            if first is None or first != second:
                return []
            shapes.append(f"'{info.name}' {list(first)}")
        if not shapes:
            return []
        folded = "; the constants rewritten (-v lists them) may have folded the batch into another axis" * bool(
            self.trace.rewrites
        )
        moved = self._transposing_reshapes()
        if moved:
            folded = f"; {moved[0]} {_TRANSPOSE}"
        where = self._where_lost(self.evaluator.model.graph.output[0].name)
        return [
            f"no output follows the batch: {', '.join(shapes[:3])} "
            f"{'keeps its' if len(shapes) == 1 else 'keep their'} shape at every batch, so the batch is "
            f"lost inside the model{where}{folded}"
        ]

    def _where_lost(self, name: str) -> str:
        """`` at Loop 'x' (...)``: the node nearest ``name`` upstream whose own output keeps its shape at both
        witnesses while one of its inputs does not; '' where none is found (then a hint at the usual causes)."""
        (a, _), _ = self.witnesses
        site, seen = self.evaluator.producer.get(name), set()
        while site is not None and id(site.node) not in seen:
            seen.add(id(site.node))
            moving = [n for n in site.node.input if n and self._moves(n)]
            if moving:
                shapes = ", ".join(f"{n} {shape_text(self.evaluator.at(n)[a])}" for n in moving[:2])
                return f" at {self.label(site)}, whose input {shapes} follows it"
            steady = [n for n in site.node.input if n in self.evaluator.producer]
            site = self.evaluator.producer.get(steady[0]) if len(steady) == 1 else None
        return f" (a reduction over it, a Loop over a fixed count, a Reshape that is a transpose at batch {self.b1})"

    def _moves(self, name: str) -> bool:
        first, second = self.at_witnesses(name)
        return first is not None and second is not None and first != second

    def uneven_outputs(self) -> list[str]:
        """Graph outputs with an axis that changes with the batch but not in step with it (5 rows at batch
        4, 8 at batch 7: a row joined to the batch axis, the batch padded). The samples' outputs side by
        side have a whole number of rows per sample, so such a model is not batchable; the node named is
        the first upstream whose own output is uneven while its inputs are not."""
        found = []
        for info in self.evaluator.model.graph.output:
            if self._uneven_axis(info.name) is None:
                continue
            site = self.evaluator.producer.get(info.name)
            while site is not None:
                upstream = next((n for n in site.node.input if n and self._uneven_axis(n) is not None), None)
                if upstream is None:
                    break
                site = self.evaluator.producer.get(upstream)
            if site is None or id(site.node) in self.decided:
                continue
            self.decided.add(id(site.node))
            name = next(o for o in site.node.output if o)
            axis, (first, second) = self._uneven_axis(name) or (0, (0, 0))
            _, witnesses = self.witnesses
            found.append(
                self.conflict(
                    site,
                    f"'{name}' has {first} on axis {axis} at batch {witnesses[0]} and {second} at batch {witnesses[1]}, "
                    "not a whole number per sample (rows joined to the batch axis, or the batch padded), so the "
                    "batched output cannot be the samples' outputs side by side",
                    "runs, but mixes samples,",
                )
            )
        return found

    def _transposing_reshapes(self) -> list[str]:
        """Rewritten Reshapes that, at the old batch of 1, move an axis of 1 and keep the other dims in
        order (``[1, 7, 5]`` to ``[7, 1, 5]``): the same bytes as a transpose there only."""
        found = []
        for site, data, out in self._reshapes_at_one():
            if [d for d in data if d != 1] == [d for d in out if d != 1] and data.index(1) != out.index(1):
                found.append(f"{self.label(site)} ({list(data)} to {list(out)})")
        return found

    def batch_axis(self, name: str) -> int | None:
        """The one axis of ``name`` that holds each witness's batch while every other axis keeps its size;
        None where there is no such axis."""
        first, second = self.at_witnesses(name)
        if first is None or second is None or len(first) != len(second):
            return None
        moving = [k for k, (x, y) in enumerate(zip(first, second)) if x != y]
        _, (wa, wb) = self.witnesses
        return moving[0] if len(moving) == 1 and (first[moving[0]], second[moving[0]]) == (wa, wb) else None

    def _reshapes_at_one(self) -> list[tuple[NodeSite, tuple[int, ...], tuple[int, ...]]]:
        """Each rewritten Reshape that keeps the rank at the old batch of 1, with its data's and its
        output's sizes there, where they differ and the data has an axis of 1."""
        found = []
        for rewrite in self.trace.rewrites:
            node = rewrite.site.node
            if node.op_type != "Reshape" or self.b1 != 1 or node.domain not in ("", "ai.onnx"):
                continue
            data, out = (sizes_of(self.evaluator.at(name)[0]) for name in (node.input[0], node.output[0]))
            if data is not None and out is not None and len(data) == len(out) and data != out and 1 in data:
                found.append((rewrite.site, data, out))
        return found

    def _uneven_axis(self, name: str) -> tuple[int, tuple[int, int]] | None:
        """The first axis of ``name`` whose size differs between the two witnesses (batches above 1) and
        is not the same multiple of each, with those sizes; None where there is none."""
        first, second = self.at_witnesses(name)
        if first is None or second is None or len(first) != len(second) or first == second:
            return None
        _, (wa, wb) = self.witnesses
        for axis, (x, y) in enumerate(zip(first, second)):
            if x != y and x * wb != y * wa:
                return axis, (x, y)
        return None

    @cached_property
    def sites(self) -> list[tuple[str, NodeSite]]:
        """Each node the walk evaluated once, with its first named output, in graph order."""
        return [
            (name, site)
            for name, site in self.evaluator.producer.items()
            if name == (site.node.output[0] or next(o for o in site.node.output if o))
        ]

    def _meets_a_free_dim(self, node: onnx.NodeProto) -> bool:
        """Whether the axes on which a broadcasting node's inputs disagree at the new batch include a dim
        that moves with another symbolic input dim (the evaluation chose its size, the model did not)."""
        if not self.trace.moves_symbols:
            return False
        shapes = []
        for n in node.input:
            if not n:
                continue
            old, new, moved = (k.shape for k in self.evaluator.at(n)[:3])
            if new is None or moved is None or old is None:
                return True  # too little is known to call it a proof
            shapes.append((new, moved, old))
        rank = max(len(new) for new, _, _ in shapes)
        for back in range(1, rank + 1):
            sizes = {new[-back] for new, _, _ in shapes if back <= len(new)} - {1}
            if len(sizes) > 1 and any(back <= len(new) and moved[-back] != old[-back] for new, moved, old in shapes):
                return True
        return False

    def condition_follows_batch(self, site: NodeSite) -> str | None:
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
        new, old = sizes_of(second), sizes_of(first)
        if new is None or product(new) == product(old or ()):
            return None
        article = "an" if node.op_type == "If" else "a"
        return self.conflict(
            site,
            f"its condition '{name}' is computed from the batch ({shape_text(first)} at batch "
            f"{self.b1}, {shape_text(second)} at batch {self.b2}); {article} {node.op_type} takes "
            "one condition for the whole batch, so the model cannot run batched as it is",
        )

    def _before_squeeze(self, name: str) -> str | None:
        """The input of the Squeeze that made ``name`` a scalar, if one did."""
        producer = self.evaluator.producer.get(name)
        if producer is not None and producer.node.op_type in ("Squeeze", "Reshape", "Identity") and producer.node.input:
            return str(producer.node.input[0])
        return None

    def record_repairs(self, deciding: bool = True) -> None:
        """Put on the trace what set_batch repairs: Squeezes that drop a batch of 1, flattened outputs, and
        Reshapes that are a transpose at batch 1."""
        self.trace.squeezes.extend(self.batch_squeezes())
        self.trace.flattens.extend(self.batch_flattens())
        if deciding:  # not in a model run as it is
            self.trace.transposes.extend(batch_transposes(self))
            repeat_loop_states(self)

    def batch_flattens(self) -> list[NodeSite]:
        """Reshapes to ``[-1]`` that make a graph output from data whose axis 0 is the batch (a batch of 1):
        ``view(-1)`` at the end of a model traced at batch 1 gives each sample's values without a batch
        axis, and at batch 4 all the samples' run together in one axis. Kept as ``[0, -1]``, the output
        has the batch on axis 0 and each sample's values after it, as a Squeeze given axes does."""
        if self.b1 != 1:
            return []
        found = []
        for info in self.evaluator.model.graph.output:
            site = self.evaluator.producer.get(info.name)
            if site is None or site.node.op_type != "Reshape" or site.node.domain not in ("", "ai.onnx"):
                continue
            shape = self.index.constant(site.node.input[1], site.scopes) if self.index is not None else None
            if shape is None or [int(v) for v in shape.reshape(-1)] != [-1] or len(site.scopes) != 1:
                continue
            old = sizes_of(self.evaluator.at(site.node.input[0])[0])
            first, second = self.at_witnesses(site.node.input[0])
            if old is None or first is None or second is None or len(first) < 2 or old[0] != 1:
                continue
            _, (wa, wb) = self.witnesses
            if first[0] == wa and second[0] == wb and first[1:] == second[1:]:  # the batch alone on axis 0
                found.append(site)
        return found

    def batch_squeezes(self) -> list[tuple[NodeSite, list[int]]]:
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
            if any(self.condition_follows_batch(consumer) for consumer in self._consumers(name)):
                continue  # a condition that follows the batch: the model is refused, not repaired
            data = self.evaluator.at(node.input[0])[1]
            if data.shape is not None and data.full:  # no axes at all: at the new batch it removes nothing
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
            f"its input '{name}' is {shape_text(first)} at batch {self.b1}, where {origin} drops the batch, and "
            f"{shape_text(second)} at batch {self.b2}, so its axes, counted from the front, point at other dims "
            f"there; shift them by one past the batch, or count them from the end"
        )

    def label(self, site: NodeSite) -> str:
        node = site.node
        return f"{node.op_type} '{node.name or node.output[0]}'{self.evaluator.where(site)}"

    def conflict(self, site: NodeSite, why: str, problem: str = "cannot run") -> str:
        return f"{self.label(site)} {problem} at batch {self.b2}: {why}"


__all__ = ["BatchFindings"]
