"""Errors patchspec reports to users, each with the exit code of the contract.

Every error carries a message written for the user (lowercase, no trailing period, what was
expected, what was found, where, and what to do next). The CLI prints ``str(error)`` and exits with
``error.exit_code``; no traceback unless ``-v``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
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
#: the exit code of mistakes of several kinds found at once (``validate``): a bug first (the rest may
#: follow from it), then the kinds in the order ``apply`` meets them: the spec, a file, a patch
EXIT_PRECEDENCE = (EXIT_INTERNAL, EXIT_INVALID_SPEC, EXIT_BAD_FILE, EXIT_PATCH_FAILED, EXIT_VERIFY_FAILED)


@dataclass(frozen=True)
class SpecLocation:
    """A place in a spec: the one type for it, with the one formatter.

    ``file``, ``line`` and ``column`` (1-based; 0 when unknown); ``label`` the step
    (``patches[1] (rename_dims)``, empty for the spec's own keys); ``key`` the path inside the step's
    params (``("axes", 2)``), or, without a step, the path in the document (``("patches", 0)``).
    ``str(location)`` is ``spec.yaml:5:9: patches[1] (rename_dims) > axes.2`` (``spec.yaml:7:1:
    patches[0]`` without a step); ``to_json()`` the fields.
    """

    file: str = ""
    line: int = 0
    column: int = 0
    label: str = ""
    key: tuple[Any, ...] = ()

    @property
    def step(self) -> str:
        """The step's label (the name this field had when the type was called ``Where``)."""
        return self.label

    @property
    def position(self) -> str:
        """``file:line:col``, or the file alone when the line is unknown."""
        return f"{self.file}:{self.line}:{self.column}" if self.line else self.file

    @property
    def place(self) -> str:
        """What is there, by meaning: ``patches[1] (rename_dims) > axes.2``, or ``patches[0].set_batch``."""
        if self.label:
            return self.label + (" > " + ".".join(str(k) for k in self.key) if self.key else "")
        return "".join(f"[{k}]" if isinstance(k, int) else (f".{k}" if i else str(k)) for i, k in enumerate(self.key))

    def __str__(self) -> str:
        from patchspec.printable import escape_controls

        return ": ".join(part for part in (self.position, escape_controls(self.place)) if part)

    def inside(self, *key: Any) -> SpecLocation:
        """The place of ``key`` inside this one (same position: the caller knows no better)."""
        return replace(self, key=self.key + key)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column, "step": self.label, "key": list(self.key)}


#: the name ``SpecLocation`` had before plugin API 1.5 (``StepContext.location()`` returns one)
Where = SpecLocation


class PatchspecError(Exception):
    """Base class: a failure patchspec explains to the user.

    Errors are data (since plugin API 1.2): ``detail`` is what went wrong, ``where`` the place in the
    spec (a :class:`SpecLocation`, or None), ``key`` the key path inside the step, ``node`` the graph node
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
        where: SpecLocation | None = None,
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
        where: str | SpecLocation,
        summary: str,
        key: tuple[Any, ...] = (),
        hint: str | None = None,
        *,
        node: str | None = None,
    ) -> None:
        if isinstance(where, SpecLocation):
            super().__init__(summary, hint, where=where, key=key, node=node)
        else:  # a place already written out (1.1)
            super().__init__(f"{where}: {summary}", hint, key=key, node=node)
        self.summary = summary


class UsageError(PatchspecError):
    """The command line is invalid (detectable without the model)."""

    exit_code = EXIT_INVALID_SPEC


@dataclass(frozen=True)
class SpecProblem:
    """One located problem in a spec file: ``file:line:col: where: message``."""

    location: SpecLocation
    message: str
    hint: str | None = None
    #: the traceback of the plugin behind the problem (one that failed to load), shown with ``-v``
    plugin_traceback: str | None = field(default=None, compare=False)

    @property
    def file(self) -> str:
        return self.location.file

    @property
    def line(self) -> int:
        return self.location.line

    @property
    def column(self) -> int:
        return self.location.column

    @property
    def where(self) -> str:
        """The place by meaning: ``patches[1] (rename_dims) > axes.2``."""
        return self.location.place

    @property
    def key(self) -> tuple[Any, ...]:
        return self.location.key

    def order(self) -> tuple[int, int, str, str]:
        """Problems are listed by position in the file, then by place and message."""
        return (self.line, self.column, self.where, self.message)

    def __str__(self) -> str:
        text = ": ".join(part for part in (str(self.location), self.message) if part)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict[str, Any]:
        """The problem's fields, for ``validate --json`` and ``--report``: ``where`` the step
        (``patches[0] (set_batch)``), ``key`` the path inside its params (``["axes", 2]``); for the
        spec's own keys, ``where`` the place (``patches[0]``) and ``key`` its path (``["patches", 0]``)."""
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "where": self.location.label or self.location.place,
            "key": list(self.key),
            "message": self.message,
            "hint": self.hint,
        }


class SpecError(PatchspecError):
    """The spec is invalid; carries every problem found, sorted by position."""

    exit_code = EXIT_INVALID_SPEC

    def __init__(self, problems: list[SpecProblem] | str, hint: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [SpecProblem(SpecLocation(), problems, hint)]
        self.problems = sorted(dict.fromkeys(problems), key=SpecProblem.order)  # each once, by position
        super().__init__("\n".join(str(p) for p in self.problems))
        self.plugin_tracebacks = tuple(dict.fromkeys(p.plugin_traceback for p in self.problems if p.plugin_traceback))

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "problems": [problem.to_json() for problem in self.problems]}


class FollowOnError(SpecError):
    """Problems found on a model that lacks a patch which could not apply or was invalid: shown with the
    others, but the exit code is their cause's (a refused set_batch is exit 4, not 2 because a run case
    does not fit the model it left unchanged)."""


def exit_code_of_all(errors: Iterable[PatchspecError]) -> int:
    """The one exit code for ``errors`` of several kinds, by :data:`EXIT_PRECEDENCE` (0 for none); a
    :class:`FollowOnError` counts only where nothing else is there."""
    errors = list(errors)
    causes = [error for error in errors if not isinstance(error, FollowOnError)] or errors
    codes = {error.exit_code for error in causes}
    return next((code for code in EXIT_PRECEDENCE if code in codes), max(codes, default=EXIT_OK))


def problems_of(error: PatchspecError) -> list[SpecProblem]:
    """``error`` as located problems: a spec error's each, or the one error at its place."""
    if isinstance(error, SpecError):
        return list(error.problems)
    traceback = error.plugin_tracebacks[0] if error.plugin_tracebacks else None
    return [SpecProblem(error.where or SpecLocation(), error.detail, error.hint, plugin_traceback=traceback)]


def sorted_problems(errors: Iterable[PatchspecError]) -> list[tuple[int, SpecProblem]]:
    """Every problem of ``errors`` with the exit code of its kind, by line (the unlocated first)."""
    found = [(error.exit_code, problem) for error in errors for problem in problems_of(error)]
    return sorted(found, key=lambda item: item[1].order())


def combined(errors: list[PatchspecError]) -> PatchspecError:
    """Mistakes of several kinds as one error: every problem, sorted by line, and one exit code
    (:func:`exit_code_of_all`); the one error itself when there is one."""
    if len(errors) == 1:
        return errors[0]
    error = PatchspecError("\n".join(str(problem) for _, problem in sorted_problems(errors)))
    error.exit_code = exit_code_of_all(errors)
    error.plugin_tracebacks = tuple(dict.fromkeys(t for e in errors for t in e.plugin_tracebacks))
    return error


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
