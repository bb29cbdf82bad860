"""Write outputs so that a failed or interrupted run leaves nothing half-written.

Files are written under their final names inside a ``.patchspec-*`` folder next to the output,
verified there, and moved into place with ``os.replace`` (data file first, then the model) only
when everything passed. Byte-identical files are not replaced, so readers and ``restat`` builds
see no change. An ONNX Runtime session holding the old output keeps its old inode.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import tempfile
from pathlib import Path

from .errors import ModelFileError

PREFIX = ".patchspec-"


class Staging:
    """A temporary folder beside the output; removed on exit whatever happened."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.folder: Path | None = None

    def __enter__(self) -> "Staging":
        folder = self.output.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=folder))
        except OSError as exc:
            raise ModelFileError(f"{folder}: cannot write the output here: {exc.strerror or exc}") from None
        return self

    def path(self, final: Path) -> Path:
        """Where ``final`` is written while staged (same file name)."""
        assert self.folder is not None
        return self.folder / final.name

    def commit(self, staged_files: list[Path]) -> list[Path]:
        """Move staged files into the output folder, model last; returns the files that changed."""
        assert self.folder is not None
        changed = []
        ordered = sorted(staged_files, key=lambda p: p.suffix == ".onnx")
        for staged in ordered:
            final = self.output.parent / staged.name
            if final.is_file() and not final.is_symlink() and filecmp.cmp(staged, final, shallow=False):
                continue
            try:
                os.replace(staged, final)
            except OSError as exc:
                raise ModelFileError(f"{final}: cannot write: {exc.strerror or exc}") from None
            changed.append(final)
        _fsync_dir(self.output.parent)
        return changed

    def __exit__(self, *exc_info) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
