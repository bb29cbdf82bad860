"""``patchspec plan``: what each patch of a spec would change in the model; writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import click

from patchspec.commands.context import State, limit_option, root_option, verbosity_options
from patchspec.errors import PatchError, SpecError, combined


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--model", type=click.Path(path_type=Path), help="Input model instead of the spec's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@root_option
@verbosity_options
@limit_option
@click.pass_obj
def plan(
    state: State, spec_path: Path, model: Path | None, as_json: bool, root: Path | None, verbose: int, quiet: bool
) -> None:
    """Load the model and say what each patch would change, and each input's and output's shape
    before -> after; -v adds each patch's details. Writes nothing."""
    from patchspec.run.engine import Engine
    from patchspec.run.reporter import Reporter
    from patchspec.spec.load import load_spec

    state.more(verbose, quiet)
    registry = state.registry()
    spec = load_spec(spec_path, registry, root=root)
    engine = Engine(registry, Reporter.to(lambda _: None) if as_json else state.reporter, root=root)
    try:
        report = engine.plan(spec, model)
    except (SpecError, PatchError) as exc:
        if model is not None:
            raise
        # the first step's problems stop the plan: find every step's, as validate does, and say them all
        from patchspec.run.model_checks import model_problems

        raise combined(model_problems(engine, spec) or [exc]) from None
    if as_json:
        state.reporter.output(json.dumps(report.to_json(), indent=2))
