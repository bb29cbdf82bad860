"""Writing a model and its data file: the output's layout, streamed copies, aligned offsets.

patchspec writes data files itself: tensors are copied from the input's files in bounded chunks (or
in the kernel with ``copy_file_range``), never loaded whole, each at an aligned offset, into files
created new (never appended to, never through a symlink). Input tensors are read through
``patchspec.model.external_data``'s path policy.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

from patchspec.errors import ModelFileError, UsageError
from patchspec.model.data_digest import Digest as _Digest
from patchspec.model.data_recipe import KnownDigests, Piece, Recipe
from patchspec.model.data_sink import Progress
from patchspec.model.data_sink import Sink as _Sink
from patchspec.model.external_data import (
    check_tensor,
    expected_nbytes,
    is_external,
    iter_tensors,
    with_raw_data,
)
from patchspec.plugin.contract import StateKey
from patchspec.spec.confine import control_character, reserved_name, write_problem

PROTOBUF_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Layout:
    """How the output stores tensor data.

    ``location``: data file name next to the output; ``""``: ``<output file name>.data``;
    ``None``: everything inline. ``keep_inline`` / ``keep_external`` give the default layout
    (the input's): tensors named in ``keep_inline`` stay inline, external ones stay external.
    """

    location: str | None
    size_threshold: int = 1024
    align: int = 4096
    checksum: bool = False
    keep_inline: frozenset[str] | None = None
    keep_external: bool = False

    def data_name(self, output: Path) -> str | None:
        if self.location is None:
            return None
        return self.location or f"{output.name}.data"


#: where the output's tensor bytes go; the external_data patch sets it (None: the default layout)
OUTPUT_LAYOUT: StateKey[Layout | None] = StateKey("patchspec.output_layout", lambda: None)


# -- layouts ----------------------------------------------------------------------------------------
def default_layout(model: onnx.ModelProto, output: Path, original: onnx.ModelProto | None = None) -> Layout:
    """The input's layout: inline stays inline; external data goes to ``<output file name>.data``.

    With ``original`` (the input before patches), tensors a patch created or changed are placed
    by the usual size rule (1024 bytes or more: external) when the input had external data.
    """
    source = original if original is not None else model
    if not any(is_external(t) for t in iter_tensors(source.graph)):
        return Layout(location=None)
    inline_names = frozenset(t.name for t in iter_tensors(source.graph) if not is_external(t) and t.name)
    return Layout(location=f"{output.name}.data", keep_inline=inline_names, keep_external=True)


def refuse_input_overwrite(layout: Layout, output: Path, protected: list[tuple[str, Path]]) -> None:
    """Refuse a data file name that would replace a file the run reads (``protected``: what it is,
    its path), patchspec's own bookkeeping, or anything but a regular file."""
    name = layout.data_name(output)
    if name is None:
        return
    target = output.parent / name
    reserved = reserved_name(name) or (f"{name!r} holds a control character" if control_character(name) else None)
    if reserved:
        raise UsageError(f"{target}: the output's data file: {reserved}", "choose another 'location'")
    for what, path in protected:
        if os.path.abspath(target) == os.path.abspath(path) or (target.exists() and _same_file(target, path)):
            msg = f"{target}: the output's data file would replace {what} '{path.name}'; patchspec never modifies its input"
            raise UsageError(msg, "choose another 'location' in the external_data patch, or another output folder")
    if name == output.name:
        raise UsageError(f"{target}: the output's data file has the model's own name", "choose another 'location'")
    refused = write_problem(None, target, [])
    if refused:
        raise UsageError(f"{target}: the output's data file {refused}", "remove it, or choose another 'location'")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def inline_size(model: onnx.ModelProto) -> int:
    """Bytes the model would take with every external tensor moved inline (an upper estimate)."""
    extra = 0
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            nbytes = expected_nbytes(tensor) or 0
            extra += nbytes + 16
    return int(model.ByteSize()) + extra


def refuse_inline_overflow(model: onnx.ModelProto, where: str) -> None:
    size = inline_size(model)
    if size > PROTOBUF_LIMIT:
        msg = f"{where}: the model would be {size} bytes ({size / 2**30:.2f} GiB) inline, past protobuf's 2 GiB limit"
        raise ModelFileError(msg, "store the weights in a data file: use '- external_data: {}' without 'inline: true'")


# -- the writer -------------------------------------------------------------------------------------
def write_model(
    model: onnx.ModelProto,
    out_path: Path,
    source_dir: Path,
    layout: Layout,
    progress: Progress | None = None,
    finalize: Callable[[onnx.ModelProto, dict[str, str]], None] | None = None,
    known: KnownDigests | None = None,
    link: bool = False,
) -> list[Path]:
    """Write ``model`` to ``out_path`` (+ its data file) without changing ``model``.

    External tensors are copied from ``source_dir`` in bounded chunks; tensors of at least
    ``size_threshold`` bytes go to the data file, each at an offset that is a multiple of
    ``layout.align``. Files are created new (never appended to, never through a symlink).
    ``finalize(output, digests)`` may still change the graph-only output (metadata, a digest computed
    meanwhile) after the data file is written and before the .onnx is; ``digests`` holds the data
    file's pieces digest (``patchspec.model.data_pieces``) by name, taken while it was written, or from ``known`` (a trusted record of what
    the same recipe made before: then the bytes are copied in the kernel and never read here, or,
    with ``link``, the previous build's file of those bytes is hard-linked). Returns the files written.
    """
    output = onnx.ModelProto()
    output.CopyFrom(model)
    source_dir = Path(os.path.abspath(source_dir))
    data_name = layout.data_name(out_path)
    plan = [(tensor, _goes_external(tensor, layout, data_name)) for tensor in iter_tensors(output.graph)]
    if data_name is None:
        refuse_inline_overflow(output, str(out_path))
    for tensor, external in plan:
        if is_external(tensor) and not external:
            tensor.CopyFrom(with_raw_data(tensor, _read_external(tensor, source_dir)))
    written = [out_path]
    digests: dict[str, str] = {}
    moving = [tensor for tensor, external in plan if external]
    if moving:
        assert data_name is not None  # _goes_external is False for every tensor without a data file
        data_path = out_path.parent / data_name
        digests[data_name] = _write_data_file(moving, data_path, source_dir, layout, progress, known, link)
        written.append(data_path)
    if finalize is not None:
        finalize(output, digests)
    _write_proto(output, out_path)
    return written


def _goes_external(tensor: TensorProto, layout: Layout, data_name: str | None) -> bool:
    if data_name is None or tensor.data_type == TensorProto.STRING:
        return False
    if is_external(tensor):
        return layout.keep_external or (expected_nbytes(tensor) or 0) >= layout.size_threshold
    if layout.keep_inline is not None and (not tensor.name or tensor.name in layout.keep_inline):
        return False
    return _inline_nbytes(tensor) >= layout.size_threshold


def _inline_nbytes(tensor: TensorProto) -> int:
    """Raw size of an inline tensor; 0 (stays inline) when it cannot be written as raw bytes here."""
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    four_bit = {TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", -1)}
    if tensor.data_type in four_bit:
        return 0  # typed 4-bit fields hold one value per entry; numpy_helper would not pack them
    try:
        return expected_nbytes(tensor) or 0
    except (KeyError, TypeError, ValueError):
        return 0


def _read_external(tensor: TensorProto, source_dir: Path) -> bytes:
    ref = check_tensor(tensor, source_dir, str(source_dir), False, {})
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        return handle.read(ref.length)


def _write_data_file(
    tensors: list[TensorProto],
    data_path: Path,
    source_dir: Path,
    layout: Layout,
    progress: Progress | None,
    known: KnownDigests | None,
    link: bool,
) -> str:
    """Write the data file; returns its sha256: known from its recipe, else taken while it is written.
    With ``link``, the previous build's data file, known to hold the same bytes, is hard-linked
    instead of copied (only where nothing reads the link: onnx's checker refuses a data file with
    several links)."""
    recipe = _recipe_of(tensors, data_path.name, source_dir, layout.align) if known is not None else None
    sha256 = known.data_sha256(recipe) if known is not None and recipe is not None else None
    if link and known is not None and recipe is not None and sha256 is not None and not layout.checksum:
        if _linked(known, recipe, sha256, data_path):
            for tensor, piece in zip(tensors, recipe.pieces):
                _point_at(tensor, data_path.name, piece.start, piece.length, _kept(tensor, source_dir, layout))
            return sha256
    total = sum(expected_nbytes(t) or 0 for t in tensors)
    sink = _Sink(data_path, total, progress)
    digest = _Digest() if sha256 is None else None
    sources: dict[Path, int] = {}
    try:
        try:
            for tensor in tensors:
                before = sink.position
                start = sink.pad_to(layout.align)
                if digest is not None and start > before:
                    digest.add_zeros(before, start - before)
                checksum = _place_one(tensor, sink, source_dir, layout, sources, (digest, known))
                _point_at(tensor, data_path.name, start, sink.position - start, checksum)
        finally:
            sink.close()
        # the input's range hashes are waited for only now: they were taken while the kernel copied
        taken = digest.hexdigest() if digest is not None else ""
    finally:
        if digest is not None:
            digest.stop()  # the worker reads the sources: they close after
        for fd in sources.values():
            os.close(fd)
    if sha256 is not None:
        return sha256
    if known is not None and recipe is not None:
        known.learned(recipe, taken)
    return taken


def _recipe_of(tensors: list[TensorProto], name: str, source_dir: Path, align: int) -> Recipe:
    """The pieces the writer writes for ``tensors``, at the offsets it writes them (padding between)."""
    pieces, position = [], 0
    for tensor in tensors:
        start = -(-position // align) * align if align > 1 else position
        if is_external(tensor):
            ref = check_tensor(tensor, source_dir, str(source_dir), False, {})
            piece = Piece(start, ref.length, Path(os.path.abspath(ref.path)), ref.offset)
        else:
            raw = _raw_bytes(tensor)
            piece = Piece(start, len(raw), sha256=hashlib.sha256(raw).hexdigest())
        pieces.append(piece)
        position = start + piece.length
    return Recipe(name, tuple(pieces))


def _raw_bytes(tensor: TensorProto) -> bytes:
    """An inline tensor's bytes as a data file holds them."""
    return tensor.raw_data if tensor.HasField("raw_data") else onnx.numpy_helper.to_array(tensor).tobytes()


def _linked(known: KnownDigests, recipe: Recipe, sha256: str, data_path: Path) -> bool:
    """Hard-link the file ``known`` proves holds ``recipe``'s bytes at ``data_path``; False: copy."""
    existing = known.reusable(recipe, sha256)
    if existing is None:
        return False
    path, (size, mtime_ns, inode) = existing
    try:
        os.link(path, data_path, follow_symlinks=False)
        linked = os.lstat(data_path)
    except OSError:  # another filesystem, no hard links: copy
        return False
    if (linked.st_size, linked.st_mtime_ns, linked.st_ino) == (size, mtime_ns, inode):
        return True
    data_path.unlink()  # changed since the record vouched for it: copy
    return False


def _kept(tensor: TensorProto, source_dir: Path, layout: Layout) -> str | None:
    """The checksum ``_place_one`` records for a tensor without ``layout.checksum``: the input's, kept."""
    if not (layout.keep_external and is_external(tensor)):
        return None
    return check_tensor(tensor, source_dir, str(source_dir), False, {}).checksum


def _place_one(
    tensor: TensorProto,
    sink: _Sink,
    source_dir: Path,
    layout: Layout,
    sources: dict[Path, int],
    hashing: tuple[_Digest | None, KnownDigests | None],
) -> str | None:
    """Write one tensor's bytes at the sink's position, given to the data file's digest (``hashing``:
    it, and what names a source range without reading it); returns the checksum to record, if any."""
    digest, known = hashing
    checksum = hashlib.sha1(usedforsecurity=False) if layout.checksum else None
    start = sink.position
    if is_external(tensor):
        ref = check_tensor(tensor, source_dir, str(source_dir), False, {})
        if ref.path not in sources:
            sources[ref.path] = os.open(ref.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        piece = _piece_hash(digest, known, sink, ref, start, sources[ref.path], checksum is not None)
        feed = _Tee(checksum, piece) if checksum is not None or piece is not None else None
        sink.copy_from(sources[ref.path], ref.offset, ref.length, feed)
        if digest is not None and piece is not None:
            digest.add_hashed(start, ref.length, piece.hexdigest())
        kept = ref.checksum if layout.keep_external else None
        return checksum.hexdigest() if checksum is not None else kept
    raw = _raw_bytes(tensor)
    sink.write(raw)
    if digest is not None:
        digest.add_bytes(start, raw)
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest() if checksum is not None else None


def _piece_hash(
    digest: _Digest | None, known: KnownDigests | None, sink: _Sink, ref: Any, start: int, fd: int, reads: bool
) -> Any:
    """How the data file's digest learns a copied range: named later by the input's own hash of it
    (``known``), else hashed by the digest's worker while the kernel copies, else (the bytes pass
    through here anyway: ``reads``, or no kernel copy) a sha256 the copy feeds, returned."""
    if digest is None:
        return None
    resolve = known.piece_sha256(Path(os.path.abspath(ref.path)), ref.offset, ref.length) if known else None
    if resolve is None and (reads or not sink.kernel_copy):
        return hashlib.sha256()
    digest.add_range(start, fd, ref.offset, ref.length, resolve)
    return None


class _Tee:
    """Hashes fed the same chunks (a checksum and a piece's sha256)."""

    def __init__(self, *hashes: Any) -> None:
        self.hashes = [h for h in hashes if h is not None]

    def update(self, data: bytes) -> None:
        for h in self.hashes:
            h.update(data)


def _point_at(tensor: TensorProto, location: str, offset: int, length: int, checksum: str | None) -> None:
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        tensor.ClearField(field)
    del tensor.external_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset)), ("length", str(length))]
    if checksum:
        entries.append(("checksum", checksum))
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _write_proto(model: onnx.ModelProto, out_path: Path) -> None:
    size = model.ByteSize()
    if size > PROTOBUF_LIMIT:
        msg = (
            f"{out_path}: the model would be {size} bytes ({size / 2**30:.2f} GiB) inline, past protobuf's 2 GiB limit"
        )
        raise ModelFileError(msg, "store the weights in a data file: use '- external_data: {}' without 'inline: true'")
    if out_path.is_symlink() or out_path.exists():
        out_path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    with os.fdopen(os.open(out_path, flags, 0o644), "wb") as handle:
        handle.write(model.SerializeToString(deterministic=True))
        handle.flush()
        os.fsync(handle.fileno())
