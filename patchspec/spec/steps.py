"""A validated spec and its steps: plain data, with the positions errors point at."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec.errors import SpecLocation, SpecProblem
from patchspec.spec.catalog import StepKind
from patchspec.spec.reader import YamlDocument


@dataclass(frozen=True)
class Step:
    """One item of ``patches`` or ``verify``: its type, its parameters and where it was written."""

    kind: StepKind  # a patch type (in ``patches``) or a verifier (in ``verify``)
    index: int
    type_name: str
    params: dict[str, Any]
    shorthand_used: bool = False

    @property
    def section(self) -> str:
        """The spec's key the step is listed under: ``patches`` or ``verify``."""
        return self.kind.section

    @property
    def label(self) -> str:
        return f"{self.section}[{self.index}] ({self.type_name})"

    @property
    def path(self) -> tuple[Any, ...]:
        return (self.section, self.index, self.type_name)


@dataclass(frozen=True)
class Spec:
    """A validated spec. Paths are absolute, resolved against the spec's folder."""

    path: Path
    document: YamlDocument
    model: Path
    output: Path
    patches: tuple[Step, ...]
    verify: tuple[Step, ...]

    @property
    def folder(self) -> Path:
        return Path(os.path.abspath(self.path)).parent  # as named: a linked spec (a Bazel sandbox) keeps its folder

    @property
    def text_digest(self) -> str:
        return hashlib.sha256(self.document.text.encode("utf-8")).hexdigest()

    def locate(self, step: Step, key: tuple[Any, ...] = ()) -> str:
        """``file:line:col: patches[1] (rename_dims) > axes.2`` for a key inside a step."""
        return str(location(self.document, step, key))

    def location(self, step: Step, key: tuple[Any, ...] = ()) -> SpecLocation:
        """The :class:`SpecLocation` of a key inside a step: file, line, column, step label, key path."""
        return location(self.document, step, key)

    def problem(self, step: Step, key: tuple[Any, ...], message: str, hint: str | None = None) -> SpecProblem:
        """A located problem inside a step's params, as the loader reports its own."""
        return SpecProblem(location(self.document, step, key), message, hint)


def location(document: YamlDocument, step: Step, key: tuple[Any, ...] = ()) -> SpecLocation:
    """Where a key inside a step of ``document`` was written (a shorthand's value stands for its key)."""
    key = tuple(key)
    return document.location(step.path if step.shorthand_used else step.path + key, label=step.label, key=key)


def locate(document: YamlDocument, step: Step, key: tuple[Any, ...] = ()) -> str:
    """``file:line:col: patches[1] (rename_dims) > axes.2`` for a key inside a step of ``document``."""
    return str(location(document, step, key))


__all__ = ["Spec", "Step", "locate", "location"]
