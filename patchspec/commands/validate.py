"""``patchspec validate``: check specs against the schema and each plugin's rules, then, where the spec's
model is there, against its graph (names, shapes; the patches run on it, nothing is written)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from patchspec.commands.context import State, limit_option, root_option
from patchspec.errors import PatchspecError, SpecError, UsageError

if TYPE_CHECKING:  # imported where used: `validate --help` stays fast
    from patchspec.host.registry import PluginRegistry
    from patchspec.spec.steps import Spec


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--no-model",
    is_flag=True,
    help="Check the spec alone, without reading its model (names and shapes are then checked by apply).",
)
@root_option
@limit_option
@click.pass_obj
def validate(state: State, specs: tuple[Path, ...], as_json: bool, no_model: bool, root: Path | None) -> None:
    """Check SPEC(s) against the schema and each plugin's rules; then, where a spec's model is there,
    against the model's graph: input and output names, run cases' shapes, and whether each patch
    applies (the patches run on the graph in memory; weights in data files are not read, nothing is
    written). Every spec is checked, and every problem of one check is reported at once.

    \b
    Examples:
      patchspec validate specs/*.yaml             the pre-commit hook's check
      patchspec validate --no-model specs/x.yaml  the spec alone (no model at hand)
    """
    from patchspec.spec.load import load_spec

    registry = state.registry()
    problems: list[PatchspecError] = []
    results: list[dict[str, Any]] = []
    for path in specs:
        try:
            spec = load_spec(path, registry, root=root)
            if not no_model and spec.model.is_file():
                check_against_model(spec, registry, root)
            results.append({"spec": str(path), "ok": True, "problems": []})
            if not as_json:
                state.echo(f"{path}: ok")
        except PatchspecError as exc:
            problems.append(exc)
            results.append({"spec": str(path), "ok": False, "problems": problems_of(exc)})
    if as_json:
        state.reporter.output(json.dumps({"specs": results}, indent=2))
        if problems:
            raise click.exceptions.Exit(problems[0].exit_code)
        return
    if problems:  # every spec's problems, with the first one's exit code (5 for a plugin's fault)
        error = UsageError("\n".join(str(p) for p in problems))
        error.exit_code = problems[0].exit_code
        error.plugin_tracebacks = tuple(dict.fromkeys(t for p in problems for t in p.plugin_tracebacks))
        raise error


def check_against_model(spec: Spec, registry: PluginRegistry, root: Path | None) -> None:
    """What ``plan`` does, quietly: load the graph, run each patch (each checks its params against the
    model first), then each verifier's ``check_model`` on the patched graph. Raises what apply would."""
    from patchspec.run.engine import Engine
    from patchspec.run.report import RunReport
    from patchspec.run.reporter import Reporter

    engine = Engine(registry, Reporter.to(lambda _: None), root=root)
    loaded = engine.load_input(spec)
    engine.patch(loaded, RunReport(str(spec.path), str(loaded.model_path), str(loaded.output_path), status="planned"))


def problems_of(exc: PatchspecError) -> list[dict[str, Any]]:
    """The error as data: each problem of an invalid spec, or the one error, with its fields."""
    if isinstance(exc, SpecError):
        return [problem.to_json() for problem in exc.problems]
    return [exc.to_json()]
