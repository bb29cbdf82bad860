"""A scatter or gather into a tensor of one sample, made at the exported batch: rewritten or repeated.

``torch.zeros(B, C).scatter_(1, idx, 1.0)`` (a one-hot) traced at batch 1 scatters into a constant
``[1, C]`` of zeros, with updates from ``ConstantOfShape([1, 1])``. At batch 4 the indices are
``[4, 1]`` and onnxruntime refuses the run ("Indices dim=4 at pos=0 is greater than input dim=1").
Where the indices carry the batch on an axis other than the one the op scatters (gathers) along, each
sample's row is its own, so a data or updates tensor that holds one sample is made for the new batch
as a Concat's input is (``joins``): the constant shape of the op that made it rewritten, or a
Tile that repeats it. One that cannot be (computed from an input) is undecided. Along the batch
axis itself the op addresses samples: ``pinned`` judges that.
"""

from __future__ import annotations

from patchspec.model.graph import NodeSite
from patchspec.shapes.batch.joins import repeat_one_sample, rewrite_maker
from patchspec.shapes.batch.states import Deciding
from patchspec.shapes.batch.trace import PointInputs, Undecided, sizes_of
from patchspec.shapes.known import Known

#: ops that scatter or gather along one axis: the inputs that must hold every sample where the indices do
SCATTERS = {"ScatterElements": (0, 2), "GatherElements": (0,)}


def settle_scatter(tracker: Deciding, site: NodeSite, inputs: PointInputs) -> PointInputs | None:
    """Make each of the op's data (and updates) that holds one sample, where its indices carry the batch,
    hold the new batch; returns the inputs as they are then, so that the evaluation goes on."""
    node, trace = site.node, tracker.trace
    if id(node) in tracker.decided or len(node.input) < 2:
        return None
    found = _indices_batch_axis(tracker, inputs)
    if found is None:
        return None
    rank = len(sizes_of(inputs[0][1]) or ())
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % max(rank, 1)
    if found == axis:
        return None  # along the batch: the op addresses samples (batch_pinned)
    replaced = [list(point) for point in inputs]
    for operand in SCATTERS[node.op_type]:
        if operand >= len(node.input) or not _one_sample(tracker, inputs, operand, found):
            continue
        name = node.input[operand]
        if not (
            rewrite_maker(tracker, site, name, found, rank) or repeat_one_sample(tracker, site, operand, found, rank)
        ):
            if id(node) not in tracker.decided:
                trace.undecided.append(
                    Undecided(
                        f"undecided: {node.op_type} '{node.name or node.output[0]}' reads '{name}', which holds "
                        f"{trace.b1} sample, with indices that carry the batch on axis {found}: at the new batch it "
                        "cannot hold every sample's row, and it is computed from an input, so nothing can be "
                        "repeated: export the model with that tensor sized from the batch"
                    )
                )
                tracker.decided.add(id(node))
            return None
        for p, point in enumerate(replaced):
            dims = list(sizes_of(point[operand]) or ())
            dims[found] = (sizes_of(inputs[p][1]) or ())[found]
            point[operand] = Known(point[operand].dtype, tuple(dims), None)
    tracker.decided.add(id(node))
    return replaced


def _indices_batch_axis(tracker: Deciding, inputs: PointInputs) -> int | None:
    """The one axis of the indices (input 1) that carries the batch at the witnesses, one row per sample."""
    first, second = sizes_of(inputs[tracker.a][1]), sizes_of(inputs[tracker.b][1])
    if first is None or second is None or len(first) != len(second):
        return None
    moving = [t for t, (x, y) in enumerate(zip(first, second)) if x != y]
    sizes = tracker.trace.sizes
    if len(moving) != 1 or (first[moving[0]], second[moving[0]]) != (sizes[tracker.a], sizes[tracker.b]):
        return None
    return moving[0]


def _one_sample(tracker: Deciding, inputs: PointInputs, operand: int, axis: int) -> bool:
    """Input ``operand`` keeps the exported batch (1) on ``axis`` at every point: made for one sample."""
    dims = [sizes_of(point[operand]) for point in inputs]
    return tracker.trace.b1 == 1 and all(d is not None and len(d) > axis and d[axis] == 1 for d in dims)


__all__ = ["SCATTERS", "settle_scatter"]
