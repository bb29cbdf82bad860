"""``patchspec verify``: run a spec's verifiers against its existing output."""

from __future__ import annotations

import os
from pathlib import Path

import click

from patchspec.commands.context import State, limit_option, native_code_option, root_option, verbosity_options


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="Model to verify instead of the spec's output.")
@native_code_option
@root_option
@verbosity_options
@limit_option
@click.pass_obj
def verify(state: State, spec_path: Path, output: Path | None, root: Path | None, verbose: int, quiet: bool) -> None:
    """Run only the spec's verifiers against the existing output."""
    from patchspec.printable import shown_path
    from patchspec.run.engine import Engine
    from patchspec.run.report import RunReport
    from patchspec.spec.confine import ROOT_HINT, Root, check_model_path, spec_path_error
    from patchspec.spec.load import load_spec

    state.more(verbose, quiet)
    registry = state.registry()
    spec = load_spec(spec_path, registry, root=root)
    engine = Engine(registry, state.reporter, root=root)
    confined = Root.of(spec.path, root)  # the spec's model and output are read: both inside its root
    check_model_path(spec, confined)
    if output is None and not confined.holds(spec.output):
        refused = f"resolves to {os.path.realpath(spec.output)}, outside the project root {confined.describe()}"
        raise spec_path_error(spec, "output", refused, ROOT_HINT)
    target = (output or spec.output).absolute()
    report = RunReport(str(spec.path), str(spec.model), str(target))
    engine.verify(spec, target, spec.model, report, check_params=True)
    state.echo(f"{shown_path(target)}: verified")
