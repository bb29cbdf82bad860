"""A data file's pieces digest, taken while the file is written, each byte hashed at most once.

The bytes the writer holds (padding, inline tensors) are hashed as they are written; a source range
the kernel copies is named by the hash the input's own digest took of that very range (``resolve``,
asked once the copy and the ``fsync`` are done: the input is hashed meanwhile on another thread),
or, where no such hash will be known, hashed on a worker thread while the copy goes on.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from patchspec.errors import ModelFileError
from patchspec.model.data_pieces import compose, hash_range, zeros_sha256

#: what the input's digest knows of a source range: called after the copy; None: hash it here
Resolver = Callable[[], str | None]


@dataclass
class _Slot:
    offset: int
    length: int
    sha256: str = ""


class Digest:
    """The pieces digest (``patchspec.model.data_pieces``) of a data file being written.

    Each piece is a slot (offset, length, sha256) filled by the writer (bytes in hand), by the
    worker (a range it reads back from the source: from the page cache, as the copy just read it),
    or at :meth:`hexdigest` by its resolver. The source ranges are the bytes copied as long as the
    input did not change meanwhile, which the engine checks before it commits
    (``LoadedInput.unchanged``).
    """

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._later: list[tuple[_Slot, Resolver, int, int]] = []
        self._queue: queue.Queue[tuple[_Slot, int, int] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._work, name="patchspec-data-digest", daemon=True)
        self._worker.start()

    def _slot(self, offset: int, length: int, sha256: str = "") -> _Slot:
        slot = _Slot(offset, length, sha256)
        if length:  # an empty tensor is no piece: the cut of the file is the same without it
            self._slots.append(slot)
        return slot

    def add_bytes(self, offset: int, data: bytes) -> None:
        self._slot(offset, len(data), hashlib.sha256(data).hexdigest())

    def add_hashed(self, offset: int, length: int, sha256: str) -> None:
        """A piece the writer hashed itself as it copied it (the bytes passed through its hands)."""
        self._slot(offset, length, sha256)

    def add_zeros(self, offset: int, length: int) -> None:
        self._slot(offset, length, zeros_sha256(length))

    def add_range(self, offset: int, source_fd: int, source_offset: int, length: int, resolve: Resolver | None) -> None:
        """A source range copied to ``offset``: named by ``resolve`` later, else hashed on the worker."""
        slot = self._slot(offset, length)
        if not length:
            return
        if resolve is not None:
            self._later.append((slot, resolve, source_fd, source_offset))
        else:
            self._queue.put((slot, source_fd, source_offset))

    def stop(self) -> None:
        """Wait for the worker to finish what it was given (it reads the sources: close them after)."""
        if self._worker.is_alive():
            self._queue.put(None)
            self._worker.join()

    def hexdigest(self) -> str:
        """Wait for the worker, then the resolvers (a range none knows is hashed here); the digest."""
        self.stop()
        if self._error is not None:
            raise self._error
        for slot, resolve, fd, source_offset in self._later:
            slot.sha256 = resolve() or _hash(fd, source_offset, slot.length)
        return compose(sorted((slot.offset, slot.length, slot.sha256) for slot in self._slots))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:  # after an error: drain, so the writer never blocks
                slot, fd, offset = item
                try:
                    slot.sha256 = _hash(fd, offset, slot.length)
                except BaseException as exc:  # handed to hexdigest(), in the writing thread
                    self._error = exc


def _hash(fd: int, offset: int, length: int) -> str:
    try:
        return hash_range(fd, offset, length)
    except OSError:
        raise ModelFileError("a data file ended early while its digest was taken") from None


def read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: no pread; the source fd is ours alone
    return os.read(fd, size)


__all__ = ["Digest", "Resolver", "read_at"]
