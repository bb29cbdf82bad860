"""Is an output up to date? The one answer for the no-op, ``--check`` and the engine alike.

Three questions, cheapest first: :func:`by_record` (the no-op: the stat cache's record of the last
build alone, nothing parsed, no plugin loaded); :func:`existing_digest` (the engine: the digest an
existing output was built with, where a record of this machine may say so); and
:meth:`Freshness.verdict` (``--check``: up to date, missing or stale, and what changed).

An output's digest covers everything it is built from (:meth:`Freshness.parts`): the spec text, the
model and data bytes, the files the steps read, patchspec's and each plugin's version. The output's
stamp says which digest it was built with; the stat cache says which files this machine wrote.
Only the stat cache is trusted to decide: it is signed with this machine's key
(:mod:`patchspec.run.statcache`), while a stamp is a file anyone can commit. So a stamp whose
digest matches counts as up to date only when the cache proves patchspec wrote that very file here
(:func:`trusted_stamp`); otherwise ``apply`` rebuilds (and keeps the file if the bytes are the
same) and ``--check`` rebuilds into a temporary folder and compares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from patchspec import __version__
from patchspec.model.data_pieces import Range, file_pieces
from patchspec.run.statcache import StatCache, file_sha256, identity
from patchspec.spec.catalog import StepKind

if TYPE_CHECKING:  # the no-op (by_record) imports this module: nothing here may import onnx
    import onnx

    from patchspec.host.registry import PluginRegistry
    from patchspec.model.io import FileStamp
    from patchspec.run.noop import Request
    from patchspec.run.stamp import OutputStamp
    from patchspec.spec.steps import Spec


@dataclass
class LoadedInput:
    """The input model, graph only, with what is needed to prove it did not change."""

    spec: Spec
    model_path: Path
    output_path: Path
    model: onnx.ModelProto
    data_paths: list[Path]
    stamps: list[FileStamp]
    #: each data file's tensor ranges (offset, length), as the model gives them: how it is cut to be
    #: hashed range by range (``patchspec.model.data_pieces``)
    ranges: dict[Path, list[Range]] = field(default_factory=dict)

    def unchanged(self) -> bool:
        return all(stamp.unchanged() for stamp in self.stamps)


def by_record(request: Request) -> Path | None:
    """The no-op: the output's path when the stat cache's record of its last build shows it up to
    date for ``request`` (the same way of asking, no recorded file changed); None when only the full
    check can tell. Reads the spec's ``output:`` with a plain YAML parse, nothing else."""
    output = request.output_path()
    if output is None:
        return None
    cache = StatCache.beside(output)
    build = cache.build
    if not build or build.get("request") != request.key():
        return None
    if identity(request.spec) != build.get("spec"):
        return None
    inputs = build.get("inputs")
    if not isinstance(inputs, dict) or any(identity(Path(path)) != kept for path, kept in inputs.items()):
        return None
    digest = cache.output_digest()
    return output if digest is not None and digest == build.get("digest") else None


@dataclass(frozen=True)
class Existing:
    """What an existing output says of the build that wrote it, as far as this machine may trust it."""

    digest: str | None  # the digest it was built with (None: none trusted, or no output)
    stamp: OutputStamp | None  # its stamp, when that (not the cache's record) said so
    read: bool  # found by reading the output or hashing (remember it: the next check is a stat)


def existing_digest(output: Path, cache: StatCache, force: bool) -> Existing:
    """The engine's question: the digest ``output`` was built with, from the stat cache's record (a
    stat per file), else from its stamp where the cache proves the file and its data files are as
    the build wrote them (hashed only where their identity changed); nothing with ``force``."""
    from patchspec.run.stamp import OutputStamp

    if force:
        return Existing(None, None, read=False)
    cached = cache.output_digest()
    if cached is not None:
        return Existing(cached, None, read=False)
    stamp = trusted_stamp(output, OutputStamp.read(output), cache)
    if stamp is None or stamp.data_changes(cache.pieces):
        return Existing(None, stamp, read=True)
    return Existing(stamp.digest, stamp, read=True)


def trusted_stamp(output: Path, stamp: OutputStamp | None, cache: StatCache) -> OutputStamp | None:
    """``stamp`` when this machine's stat cache proves patchspec wrote ``output`` as it is now (its
    identity as recorded); None otherwise: a committed or copied output decides nothing by its stamp alone."""
    return stamp if stamp is not None and cache.wrote(output) else None


class Freshness:
    """The digest parts of a build and what changed since one, for one registry of plugins.

    ``hashing``: how a file is hashed (with progress on the status line); ``dependencies``: the files
    a step reads as the spec writes them (the plugin's :meth:`dependencies`, through its guard)."""

    def __init__(
        self,
        registry: PluginRegistry,
        hashing: Callable[[Callable[..., str]], Callable[[Path], str]],
        dependencies: Callable[[Spec], list[tuple[str, Path]]],
    ) -> None:
        self.registry = registry
        self.hashing = hashing
        self.dependencies = dependencies

    def parts(
        self, loaded: LoadedInput, no_verify: bool, cache: StatCache | None = None, allow_undecided: bool = False
    ) -> dict[str, str]:
        """Each thing the output depends on, by a name that says what it is, with its hash or version:
        the spec text, model and data bytes, the bytes of the files steps read, patchspec's and each
        plugin's version. Files enter by content and by the name the spec gives them, never by
        absolute path, so two checkouts at different folders build the same bytes (docs/cli.md).
        With a stat cache, a file whose identity did not change is not read again. An output written
        with undecided points (``--no-verify --allow-undecided``) is a build of its own."""
        sha256 = self.hashing(cache.sha256 if cache is not None else file_sha256)
        parts = {
            "patchspec": f"{__version__} no_verify={no_verify}"
            + (" allow_undecided" if no_verify and allow_undecided else ""),
            "spec": loaded.spec.text_digest,
            f"model {loaded.model_path.name}": sha256(loaded.model_path),
        }
        for path in loaded.data_paths:
            parts[f"data {path.name}"] = self.pieces(cache, loaded.ranges.get(path, []))(path)
        for written, path in self.dependencies(loaded.spec):
            parts[f"file {written}"] = sha256(path)
        for step in (*loaded.spec.patches, *loaded.spec.verify):
            kind = StepKind.of_section(step.section)
            owner = self.registry.owner(kind, step.type_name)
            parts[f"plugin {step.type_name}"] = f"{owner.distribution} {owner.version}" if owner else "?"
        return parts

    def pieces(self, cache: StatCache | None, ranges: list[Range]) -> Callable[[Path], str]:
        """How a data file is hashed: range by range, cut by its model's ``ranges``, with progress."""

        def pieces(path: Path, progress: Callable[[int, int], None] | None = None) -> str:
            return cache.pieces(path, ranges, progress) if cache is not None else file_pieces(path, ranges, progress)[0]

        return self.hashing(pieces)

    def verdict(
        self,
        loaded: LoadedInput,
        cache: StatCache,
        no_verify: bool,
        allow_undecided: bool,
        rebuilds_same: Callable[[dict[str, str]], bool],
    ) -> tuple[str, list[str]]:
        """``--check``'s question: ("up to date" | "missing" | "stale", what changed since the output
        was built). ``cache`` is read, never written; an output whose stamp matches but that no
        record of this machine vouches for is up to date only if ``rebuilds_same`` (building it again
        elsewhere gives its bytes)."""
        from patchspec.run.stamp import OutputStamp, digest_of

        stamped = OutputStamp.read(loaded.output_path)
        if stamped is None:
            if not loaded.output_path.exists():
                return "missing", []
            return "stale", ["the output is incomplete (a data file missing or short) or not written by patchspec"]
        parts = self.parts(loaded, no_verify, cache, allow_undecided)
        changed = self.changes(loaded, stamped.parts, parts) if stamped.digest != digest_of(parts) else []
        changed += stamped.data_changes(cache.pieces)
        if changed:
            return "stale", changed
        if trusted_stamp(loaded.output_path, stamped, cache) or rebuilds_same(parts):
            return "up to date", []
        return "stale", [
            "its stamp matches, but its bytes are not what this spec builds (a committed or copied output?)"
        ]

    def changes(self, loaded: LoadedInput, built_from: dict[str, str] | None, parts: dict[str, str]) -> list[str]:
        """What differs between the parts the output was built from and today's, files by path."""
        from patchspec.run.stamp import input_changes

        paths = {"spec": loaded.spec.path, f"model {loaded.model_path.name}": loaded.model_path}
        paths.update({f"data {path.name}": path for path in loaded.data_paths})
        paths.update({f"file {written}": path for written, path in self.dependencies(loaded.spec)})
        return input_changes(built_from, parts, paths)


def settle(outputs: list[Path], inputs: list[Path], cache: StatCache, digest: str) -> bool:
    """An up-to-date output older than one of its inputs (``touch models/m.onnx.data``, a checkout)
    gets the time of now, so the build tool's next run is a no-op: Make, Ninja and CMake compare
    modification times, and an output left older than its input is rebuilt on every run. Its bytes,
    and so its digest and the stat cache's hashes, stay as they are. True when it touched anything."""
    try:
        newest = max(os.stat(path).st_mtime_ns for path in inputs)
        oldest = min(os.stat(path).st_mtime_ns for path in outputs)
    except (OSError, ValueError):
        return False
    if oldest >= newest:
        return False
    hashes = {path: cache.known_sha256(path) for path in outputs}  # known by identity: read nothing
    ours = [path for path in outputs if cache.wrote(path)]
    now = max(time.time_ns(), newest)  # an input dated ahead of the clock is matched, not undercut
    for path in outputs:
        try:
            os.utime(path, ns=(now, now))
        except OSError:
            return False  # read-only: the tool will run patchspec again, which says up to date again
    for path, sha256 in hashes.items():
        entry = cache.files.get(str(path.absolute()), {})
        if sha256 is not None:
            cache.remember(path, sha256, entry.get("ranges"))
    for path in ours:  # touched by this build, not by another writer: still ours
        kept = cache.written[str(path.absolute())]
        cut = kept.get("ranges")
        cache.record_written(path, kept["digest"], None if cut is None else [(o, n) for o, n in cut])
    cache.record_output(outputs, digest)
    return True


def same_files(built: list[Path], existing_folder: Path) -> bool:
    """Whether each file in ``built`` has a byte-identical twin of its name in ``existing_folder``."""
    import filecmp

    for path in built:
        twin = existing_folder / path.name
        if not (os.path.isfile(twin) and not os.path.islink(twin) and filecmp.cmp(path, twin, shallow=False)):
            return False
    return True


__all__ = [
    "Existing",
    "Freshness",
    "LoadedInput",
    "by_record",
    "existing_digest",
    "same_files",
    "settle",
    "trusted_stamp",
]
