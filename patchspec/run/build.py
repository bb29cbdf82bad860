"""One spec's build under way: what ``Engine.apply`` hands from stage to stage.

The request says how the build was asked for (the same for every spec of a run); a :class:`Build`
holds what this spec's build found and made so far: its loaded input, report, stat cache and
depfile, the digest of its inputs (hashed on a worker thread while the patches run and the weights
are copied) and what the existing output says of the build that wrote it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from patchspec.run.depfile import Depfile
from patchspec.run.freshness import Existing, LoadedInput
from patchspec.run.report import RunReport
from patchspec.run.request import BuildRequest
from patchspec.run.stamp import digest_of
from patchspec.run.statcache import StatCache
from patchspec.spec.confine import Root


@dataclass
class Build:
    """One spec's build: its input, how it was asked for, and what it has found so far."""

    loaded: LoadedInput
    request: BuildRequest
    report: RunReport
    cache: StatCache
    root: Root
    dependencies: list[Path]  # the files the steps read besides the models
    depfile: Depfile | None
    existing: Existing = field(default_factory=lambda: Existing(None, None, read=False))
    hashing: Future[dict[str, str]] | None = None  # the digest parts, on the worker thread
    #: each data file it wrote, by name: its tensors' ranges (how its pieces digest cuts it)
    cuts: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def output(self) -> Path:
        return self.loaded.output_path

    @property
    def inputs(self) -> list[Path]:
        """Every file the output is built from: the spec, the model, its data files, the steps' files."""
        loaded = self.loaded
        return [loaded.spec.path, loaded.model_path, *loaded.data_paths, *self.dependencies]

    def parts(self) -> dict[str, str]:
        """The digest parts (waits for the worker thread)."""
        assert self.hashing is not None, "the inputs are hashed first"
        return self.hashing.result()

    def digest(self) -> str:
        return digest_of(self.parts())

    def up_to_date(self) -> bool:
        """Whether the existing output was built, as far as this machine may trust it, with this digest."""
        return self.existing.digest is not None and self.existing.digest == self.digest()


__all__ = ["Build"]
