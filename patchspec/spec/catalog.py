"""The kinds of step, and what the spec loader asks of the plugins that provide them.

The registry that finds, loads and calls plugins (``patchspec.host.registry``) sits above this
package in CONTRIBUTING's map: it runs plugin code, and the plugin boundary reads shapes. The loader
needs only this much of it, a :class:`Catalog` of patch types and verifiers by name, so a spec is
validated against whatever registry it is handed (the real one, or a test's).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol

#: the environment variable that keeps installed plugins from loading (comma-separated entry-point names)
DISABLE_ENV = "PATCHSPEC_DISABLE_PLUGINS"


class StepKind(str, Enum):
    """What a step is: a patch (in ``patches:``) or a verification (in ``verify:``)."""

    PATCH_TYPE = "patch type"
    VERIFIER = "verifier"

    def __str__(self) -> str:  # "patch type" in messages, as before kinds were an enum
        return self.value

    @classmethod
    def of_section(cls, section: str) -> StepKind:
        """The kind of the steps in a spec's ``section`` (``patches`` or ``verify``)."""
        return cls.PATCH_TYPE if section == "patches" else cls.VERIFIER

    @property
    def section(self) -> str:
        return "patches" if self is StepKind.PATCH_TYPE else "verify"


class StepGuard(Protocol):
    """One step's patch type or verifier, called through the plugin boundary."""

    def schema_errors(self, params: Any) -> list[Any]: ...

    def check_params(self, params: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]: ...

    def dependencies(self, params: dict[str, Any]) -> list[str]: ...


class MissingPlugin(Protocol):
    """An installed plugin that would provide a type but is disabled or broken."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def distribution(self) -> str: ...

    @property
    def disabled(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def traceback(self) -> str | None: ...


class Catalog(Protocol):
    """The patch types and verifiers a spec may use, by name (classes with ``params_schema``,
    ``shorthand`` and ``description``), and a guard to call each through."""

    @property
    def patch_types(self) -> Mapping[str, Any]: ...

    @property
    def verifiers(self) -> Mapping[str, Any]: ...

    def guard(self, kind: str, name: str, where: str = "") -> StepGuard: ...

    def why_missing(self, type_name: str) -> MissingPlugin | None: ...


__all__ = ["DISABLE_ENV", "Catalog", "MissingPlugin", "StepGuard", "StepKind"]
