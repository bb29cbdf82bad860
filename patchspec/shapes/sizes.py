"""Where an integer input is the size an op makes its output: a Resize's ``sizes``.

A document unwarper takes the image's size as a second input, picks its elements (``size[0]``,
``size[1]``), and resizes a grid to them. Any positive sizes run, and the compare of one sample against
the batch holds at any of them, so the run case gives such an input a size of its own rather than
flagging it. The input's length is the one it is declared with, or, where that is symbolic, one past the
highest element the graph picks. ``values`` asks it, among its other rules.
"""

from __future__ import annotations

from patchspec.model.graph import node_label
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.coordinates import Uses

#: ops an output size passes through on its way to the op that uses it (operand 0; any of a Concat's)
_SIZE_STEPS = frozenset({"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Concat", "Gather", "Slice"})
#: (op, operand) that take their operand as the output's sizes
_SIZED = frozenset({("Resize", 3)})
#: the size each picked element gets: as large as the lint's default spatial sizes
SIZE = 64


def output_sizes(uses: Uses, name: str) -> tuple[list[int], str] | None:
    """(values, why) where every use of ``name`` ends as the sizes of a Resize's output; None otherwise."""
    length = _length(uses, name)
    if length is None:
        return None
    sized: set[str] = set()
    stack, seen = [name], {name}
    while stack:
        for site, operand in uses.consumers.get(stack.pop(), []):
            node = site.node
            if (node.op_type, operand) in _SIZED:
                sized.add(node_label(node))
            elif node.op_type in _SIZE_STEPS and (operand == 0 or node.op_type == "Concat"):
                stack.extend(o for o in node.output if o and o not in seen)
                seen.update(node.output)
            else:
                return None  # used as something else too: not only a size
    if not sized:
        return None
    readers = ", ".join(sorted(sized))
    why = (
        f"output sizes of {readers}: any positive sizes run, {SIZE} each here; give the sizes your callers "
        "send ('value: ...') to verify those"
    )
    return [SIZE] * length, why


def _length(uses: Uses, name: str) -> int | None:
    """The input's one dim where it is a number; where it is symbolic, one past the highest constant
    index the Gathers that read it pick (every use a Gather on axis 0 then); None otherwise."""
    info = next((info for info in uses.model.graph.input if info.name == name), None)
    dims = read_dims(info) if info is not None else None
    if dims is None or len(dims) != 1:
        return None
    if isinstance(dims[0], int):
        return dims[0] if dims[0] > 0 else None
    highest = -1
    for site, operand in uses.consumers.get(name, []):
        axis = next((a.i for a in site.node.attribute if a.name == "axis"), 0)
        index = uses.constant(site, 1) if site.node.op_type == "Gather" and operand == 0 and axis == 0 else None
        if index is None or index.size == 0 or index.dtype.kind not in "iu" or index.min() < 0:
            return None
        highest = max(highest, int(index.max()))
    return highest + 1 if highest >= 0 else None


__all__ = ["SIZE", "output_sizes"]
