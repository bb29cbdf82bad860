"""What the output of a run case is compared with: the original, another model, or saved outputs.

A reference model runs at the level the output ran at (like with like), once per (provider, level,
case, per sample or not): :class:`References` keeps what it gave, so the diagnosis of a failure
(:mod:`patchspec.ort.run.diagnosis`) reuses the runs it needs. One reference session at a time: the
output's and a reference's weights are never in memory together.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from patchspec.errors import ModelFileError
from patchspec.limits import current as current_limits
from patchspec.ort.run.feeds import feed_shape_problems, make_feeds
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import BatchSplit, Feeds, Session, TensorDecl

#: what a reference gave for one case: (outputs, seconds), or why it could not run
Expected = tuple[Feeds, float] | RunFailure


@dataclass
class CaseRun:
    """One case on the output at one level: the feeds it got and what came out (or why nothing did)."""

    index: int
    case: dict[str, Any]
    feeds: Feeds | None = None
    outputs: Feeds | None = None
    seconds: float = 0.0
    failure: str | None = None


@dataclass(frozen=True)
class ReferenceSettings:
    """compare's ``against`` and ``split_batch``, and how reference sessions are built."""

    against: str
    original: Path
    resolve: Callable[[str], Path]
    split_batch: bool = False
    split: BatchSplit = field(default_factory=BatchSplit)
    libraries: Sequence[Path] = ()
    timeout: float | None = None
    #: each provider's session options (:func:`patchspec.ort.providers.provider_setup`): like with like
    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class References:
    """The reference outputs of every case, by (reference path, provider, level, case, per sample)."""

    def __init__(self, settings: ReferenceSettings, progress: Callable[[str], None]) -> None:
        self.settings = settings
        self.progress = progress
        self.found: dict[tuple[Path, str, str, int, bool], Expected] = {}

    def path(self, run: CaseRun) -> Path | None:
        """The case's reference (its own ``against``, else compare's); None for ``none``."""
        against = run.case.get("against", self.settings.against)
        if against == "none":
            return None
        return self.settings.original if against == "original" else self.settings.resolve(against)

    def model_path(self, run: CaseRun) -> Path | None:
        """The reference when it is a model that can be run again (not saved outputs, not none)."""
        path = self.path(run)
        return None if path is None or path.suffix == ".npz" else path

    def outputs(self, provider: str, level: str, run: CaseRun) -> tuple[Feeds | None, float]:
        """The reference's outputs for this case, at the level the output ran at: like with like."""
        path = self.path(run)
        if path is None:
            return None, 0.0
        if path.suffix == ".npz":
            return load_expected(path), 0.0
        return self.expected(path, provider, level, run, self.settings.split_batch)

    def floor_path(self, run: CaseRun) -> Path:
        """The model a provider's floor is measured with: the case's reference model, else the original."""
        return self.model_path(run) or self.settings.original

    def run_all(self, provider: str, level: str, runs: list[CaseRun], floor: bool = False) -> None:
        """Every case's reference at one level (``floor``: the model its floor is measured with): one
        session per model, freed before the next."""
        by_path: dict[Path, list[CaseRun]] = {}
        for run in runs:
            if floor and self.path(run) is None:
                continue  # against none: nothing compared, no floor needed
            path = self.floor_path(run) if floor else self.model_path(run)
            if run.outputs is not None and path is not None:
                by_path.setdefault(path, []).append(run)
        for path, group in by_path.items():
            self._run(path, provider, level, self.settings.split_batch, group)

    def expected(self, path: Path, provider: str, level: str, run: CaseRun, split: bool) -> tuple[Feeds, float]:
        """The reference model's outputs and seconds for one case, run once per (provider, level, split)."""
        key = (path, provider, level, run.index, split)
        if key not in self.found:
            self._run(path, provider, level, split, [run])
        found = self.found[key]
        if isinstance(found, RunFailure):
            raise found
        return found

    def _run(self, path: Path, provider: str, level: str, split: bool, runs: list[CaseRun]) -> None:
        runs = [run for run in runs if (path, provider, level, run.index, split) not in self.found]
        if not runs:
            return
        try:
            reference = reference_session(path, provider, level, self.settings)
        except RunFailure as exc:
            for run in runs:
                self.found[(path, provider, level, run.index, split)] = exc
            return
        for run in runs:
            key = (path, provider, level, run.index, split)
            self.progress(
                f"{provider} case {run.index}, optimizations {level}: the reference {path.name}"
                + (", per sample" if split else "")
            )
            shapes = {name: tuple(array.shape) for name, array in (run.outputs or {}).items()}
            try:
                self.found[key] = run_reference(
                    reference, run.feeds or {}, self.settings.split if split else None, shapes
                )
            except RunFailure as exc:
                self.found[key] = exc
        del reference


def reference_session(path: Path, provider: str, level: str, settings: ReferenceSettings) -> Session:
    if not path.is_file():
        raise RunFailure(f"reference model {path} does not exist", "'against' paths are relative to the spec's folder")
    try:
        options = settings.provider_options.get(provider)
        return Session(path, provider, level, settings.libraries, settings.timeout, options=options)
    except RunFailure as exc:
        raise RunFailure(f"reference: {exc.message}", exc.hint, detail=exc.detail, node=exc.node) from None


def run_reference(
    reference: Session, feeds: Feeds, split: BatchSplit | None, batched_shapes: dict[str, tuple[int, ...]]
) -> tuple[Feeds, float]:
    declared = {d.name: d for d in reference.inputs}
    missing = [d for d in reference.inputs if d.name not in feeds]
    # each side gets its own element type: a patch that casts inputs to fp16 is compared with the
    # fp32 original on the same values
    ref_feeds = {name: _as_declared(array, declared[name]) for name, array in feeds.items() if name in declared}
    if missing:
        ref_feeds.update(make_feeds({}, missing, Path))
    if split is not None:
        return reference.run_split(ref_feeds, split, batched_shapes)
    hint = f"if {reference.path.name} only runs one sample at a time, set 'split_batch: true' under compare"
    misfit = feed_shape_problems(ref_feeds, reference.inputs)
    if misfit:
        raise RunFailure(f"the reference {reference.path} refuses this case: " + "; ".join(misfit), hint)
    try:
        return reference.run(ref_feeds)
    except RunFailure as exc:
        raise RunFailure(f"reference: {exc.message}", hint, detail=exc.detail, node=exc.node) from None


def _as_declared(array: np.ndarray, decl: TensorDecl) -> np.ndarray:
    if decl.dtype is None or str(array.dtype) == decl.dtype:
        return array
    return array.astype(decl.dtype)


def load_expected(path: Path) -> Feeds:
    """The arrays of an ``.npz`` of expected outputs. What each array declares (shape and dtype in its
    header) is added up and held to the caller's ``case-bytes`` limit before one is decompressed: a
    7.7 MB archive once asked for 7.45 GiB."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if isinstance(archive, np.lib.npyio.NpzFile):
                _refuse_oversized(path, archive)
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, AttributeError, zipfile.BadZipFile) as exc:
        msg = f"cannot read expected outputs from {path}: {exc}"
        raise RunFailure(msg, "give a .npz written by numpy.savez with one array per output name") from None


def _refuse_oversized(path: Path, archive: np.lib.npyio.NpzFile) -> None:
    limits, members = current_limits(), archive.zip
    if members is None:  # closed: nothing to read
        return
    total = 0
    for name in archive.files:
        with members.open(f"{name}.npy") as member:
            version = np.lib.format.read_magic(member)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = reader(member)
        total += math.prod(shape) * dtype.itemsize
    if total > limits.case_bytes:
        raise ModelFileError(
            f"{path}: its arrays declare {total:,} bytes together, over {limits.describe('case_bytes')}",
            "give expected outputs of the case's own size",
        )


__all__ = ["CaseRun", "ReferenceSettings", "References", "load_expected", "reference_session", "run_reference"]
