"""Graph inputs that feed a recurrent op (LSTM, GRU, RNN): its initial state or its sequence, and
inputs shaped like an output that carries the batch (a state passed in and out). ``init`` asks them
where an input holds the batch on an axis other than 0."""

from __future__ import annotations

import onnx

from patchspec.author.batch_ties import Pair
from patchspec.author.init_case import PROBE, all_nodes
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs

#: recurrent ops and the operands that hold their initial state ([directions, batch, hidden] by default)
STATES: dict[str, tuple[int, ...]] = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
#: the operand a recurrent op runs through: its sequence X, batch on the same axis as its state
SEQUENCES: dict[str, tuple[int, ...]] = {"LSTM": (0,), "GRU": (0,), "RNN": (0,)}
#: ops between a state input and the recurrent op that keep its batch axis (a Slice of its layers)
_STATE_PATH = {"Identity", "Cast", "Slice", "Split"}


def recurrent_states(model: onnx.ModelProto, operands: dict[str, tuple[int, ...]] = STATES) -> dict[Pair, str]:
    """Graph inputs that an LSTM/GRU/RNN takes as its initial state (or, with ``SEQUENCES``, as its
    sequence): {(input, batch axis): "GRU 'name'"}."""
    recurrent = [node for node in all_nodes(model.graph) if node.op_type in operands]
    if not recurrent:
        return {}
    inputs = fed_inputs(model.graph)
    producers = {o: node for node in model.graph.node for o in node.output if o}
    found: dict[Pair, str] = {}
    for graph_node in recurrent:
        for operand in operands.get(graph_node.op_type, ()):
            if operand >= len(graph_node.input) or not graph_node.input[operand]:
                continue
            name = graph_node.input[operand]
            while name not in inputs and name in producers and producers[name].op_type in _STATE_PATH:
                name = producers[name].input[0]
            if name in inputs:
                layout = next((a.i for a in graph_node.attribute if a.name == "layout"), 0)
                found.setdefault(
                    (name, 0 if layout else 1), f"{graph_node.op_type} '{graph_node.name or graph_node.output[0]}'"
                )
    return found


def state_pairs(
    model: onnx.ModelProto, probe: onnx.ModelProto | None, chosen: list[Pair], old_size: int
) -> dict[Pair, str]:
    """Inputs shaped like an output that carries the batch, except that they hold the old batch (or an
    unknown size) on that axis: a recurrent state in ``[2, 1, 128]``, out ``[2, N, 128]``. {(input, axis): output}"""
    batched = {name for name, _ in chosen}
    found: dict[Pair, str] = {}
    for info in probe.graph.output if probe is not None else []:
        dims = read_dims(info) or []
        for axis, dim in enumerate(dims):
            if dim != PROBE:
                continue
            for name, given in fed_inputs(model.graph).items():
                theirs = read_dims(given) or []
                if name in batched or len(theirs) != len(dims) or theirs[axis] not in (None, old_size):
                    continue
                if all(a == b for i, (a, b) in enumerate(zip(theirs, dims)) if i != axis):
                    found.setdefault((name, axis), info.name)
    return found


__all__ = ["SEQUENCES", "STATES", "recurrent_states", "state_pairs"]
