"""Where a Reshape folded the batch behind other dims, and where later ops carry that fold.

PyTorch's attention, sequence first, reshapes ``[L, B, E]`` to ``[-1, E]``: the batch is folded
into the first axis as its inner part, behind the sequence. Each row is still one sample's and the
element that absorbed the batch is right at any batch, so the tracker leaves such a Reshape alone
and remembers the fold here, for the Reshape that splits the batch out again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

from patchspec.model.graph import NodeSite, ScopeIndex
from patchspec.shapes.batch.singles import Singles
from patchspec.shapes.batch.trace import product, sizes_of
from patchspec.shapes.evaluate import ShapeEvaluator
from patchspec.shapes.known import Known

#: (the axis the batch is folded into, how many elements of that axis come before each sample's)
Fold = tuple[int, int]


class Folds:
    """The folds found so far, by tensor name, and the tensors known to hold none."""

    def __init__(
        self, evaluator: ShapeEvaluator, witnesses: tuple[int, int], sizes: tuple[int, int], index: ScopeIndex
    ) -> None:
        """``witnesses``: the two points compared (their batches ``sizes``, both above 1); ``index``: the
        constants by scope."""
        self.evaluator = evaluator
        self.witnesses = witnesses
        self.wa, self.wb = sizes
        self.folded: dict[str, Fold] = {}
        self.not_folded: set[str] = set()
        self.singles = Singles(evaluator, index)

    def folded_behind(self, data_shape: Sequence[int], axis: int, factor: int, out1: Known, out2: Known) -> Fold | None:
        """The Reshape merges the batch into an output axis as its innermost part, behind data dims that
        come before it: ``[L, batch, E] -> [-1, E]``. Making another element "the batch" would move the
        batch into the features. ``factor``: the batch axis's size per sample; a batch folded with heads
        before (``[L, B*heads, d]``) is their outer part."""
        first, second = sizes_of(out1), sizes_of(out2)
        if first is None or second is None or len(first) != len(second):
            return None
        differing = [j for j, (a, b) in enumerate(zip(first, second)) if a != b]
        if len(differing) != 1 or first[differing[0]] * self.wb != second[differing[0]] * self.wa:
            return None
        j = differing[0]
        before, after = product(data_shape[:axis]), factor * product(data_shape[axis + 1 :])
        outer = product(first[:j])
        if (
            after == product(first[j + 1 :])
            and outer < before
            and before % outer == 0
            and outer * first[j] == before * self.wa
        ):
            return j, before // outer
        return None

    def candidates(
        self,
        values: list[int],
        b1: int,
        data_shape: Sequence[int],
        axis: int,
        factor: int,
        outputs: Callable[[int], tuple[Known, Known]],
    ) -> dict[int, Fold]:
        """Elements of a Reshape's shape that, scaled with the batch (``outputs(j)``: the node's output at
        the two witnesses then), fold it behind the data dims before it (``[L*B, E]``)."""
        found = {}
        for j, value in enumerate(values):
            if value in (0, -1) or value % b1:
                continue
            behind = self.folded_behind(data_shape, axis, factor, *outputs(j))
            if behind is not None and behind[0] == j:
                found[j] = behind
        return found

    def placed(
        self, site: NodeSite, proved: list[int], values: list[int], prefix: list[int], fits: Callable[[int], bool]
    ) -> list[int]:
        """Of the elements of a Reshape's shape proved to be the batch, the one where the data has it (dims
        of 1: the same memory either way); where a reader keeps one element of that axis (a Squeeze, a
        Slice ``[-1:]``: :mod:`.singles`), the other 1 at the same memory that ``fits`` (TFLite's RNN writes
        each step as ``[1, 1, H]``, a list of one step, and squeezes or slices axis 0)."""
        if len(proved) > 1:
            proved = [i for i in proved if values[:i] == prefix] or proved
        if len(proved) != 1 or values[proved[0]] != 1:
            return proved
        removed = self.singles.axes(site, site.node.output[0], len(values))
        i = proved[0]
        if i not in removed:
            return proved
        others = [j for j in range(len(values)) if j not in removed and values[j] == 1 and fits(j)]
        return others if len(others) == 1 else proved

    def fold_of(self, name: str) -> Fold | None:
        """Where a folded batch sits in ``name``: carried from the Reshape that folded it through ops
        that keep that axis as it is (elementwise ops, MatMul/Gemm rows, Transpose moves it)."""
        chain: list[tuple[str, onnx.NodeProto]] = []
        while name not in self.folded:
            producer = self.evaluator.producer.get(name)
            if producer is None or len(chain) > 64 or not producer.node.input or name in self.not_folded:
                self.not_folded.update(tensor for tensor, _ in chain)  # remembered: a deep chain is walked once
                return None
            chain.append((name, producer.node))
            name = producer.node.input[0]
        fold: Fold | None = self.folded[name]
        for tensor, node in reversed(chain):
            assert fold is not None
            fold = self._carried_fold(node, name, tensor, fold)
            if fold is None:
                self.not_folded.add(tensor)
                return None
            self.folded[tensor] = fold
            name = tensor
        return fold

    def _carried_fold(self, node: onnx.NodeProto, source: str, target: str, fold: Fold) -> Fold | None:
        axis, before = fold
        if node.op_type == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            return (perm.index(axis), before) if perm and axis in perm else None
        if node.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
            return None  # they move axes: only a Reshape of its own can say where the batch went
        a, b = self.witnesses
        given_at, made_at = self.evaluator.at(source), self.evaluator.at(target)
        points = ((given_at[a], made_at[a]), (given_at[b], made_at[b]))
        for given, made in points:
            if given.shape is None or made.shape is None or len(given.shape) != len(made.shape):
                return None
            if axis >= len(made.shape) or given.shape[axis] != made.shape[axis]:
                return None
        return fold


def kept_whole(data: Known, output: Known, axis: int) -> int | None:
    """The output axis that holds the data's batch axis (both at the export's batch): the same
    elements before it, and the batch axis itself (``[L, 1, 48] -> [-1, 1, 3, 16]``: axis 1, a dynamo
    export's baked batch) or its outer part, features after it (``[L, 1, 16] -> [-1, 2, 8]``: batch x
    heads). Such a Reshape keeps the batch apart from the sequence; folding it into the ``-1`` would
    let the ops that follow (attention over axis 0) run across the samples. The last axis is never
    taken for the outer part: ``[L, 1, E] -> [-1, E]`` folds the batch into the rows (torch's
    ``view(L * B, E)``), it does not scale the features."""
    data_shape, out = sizes_of(data), sizes_of(output)
    if data_shape is None or out is None or axis >= len(data_shape):
        return None
    batch, before, after = data_shape[axis], product(data_shape[:axis]), product(data_shape[axis + 1 :])
    for i, size in enumerate(out):
        if product(out[:i]) != before or size * product(out[i + 1 :]) != batch * after:
            continue
        if size == batch or (i < len(out) - 1 and batch and size % batch == 0):
            return i  # the batch axis, or its outer part followed by features (heads: [L, B*h, d])
    return None


__all__ = ["Fold", "Folds", "kept_whole"]
