"""The sizes each export was traced at, where its inputs do not say them.

A torch export made with ``dynamic_axes`` names its inputs' axes (``feats [1, 'T', 40]``), but code
that used Python ints still baked the traced size into constants (12 in A, 20 in B). The sizes are
recovered, per dim name, from what the user gives (``--shape-a`` / ``--shape-b``), or else proved by
running A and B: candidates are the pairs of entries that differ between the exports (then 1, then
products of two of them, for a merger's flattened ``h * w * 4``), simplest first; the first set of
sizes at which A runs at its sizes and B at its sizes wins. A dim name is *baked* when A then fails
with that size alone moved by one: only baked sizes become atoms to fit; a free one only sizes the
run cases.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from patchspec.author.fit import Atom
from patchspec.author.init_case import input_rules, probe_values
from patchspec.author.original_runs import OriginalRuns
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.expressions import quote_tensor

Slot = tuple[int, int]  # (input position, axis)
Dims = list[list[object]]  # each input's declared dims, by position
Values = list[dict[str, Any]]  # each input's case item less its shape, by position
#: at most this many sets of sizes are tried, for at most this long, before derive asks for --shape-a / -b
MAX_TRIES = 4000
MAX_SECONDS = 30.0
#: strides a traced size may have been divided by before it reached a constant
SCALES = (2, 4, 8, 16, 32)
#: at most this many unknown dim names are searched together
MAX_GROUPS = 4
SHAPE_HINT = (
    "give the sizes each export was traced at: --shape-a NAME=D0,D1,... and --shape-b NAME=D0,D1,... "
    "(one per input that has symbolic dims)"
)


@dataclass
class Traced:
    """Each input's sizes in A and in B (by input position), the atoms for baked sizes, and notes."""

    shapes: tuple[list[list[int]], list[list[int]]]
    atoms: list[Atom] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Group:
    """Axes one dim name covers (an unnamed axis is its own group), and its sizes once known."""

    label: str
    slots: list[Slot]
    sizes: tuple[int, int] | None = None
    how: str = ""


def traced_sizes(
    inputs: tuple[Sequence[onnx.ValueInfoProto], Sequence[onnx.ValueInfoProto]],
    paths: tuple[Path, Path],
    model_a: onnx.ModelProto,
    differing: Sequence[tuple[int, int]],
    given: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {}),
) -> Traced:
    """The traced sizes of every input axis; raises PatchError (4) when they cannot be told."""
    dims: tuple[Dims, Dims] = (
        [list(read_dims(info) or []) for info in inputs[0]],
        [list(read_dims(info) or []) for info in inputs[1]],
    )
    groups = _groups(inputs[0], dims)
    for side in (0, 1):
        _take_given(groups, inputs[side], given[side], side)
    unknown = [group for group in groups.values() if group.sizes is None or -1 in group.sizes]
    if unknown:
        _search(unknown, groups, dims, paths, model_a, differing, inputs[0])
    shapes = (_shapes(dims[0], groups, 0), _shapes(dims[1], groups, 1))
    traced = Traced(shapes)
    for group in groups.values():
        if group.sizes is None or not group.how:
            continue
        first = group.slots[0]
        name = inputs[0][first[0]].name
        traced.notes.append(f"{group.label}: {group.sizes[0]} in A, {group.sizes[1]} in B ({group.how})")
        if group.sizes[0] != group.sizes[1] and "free" not in group.how:
            traced.atoms.append(Atom(f"dim({quote_tensor(name)}, {first[1]})", *group.sizes))
    return traced


def _groups(inputs: Sequence[onnx.ValueInfoProto], dims: tuple[Dims, Dims]) -> dict[object, _Group]:
    groups: dict[object, _Group] = {}
    for i, info in enumerate(inputs):
        for axis, dim_a in enumerate(dims[0][i]):
            dim_b = dims[1][i][axis] if i < len(dims[1]) and axis < len(dims[1][i]) else None
            if isinstance(dim_a, int) and isinstance(dim_b, int):
                continue
            key: object = dim_a if isinstance(dim_a, str) else (i, axis)
            label = f"'{dim_a}'" if isinstance(dim_a, str) else f"{info.name}[{axis}]"
            group = groups.setdefault(key, _Group(label, []))
            group.slots.append((i, axis))
            if isinstance(dim_a, int) or isinstance(dim_b, int):  # fixed on one side only
                known = (dim_a if isinstance(dim_a, int) else -1, dim_b if isinstance(dim_b, int) else -1)
                group.sizes = known
    return groups


def _take_given(
    groups: dict[object, _Group], inputs: Sequence[onnx.ValueInfoProto], given: dict[str, list[int]], side: int
) -> None:
    names = [info.name for info in inputs]
    for name, sizes in given.items():
        if name not in names:
            flag = "--shape-a" if side == 0 else "--shape-b"
            raise PatchError(f"{flag} {name}: the model has no input '{name}'; its inputs: {', '.join(names)}")
        i = names.index(name)
        for group in groups.values():
            for slot in group.slots:
                if slot[0] == i and slot[1] < len(sizes):
                    pair = list(group.sizes or (-1, -1))
                    pair[side] = sizes[slot[1]]
                    group.sizes = (pair[0], pair[1])
                    group.how = "given"


def _candidates(differing: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Pairs of entries that differ (most frequent first), then 1, then each times a power of two (a
    stride), then products of two of them (a flattened grid)."""
    counted = Counter(pair for pair in differing if pair[0] >= 1 and pair[1] >= 1 and pair[0] != pair[1])
    plain = [pair for pair, _ in counted.most_common()]
    scaled = [(x * k, y * k) for k in SCALES for x, y in plain]
    products = [(x[0] * y[0], x[1] * y[1]) for i, x in enumerate(plain) for y in plain[i:]]
    return list(dict.fromkeys([*plain, (1, 1), *scaled, *products]))


def _combos(count: int, width: int) -> Iterator[tuple[int, ...]]:
    """Index tuples over ``count`` groups, by the sum of their indices (simplest first)."""
    for total in range(count * (width - 1) + 1):
        yield from _summing(count, width, total)


def _summing(count: int, width: int, total: int) -> Iterator[tuple[int, ...]]:
    if count == 1:
        if total < width:
            yield (total,)
        return
    for first in range(min(total, width - 1) + 1):
        for rest in _summing(count - 1, width, total - first):
            yield (first, *rest)


def _search(
    unknown: list[_Group],
    groups: dict[object, _Group],
    dims: tuple[Dims, Dims],
    paths: tuple[Path, Path],
    model_a: onnx.ModelProto,
    differing: Sequence[tuple[int, int]],
    model_inputs: Sequence[onnx.ValueInfoProto],
) -> None:
    labels = ", ".join(group.label for group in unknown)
    candidates = _candidates(differing)
    if len(unknown) > MAX_GROUPS:
        raise PatchError(
            f"derive cannot tell the sizes A and B were traced at for {labels}: too many to search", SHAPE_HINT
        )
    runs = (OriginalRuns(paths[0], model_a), OriginalRuns(paths[1], model_a))  # one network: one size
    if runs[0].session is None or runs[1].session is None:  # no evidence: the run cases say so when they fail
        why = runs[0].why_not or runs[1].why_not
        for group in unknown:
            group.sizes = _merged(group.sizes, (1, 1))
            group.how = f"free: assumed, as onnxruntime cannot run A and B here ({why}); {SHAPE_HINT}"
        return
    by_name = probe_values(input_rules(model_a))
    values = [by_name.get(info.name, {}) for info in model_inputs]
    known = [group.sizes for group in unknown]  # a size given or fixed on one side only
    tried, started = 0, time.monotonic()
    for combo in _combos(len(unknown), len(candidates)):
        if tried >= MAX_TRIES or time.monotonic() - started > MAX_SECONDS:
            break
        tried += 1
        for group, index, sizes in zip(unknown, combo, known):
            group.sizes = _merged(sizes, candidates[index])
        if all(_runs(runs[side], dims[side], groups, side, values) for side in (0, 1)):
            for group in unknown:
                group.how = _proof(group, runs[0], dims[0], groups, values)
            for group, sizes in zip(unknown, known):
                _smallest_free(group, sizes, runs, dims, groups, values)
            return
    for group in unknown:
        group.sizes = None
    raise PatchError(
        f"derive cannot tell the sizes A and B were traced at for {labels}: A and B ran at none of "
        f"{tried} sets of sizes made from the constants that differ",
        SHAPE_HINT,
    )


def _smallest_free(
    group: _Group,
    known: tuple[int, int] | None,
    runs: tuple[OriginalRuns, OriginalRuns],
    dims: tuple[Dims, Dims],
    groups: dict[object, _Group],
    values: Values,
) -> None:
    """A free size (a batch no constant holds) runs the cases at 1 where A and B run there too."""
    if "free" not in group.how or group.sizes is None:
        return
    found, group.sizes = group.sizes, _merged(known, (1, 1))
    if all(_runs(runs[side], dims[side], groups, side, values) for side in (0, 1)):
        group.how = "free: A and B run at any size here, so no constant holds it; the run cases use 1"
    else:
        group.sizes = found


def _merged(known: tuple[int, int] | None, candidate: tuple[int, int]) -> tuple[int, int]:
    if known is None:
        return candidate
    return (known[0] if known[0] >= 0 else candidate[0], known[1] if known[1] >= 0 else candidate[1])


def _proof(group: _Group, runs: OriginalRuns, dims: Dims, groups: dict[object, _Group], values: Values) -> str:
    assert group.sizes is not None
    size = group.sizes[0]
    group.sizes = (size + 1, group.sizes[1])
    moved = _runs(runs, dims, groups, 0, values)
    group.sizes = (size, group.sizes[1])
    if moved:
        return f"free: A runs at {size} and at {size + 1}, so no constant holds it; the run cases use these"
    return f"A and B run at these sizes, and A fails at {size + 1}: the trace baked it"


def _runs(runs: OriginalRuns, dims: Dims, groups: dict[object, _Group], side: int, values: Values) -> bool:
    inputs = runs.session.inputs if runs.session is not None else []
    shapes = _shapes(dims, groups, side)
    items = {decl.name: {**extra, "shape": shape} for decl, shape, extra in zip(inputs, shapes, values)}
    ran = runs.run(items)
    return ran is not None and ran.ok


def _shapes(dims: Dims, groups: dict[object, _Group], side: int) -> list[list[int]]:
    sizes = {slot: group.sizes[side] for group in groups.values() if group.sizes for slot in group.slots}
    return [
        [d if isinstance(d, int) else max(sizes.get((i, axis), 1), 1) for axis, d in enumerate(input_dims)]
        for i, input_dims in enumerate(dims)
    ]


__all__ = ["SHAPE_HINT", "Traced", "traced_sizes"]
