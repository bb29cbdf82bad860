"""``patchspec plugins``: the installed plugins, what each provides, and the broken or disabled ones."""

from __future__ import annotations

import json

import click

from patchspec.commands.context import State
from patchspec.errors import did_you_mean


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def plugins(state: State, as_json: bool) -> None:
    """List installed plugins: name, version, what each provides, where it was loaded from."""
    from patchspec.spec.catalog import DISABLE_ENV

    registry = state.registry()
    broken = [info.label for info in registry.plugins if info.error]  # by distribution: two may claim one name
    if as_json:
        state.reporter.output(json.dumps([vars(p) for p in [*registry.plugins, *registry.disabled]], indent=2))
        _fail_if_broken(broken)
        return
    for info in registry.plugins:
        kind = "built-in" if info.builtin else info.distribution
        state.reporter.output(f"{info.name} ({kind} {info.version})")
        if info.patch_types:
            state.reporter.output(f"  patch types: {', '.join(info.patch_types)}")
        if info.verifiers:
            state.reporter.output(f"  verifiers:   {', '.join(info.verifiers)}")
        state.reporter.output(f"  from: {info.location or info.module}")
        if info.error:
            state.reporter.output(f"  BROKEN: {info.error}")
            if info.traceback and state.verbosity > 0:
                state.reporter.output("    " + info.traceback.rstrip("\n").replace("\n", "\n    "))
    if registry.disabled:
        names = ", ".join(f"{info.name}" for info in registry.disabled)
        state.reporter.output(f"disabled by {DISABLE_ENV} (installed, not loaded): {names}")
    for name in registry.disabled_unknown:
        installed = [info.name for info in [*registry.plugins, *registry.disabled]]
        state.reporter.error(
            f"warning: {DISABLE_ENV} names '{name}', which is not an installed plugin" + did_you_mean(name, installed)
        )
    _fail_if_broken(broken)


def _fail_if_broken(broken: list[str]) -> None:
    """Exit 5 when a plugin is broken (a bug in that plugin, as ``schema`` says too; the listing above
    says why), so a CI step that runs ``patchspec plugins`` to check its environment fails."""
    if broken:
        from patchspec.errors import PluginError

        names = ", ".join(sorted(broken))
        raise PluginError(
            f"{len(broken)} installed plugin{'s' * (len(broken) != 1)} failed to load: {names}",
            "see BROKEN above (-v for the traceback); reinstall or fix the plugin, or disable it with "
            "PATCHSPEC_DISABLE_PLUGINS",
        )
