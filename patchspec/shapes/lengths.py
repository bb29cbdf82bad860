"""Where an integer input is a length along another input's axis: a waveform's valid samples.

One value per sample, compared with the positions of that axis (``arange(N) < lens``: a padding mask),
maybe as frames first (``(lens - 400) // 160 + 1``, arithmetic with constants), or only computed on into
an output (the features' lengths). Such lengths run 1..the axis's size; the axis is the one symbolic
axis the other inputs have besides the batch. An input that sizes a tensor or picks a branch is no
length of that axis and is left to the other rules. ``values`` asks it, among its other rules.
"""

from __future__ import annotations

import numpy as np

from patchspec.shapes.annotations import read_dims
from patchspec.shapes.coordinates import Uses

#: ops whose operand sizes a tensor, a loop or picks a branch: an input used so is no length of an axis
SIZE_USES = frozenset(
    {"Range", "Reshape", "Slice", "Expand", "Tile", "ConstantOfShape", "If", "Loop", "Resize", "Pad", "TopK"}
)
#: ops through which a length stays a length: copies, reshapes, and arithmetic with constants
LENGTH_STEPS = frozenset(
    {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Add", "Sub", "Mul", "Div", "Floor", "Ceil"}
)
#: comparisons with positions that make a padding mask
ORDERINGS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
#: ops a count of positions passes through on its way to the comparison
_POSITION_STEPS = frozenset({"Unsqueeze", "Reshape", "Cast", "Expand", "Identity"})


def lengths_along(uses: Uses, name: str) -> tuple[str, tuple[str, int]] | None:
    """(why, (input, axis)) where ``name`` holds lengths along that input's axis; None otherwise."""
    axes = _length_axes(uses, name)
    use = _length_use(uses, name) if len(axes) == 1 else None
    if use is None:
        return None
    tensor, axis = axes[0]
    return f"lengths along '{tensor}' axis {axis} ({use}): 1..its size", (tensor, axis)


def _length_axes(uses: Uses, name: str) -> list[tuple[str, int]]:
    """The other inputs' symbolic axes, less the batch (the dim ``name``, one value per sample, has)."""
    infos = {info.name: info for info in uses.model.graph.input}
    mine = (read_dims(infos[name]) or [None]) if name in infos else [None]
    if len(mine) != 1:
        return []
    constants = {t.name for t in uses.model.graph.initializer}
    return [
        (other, axis)
        for other, info in infos.items()
        if other not in constants and other != name
        for axis, dim in enumerate(read_dims(info) or [])
        if not isinstance(dim, int) and (dim != mine[0] if isinstance(mine[0], str) else axis != 0)
    ]


def _length_use(uses: Uses, name: str) -> str | None:
    """How a length is used: compared with positions, or only computed on into outputs; None otherwise."""
    outputs = {info.name for info in uses.model.graph.output}
    seen, stack, ends = {name}, [name], set()
    while stack:
        tensor = stack.pop()
        if tensor in outputs:
            ends.add("output")
        for site, operand in uses.consumers.get(tensor, []):
            node = site.node
            others = [i for i in range(len(node.input)) if i != operand and node.input[i]]
            if node.op_type in SIZE_USES:
                return None  # it sizes a tensor or picks a branch: not a length of the given axis
            if node.op_type in ORDERINGS and len(others) == 1 and _counts_from_zero(uses, node.input[others[0]]):
                ends.add("mask")
            elif node.op_type in LENGTH_STEPS and all(uses.constant(site, i) is not None for i in others):
                stack.extend(o for o in node.output if o and o not in seen)
                seen.update(node.output)
            else:  # a divisor of a mean over the valid frames, an index near the end: still lengths
                ends.add("other")
    if "mask" in ends:
        return "compared with positions 0, 1, ...: a padding mask"
    return "only computed on into an output" if ends == {"output"} else None


def _counts_from_zero(uses: Uses, tensor: str) -> bool:
    """``tensor`` is a Range from 0 by 1 (reshaped or cast on the way)."""
    for _ in range(4):
        producer = uses.producers.get(tensor)
        if producer is None:
            return False
        if producer.op_type == "Range" and len(producer.input) == 3:
            start, delta = (uses.index.constant(producer.input[i], (uses.model.graph,)) for i in (0, 2))
            return _scalar(start) == 0 and _scalar(delta) == 1
        if producer.op_type not in _POSITION_STEPS:
            return False
        tensor = producer.input[0]
    return False


def _scalar(value: object) -> int | None:
    array = None if value is None else np.asarray(value).reshape(-1)
    return int(array[0]) if array is not None and array.size == 1 else None


__all__ = ["LENGTH_STEPS", "ORDERINGS", "SIZE_USES", "lengths_along"]
