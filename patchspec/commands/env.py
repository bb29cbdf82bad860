"""``patchspec env``: versions of patchspec, onnx and ONNX Runtime, and the available providers."""

from __future__ import annotations

import json

import click

from patchspec.commands.context import State


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def env(state: State, as_json: bool) -> None:
    """Versions of patchspec, onnx and every ONNX Runtime distribution; available providers."""
    from patchspec.ort.environment import environment, environment_lines

    if as_json:
        state.reporter.output(json.dumps(environment(), indent=2))
        return
    for line in environment_lines():
        state.reporter.output(line)
