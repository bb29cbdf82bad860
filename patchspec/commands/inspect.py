"""``patchspec inspect``: a model's inputs, outputs, shape lint, weights and metadata; ``--suggest``
lists the constants that bake the export's input sizes."""

from __future__ import annotations

import json
from pathlib import Path

import click

from patchspec.commands.context import State
from patchspec.errors import ModelFileError, PatchspecError


@click.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(path_type=Path))
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    metavar="NAME=D0,D1,...",
    help="Input shape for the lint (repeatable); default: 1 on axis 0, 64, 96, ... elsewhere. With --suggest: "
    "the sizes the export was traced at, for its symbolic dims.",
)
@click.option(
    "--value",
    "values",
    multiple=True,
    metavar="NAME=V[,V...]",
    help="Value an input is fed for the lint (repeatable), e.g. --value sr=16000; default: what the graph "
    "says an integer input needs, else random.",
)
@click.option("--all", "unfold", is_flag=True, help="Unfold every subgraph, dim_param use and list (also -v).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (always every detail).")
@click.option(
    "--suggest",
    is_flag=True,
    help="List the shape constants that bake the export's input sizes, and the spec lines that free them "
    "(reads the graph only; no lint run).",
)
@click.pass_obj
def inspect_command(
    state: State,
    model_path: Path,
    shapes: tuple[str, ...],
    values: tuple[str, ...],
    unfold: bool,
    as_json: bool,
    suggest: bool,
) -> None:
    """Inputs, outputs, lint findings, ops, weights, metadata, dim_params, external data, subgraphs.

    The lint runs the model on ONNX Runtime at the given (or default) input shapes and reports every
    dim_param that is bound to different sizes, with the patch that fixes it. Never writes anything.
    When the external data is missing (or a Git LFS pointer), the graph is still shown, the lint is
    skipped and the missing files are listed at the end (exit 3).

    \b
    --suggest instead finds constants a tracer baked from the export's input sizes (a Reshape to
    [1, 85, 96] for a 64x96 image at stride 8) and prints the rename_dims / replace_initializer
    lines that make them follow the inputs, e.g.:
      patchspec inspect models/det.onnx --suggest
    """
    from patchspec.ort.lint.probe_inputs import parse_shape_options, parse_value_options
    from patchspec.ort.lint.report import format_inspection, inspect_model

    if suggest:
        _suggest(state, model_path, parse_shape_options(shapes), as_json)
        return
    try:
        data = inspect_model(model_path, parse_shape_options(shapes), parse_value_options(values))
    except PatchspecError as exc:
        if not as_json:
            raise
        # --json always prints JSON on stdout: the error as data, with the same exit code
        error = {
            "model": str(model_path),
            "error": exc.to_json(),
        }
        click.echo(json.dumps(error, indent=2))
        raise click.exceptions.Exit(exc.exit_code) from None
    state.reporter.output(
        json.dumps(data, indent=2) if as_json else format_inspection(data, unfold or state.verbosity > 0)
    )
    problem = data["external_data_problem"]
    if problem and as_json:
        raise click.exceptions.Exit(problem["exit_code"])
    if problem:  # the missing files, once, at the end (on stderr, as any error)
        raise ModelFileError(problem["message"], problem["hint"])


def _suggest(state: State, model_path: Path, shapes: dict[str, list[int]], as_json: bool) -> None:
    """``--suggest``: the constants that bake the export's sizes, and the spec lines that free them."""
    from patchspec.author.suggest import format_suggestions, suggest_report
    from patchspec.printable import one_line_strings

    data = suggest_report(model_path, shapes)
    text = json.dumps(data, indent=2) if as_json else format_suggestions(one_line_strings(data))
    state.reporter.output(text)  # the model's names, escaped: none can steer the terminal or start a line
