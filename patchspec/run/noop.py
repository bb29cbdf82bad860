"""The no-op's record: how a build was asked for and from which files, so that the next ``apply``
can answer "up to date" from the stat cache alone (``freshness.by_record``), without parsing the
model or loading a plugin.

A build that succeeded writes, in the stat cache beside its output, how it was asked for (the spec,
``--model``/``--output``, ``--no-verify``, ``--strict-paths``, patchspec's version and the installed
plugins' versions) and the identity (size, mtime, inode, ctime) of the spec and of every input file
it hashed, as each was when hashed. The next ``apply`` or ``apply --check`` asked the same way reads
the spec's ``output:`` with a plain YAML parse, stats those files and the output's, and when none
changed, the output is up to date: the digest it was stamped with is the one this run would compute.
Any doubt (no record, a file touched, a plugin upgraded, another option) means the full check, which
reads the stamp in the output itself: the model's own metadata is the truth when the two disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchspec.run.request import BuildRequest
from patchspec.run.statcache import StatCache


@dataclass(frozen=True)
class Request:
    """How ``apply`` was asked to build one spec's output: the spec, the run's :class:`BuildRequest`
    and the installed plugins (each one's name -> distribution and version, and those disabled)."""

    spec: Path
    build: BuildRequest = field(default_factory=BuildRequest)
    plugins: dict[str, str] = field(default_factory=dict)

    def key(self) -> dict[str, Any]:
        """What a build record must match, as JSON."""
        return self.build.key(self.spec, self.plugins)

    def output_path(self) -> Path | None:
        """Where the output is: ``--output``, or the spec's ``output:`` as the loader resolves it (None
        when the spec cannot be read that simply: the full check then says why)."""
        if self.build.output is not None:
            return self.build.output.absolute()
        try:
            import yaml

            data = yaml.load(self.spec.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (OSError, ValueError, yaml.YAMLError):
            return None
        written = data.get("output") if isinstance(data, dict) else None
        if not isinstance(written, str) or not written:
            return None
        return Path(os.path.normpath(Path(os.path.abspath(self.spec)).parent / written))


def remember(request: Request, spec_identity: list[int] | None, output: Path, inputs: list[str], digest: str) -> None:
    """After a build (or a full check that found the output up to date): record it for the next no-op.

    ``spec_identity`` is the spec's, taken before it was read; each input's identity is the one the
    stat cache kept when it hashed the file, so a file changed since then is seen as changed. Nothing
    is recorded when any of them is unknown, or when the output is no longer as the build left it."""
    cache = StatCache.beside(output)
    if spec_identity is None or cache.output_digest() != digest:
        return
    kept: dict[str, Any] = {}
    for name in inputs:
        entry = cache.files.get(str(Path(name).absolute()))
        if entry is None:
            return
        kept[str(Path(name).absolute())] = entry["identity"]
    cache.build = {"request": request.key(), "spec": spec_identity, "inputs": kept, "digest": digest}
    cache.save()


__all__ = ["Request", "remember"]
