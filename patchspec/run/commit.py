"""Write outputs so that a failed or interrupted run leaves nothing half-written.

Files are written under their final names inside a ``.patchspec-*`` folder next to the output,
verified there, and moved into place with ``os.replace`` (data file first, then the model) only
when everything passed. Byte-identical files are not replaced, so readers and ``restat`` builds
see no change; a data file is known identical by its sha256 where the build knows the new one's and
the signed stat cache the old one's (2 GiB compared without reading either), else byte by byte.
An ONNX Runtime session holding the old output keeps its old inode.

A staging folder's name carries the id of the process that made it
(``.patchspec-<pid>-<random>``); a run removes the ones whose process is gone (a SIGKILL leaves
them), never one of a live process, never through a link.
"""

from __future__ import annotations

import contextlib
import filecmp
import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from filelock import FileLock

from patchspec.errors import ModelFileError
from patchspec.interrupts import deferred
from patchspec.run.statcache import StatCache
from patchspec.spec.confine import LOCK_NAME, STAGING_PREFIX, file_kind

PREFIX = STAGING_PREFIX
#: LOCK_NAME: the lock file that serialises commits into one folder (filelock: flock on POSIX, LockFileEx
#: on Windows); both names are refused as a data file's ``location``
__all__ = ["PREFIX", "Staging", "remove_dead_folders", "remove_superseded"]


class Staging:
    """A temporary folder beside the output; removed on exit whatever happened."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.folder: Path | None = None
        self.created: list[Path] = []  # folders made for the output, innermost first
        self.committed = False

    def __enter__(self) -> Staging:
        folder = self.output.parent
        self.created = [p for p in (folder, *folder.parents) if not p.exists()]
        try:
            with deferred():  # made and recorded whole: a signal between the two left the folder behind
                folder.mkdir(parents=True, exist_ok=True)
                remove_dead_folders(folder, PREFIX)
                self.folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=folder))
        except OSError as exc:
            self.__exit__()
            raise ModelFileError(f"{folder}: cannot write the output here: {exc.strerror or exc}") from None
        except BaseException:  # the signal held meanwhile: __exit__ never runs after a failed __enter__
            self.__exit__()
            raise
        return self

    def path(self, final: Path) -> Path:
        """Where ``final`` is written while staged (same file name)."""
        assert self.folder is not None
        return self.folder / final.name

    def commit(
        self,
        staged_files: list[Path],
        digests: Mapping[str, str] | None = None,
        known: Callable[[Path], str | None] | None = None,
    ) -> list[Path]:
        """Move staged files into the output folder, model last; returns the files that changed.
        ``digests``: a staged file's sha256 by name; ``known``: an existing file's, where a trusted
        record knows it without reading (the stat cache's, by identity)."""
        assert self.folder is not None
        changed: list[Path] = []
        previous: dict[Path, Path | None] = {}  # final -> hard link to what it replaced (None: it was new)
        ordered = sorted(staged_files, key=lambda p: p.suffix == ".onnx")
        same = functools.partial(_identical, digests or {}, known or (lambda path: None))
        with _folder_lock(self.output.parent):
            self._replace_all(ordered, changed, previous, same)
        _fsync_dir(self.output.parent)
        self.committed = True
        return changed

    def _replace_all(
        self,
        ordered: list[Path],
        changed: list[Path],
        previous: dict[Path, Path | None],
        same: Callable[[Path, Path], bool],
    ) -> None:
        """``os.replace`` each staged file unless identical; on any failure, put back what was replaced."""
        final = self.output
        try:
            for staged in ordered:
                final = self.output.parent / staged.name
                if final.is_file() and not final.is_symlink() and same(staged, final):
                    if os.path.samefile(staged, final):  # a link to the previous build's file: gone now,
                        staged.unlink()  # so its ctime settles before the stat cache records it
                    continue
                previous[final] = self._keep_previous(final)
                os.replace(staged, final)
                changed.append(final)
        except BaseException as exc:  # a failed or interrupted commit puts the previous files back
            with deferred():  # whole: a second signal waits until the previous files are back
                for done in reversed(changed):
                    _restore(done, previous[done])
            if isinstance(exc, OSError):
                raise ModelFileError(f"{final}: cannot write: {exc.strerror or exc}") from None
            raise

    def _keep_previous(self, final: Path) -> Path | None:
        """A hard link (same inode) to the file ``final`` is about to replace, for a rollback.

        None when ``final`` does not exist yet (a rollback removes it); ``final`` itself when no hard
        link can be made (a rollback leaves it).
        """
        assert self.folder is not None
        if not os.path.lexists(final):
            return None
        backup = self.folder / f".previous-{final.name}"
        try:
            os.link(final, backup, follow_symlinks=False)
        except OSError:
            return final  # no hard links on this file system: this file cannot be rolled back
        return backup

    def __exit__(self, *exc_info: object) -> None:
        with deferred():  # a signal now waits until the staging folder is gone
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
            if not self.committed:  # a failed run leaves no trace, not even an empty output folder
                for created in self.created:
                    try:
                        os.rmdir(created)
                    except OSError:
                        break


def _identical(digests: Mapping[str, str], known: Callable[[Path], str | None], staged: Path, final: Path) -> bool:
    """Whether ``final`` holds ``staged``'s bytes: by their sha256 where both are known, else read."""
    ours, theirs = digests.get(staged.name), known(final)
    if ours and theirs:
        return ours == theirs
    return filecmp.cmp(staged, final, shallow=False)


def remove_dead_folders(folder: Path, prefix: str) -> list[Path]:
    """Remove the ``<prefix><pid>-*`` folders in ``folder`` whose process is gone; returns them.

    A link is never followed or removed, nor a folder without a pid in its name, nor one whose
    process (or a process reusing its id) still runs."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        pid = _pid_in(entry.name, prefix)
        if pid is None or pid == os.getpid() or not entry.is_dir(follow_symlinks=False) or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _pid_in(name: str, prefix: str) -> int | None:
    if not name.startswith(prefix):
        return None
    number = name[len(prefix) :].partition("-")[0]
    return int(number) if number.isascii() and number.isdigit() and len(number) < 10 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def remove_superseded(output: Path, cache: StatCache, new: list[str]) -> None:
    """Files a previous build wrote beside ``output`` that this one no longer names, each deleted only
    while it is still, by inode and sha256, the file that build wrote (:meth:`StatCache.wrote`)."""
    kept = {Path(name).name for name in new} | {output.name}
    folder = os.path.realpath(output.parent)
    for name in list(cache.written):
        path = Path(name)
        if os.path.realpath(path.parent) != folder or path.name in kept:
            continue
        if cache.wrote(path):
            path.unlink(missing_ok=True)
        del cache.written[name]


def _restore(final: Path, backup: Path | None) -> None:
    try:
        if backup is None:
            os.unlink(final)
        elif backup != final:
            os.replace(backup, final)
    except OSError:
        pass  # best effort: the error being reported already names the file


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Serialise the commits of concurrent runs into one folder: model and data from the same run.

    The lock file stays (removing it would race with a waiting run); it is empty and hidden.
    """
    lock = folder / LOCK_NAME
    try:
        mode = os.lstat(lock).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # a committed link would be opened, and truncated, through
        raise ModelFileError(
            f"{lock}: patchspec's lock file is {file_kind(mode)}, not a file patchspec made; nothing was written",
            "remove it (patchspec makes its own), and keep .patchspec.lock out of version control",
        )
    with FileLock(str(lock)):
        yield


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
