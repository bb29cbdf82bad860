"""``patchspec validate``: check specs against the schema and each plugin's rules; no model is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from patchspec.commands.context import State, limit_option, root_option
from patchspec.errors import PatchspecError, SpecError, UsageError


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@root_option
@limit_option
@click.pass_obj
def validate(state: State, specs: tuple[Path, ...], as_json: bool, root: Path | None) -> None:
    """Check SPEC(s) against the schema and each plugin's rules; no model is read."""
    from patchspec.spec.load import load_spec

    registry = state.registry()
    problems: list[PatchspecError] = []
    results: list[dict[str, Any]] = []
    for path in specs:
        try:
            load_spec(path, registry, root=root)
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


def problems_of(exc: PatchspecError) -> list[dict[str, Any]]:
    """The error as data: each problem of an invalid spec, or the one error, with its fields."""
    if isinstance(exc, SpecError):
        return [problem.to_json() for problem in exc.problems]
    return [exc.to_json()]
