"""``patchspec validate``: check specs against the schema and each plugin's rules, then, where the spec's
model is there, against its graph (names, shapes; the patches run on it, nothing is written); every
problem of every spec at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from patchspec.commands.context import State, limit_option, root_option
from patchspec.errors import PatchspecError, SpecError, SpecProblem, UsageError, exit_code_of_all, sorted_problems

if TYPE_CHECKING:  # imported where used: `validate --help` stays fast
    from patchspec.host.registry import PluginRegistry


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
    written). Every problem of every spec is reported at once, sorted by line; the exit code is the
    kind of mistake (2 the spec, 3 a file, 4 a patch, 5 a bug; several kinds: 5, then 2, 3, 4).

    \b
    Examples:
      patchspec validate specs/*.yaml             the pre-commit hook's check
      patchspec validate --no-model specs/x.yaml  the spec alone (no model at hand)
    """
    registry = state.registry()
    checked = [(path, check_spec(path, registry, root, with_model=not no_model)) for path in specs]
    found = [error for _, errors in checked for error in errors]
    if as_json:
        results = [
            {
                "spec": str(path),
                "ok": not errors,
                "problems": [_problem_json(path, c, p) for c, p in sorted_problems(errors)],
            }
            for path, errors in checked
        ]
        state.reporter.output(json.dumps({"specs": results}, indent=2))
        if found:
            raise click.exceptions.Exit(exit_code_of_all(found))
        return
    for path, errors in checked:
        if not errors:
            state.echo(f"{path}: ok")
    if found:  # every spec's problems, each spec's sorted by line, with the exit code of their kinds
        error = UsageError("\n".join(str(problem) for _, errors in checked for _, problem in sorted_problems(errors)))
        error.exit_code = exit_code_of_all(found)
        error.plugin_tracebacks = tuple(dict.fromkeys(t for p in found for t in p.plugin_tracebacks))
        raise error


def check_spec(path: Path, registry: PluginRegistry, root: Path | None, *, with_model: bool) -> list[PatchspecError]:
    """Every problem of the spec at ``path``, in one pass: the spec's own (schema, unknown types, params,
    files), then, where its model is there, the model's (names, shapes, patches that cannot apply) on
    the steps that were valid."""
    from patchspec.spec.load import read_spec

    try:
        reading = read_spec(path, registry, root=root)
    except PatchspecError as exc:  # nothing could be read (YAML, the format version, the envelope's shape)
        return [exc]
    errors: list[PatchspecError] = [SpecError(list(reading.problems))] if reading.problems else []
    spec = reading.spec
    if spec is not None and with_model and spec.model.is_file():
        from patchspec.run.engine import Engine
        from patchspec.run.model_checks import model_problems
        from patchspec.run.reporter import Reporter

        engine = Engine(registry, Reporter.to(lambda _: None), root=root)
        errors += model_problems(engine, spec, reading.left_out, reading.invalid)
    return errors


def _problem_json(path: Path, exit_code: int, problem: SpecProblem) -> dict[str, Any]:
    """A problem as ``validate --json`` gives it: its fields (the spec's file where it names no place)
    and the exit code of its kind."""
    return {**problem.to_json(), "file": problem.file or str(path), "exit_code": exit_code}
