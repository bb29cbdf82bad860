"""How ``apply`` was asked to build: one frozen value, made once by the command and passed down.

As black's ``Mode`` carries every option that changes a run, :class:`BuildRequest` carries
``apply``'s: the command line builds it once, the engine and the no-op read it, and the no-op's
record is keyed by it (:meth:`BuildRequest.key`), so no option travels as a loose argument.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec import __version__


@dataclass(frozen=True)
class BuildRequest:
    """``apply``'s options, for every spec of one run (the defaults are a plain ``apply SPEC``)."""

    model: Path | None = None  # --model: the input instead of the spec's (one spec only)
    output: Path | None = None  # --output: where instead of the spec's (one spec only)
    force: bool = False
    check: bool = False  # --check: write nothing, say what is stale
    no_verify: bool = False
    allow_undecided: bool = False  # with --no-verify: write what a patch left undecided
    depfile: Path | None = None
    report: Path | None = None  # --report: the JSON report's path
    strict_paths: bool = False
    root: Path | None = None  # --root: the project root for every spec (default: each spec's own)
    output_dirs: tuple[Path, ...] = ()  # --output-dir: where specs may write any name, replace any file

    @property
    def refuse_undecided(self) -> bool:
        """``--no-verify`` without ``--allow-undecided``: a point a patch left undecided stops the run."""
        return self.no_verify and not self.allow_undecided

    @property
    def writes_extras(self) -> bool:
        """Whether the run must happen even for an up-to-date output (it rebuilds, or writes a file)."""
        return self.force or self.depfile is not None or self.report is not None

    def key(self, spec: Path, plugins: dict[str, str]) -> dict[str, Any]:
        """What the no-op's record of a build of ``spec`` must match (``run/noop``), as JSON: every
        option that changes the output, patchspec's version and the installed ``plugins``."""
        return {
            "spec": os.path.abspath(spec),
            "model": os.path.abspath(self.model) if self.model else None,
            "output": os.path.abspath(self.output) if self.output else None,
            "no_verify": self.no_verify,
            "allow_undecided": self.no_verify and self.allow_undecided,
            "strict_paths": self.strict_paths,
            "patchspec": __version__,
            "plugins": plugins,
        }


__all__ = ["BuildRequest"]
