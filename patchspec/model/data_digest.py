"""A data file's sha256, taken while the file is written: the bytes the writer holds, and the source
ranges the kernel copies, hashed on a worker thread while the copy and the ``fsync`` go on."""

from __future__ import annotations

import hashlib
import os
import queue
import threading

from patchspec.errors import ModelFileError


class Digest:
    """The sha256 of a data file, computed while the file is written, not read back after.

    The kernel copies tensors (``copy_file_range``) without their bytes passing through patchspec;
    a worker thread reads the same source ranges (from the page cache: the input's digest has just
    read them) and hashes them, with the padding and inline bytes, in file order, while the copy and
    the ``fsync`` go on. The source ranges are the bytes copied as long as the input did not change
    meanwhile, which the engine checks before it commits (``LoadedInput.unchanged``). The queue is
    bounded, so a slow hash holds the copy back instead of piling up chunks in memory.
    """

    #: bytes of a source range read at a time; a write larger than ``QUEUED`` is hashed in place
    CHUNK = 1 << 20
    QUEUED = 1 << 16

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._queue: queue.Queue[tuple[int, int, int] | bytes | None] = queue.Queue(maxsize=64)
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._work, name="patchspec-data-digest", daemon=True)
        self._worker.start()

    def add_bytes(self, data: bytes) -> None:
        """Bytes the writer has in hand: padding is queued; a chunk it copied itself is hashed here,
        once the worker has caught up, so no chunk waits in the queue (one in memory at a time)."""
        if len(data) <= self.QUEUED:
            self._queue.put(bytes(data))
            return
        self._queue.join()
        self._sha.update(data)

    def add_range(self, source_fd: int, offset: int, length: int) -> None:
        self._queue.put((source_fd, offset, length))

    def hexdigest(self) -> str:
        """Wait for the worker; the digest of everything given (raises what the worker hit)."""
        self._queue.put(None)
        self._worker.join()
        if self._error is not None:
            raise self._error
        return self._sha.hexdigest()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:  # after an error: drain, so the writer never blocks
                    self._hash(item)
            except BaseException as exc:  # handed to hexdigest(), in the writing thread
                self._error = exc
            finally:
                self._queue.task_done()

    def _hash(self, item: tuple[int, int, int] | bytes) -> None:
        if isinstance(item, bytes):
            self._sha.update(item)
            return
        fd, offset, length = item
        end = offset + length
        while offset < end:
            chunk = read_at(fd, min(self.CHUNK, end - offset), offset)
            if not chunk:
                raise ModelFileError("a data file ended early while its digest was taken")
            self._sha.update(chunk)
            offset += len(chunk)


def read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: no pread; the source fd is ours alone
    return os.read(fd, size)


__all__ = ["Digest", "read_at"]
