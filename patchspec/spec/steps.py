"""A validated spec and its steps: plain data, with the positions errors point at."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec.errors import SpecProblem
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

    def problem(self, step: Step, key: tuple[Any, ...], message: str, hint: str | None = None) -> SpecProblem:
        """A located problem inside a step's params, as the loader reports its own."""
        key = tuple(key)
        doc_path = step.path if step.shorthand_used else step.path + key
        where = step.label + (" > " + ".".join(str(k) for k in key) if key else "")
        problem: SpecProblem = self.document.problem(doc_path, where, message, hint)
        return problem


def locate(document: YamlDocument, step: Step, key: tuple[Any, ...] = ()) -> str:
    """``file:line:col: patches[1] (rename_dims) > axes.2`` for a key inside a step of ``document``."""
    key = tuple(key)
    doc_path = step.path if step.shorthand_used else step.path + key
    pos = document.position(doc_path)
    where = step.label + (" > " + ".".join(str(k) for k in key) if key else "")
    return f"{document.path}:{pos.line}:{pos.column}: {where}"


__all__ = ["Spec", "Step", "locate"]
