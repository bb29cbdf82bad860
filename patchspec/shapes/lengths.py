"""Where an integer input is a length along another input's axis: a waveform's valid samples.

One value per sample, compared with the positions of that axis (``arange(N) < lens``: a padding mask),
maybe as frames first (``(lens - 400) // 160 + 1``: whatever is computed from it and constants alone),
or only computed on into an output (the features' lengths). Such lengths run 1..the axis's size; the
axis is the one symbolic axis the other inputs have besides the batch, or, in a static export, the
count of the constant positions. An input that sizes a tensor or picks a branch is no length of that
axis and is left to the other rules. ``values`` asks it, among its other rules.
"""

from __future__ import annotations

import numpy as np

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.coordinates import Uses

#: ops whose operand sizes a tensor, a loop or picks a branch: an input used so is no length of an axis
_SIZE_USES = frozenset(
    {"Range", "Reshape", "Slice", "Expand", "Tile", "ConstantOfShape", "If", "Loop", "Resize", "Pad", "TopK"}
)
#: comparisons with positions that make a padding mask
_ORDERINGS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
#: ops that clamp their operand 0 into bounds, which may be computed (the frames a shape holds)
_CLAMPS = frozenset({"Clip"})
#: ops a count of positions passes through on its way to the comparison
_POSITION_STEPS = frozenset({"Unsqueeze", "Reshape", "Cast", "Expand", "Identity"})


def lengths_along(uses: Uses, name: str) -> tuple[str, tuple[str, int] | int] | None:
    """(why, (input, axis)) where ``name`` holds lengths along that input's axis, or (why, count) where
    the positions are a constant ``0..count-1`` (a static export); None otherwise."""
    use, count = _length_use(uses, name)
    if use is None:
        return None
    axes = length_axes(uses, name)
    if len(axes) == 1:
        tensor, axis = axes[0]
        return f"lengths along '{tensor}' axis {axis} ({use}): 1..its size", (tensor, axis)
    if count is not None:
        return f"lengths (compared with positions 0..{count - 1}: a padding mask): 1..{count}", count
    return None


def length_axes(uses: Uses, name: str) -> list[tuple[str, int]]:
    """The other inputs' symbolic axes, less the batch (the dim ``name``, one value per sample, has); axes
    that share one dim name are one length (``chars [batch, seq]`` and ``tags [batch, seq]``): the first."""
    infos = {info.name: info for info in uses.model.graph.input}
    mine = (read_dims(infos[name]) or [None]) if name in infos else [None]
    if len(mine) != 1:
        return []
    constants = {t.name for t in uses.model.graph.initializer}
    found: dict[object, tuple[str, int]] = {}
    for other, info in infos.items():
        if other in constants or other == name:
            continue
        for axis, dim in enumerate(read_dims(info) or []):
            if not isinstance(dim, int) and (dim != mine[0] if isinstance(mine[0], str) else axis != 0):
                found.setdefault(dim if isinstance(dim, str) else (other, axis), (other, axis))
    return list(found.values())


def _length_use(uses: Uses, name: str) -> tuple[str | None, int | None]:
    """How a length is used, and how many positions a constant count of them holds (else None): compared
    with positions, or only computed on into outputs. Every value computed from it and constants alone
    (a floor division spelled out in Mod, Less and Where), or clamped (by a bound computed or not), is
    followed in graph order."""
    graph = uses.model.graph
    derived, ends, count = {name}, set(), None
    for node in graph.node:
        reads = [i for i, tensor in enumerate(node.input) if tensor in derived]
        if not reads:
            continue
        if node.op_type in _SIZE_USES:
            return None, None  # it sizes a tensor or picks a branch: not a length of the given axis
        others = [tensor for i, tensor in enumerate(node.input) if tensor and i not in reads]
        if node.op_type in _ORDERINGS and len(others) == 1:
            positions = _positions(uses, others[0])
            if positions is not None:
                ends.add("mask")
                count = positions if positions > 0 else count
                continue
        clamped = (node.op_type in _CLAMPS and reads == [0]) or node.op_type in {"Min", "Max"}
        if clamped or all(uses.index.constant(tensor, (graph,)) is not None for tensor in others):
            derived.update(o for o in node.output if o)
        else:  # a divisor of a mean over the valid frames, an index near the end: still lengths
            ends.add("other")
    if derived & {info.name for info in graph.output}:
        ends.add("output")
    if "mask" in ends:
        return "compared with positions 0, 1, ...: a padding mask", count
    return ("only computed on into an output" if ends == {"output"} else None), None


def _positions(uses: Uses, tensor: str) -> int | None:
    """``tensor`` counts positions from 0 by 1 (reshaped or cast on the way): how many where a constant
    holds them (a static export folded the arange), 0 for a Range; None if it does not count."""
    graph = uses.model.graph
    for _ in range(4):
        value = uses.index.constant(tensor, (graph,))
        if value is not None:
            flat = np.asarray(value).reshape(-1)
            counts = flat.size > 1 and flat.dtype.kind in "iu" and bool((flat == np.arange(flat.size)).all())
            return int(flat.size) if counts else None
        producer = uses.producers.get(tensor)
        if producer is None:
            return None
        if producer.op_type == "Range" and len(producer.input) == 3:
            start, delta = (uses.index.constant(producer.input[i], (graph,)) for i in (0, 2))
            return 0 if _scalar(start) == 0 and _scalar(delta) == 1 else None
        if producer.op_type not in _POSITION_STEPS:
            return None
        tensor = producer.input[0]
    return None


def _scalar(value: object) -> int | None:
    array = None if value is None else np.asarray(value).reshape(-1)
    return int(array[0]) if array is not None and array.size == 1 else None


__all__ = ["length_axes", "lengths_along"]
