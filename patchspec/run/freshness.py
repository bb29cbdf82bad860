"""Is an output up to date? What it is built from, what changed, and which record may say so.

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
from dataclasses import dataclass
from pathlib import Path

import onnx

from patchspec import __version__
from patchspec.host.registry import PluginRegistry
from patchspec.model.io import FileStamp
from patchspec.run.stamp import OutputStamp, input_changes
from patchspec.run.statcache import StatCache, file_sha256
from patchspec.spec.catalog import StepKind
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

    def unchanged(self) -> bool:
        return all(stamp.unchanged() for stamp in self.stamps)


def trusted_stamp(output: Path, stamp: OutputStamp | None, cache: StatCache) -> OutputStamp | None:
    """``stamp`` when this machine's stat cache proves patchspec wrote ``output`` as it is now (inode
    and sha256); None otherwise: a committed or copied output decides nothing by its stamp alone."""
    return stamp if stamp is not None and cache.wrote(output, reread=False) else None


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
            parts[f"data {path.name}"] = sha256(path)
        for written, path in self.dependencies(loaded.spec):
            parts[f"file {written}"] = sha256(path)
        for step in (*loaded.spec.patches, *loaded.spec.verify):
            kind = StepKind.of_section(step.section)
            owner = self.registry.owner(kind, step.type_name)
            parts[f"plugin {step.type_name}"] = f"{owner.distribution} {owner.version}" if owner else "?"
        return parts

    def changes(self, loaded: LoadedInput, built_from: dict[str, str] | None, parts: dict[str, str]) -> list[str]:
        """What differs between the parts the output was built from and today's, files by path."""
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
    hashes = {path: cache.sha256(path) for path in outputs}  # known by identity: read nothing
    now = max(time.time_ns(), newest)  # an input dated ahead of the clock is matched, not undercut
    for path in outputs:
        try:
            os.utime(path, ns=(now, now))
        except OSError:
            return False  # read-only: the tool will run patchspec again, which says up to date again
    for path, sha256 in hashes.items():
        cache.remember(path, sha256)
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


__all__ = ["Freshness", "LoadedInput", "same_files", "settle", "trusted_stamp"]
