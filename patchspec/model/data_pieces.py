"""A data file's digest composed from its pieces' digests, so each byte is hashed once per build.

A data file holds tensors at byte ranges. Its *pieces digest* is the sha256 of a short text that
lists, for the ranges that cover the file from its first byte to its last (each tensor's range, and
the gaps between them: padding), where each one starts, its length and the sha256 of its bytes. The
ranges are the model's own (every offset and length its tensors give for that file): two builds
from the same model cut a file the same way, and a ``--check`` on another machine cuts it the same
way from the files alone. Like a plain sha256, the pieces digest names the file's bytes (the ranges
and their places are in the hashed text), and it is prefixed so the two are never mistaken.

What it buys: an input data file is hashed range by range, tensor by tensor; the data file
patchspec writes from it is those same ranges at new offsets with zero padding between, so its
digest is composed from the input's range hashes plus the few bytes patchspec writes itself, and is
never read (``patchspec.model.data_writer``). No onnx here: the stat cache imports this module.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: the composed text's version; another way of composing must never give the same digest
VERSION = "patchspec pieces 1"
#: every pieces digest starts with this, so it is never taken for a plain sha256 (which has no "-")
PREFIX = "pieces1-"
CHUNK = 1 << 20
#: threads that hash one file's ranges at once (at most one per core), from this many bytes on
WORKERS, PARALLEL_FROM = 4, 64 << 20

Range = tuple[int, int]  # (offset, length)
Entry = tuple[int, int, str]  # (offset, length, sha256 of those bytes)


def cover(ranges: Iterable[Range], size: int) -> list[Range]:
    """The ranges that cover ``[0, size)``, cut at every start and end of ``ranges`` (clipped to the
    file): a model's tensors with the gaps between them; overlapping tensors cut into their parts."""
    cuts = {0, size}
    for offset, length in ranges:
        cuts.update(min(max(point, 0), size) for point in (offset, offset + length))
    points = sorted(cuts)
    return [(start, end - start) for start, end in zip(points, points[1:]) if end > start]


def compose(entries: Iterable[Entry]) -> str:
    """The pieces digest of a file whose covering ranges (in file order) hashed to ``entries``."""
    lines = [VERSION, *(f"{offset} {length} {sha256}" for offset, length, sha256 in entries)]
    return PREFIX + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def fingerprint(ranges: Iterable[Range]) -> str:
    """A short name for how a file is cut (which ranges a model gives): a digest is reused only for
    the same cut."""
    text = " ".join(f"{offset}:{length}" for offset, length in sorted(set(ranges)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def zeros_sha256(length: int) -> str:
    return hashlib.sha256(bytes(length)).hexdigest()


def hash_range(fd: int, offset: int, length: int, progress: Callable[[int], None] | None = None) -> str:
    """The sha256 of ``length`` bytes of ``fd`` at ``offset``, read a MiB at a time."""
    sha, end = hashlib.sha256(), offset + length
    while offset < end:
        chunk = os.pread(fd, min(CHUNK, end - offset), offset) if hasattr(os, "pread") else _read(fd, offset, end)
        if not chunk:
            raise OSError(f"the file ended {end - offset} bytes early while it was hashed")
        sha.update(chunk)
        offset += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return sha.hexdigest()


def _read(fd: int, offset: int, end: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: no pread; the fd is ours alone
    return os.read(fd, min(CHUNK, end - offset))


def file_pieces(
    path: Path, ranges: Iterable[Range], progress: Callable[[int, int], None] | None = None
) -> tuple[str, list[Entry]]:
    """The pieces digest of the file at ``path`` cut by ``ranges``, and each covering range's sha256
    ("missing", [] when it is not a file); ``progress(done, total)`` as the bytes are read. The
    ranges are hashed on up to :data:`WORKERS` threads at once (hashlib lets go of the GIL): while
    the build's copy waits on the disk, the other cores hash."""
    if not path.is_file():
        return "missing", []
    with open(path, "rb") as handle:
        fd = handle.fileno()
        total, done, lock = os.fstat(fd).st_size, [0], threading.Lock()

        def advance(nbytes: int) -> None:
            with lock:
                done[0] += nbytes
                if progress is not None:
                    progress(done[0], total)

        def one(piece: Range) -> Entry:
            return piece[0], piece[1], hash_range(fd, piece[0], piece[1], advance)

        pieces = cover(ranges, total)
        # Windows has no pread: the threads would share one file offset
        workers = min(WORKERS, os.cpu_count() or 1, len(pieces)) if hasattr(os, "pread") else 1
        if workers < 2 or total < PARALLEL_FROM:
            return _composed([one(piece) for piece in pieces])
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="patchspec-pieces") as pool:
            return _composed(list(pool.map(one, pieces)))


def _composed(entries: list[Entry]) -> tuple[str, list[Entry]]:
    return compose(entries), entries


__all__ = ["PREFIX", "VERSION", "Entry", "Range", "compose", "cover", "file_pieces", "fingerprint", "hash_range"]
