"""The hooks a patchspec plugin implements.

A plugin is a module (or object) registered under the ``patchspec`` entry-point group. It
implements one or both hooks below with :data:`hookimpl`. Hooks only *collect*: patchspec's engine
decides the order in which patches and verifiers run (the order of the spec), never pluggy.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

NAME = "patchspec"  #: the pluggy project name and the entry-point group

_spec = pluggy.HookspecMarker(NAME)
hookimpl = pluggy.HookimplMarker(NAME)


@_spec
def register_patch_types(register: Callable[[type], None]) -> None:
    """Register the patch types this plugin provides.

    Call ``register(SomePatch)`` once per :class:`patchspec.PatchType` subclass. ``SomePatch.name``
    is the key users write in a spec's ``patches`` list. Built-in names are bare (``set_batch``);
    a third-party plugin's names must be ``<entry-point name>.<type>`` (``acme.fuse_gelu``).
    A name registered twice is an error naming both plugins.

    :param register: callback taking a :class:`patchspec.PatchType` subclass.

    Called once per run, after every plugin is loaded and before the spec is validated.

    .. versionadded:: 0.1
    """


@_spec
def register_verifiers(register: Callable[[type], None]) -> None:
    """Register the verifiers this plugin provides.

    Call ``register(SomeVerifier)`` once per :class:`patchspec.Verifier` subclass. Naming rules are
    those of :func:`register_patch_types`.

    :param register: callback taking a :class:`patchspec.Verifier` subclass.

    Called once per run, after every plugin is loaded and before the spec is validated.

    .. versionadded:: 0.1
    """


__all__ = ["NAME", "hookimpl", "register_patch_types", "register_verifiers"]
