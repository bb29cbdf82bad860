"""How many times a while-loop runs, where its condition counts: ``while i < 7: i += 1``.

A TFLite RNN converted by tf2onnx is a Loop whose trip count is INT64_MAX (a bound, not a count) and
whose body stops it by comparing counters it carries with constants. Its scan outputs stack one
step each, so their first axis is the number of steps: unknown until the condition is run. Here it
is, in numpy, on the few nodes the condition depends on (the counters' updates and the comparison),
with the evaluator's kernels (:mod:`patchspec.shapes.kernels`); any other loop is left unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from patchspec.shapes.kernels import values_of
from patchspec.shapes.known import UNKNOWN, Known

#: the most steps a loop is run here; a condition that holds longer leaves the count unknown
MOST_TRIPS = 4096

Array = np.ndarray[Any, Any]


def loop_trips(
    body: onnx.GraphProto,
    loop: tuple[Sequence[str], Sequence[Known]],
    scope: tuple[Mapping[str, list[Known]], int],
    opset: int,
) -> int | None:
    """The steps the Loop runs; None where its condition depends on anything but counters and constants.

    ``loop``: the Loop's input names and what the evaluator knows of them (trip bound, condition,
    carried states; an omitted condition is True); ``scope``: what it knows of every tensor, by point,
    and the point asked about (for the tensors of enclosing scopes the body reads)."""
    names, knowns = loop
    given = [k.value if name or i != 1 else np.array(True) for i, (name, k) in enumerate(zip(names, knowns))]
    known, point = scope

    def outer(name: str) -> Array | None:
        found = known.get(name)
        return found[point].value if found else None

    cone = _cone(body)
    if cone is None:
        return None
    nodes, carried = cone
    bound = given[0] if given and given[0] is not None else None
    most = MOST_TRIPS if bound is None else min(MOST_TRIPS, int(np.asarray(bound).reshape(-1)[0]))
    condition = given[1] if len(given) > 1 else np.array(True)
    states = {j: given[2 + j] if 2 + j < len(given) else None for j in carried}
    if condition is None or any(value is None for value in states.values()):
        return None
    constants = {t.name: numpy_helper.to_array(t) for t in body.initializer}
    for trip in range(most + 1):
        if trip == most or not bool(np.asarray(condition).reshape(-1)[0]):
            return trip if trip < MOST_TRIPS else None
        names = [info.name for info in body.input]
        values: dict[str, Array | None] = {**constants, names[0]: np.array(trip, dtype=np.int64), names[1]: condition}
        values.update({names[2 + j]: states[j] for j in carried})
        if not _run(nodes, values, outer, opset):
            return None
        condition = values.get(body.output[0].name)
        states = {j: values.get(body.output[1 + j].name) for j in carried}
        if condition is None or any(value is None for value in states.values()):
            return None
    return None


def _cone(body: onnx.GraphProto) -> tuple[list[onnx.NodeProto], list[int]] | None:
    """The body's nodes the condition depends on, in order, and the carried states it reads."""
    producers = {o: node for node in body.node for o in node.output if o}
    inputs = {info.name: i for i, info in enumerate(body.input)}
    needed: set[int] = set()
    carried: set[int] = set()
    todo = [body.output[0].name] if body.output else []
    while todo:
        name = todo.pop()
        if name in inputs and inputs[name] >= 2 and inputs[name] - 2 not in carried:
            carried.add(inputs[name] - 2)
            todo.append(body.output[inputs[name] - 1].name)  # the state's next value
        node = producers.get(name)
        if node is None or id(node) in needed:
            continue
        if node.attribute and any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute):
            return None  # a loop or a branch inside: not a counter
        needed.add(id(node))
        todo.extend(tensor for tensor in node.input if tensor)
    if not needed:
        return None
    return [node for node in body.node if id(node) in needed], sorted(carried)


def _run(
    nodes: list[onnx.NodeProto], values: dict[str, Array | None], outer: Callable[[str], Array | None], opset: int
) -> bool:
    """Compute ``nodes`` in order into ``values``; False where one cannot be computed."""
    for node in nodes:
        args = [_known(values[t] if t in values else outer(t)) if t else UNKNOWN for t in node.input]
        results = values_of(node, args, opset)
        if results is None:
            return False
        values.update(zip(node.output, results))
    return True


def _known(value: Array | None) -> Known:
    """A value as the kernels read it (its shape with it)."""
    return UNKNOWN if value is None else Known(0, tuple(int(d) for d in np.shape(value)), value)


__all__ = ["MOST_TRIPS", "loop_trips"]
