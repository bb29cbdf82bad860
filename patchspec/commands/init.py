"""``patchspec init``: a commented starter spec for one model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchspec.commands.context import State
from patchspec.errors import UsageError

if TYPE_CHECKING:  # imported inside the command, so that --help loads none of it
    from patchspec.author.init import InitResult


@click.command("init")
@click.argument("model_path", metavar="MODEL", type=click.Path(path_type=Path))
@click.option("--batch", type=click.IntRange(min=1), help="A static batch of this size.")
@click.option("--dynamic", metavar="NAME", help="A symbolic batch with this name (the default: N).")
@click.option(
    "--output",
    "spec_path",
    type=click.Path(path_type=Path),
    help="Where to write the spec (default: MODEL's name with .patchspec.yaml, in the current folder).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing spec.")
@click.pass_obj
def init_command(
    state: State,
    model_path: Path,
    batch: int | None,
    dynamic: str | None,
    spec_path: Path | None,
    force: bool,
) -> None:
    """Write a commented starter spec for MODEL: its batch, dim names to tell apart, and a verify block.

    \b
    It finds which inputs (and which axes) carry the batch, trying set_batch on the graph alone;
    gives integer inputs values where the graph says what they are (a sample rate compared with
    16000 to choose a branch, token ids below an embedding table's row count, a 0/1 mask), and
    flags the others; verifies against the original, one sample at a time when the original's batch
    is fixed or it fails at the batch. Inputs that name the batch apart (tf2onnx's unk__12, unk__13)
    are tied to it by running the original (CPU, weights up to 1 GiB), and the spec quotes the run
    that proved it. Nothing is written when the spec exists (use --force).

    \b
    Examples:
      patchspec init models/det.onnx                 # symbolic batch N
      patchspec init models/det.onnx --batch 8 --output specs/det_b8.yaml
      patchspec apply specs/det_b8.yaml              # next: build and verify

    Exit codes: 0 written, 2 bad options or the spec exists, 3 the model cannot be read,
    4 set_batch cannot batch the model (the reason is printed).
    """
    from patchspec.author.init import draft_spec
    from patchspec.printable import escape_controls

    if batch is not None and dynamic is not None:
        raise UsageError("give --batch N (static) or --dynamic NAME (symbolic), not both")
    spec_path = spec_path or Path(f"{model_path.stem}.patchspec.yaml")
    if spec_path.exists() and not force:
        raise UsageError(
            f"{spec_path} exists; nothing was written", "give another --output, or --force to overwrite it"
        )
    result = draft_spec(model_path, spec_path, batch if batch is not None else (dynamic or "N"), state.registry())
    _say_inputs(state, result)
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(result.text, encoding="utf-8")
    for note in result.notes:
        state.echo(f"flagged: {escape_controls(note)}")
    state.echo(f"wrote {spec_path}; next: {result.next}")


def _say_inputs(state: State, result: InitResult) -> None:
    """One line per input: its batch axis, how it was decided, and the values it is given."""
    from patchspec.printable import escape_controls

    names = {row.name: escape_controls(row.name) for row in result.rows}  # a name cannot forge a line
    width = max([len("input")] + [len(name) for name in names.values()])
    state.echo(f"{'input'.ljust(width)}  batch axis  how it was decided")
    for row in result.rows:
        axis = "-" if row.axis is None else str(row.axis)
        values = f"; values: {row.values}" if row.values else ""
        state.echo(f"{names[row.name].ljust(width)}  {axis.ljust(10)}  {row.how}{values}")
