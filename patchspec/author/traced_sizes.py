"""The sizes each export was traced at, where its inputs do not say them.

A torch export made with ``dynamic_axes`` names its inputs' axes (``feats [1, 'T', 40]``), but code
that used Python ints still baked the traced size into constants (12 in A, 20 in B). The sizes are
recovered, per dim name, from what the user gives (``--shape-a`` / ``--shape-b``), or else proved by
running A and B: candidates are the pairs of entries that differ between the exports (then 1, then
products of two of them, for a merger's flattened ``h * w * 4``), simplest first. Every set of sizes
at which A runs at its sizes and B at its sizes is collected, never only the first: the caller fits
each and asks the user which one was traced when they give different specs. A dim name is *baked*
when A then fails with that size alone moved by one: only baked sizes become atoms to fit; a free one
only sizes the run cases. Sets that differ only in free sizes, or in a 1 where another set holds a
larger size (broadcasting), are one answer.
"""

from __future__ import annotations

import shlex
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
from patchspec.shapes.annotations import format_dims, read_dims
from patchspec.shapes.expressions import quote_tensor

Slot = tuple[int, int]  # (input position, axis)
Dims = list[list[object]]  # each input's declared dims, by position
Values = list[dict[str, Any]]  # each input's case item less its shape, by position
_Failures = dict[tuple[int, ...], set[tuple[int, ...]]]  # groups a failing node reads -> their sizes
Answer = list[tuple[tuple[int, int], str]]  # per unknown group: its sizes in A and B, and how they were found
#: at most this many runs of A and B, for at most this long, search for the sizes, before derive asks for --shape-a / -b
MAX_TRIES = 4000
MAX_SECONDS = 30.0
#: strides a traced size may have been divided by before it reached a constant
SCALES = (2, 4, 8, 16, 32)
#: at most this many unknown dim names are searched together
MAX_GROUPS = 4
#: at most this many sets of sizes that run are collected (each costs a few more runs)
MAX_ANSWERS = 16
SHAPE_HINT = (
    "give the sizes each export was traced at: --shape-a NAME=D0,D1,... and --shape-b NAME=D0,D1,... "
    "(one per input that has symbolic dims)"
)


@dataclass
class Traced:
    """Each input's sizes in A and in B (by input position), the atoms for baked sizes, notes, and the
    options that give these sizes (``--shape-a x=1,12,40 --shape-b x=1,20,40``, ready to paste)."""

    shapes: tuple[list[list[int]], list[list[int]]]
    atoms: list[Atom] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    options: str = ""
    searched: bool = False  # found by running A and B, not given or declared
    settled: bool = True  # every other set of sizes was tried, or none was needed


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
) -> list[Traced]:
    """The traced sizes of every input axis: one answer, or each set of sizes A and B both run at
    (simplest first; the caller asks which when they give different specs). Raises PatchError (4) when
    no size runs."""
    dims: tuple[Dims, Dims] = (
        [list(read_dims(info) or []) for info in inputs[0]],
        [list(read_dims(info) or []) for info in inputs[1]],
    )
    groups = _groups(inputs[0], dims)
    for side in (0, 1):
        _take_given(groups, inputs[side], given[side], side)
    unknown = [group for group in groups.values() if group.sizes is None or -1 in group.sizes]
    if not unknown:
        return [_traced(inputs[0], dims, groups)]
    answers, settled = _search(unknown, groups, dims, paths, model_a, differing, inputs[0])
    found = []
    for answer in answers:
        for group, (sizes, how) in zip(unknown, answer):
            group.sizes, group.how = sizes, how
        traced = _traced(inputs[0], dims, groups)
        traced.searched, traced.settled = True, settled
        found.append(traced)
    return found


def _traced(inputs: Sequence[onnx.ValueInfoProto], dims: tuple[Dims, Dims], groups: dict[object, _Group]) -> Traced:
    traced = Traced((_shapes(dims[0], groups, 0), _shapes(dims[1], groups, 1)))
    for group in groups.values():
        if group.sizes is None or not group.how:
            continue
        first = group.slots[0]
        name = inputs[first[0]].name
        traced.notes.append(f"{group.label}: {group.sizes[0]} in A, {group.sizes[1]} in B ({group.how})")
        if group.sizes[0] != group.sizes[1] and "free" not in group.how:
            traced.atoms.append(Atom(f"dim({quote_tensor(name)}, {first[1]})", *group.sizes))
    symbolic = sorted({slot[0] for group in groups.values() for slot in group.slots})
    traced.options = " ".join(
        f"{flag} {shlex.quote(inputs[i].name + '=' + ','.join(map(str, shapes[i])))}"
        for flag, shapes in (("--shape-a", traced.shapes[0]), ("--shape-b", traced.shapes[1]))
        for i in symbolic
    )
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
    flag = "--shape-a" if side == 0 else "--shape-b"
    for name, sizes in given.items():
        if name not in names:
            raise PatchError(f"{flag} {name}: the model has no input '{name}'; its inputs: {', '.join(names)}")
        i = names.index(name)
        declared = read_dims(inputs[i]) or []
        wrong = [
            f"axis {k} is {d}" for k, (d, size) in enumerate(zip(declared, sizes)) if isinstance(d, int) and d != size
        ]
        if len(sizes) != len(declared) or wrong:
            detail = (
                f"it has {len(declared)} axes, got {len(sizes)}" if len(sizes) != len(declared) else ", ".join(wrong)
            )
            raise PatchError(f"{flag} {name}={','.join(map(str, sizes))}: {name} is {format_dims(declared)}: {detail}")
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
) -> tuple[list[Answer], bool]:
    """Every set of sizes (per unknown group: its sizes and how they were found) at which A and B run,
    simplest first, less those that differ only in free sizes or in a broadcast 1."""
    labels = ", ".join(group.label for group in unknown)
    candidates = _candidates(differing)
    if len(unknown) > MAX_GROUPS:
        raise PatchError(
            f"derive cannot tell the sizes A and B were traced at for {labels}: too many to search", SHAPE_HINT
        )
    runs = (OriginalRuns(paths[0], model_a), OriginalRuns(paths[1], model_a))  # one network: one size
    if runs[0].session is None or runs[1].session is None:  # no evidence: the run cases say so when they fail
        why = runs[0].why_not or runs[1].why_not
        how = f"free: assumed, as onnxruntime cannot run A and B here ({why}); {SHAPE_HINT}"
        return [[(_merged(group.sizes, (1, 1)), how) for group in unknown]], True
    by_name = probe_values(input_rules(model_a))
    values = [by_name.get(info.name, {}) for info in model_inputs]
    known = [group.sizes for group in unknown]  # a size given or fixed on one side only
    found: dict[tuple[object, ...], Answer] = {}  # by the baked sizes: free ones differ and change nothing
    reads = _group_reads(model_a, unknown, model_inputs)
    failed: tuple[_Failures, _Failures] = ({}, {})
    started, complete = time.monotonic(), True
    for combo in _combos(len(unknown), len(candidates)):
        if _spent(runs) >= MAX_TRIES or time.monotonic() - started > MAX_SECONDS or len(found) >= MAX_ANSWERS:
            complete = False
            break
        for group, index, sizes in zip(unknown, combo, known):
            group.sizes = _merged(sizes, candidates[index])
        if all(_runs_at(runs[side], dims[side], groups, side, values, unknown, reads, failed[side]) for side in (0, 1)):
            hows = [_proof(group, runs[0], dims[0], groups, values) for group in unknown]
            for group, sizes, how in zip(unknown, known, hows):
                group.how = how
                _smallest_free(group, sizes, runs, dims, groups, values)
            answer = [(group.sizes or (1, 1), group.how) for group in unknown]
            found.setdefault(tuple("free" if "free" in how else sizes for sizes, how in answer), answer)
    return _distinct(found, labels, _spent(runs)), complete


def _distinct(found: dict[tuple[object, ...], Answer], labels: str, tried: int) -> list[Answer]:
    """The answers found, less a set that another equals but for sizes 1 in A and B where it holds larger
    ones: 1 runs there because it broadcasts, not because the trace saw it."""
    if not found:
        raise PatchError(
            f"derive cannot tell the sizes A and B were traced at for {labels}: A and B ran at none of "
            f"{tried} sets of sizes made from the constants that differ",
            SHAPE_HINT,
        )
    keys = list(found)
    return [found[key] for key in keys if not any(other != key and _broadcast_of(key, other) for other in keys)]


def _spent(runs: tuple[OriginalRuns, OriginalRuns]) -> int:
    return len(runs[0].done) + len(runs[1].done)


def _group_reads(
    model: onnx.ModelProto, unknown: list[_Group], inputs: Sequence[onnx.ValueInfoProto]
) -> dict[str, tuple[int, ...]]:
    """For each node by name, the unknown groups (by index) whose inputs reach it: a run that fails there
    fails at every set of sizes that keeps those groups' sizes (the other inputs cannot reach it)."""
    positions = {info.name: i for i, info in enumerate(inputs)}
    reach: dict[str, set[int]] = {name: {i} for name, i in positions.items()}
    every = set(positions.values())
    found: dict[str, tuple[int, ...]] = {}
    for node in model.graph.node:
        nested = any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute)
        read = set(every) if nested else set().union(*(reach.get(name, set()) for name in node.input))
        for name in node.output:
            reach[name] = read
        if node.name:
            found[node.name] = tuple(k for k, group in enumerate(unknown) if any(s[0] in read for s in group.slots))
    return found


def _runs_at(
    runs: OriginalRuns,
    dims: Dims,
    groups: dict[object, _Group],
    side: int,
    values: Values,
    unknown: list[_Group],
    reads: dict[str, tuple[int, ...]],
    failed: _Failures,
) -> bool:
    """Whether the model runs at the groups' sizes; skips the run where an earlier one failed at a node
    that only groups with the same sizes reach."""
    sizes = [group.sizes[side] if group.sizes else 1 for group in unknown]
    if any(tuple(sizes[k] for k in which) in seen for which, seen in failed.items()):
        return False
    if _runs(runs, dims, groups, side, values):
        return True
    ran = runs.run(_items(runs, dims, groups, side, values))
    which = reads.get(ran.node or "", tuple(range(len(unknown)))) if ran is not None else ()
    failed.setdefault(which, set()).add(tuple(sizes[k] for k in which))
    return False


def _broadcast_of(key: tuple[object, ...], other: tuple[object, ...]) -> bool:
    return all(x == y or x == (1, 1) for x, y in zip(key, other))


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
    ran = runs.run(_items(runs, dims, groups, side, values))
    return ran is not None and ran.ok


def _items(runs: OriginalRuns, dims: Dims, groups: dict[object, _Group], side: int, values: Values) -> dict[str, Any]:
    inputs = runs.session.inputs if runs.session is not None else []
    shapes = _shapes(dims, groups, side)
    return {decl.name: {**extra, "shape": shape} for decl, shape, extra in zip(inputs, shapes, values)}


def _shapes(dims: Dims, groups: dict[object, _Group], side: int) -> list[list[int]]:
    sizes = {slot: group.sizes[side] for group in groups.values() if group.sizes for slot in group.slots}
    return [
        [d if isinstance(d, int) else max(sizes.get((i, axis), 1), 1) for axis, d in enumerate(input_dims)]
        for i, input_dims in enumerate(dims)
    ]


__all__ = ["SHAPE_HINT", "Traced", "traced_sizes"]
