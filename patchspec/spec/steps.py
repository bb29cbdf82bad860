"""A validated spec and its steps: plain data, with the positions errors point at."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec.errors import SpecProblem, Where, step_where
from patchspec.spec.reader import YamlDocument


@dataclass(frozen=True)
class Step:
    """One item of ``patches`` or ``verify``: its type, its parameters and where it was written."""

    section: str  # "patches" | "verify"
    index: int
    type_name: str
    params: dict[str, Any]
    shorthand_used: bool = False

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
        return locate(self.document, step, key)

    def location(self, step: Step, key: tuple[Any, ...] = ()) -> Where:
        """The :class:`Where` of a key inside a step: file, line, column, step label, key path."""
        return location(self.document, step, key)

    def problem(self, step: Step, key: tuple[Any, ...], message: str, hint: str | None = None) -> SpecProblem:
        """A located problem inside a step's params, as the loader reports its own."""
        key = tuple(key)
        doc_path = step.path if step.shorthand_used else step.path + key
        where = step_where(step.label, key)
        pos = self.document.position(doc_path)
        return SpecProblem(pos.line, pos.column, where, message, hint, file=str(self.document.path), key=key)


def location(document: YamlDocument, step: Step, key: tuple[Any, ...] = ()) -> Where:
    """Where a key inside a step of ``document`` was written."""
    key = tuple(key)
    pos = document.position(step.path if step.shorthand_used else step.path + key)
    return Where(str(document.path), pos.line, pos.column, step.label, key)


def locate(document: YamlDocument, step: Step, key: tuple[Any, ...] = ()) -> str:
    """``file:line:col: patches[1] (rename_dims) > axes.2`` for a key inside a step of ``document``."""
    return str(location(document, step, key))


__all__ = ["Spec", "Step", "locate", "location"]
