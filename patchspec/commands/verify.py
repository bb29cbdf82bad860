"""``patchspec verify``: run a spec's verifiers against its existing output."""

from __future__ import annotations

from pathlib import Path

import click

from patchspec.commands.context import State, verbosity_options


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="Model to verify instead of the spec's output.")
@verbosity_options
@click.pass_obj
def verify(state: State, spec_path: Path, output: Path | None, verbose: int, quiet: bool) -> None:
    """Run only the spec's verifiers against the existing output."""
    from patchspec.run.engine import Engine
    from patchspec.run.report import RunReport
    from patchspec.spec.load import load_spec

    state.more(verbose, quiet)
    registry = state.registry()
    spec = load_spec(spec_path, registry)
    engine = Engine(registry, state.reporter)
    target = (output or spec.output).absolute()
    report = RunReport(str(spec.path), str(spec.model), str(target))
    engine.verify(spec, target, spec.model, report, check_params=True)
    state.echo(f"{target}: verified")
