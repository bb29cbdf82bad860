"""The spec that makes one export work at any size, derived from two exports at two sizes.

A and B are one network traced at two input sizes. Their graphs pair up node for node (same op
types, domains, attributes and wiring, Constant nodes aside; constants pair by the node input that
reads them, :mod:`.pairing`). Each entry of an integer constant that differs is fitted as an
expression of the input dims that differ (:mod:`.fit`), or becomes ``-1`` in a Reshape's shape;
sizes the inputs do not carry (a merger's grid, flattened into its patches) become an added int64
input read with ``value()``. The spec frees the input dims that differ and verifies at both sizes.

Inputs already symbolic in both (a torch export with ``dynamic_axes`` whose code used Python ints:
``feats [1, 'T', 40]``) hide the sizes the trace baked in: :mod:`.traced_sizes` recovers them (given,
or proved by running A and B), and the fits use them as ``dim(feats, 1)``.
"""

from __future__ import annotations

import copy
import io
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from patchspec.author.fit import Atom, Fit, fit, folded_into, same_values
from patchspec.author.pairing import Export, Rewrite, pair, rewrites
from patchspec.author.spec_text import DraftStep, SpecDraft, checked, next_command, output_ref, root_needed
from patchspec.author.traced_sizes import MAX_SECONDS, MAX_TRIES, Traced, traced_sizes
from patchspec.errors import ModelFileError, PatchError
from patchspec.host.registry import PluginRegistry
from patchspec.model.graph import all_names, fresh_name
from patchspec.shapes.annotations import dim_params, format_dims, read_dims
from patchspec.shapes.expressions import quote_tensor

#: the name of the input that carries sizes no input dim holds (a fresh one if the model has it)
SIZES_INPUT = "sizes"
#: at most this many sets of sizes are listed when derive asks which ones were traced
MAX_ASKED = 8
SEARCH = "dim, dim * k, dim // k, dim + k, dim - k, and products of two or three dims (optionally * k or // k)"


@dataclass
class Row:
    """One fitted entry, for the table the command prints."""

    constant: str
    a: int
    b: int
    expression: str


@dataclass
class Derivation:
    text: str
    spec_path: Path
    rows: list[Row] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)  # 'x[2] 320 -> 256 as x_dim2'
    arrays: dict[Path, np.ndarray] = field(default_factory=dict)  # .npy files the run cases read
    notes: list[str] = field(default_factory=list)
    next: str = ""  # the command to run next, as printed


def derive(
    a_path: Path,
    b_path: Path,
    spec_path: Path,
    registry: PluginRegistry,
    shapes: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {}),
) -> Derivation:
    """The spec (checked by the spec loader) that makes ``a_path`` work at any size, to be written at
    ``spec_path``; ``shapes`` are the sizes A and B were traced at, by input name, where the user gives
    them. Raises ModelFileError (3) for a model that cannot be read, PatchError (4) for two graphs that
    do not pair, sizes that cannot be told, or an entry no expression fits."""
    a, b = Export(a_path, "A"), Export(b_path, "B")
    changed = rewrites(a, b, pair(a, b))
    differing = [(rewrite.a[i], rewrite.b[i]) for rewrite in changed for i in rewrite.entries]
    answers = traced_sizes((a.inputs, b.inputs), (a_path, b_path), a.model, differing, shapes)
    if not changed and not _varying_dims(a, b) + answers[0].atoms:
        msg = f"{a_path} and {b_path} have the same input sizes and the same constants: there is nothing to derive"
        raise PatchError(msg, "export B at another input size than A")
    traced, changed, atoms, sizes = _settled(a, b, changed, answers)
    folder = spec_path.resolve().parent
    root = root_needed(spec_path, [a_path, b_path])
    outside = [f"A and B lie outside this spec's project root: apply with --root {root}."] if root else []
    draft = SpecDraft(
        _relative(a_path, folder),
        output_ref(spec_path, f"{a_path.stem}.dynamic.onnx"),
        header=_header(a_path, b_path, spec_path) + outside,
    )
    arrays: dict[Path, np.ndarray] = {}
    if sizes.pairs:
        draft.patches.append(sizes.step(atoms))
        arrays = {folder / sizes.file(spec_path, side): sizes.values(side) for side in (0, 1)}
    draft.patches += [_replace_step(rewrite) for rewrite in changed]
    renames, freed = _renames(a, b)
    draft.patches += renames
    draft.verify += [
        DraftStep("check", {}, ["onnx's checker and strict shape inference on the output"]),
        _run_step(a, b_path, folder, sizes, spec_path, traced),
    ]
    text = checked(draft, spec_path, registry)
    rows = [Row(f"{r.name}[{i}]", r.a[i], r.b[i], r.fits[i].text) for r in changed for i in sorted(r.fits)]
    notes = _notes(atoms, changed, traced)
    return Derivation(text, spec_path, rows, freed, arrays, notes, next_command(spec_path, root))


# -- fitting --------------------------------------------------------------------------------------------
def _settled(
    a: Export, b: Export, changed: list[Rewrite], answers: list[Traced]
) -> tuple[Traced, list[Rewrite], list[Atom], _Sizes]:
    """The one answer the fits settle on: where A and B run at several sets of sizes, they must all give
    the same patches (then the simplest sizes size the run cases), or derive asks which were traced."""
    fitted, failure = [], None
    for traced in answers:
        attempt, atoms = copy.deepcopy(changed), _varying_dims(a, b) + traced.atoms
        sizes = _Sizes(fresh_name(SIZES_INPUT, all_names(a.model)))
        try:
            _fit_entries(attempt, atoms, sizes)
        except PatchError as exc:
            failure = failure or exc
            continue
        fitted.append((traced, attempt, atoms, sizes))
    if not fitted:
        assert failure is not None
        raise failure
    outcomes = {_outcome(attempt, sizes) for _, attempt, _, sizes in fitted}
    if len(outcomes) > 1 or not fitted[0][0].settled:
        raise _ask_sizes(a, b, [traced for traced, *_ in fitted], len(outcomes) > 1)
    return fitted[0]


def _outcome(changed: list[Rewrite], sizes: _Sizes) -> tuple[object, ...]:
    """What a spec's patches hold: each rewrite's entries and the added input's sizes."""
    return (*((r.name, tuple(sorted((i, f.text) for i, f in r.fits.items()))) for r in changed), tuple(sizes.pairs))


def _ask_sizes(a: Export, b: Export, answers: list[Traced], differ: bool) -> PatchError:
    command = f"patchspec derive {shlex.quote(str(a.path))} {shlex.quote(str(b.path))}"
    if differ:
        head = (
            f"derive cannot tell the sizes A and B were traced at: both run at {len(answers)} sets of sizes, "
            "and they give different specs (the constants fit each of them):"
        )
    else:
        head = (
            f"derive found sizes A and B run at, but could not try every other set of sizes within "
            f"{MAX_TRIES} runs or {MAX_SECONDS:.0f} s, so it cannot tell they are the sizes A and B were traced at:"
        )
    lines = [head]
    shared = set.intersection(*(set(traced.notes) for traced in answers)) if differ else set()
    for traced in answers[:MAX_ASKED]:
        told = "; ".join(note.split(" (", 1)[0] for note in traced.notes if note not in shared and "(free" not in note)
        lines.append(f"  {traced.options}" + (f"    # {told}" if told else ""))
    if len(answers) > MAX_ASKED:
        lines.append(f"  ... and {len(answers) - MAX_ASKED} more")
    lines.append("nothing was written")
    hint = f"rerun with the sizes each export was traced at (a line above, or your own): {command} --shape-a ... --shape-b ..."
    return PatchError("\n".join(lines), hint)


def _varying_dims(a: Export, b: Export) -> list[Atom]:
    """``dim(x, axis)`` for every input axis whose fixed size differs between A and B."""
    atoms = []
    for info_a, info_b in zip(a.inputs, b.inputs):
        for axis, (da, db) in enumerate(zip(read_dims(info_a) or [], read_dims(info_b) or [])):
            if isinstance(da, int) and isinstance(db, int) and da != db:
                atoms.append(Atom(f"dim({quote_tensor(info_a.name)}, {axis})", da, db))
    return atoms


class _Sizes:
    """The added input: sizes no input dim holds, one element each (``value(sizes, 0)``, ...)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pairs: list[tuple[int, int]] = []
        self.uses: dict[int, list[str]] = {}

    def atoms(self) -> list[Atom]:
        return [Atom(f"value({quote_tensor(self.name)}, {i})", a, b) for i, (a, b) in enumerate(self.pairs)]

    def values(self, side: int) -> np.ndarray:
        return np.array([pair[side] for pair in self.pairs], dtype=np.int64)

    def file(self, spec_path: Path, side: int) -> str:
        stem = spec_path.name.rsplit(".", 1)[0] if spec_path.suffix in (".yaml", ".yml") else spec_path.name
        return f"{stem}.{self.name}.{'ab'[side]}.npy"

    def step(self, atoms: list[Atom]) -> DraftStep:
        folded = folded_into(self.pairs, atoms)
        assert folded is not None, "_fit_entries refuses sizes that are not folded into an input dim"
        atom, factor = folded
        product = " * ".join(a.text for a in self.atoms())
        comments = [
            f"sizes the inputs do not carry: {atom.text} is {factor} * {product} in A and in B,",
            "so they were flattened into it; feed them at run time (the run cases read them from .npy files)",
        ]
        comments += [
            f"{a.text}: {a.a} in A, {a.b} in B; {', '.join(self.uses.get(i, []))}" for i, a in enumerate(self.atoms())
        ]
        return DraftStep("add_input", {"name": self.name, "dtype": "int64", "shape": [len(self.pairs)]}, comments)


def _fit_entries(changed: list[Rewrite], atoms: list[Atom], sizes: _Sizes) -> None:
    """Fill each rewrite's ``fits``: dims first, then -1 in Reshape shapes, then the added input."""
    for rewrite in changed:
        for i in rewrite.entries:
            found = fit(rewrite.a[i], rewrite.b[i], atoms)
            if found is not None:
                rewrite.fits[i] = found
        if rewrite.reshape:
            free = [i for i in rewrite.entries if i not in rewrite.fits] or rewrite.entries
            worst = max(reversed(free), key=lambda i: rewrite.fits[i].cost if i in rewrite.fits else 99)
            rewrite.fits[worst] = Fit("-1", 0)
    left = [(rewrite, i) for rewrite in changed for i in rewrite.entries if i not in rewrite.fits]
    if not left:
        return
    for pair_ in sorted({(rewrite.a[i], rewrite.b[i]) for rewrite, i in left}):
        if fit(*pair_, atoms + sizes.atoms()) is None:
            sizes.pairs.append(pair_)
    if min(min(pair_) for pair_ in sizes.pairs) < 1 or folded_into(sizes.pairs, atoms) is None:
        raise _no_fit(left, atoms)
    for rewrite, i in left:
        found = fit(rewrite.a[i], rewrite.b[i], atoms + sizes.atoms())
        if found is None:  # each pair fits once sizes holds it, or was put in sizes above
            raise _no_fit(left, atoms)
        rewrite.fits[i] = found
        for slot, atom in enumerate(sizes.atoms()):
            if atom.text in found.text:
                sizes.uses.setdefault(slot, []).append(f"{rewrite.name}[{i}]")


def _no_fit(left: list[tuple[Rewrite, int]], atoms: list[Atom]) -> PatchError:
    lines = ["no expression of the input sizes gives these entries at both A's and B's sizes:"]
    for rewrite in dict.fromkeys(rewrite for rewrite, _ in left):
        entries = "; ".join(f"entry {i}: {rewrite.a[i]} in A, {rewrite.b[i]} in B" for r, i in left if r is rewrite)
        lines.append(
            f"  {rewrite.readers}: constant '{rewrite.name}' is {rewrite.a} in A and {rewrite.b} in B; {entries}"
        )
    lines.append("  and they are not sizes flattened into one input dim, which an added input could carry")
    known = ", ".join(f"{atom.text} is {atom.a} in A, {atom.b} in B" for atom in atoms) or "none: no input dim differs"
    hint = (
        f"derive tries {SEARCH}; the sizes it can use: {known}. "
        "Write this replace_initializer by hand (docs/expressions.md), or export A and B at sizes that are multiples "
        "of the model's strides"
    )
    return PatchError("\n".join(lines), hint)


# -- the spec --------------------------------------------------------------------------------------------
def _header(a_path: Path, b_path: Path, spec_path: Path) -> list[str]:
    return [
        f"Written by 'patchspec derive {a_path.name} {b_path.name}': one network exported at two input sizes.",
        "It computes at run time the constants the trace baked in and frees the input sizes;",
        f"check the comments, then 'patchspec apply {spec_path.name}'. Paths are relative to this file's folder.",
    ]


def _replace_step(rewrite: Rewrite) -> DraftStep:
    shape = [rewrite.fits[i].text if i in rewrite.fits else value for i, value in enumerate(rewrite.a)]
    shape = [int(item) if item == "-1" else item for item in shape]
    comments = [f"{rewrite.readers}: {rewrite.a} in A, {rewrite.b} in B"]
    return DraftStep("replace_initializer", {"initializer": rewrite.name, "shape": shape}, comments)


def _renames(a: Export, b: Export) -> tuple[list[DraftStep], list[str]]:
    """rename_dims on each input's axes that differ; outputs and intermediates are re-derived from them."""
    taken = dim_params(a.model)
    steps, freed = [], []
    for info_a, info_b in zip(a.inputs, b.inputs):
        dims_a, dims_b = read_dims(info_a) or [], read_dims(info_b) or []
        axes = {}
        for axis, (da, db) in enumerate(zip(dims_a, dims_b)):
            if da != db and isinstance(da, int):
                axes[axis] = fresh_name(f"{info_a.name}_dim{axis}", taken)
                taken.add(axes[axis])
                freed.append(f"{info_a.name}[{axis}] {da} -> {db} as {axes[axis]}")
        if axes:
            comment = f"{info_a.name}: {format_dims(dims_a)} in A, {format_dims(dims_b)} in B; the outputs follow"
            steps.append(DraftStep("rename_dims", {"tensor": info_a.name, "axes": axes}, [comment]))
    return steps, freed


def _run_step(a: Export, b_path: Path, folder: Path, sizes: _Sizes, spec_path: Path, traced: Traced) -> DraftStep:
    cases: list[dict[str, Any]] = []
    for side in (0, 1):
        # by A's names (the spec patches A), at the sizes each export was traced at
        inputs: dict[str, Any] = {info.name: shape for info, shape in zip(a.inputs, traced.shapes[side])}
        if sizes.pairs:
            inputs[sizes.name] = {"file": sizes.file(spec_path, side)}
        cases.append({"inputs": inputs})
    cases[1]["against"] = _relative(b_path, folder)  # case 1 keeps the default: the original
    comments = ["case 1 at A's sizes, compared with A (the original); case 2 at B's sizes, compared with B"]
    comments += [f"traced at {note}" for note in traced.notes]
    return DraftStep("run", {"cases": cases}, comments)


def _notes(atoms: list[Atom], changed: list[Rewrite], traced: Traced) -> list[str]:
    notes = [f"traced at {note}" for note in traced.notes]
    used = " ".join(f.text for rewrite in changed for f in rewrite.fits.values())
    for x, y in same_values(atoms):
        if x.text in used or y.text in used:
            notes.append(
                f"{x.text} and {y.text} are both {x.a} in A and {x.b} in B: the fits cannot tell them apart; "
                "check the expressions, or export B with different sizes on these axes"
            )
    return notes


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), folder)).as_posix()


def write(derivation: Derivation) -> None:
    """The .npy files first, then the spec, each written whole and renamed into place."""
    for path, array in derivation.arrays.items():
        _replace(path, _npy_bytes(array))
    _replace(derivation.spec_path, derivation.text.encode("utf-8"))


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["Derivation", "Row", "derive", "write"]
