"""Errors patchspec reports to users, each with the exit code of the contract.

Every error carries a message written for the user (lowercase, no trailing period, what was
expected, what was found, where, and what to do next). The CLI prints ``str(error)`` and exits with
``error.exit_code``; no traceback unless ``-v``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EXIT_OK = 0
EXIT_VERIFY_FAILED = 1
EXIT_INVALID_SPEC = 2
EXIT_BAD_FILE = 3
EXIT_PATCH_FAILED = 4
EXIT_INTERNAL = 5
#: `apply --check`: some output is missing or would be rebuilt (nothing was written)
EXIT_STALE = 6
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


@dataclass(frozen=True)
class Where:
    """The place in a spec an error points at: file, line and column, the step, the key inside it.

    ``str(where)`` is ``spec.yaml:5:9: patches[1] (rename_dims) > axes.2``; ``to_json()`` the fields.
    """

    file: str
    line: int
    column: int
    step: str = ""  # "patches[1] (rename_dims)"; empty for the spec's own keys
    key: tuple[Any, ...] = ()

    def __str__(self) -> str:
        place = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        label = step_where(self.step, self.key) if self.step else ""
        return ": ".join(part for part in (place, label) if part)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column, "step": self.step, "key": list(self.key)}


class PatchspecError(Exception):
    """Base class: a failure patchspec explains to the user.

    Errors are data (since plugin API 1.2): ``detail`` is what went wrong, ``where`` the place in the
    spec (a :class:`Where`, or None), ``key`` the key path inside the step, ``node`` the graph node
    it concerns, ``hint`` what to do. ``message`` is the one line ``where: detail`` the reporter
    prints, and ``to_json()`` gives every field for ``--json`` and ``--report``.
    """

    exit_code = EXIT_INTERNAL
    #: tracebacks of plugin code behind this error (a plugin that raised or failed to import);
    #: ``-v`` prints these instead of patchspec's own traceback, which would not help
    plugin_tracebacks: tuple[str, ...] = ()

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        where: Where | None = None,
        key: tuple[Any, ...] = (),
        node: str | None = None,
    ) -> None:
        self.detail = message
        self.message = f"{where}: {message}" if where is not None else message
        super().__init__(self.message)
        self.hint = hint
        self.where = where
        self.key = tuple(key) or (where.key if where is not None else ())
        self.node = node

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message

    def to_json(self) -> dict[str, Any]:
        """Every field, for ``--json`` and ``--report``."""
        return {
            "exit_code": self.exit_code,
            "message": self.message,
            "detail": self.detail,
            "where": self.where.to_json() if self.where is not None else None,
            "key": list(self.key),
            "node": self.node,
            "hint": self.hint,
        }


class VerificationFailed(PatchspecError):
    """A verifier rejected the patched model; nothing was written."""

    exit_code = EXIT_VERIFY_FAILED


class VerifierFailed(PatchspecError):
    """A verifier stopped with ``context.fail``: its verdict is "failed" (exit 1), not an error of the run.

    Not a :class:`VerificationFailed`, which is the run's verdict over every verifier: this is one
    verifier's, caught by the engine (since plugin API 1.2; before, a subclass of it).

    The engine catches it and reports the verifier as failed, like one that returned a failed
    :class:`VerifyResult`; ``summary`` is the plugin's message, ``key`` where in its params it points.
    """

    exit_code = EXIT_VERIFY_FAILED

    def __init__(
        self,
        where: str | Where,
        summary: str,
        key: tuple[Any, ...] = (),
        hint: str | None = None,
        *,
        node: str | None = None,
    ) -> None:
        if isinstance(where, Where):
            super().__init__(summary, hint, where=where, key=key, node=node)
        else:  # a place already written out (1.1)
            super().__init__(f"{where}: {summary}", hint, key=key, node=node)
        self.summary = summary


class UsageError(PatchspecError):
    """The command line is invalid (detectable without the model)."""

    exit_code = EXIT_INVALID_SPEC


def step_where(label: str, key: Iterable[Any] = ()) -> str:
    """A place in a spec as messages name it: ``patches[1] (rename_dims) > axes.2``."""
    key = tuple(key)
    return label + (" > " + ".".join(str(k) for k in key) if key else "")


@dataclass(frozen=True, order=True)
class SpecProblem:
    """One located problem in a spec file: ``file:line:col: where: message``."""

    line: int
    column: int
    where: str
    message: str
    hint: str | None = None
    file: str = ""
    #: the traceback of the plugin behind the problem (one that failed to load), shown with ``-v``
    plugin_traceback: str | None = field(default=None, compare=False)
    #: the key path inside the step's params (``("axes", 2)``), as data
    key: tuple[Any, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        from patchspec.printable import escape_controls

        place = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        parts = [part for part in (place, escape_controls(self.where), self.message) if part]
        text = ": ".join(parts)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict[str, Any]:
        """The problem's fields, for ``validate --json`` and ``--report``: ``where`` the step
        (``patches[0] (set_batch)``), ``key`` the path inside its params (``["axes", 2]``)."""
        suffix = step_where("", self.key)
        step = self.where[: -len(suffix)] if suffix and self.where.endswith(suffix) else self.where
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "where": step,
            "key": list(self.key),
            "message": self.message,
            "hint": self.hint,
        }


class SpecError(PatchspecError):
    """The spec is invalid; carries every problem found, sorted by position."""

    exit_code = EXIT_INVALID_SPEC

    def __init__(self, problems: list[SpecProblem] | str, hint: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [SpecProblem(0, 0, "", problems, hint)]
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
        self.plugin_tracebacks = tuple(dict.fromkeys(p.plugin_traceback for p in self.problems if p.plugin_traceback))

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "problems": [problem.to_json() for problem in self.problems]}


class ModelFileError(PatchspecError):
    """A file cannot be used: input missing/corrupt/too new, bad external data, output unwritable."""

    exit_code = EXIT_BAD_FILE


class PatchError(PatchspecError):
    """A patch cannot apply to this model (selector count, missing tensor, non-constant target)."""

    exit_code = EXIT_PATCH_FAILED


class PluginError(PatchspecError):
    """A plugin broke its contract or raised; the message names the plugin and its version."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str | None = None, plugin_traceback: str | None = None) -> None:
        super().__init__(message, hint)
        if plugin_traceback:
            self.plugin_tracebacks = (plugin_traceback,)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; staging was removed.

    A ``BaseException``, as ``KeyboardInterrupt`` is: a signal that arrives while onnxruntime builds a
    session or a plugin runs must end the run, and no ``except Exception`` on its way (a failed
    session build, a plugin's fault) may turn it into a verdict (exit 1) or a bug (exit 5).
    """

    def __init__(self, signum: int) -> None:
        super().__init__("interrupted")
        self.exit_code = EXIT_SIGINT if signum == 2 else EXIT_SIGTERM


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Names among ``candidates`` that look like ``word``, best first (for 'did you mean')."""
    import difflib

    pool = sorted(set(candidates))
    found = difflib.get_close_matches(word, pool, n=limit, cutoff=0.6)
    if not found:
        lowered = {c.lower(): c for c in pool}
        found = [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered), n=limit, cutoff=0.5)]
    return found


def did_you_mean(word: str, candidates: Iterable[str], limit: int = 3) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    found = close_matches(word, candidates, limit)
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
