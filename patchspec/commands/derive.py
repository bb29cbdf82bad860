"""``patchspec derive``: the spec that makes one export work at any input size, from two exports at
two sizes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchspec.commands.context import State
from patchspec.errors import UsageError

if TYPE_CHECKING:  # imported inside the command, so that --help loads none of it
    from patchspec.author.derive import Derivation


@click.command("derive")
@click.argument("a_path", metavar="A", type=click.Path(path_type=Path))
@click.argument("b_path", metavar="B", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "spec_path",
    type=click.Path(path_type=Path),
    help="Where to write the spec (default: A's name with .patchspec.yaml, in the current folder).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing spec (and its .npy files).")
@click.option(
    "--shape-a",
    "shapes_a",
    multiple=True,
    metavar="NAME=D0,D1,...",
    help="The sizes A was traced at, for an input with symbolic dims (repeatable); default: found by running A and B.",
)
@click.option(
    "--shape-b",
    "shapes_b",
    multiple=True,
    metavar="NAME=D0,D1,...",
    help="The sizes B was traced at, as --shape-a.",
)
@click.pass_obj
def derive_command(
    state: State,
    a_path: Path,
    b_path: Path,
    spec_path: Path | None,
    force: bool,
    shapes_a: tuple[str, ...],
    shapes_b: tuple[str, ...],
) -> None:
    """Write the spec that makes model A work at any input size, from A and B: one network exported
    (traced) at two input sizes.

    \b
    Tracers bake sizes into constants (a Reshape to [1, 11, 2, 15, 2, -1] for an 11x15 grid). derive
    pairs the two graphs node for node, fits each integer constant that differs as an expression of
    the input dims (dim(x, 2) // 8, dim(x, 2) * dim(x, 3) // 64, or -1 in a Reshape), adds an int64
    input for sizes no input dim holds (a merger's grid: value(sizes, 0)), and frees the input dims
    that differ. The spec has replace_initializer and rename_dims patches, and a verify block:
    check, and run at A's sizes against A and at B's sizes against B.

    \b
    Inputs symbolic in both (torch's dynamic_axes, where the code used Python ints: feats [1, 'T', 40])
    hide the sizes the trace baked: derive finds them by running A and B at sizes made from the
    constants that differ, or takes them from --shape-a / --shape-b.

    \b
    Example:
      patchspec derive det_640x640.onnx det_480x736.onnx --output specs/det_any.yaml
      patchspec apply specs/det_any.yaml             # next: build and verify
      patchspec derive speech_a.onnx speech_b.onnx --shape-a feats=1,12,40 --shape-b feats=1,20,40

    \b
    derive never guesses: where A and B run at several sets of sizes that give different specs (a
    merger whose constants fit a 22x30 grid and an 11x60 one), it prints each set as --shape-a /
    --shape-b options, ready to paste, and writes nothing until the sizes are given.

    Exit codes: 0 written, 2 bad command line or the spec exists (use --force), 3 a model cannot be
    read, 4 the graphs differ in structure, an entry fits no expression (the nodes are named), or
    the traced sizes cannot be told (give --shape-a / --shape-b).
    """
    from patchspec.author.derive import derive, write

    spec_path = _spec_path(a_path, b_path, spec_path, force)
    shapes = (_shapes("--shape-a", shapes_a), _shapes("--shape-b", shapes_b))
    result = derive(a_path, b_path, spec_path, state.registry(), shapes)
    existing = [str(path) for path in result.arrays if path.exists()]
    if existing and not force:
        raise UsageError(f"{', '.join(existing)} exists; nothing was written", "give another --output, or --force")
    write(result)
    _say(state, result, spec_path)


def _spec_path(a_path: Path, b_path: Path, spec_path: Path | None, force: bool) -> Path:
    """Where the spec goes (``--output``, else beside the working folder), refused before any model is read."""
    if a_path.resolve() == b_path.resolve():
        raise UsageError(f"A and B are the same file ({a_path}): give two exports of the model at two input sizes")
    spec_path = spec_path or Path(f"{a_path.stem}.patchspec.yaml")
    if spec_path.is_dir():
        raise UsageError(f"--output {spec_path} is a folder: give the spec's file name")
    if spec_path.exists() and not force:
        raise UsageError(
            f"{spec_path} exists; nothing was written", "give another --output, or --force to overwrite it"
        )
    return spec_path


def _say(state: State, result: Derivation, spec_path: Path) -> None:
    """The constants fitted (a table), the dims freed, the notes and what was written."""
    if result.rows:
        width = max(len("constant"), *(len(row.constant) for row in result.rows))
        state.echo(f"{'constant'.ljust(width)}  {'A -> B':<14}  expression")
        for row in result.rows:
            state.echo(f"{row.constant.ljust(width)}  {f'{row.a} -> {row.b}':<14}  {row.expression}")
    for line in result.freed:
        state.echo(f"freed input dim {line}")
    for note in result.notes:
        state.echo(f"note: {note}")
    files = "".join(f", {path.name}" for path in result.arrays)
    state.echo(f"wrote {spec_path}{files}; next: {result.next}")


def _shapes(flag: str, values: tuple[str, ...]) -> dict[str, list[int]]:
    from patchspec.ort.lint.probe_inputs import parse_shape_options

    try:
        return parse_shape_options(values)
    except UsageError as exc:  # its message names --shape
        raise UsageError(exc.detail.replace("--shape ", f"{flag} ", 1), exc.hint) from None
