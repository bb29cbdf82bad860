"""patchspec-acme: an example third-party patchspec plugin.

Registered under the ``patchspec`` entry-point group as ``acme``, so every type it provides is
named ``acme.<type>``. This module only registers; each type lives in its own module.
"""

from collections.abc import Callable

from patchspec import hookimpl

from .max_nodes import MaxNodesVerifier
from .strip_doc_strings import StripDocStringsPatch

__version__ = "0.1.0"


@hookimpl
def register_patch_types(register: Callable[[type], None]) -> None:
    register(StripDocStringsPatch)


@hookimpl
def register_verifiers(register: Callable[[type], None]) -> None:
    register(MaxNodesVerifier)
