"""Where a Reshape folded the batch behind other dims, and where later ops carry that fold.

PyTorch's attention, sequence first, reshapes ``[L, B, E]`` to ``[-1, E]``: the batch is folded
into the first axis as its inner part, behind the sequence. Each row is still one sample's and the
element that absorbed the batch is right at any batch, so the tracker leaves such a Reshape alone
and remembers the fold here, for the Reshape that splits the batch out again.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from patchspec.shapes.batch_trace import product
from patchspec.shapes.evaluate import Known, ShapeEvaluator

#: (the axis the batch is folded into, how many elements of that axis come before each sample's)
Fold = tuple[int, int]


class Folds:
    """The folds found so far, by tensor name, and the tensors known to hold none."""

    def __init__(self, evaluator: ShapeEvaluator, witnesses: tuple[int, int], sizes: tuple[int, int]) -> None:
        """``witnesses``: the two points compared (their batches ``sizes``, both above 1)."""
        self.evaluator = evaluator
        self.witnesses = witnesses
        self.wa, self.wb = sizes
        self.folded: dict[str, Fold] = {}
        self.not_folded: set[str] = set()

    def folded_behind(self, data_shape: Sequence[int], axis: int, factor: int, out1: Known, out2: Known) -> Fold | None:
        """The Reshape merges the batch into an output axis as its innermost part, behind data dims that
        come before it: ``[L, batch, E] -> [-1, E]``. Making another element "the batch" would move the
        batch into the features. ``factor``: the batch axis's size per sample; a batch folded with heads
        before (``[L, B*heads, d]``) is their outer part."""
        if out1.shape is None or out2.shape is None or not (out1.full and out2.full):
            return None
        if len(out1.shape) != len(out2.shape):
            return None
        differing = [j for j, (a, b) in enumerate(zip(out1.shape, out2.shape)) if a != b]
        if len(differing) != 1 or out1.shape[differing[0]] * self.wb != out2.shape[differing[0]] * self.wa:
            return None
        j = differing[0]
        before, after = product(data_shape[:axis]), factor * product(data_shape[axis + 1 :])
        outer = product(out1.shape[:j])
        if (
            after == product(out1.shape[j + 1 :])
            and outer < before
            and before % outer == 0
            and outer * out1.shape[j] == before * self.wa
        ):
            return j, before // outer
        return None

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


__all__ = ["Fold", "Folds"]
