"""Which plugins this process sees, from metadata alone: nothing here imports a plugin, pluggy or the
contract, so an up-to-date ``apply`` (``run/noop``) can ask which plugins a build would use.

Plugins are the ``patchspec`` entry points installed, less those ``PATCHSPEC_DISABLE_PLUGINS``
names, plus those a test hands in (``in_process_plugin``, which ``patchspec.testing.registered``
uses)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata

from patchspec.plugin.hookspecs import NAME
from patchspec.spec.catalog import DISABLE_ENV

BUILTIN_DISTRIBUTION = "patchspec"
#: the distribution a plugin handed in by a test (``patchspec.testing.registered``) is listed with
IN_PROCESS_DISTRIBUTION = "(registered in process)"

#: (name, plugin) pairs that every PluginRegistry.load() adds, while ``in_process_plugin`` is active.
#: Empty unless a test (``patchspec.testing.registered``) put something there.
_IN_PROCESS: list[tuple[str, object]] = []


@contextmanager
def in_process_plugin(name: str, plugin: object) -> Iterator[None]:
    """Make ``plugin`` (a module or object with hookimpls) part of every registry loaded meanwhile.

    It replaces an installed entry point of the same ``name``, so a plugin's own tests can run
    whether or not the plugin is installed.
    """
    pair = (name, plugin)
    _IN_PROCESS.append(pair)
    try:
        yield
    finally:
        _IN_PROCESS.remove(pair)


#: each distribution's (name, version), read once: ``Distribution.name`` and ``.version`` parse its
#: METADATA file on every access (about 0.4 ms each), and a registry asks for every entry point's
_NAME_AND_VERSION: weakref.WeakKeyDictionary[metadata.Distribution, tuple[str, str]] = weakref.WeakKeyDictionary()


def distribution_of(entry_point: metadata.EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that installed ``entry_point`` ("?" when unknown)."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return ("?", "?")
    if dist not in _NAME_AND_VERSION:
        read = dist.metadata  # one parse for both
        _NAME_AND_VERSION[dist] = (read["Name"], read["Version"])
    return _NAME_AND_VERSION[dist]


def disabled_names() -> set[str]:
    """The entry-point names listed in PATCHSPEC_DISABLE_PLUGINS."""
    return {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def installed_plugins() -> dict[str, str] | None:
    """Each installed plugin's entry point -> its distribution and version, and the plugins disabled:
    what a build used, as a no-op's record keeps it (``run/noop``). None while a test registers
    plugins in process: no record can describe those."""
    if _IN_PROCESS:
        return None
    found = {f"{e.name} = {e.value}": " ".join(distribution_of(e)) for e in metadata.entry_points(group=NAME)}
    found[DISABLE_ENV] = ",".join(sorted(disabled_names()))
    return found


__all__ = [
    "BUILTIN_DISTRIBUTION",
    "IN_PROCESS_DISTRIBUTION",
    "disabled_names",
    "distribution_of",
    "in_process_plugin",
    "installed_plugins",
]
