"""``patchspec schema``: the JSON Schema of specs (core and every installed plugin), for editors."""

from __future__ import annotations

import json
from pathlib import Path

import click

from patchspec.commands.context import State
from patchspec.errors import ModelFileError, PluginError


@click.command()
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the schema to this file (its folders are created) instead of printing it.",
)
@click.pass_obj
def schema(state: State, output: Path | None) -> None:
    """Print the JSON Schema of specs (core + every installed plugin), for editors.

    \b
    For an editor with the YAML language server, write it once, then name it in each spec
    (the path is relative to the spec):
      patchspec schema --output .patchspec/schema.json
      # yaml-language-server: $schema=../.patchspec/schema.json

    A plugin that fails to load is left out with a warning on stderr, and the exit status is 5:
    the schema is incomplete (disable the plugin with PATCHSPEC_DISABLE_PLUGINS to leave it out on purpose).
    """
    from patchspec.spec.catalog import DISABLE_ENV
    from patchspec.spec.load import combined_schema

    registry = state.registry()
    text = json.dumps(combined_schema(registry), indent=2, sort_keys=True)
    if output is None:
        click.echo(text)
    else:
        from patchspec.run.atomic import write_text_atomically

        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(output, text + "\n")
        except OSError as exc:
            raise ModelFileError(f"{output}: cannot write the schema: {exc.strerror or exc}") from exc
        state.echo(f"wrote {output}")
    broken = registry.broken()
    if broken:
        lines = [f"warning: the schema above leaves out {len(broken)} plugin(s) that failed to load:"]
        lines += [f"  {info.label}: {info.error}" for info in broken]
        names = ",".join(info.name for info in broken)
        hint = (
            f"fix or reinstall them ('patchspec plugins' shows why), or leave them out on purpose: "
            f"{DISABLE_ENV}={names} patchspec schema"
        )
        raise PluginError(
            "\n".join(lines), hint, "\n".join(info.traceback for info in broken if info.traceback) or None
        )
