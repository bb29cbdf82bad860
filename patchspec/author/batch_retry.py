"""Other batch axes for init, where set_batch refuses or couples the ones the contract detects.

The contract's detection takes the first input's axis 0 (or its batch dim wherever it appears). Where
set_batch refuses that, another input's axis that may carry the batch is tried alongside; where it still
refuses, every input's axis of size 1 (a static export at batch 1 whose first input is sequence first:
``x [T, 1, E]`` beside a padding mask ``[1, T]``). Where it accepts but finds the samples coupled, the
first other axis of size 1 or unknown on every chosen input (a sequence-first model's time on axis 0).
"""

from __future__ import annotations

from typing import Any, Protocol

import onnx

from patchspec.author.batch_ties import Pair
from patchspec.author.init_case import PROBE
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs


class Probes(Protocol):
    """What of init's prober (set_batch on the graph only) these read."""

    def refusal(self, axes: list[Pair], size: int | str = PROBE) -> PatchError | None: ...

    def coupled(self, axes: list[Pair]) -> list[str]: ...


def with_another_input(
    model: onnx.ModelProto,
    prober: Probes,
    size: int | str,
    chosen: list[Pair],
    how: dict[Pair, str],
    refusal: Any,
    old_size: int | None,
) -> tuple[list[Pair], dict[Pair, str]]:
    """set_batch refuses ``chosen``: try adding an input axis that may carry the batch (one at a time,
    then all), then every input's axis of size 1 instead, else raise the refusal, said at the batch the
    user asked for."""
    candidates = [
        (name, axis)
        for name, info in fed_inputs(model.graph).items()
        for axis, dim in enumerate(read_dims(info) or [])
        if (name, axis) not in chosen and name not in {n for n, _ in chosen} and dim in (None, old_size)
    ]
    for extra in [[c] for c in candidates] + ([candidates] if len(candidates) > 1 else []):
        if prober.refusal(chosen + extra) is None:
            first = refusal.detail.splitlines()[0]
            how.update({pair: f"tried: set_batch refuses the model without it ({first})" for pair in extra})
            return chosen + extra, how
    ones = _axes_of_one(model)
    if ones and ones != chosen and prober.refusal(ones) is None and not prober.coupled(ones):
        first = refusal.detail.splitlines()[0]
        how.update({pair: f"its axis of size 1 (axis 0 of the first input is refused: {first})" for pair in ones})
        return ones, how
    if isinstance(size, int):  # the probe's batch is symbolic: the batch the user asked for may still do
        at_size = prober.refusal(chosen, size)
        if at_size is None:  # a constant state of one sample: repeated at a size, not at any batch
            return chosen, how
        refusal = at_size
    raise PatchError(
        f"set_batch cannot batch this model: {refusal.detail}",
        "list the inputs that carry the batch yourself: patchspec init does not guess further",
        node=refusal.node,
    )


def uncoupled_axes(
    model: onnx.ModelProto, prober: Probes, chosen: list[Pair], how: dict[Pair, str]
) -> list[Pair] | None:
    """Axis 0 was chosen and set_batch finds that it couples the samples (a sequence-first model's time,
    named ``time`` or exported at 6): the first other axis where every chosen input has 1 or an unknown
    size, where set_batch accepts the model and finds the samples independent; None when there is none."""
    coupled = prober.coupled(chosen)
    if not coupled or any(axis != 0 for _, axis in chosen):
        return None
    inputs = fed_inputs(model.graph)
    dims = {name: read_dims(inputs[name]) or [] for name, _ in chosen}
    for axis in range(1, min(len(d) for d in dims.values())):
        moved = [(name, axis) for name, _ in chosen]
        if all(dims[name][axis] in (1, None) for name in dims) and prober.refusal(moved) is None:
            if not prober.coupled(moved):
                for old, new in zip(chosen, moved):
                    how.pop(old, None)
                    how[new] = f"on axis 0 the samples would not be independent ({coupled[0]}); on axis {axis} they are"
                return moved
    return None


def _axes_of_one(model: onnx.ModelProto) -> list[Pair]:
    """Each input's first axis of size 1, where every input has one: a static export at batch 1."""
    axes = []
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        if 1 not in dims:
            return []
        axes.append((name, dims.index(1)))
    return axes


__all__ = ["Probes", "uncoupled_axes", "with_another_input"]
