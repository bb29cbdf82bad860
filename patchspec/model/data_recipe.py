"""How a data file is made, as a value: the byte ranges it copies, the bytes it writes, the padding.

A data file patchspec writes is a function of its recipe: each piece is either a byte range copied
from an input file or bytes the writer holds, at an offset, with zero padding between. Named by the
content digest of each source file, a recipe therefore names the data file's bytes, so a data file's
digest once computed can be known again without reading 2 GiB (:meth:`Recipe.key`; the signed stat
cache keeps what each key made, ``patchspec.run.statcache``, which imports this module: no onnx here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: a recipe key's version: another way of writing data files must not match a key of this one
VERSION = "patchspec data recipe 2"


@dataclass(frozen=True)
class Piece:
    """One tensor's bytes at ``start`` in the data file: ``length`` bytes copied from ``source`` at
    ``offset``, or (``source`` None) bytes the writer holds, named by their ``sha256``."""

    start: int
    length: int
    source: Path | None = None
    offset: int = 0
    sha256: str = ""


@dataclass(frozen=True)
class Recipe:
    """A data file's pieces in file order; the bytes between them are zeros, and it ends with the last."""

    name: str
    pieces: tuple[Piece, ...]

    def key(self, source_sha256: Callable[[Path], str | None]) -> str | None:
        """The sha256 naming these bytes, each source by its content (``source_sha256``, None when
        unknown); None when a source's content is not known."""
        lines = [VERSION]
        for piece in self.pieces:
            if piece.source is None:
                lines.append(f"{piece.start} {piece.length} bytes {piece.sha256}")
                continue
            content = source_sha256(piece.source)
            if content is None:
                return None
            lines.append(f"{piece.start} {piece.length} copy {content} {piece.offset}")
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()


class KnownDigests(Protocol):
    """What the writer asks before it writes a data file, and tells after it hashed one."""

    def data_sha256(self, recipe: Recipe) -> str | None:
        """The sha256 of the file ``recipe`` makes, when a trusted record proves it; None: hash it."""

    def learned(self, recipe: Recipe, sha256: str) -> None:
        """``recipe`` made a file whose bytes hashed to ``sha256`` (taken while it was written)."""

    def reusable(self, recipe: Recipe, sha256: str) -> tuple[Path, tuple[int, int, int]] | None:
        """A file a build wrote that holds these bytes (the previous build's data file of this name),
        with its size, mtime and inode as vouched for, to hard-link instead of copying; or None."""

    def piece_sha256(self, source: Path, offset: int, length: int) -> Callable[[], str | None] | None:
        """What will name the bytes of ``source`` at ``offset`` without reading them again (the input's
        digest hashes each tensor's range once, on another thread): called once they are copied, it
        waits for that digest and gives the range's sha256, or None (hash it after all); None now:
        nothing will know it, hash it while it is copied."""


__all__ = ["VERSION", "KnownDigests", "Piece", "Recipe"]
