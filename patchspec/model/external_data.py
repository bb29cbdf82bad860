"""External tensor data: patchspec's own path policy, a validated reader and a streaming writer.

onnx and ONNX Runtime disagree on what a valid external reference is (onnx refuses symlinks and
``w..data``; the checker does no size checks; ORT memory-maps the file). patchspec checks every
reference itself before either library reads a byte, and writes data files itself: tensors are
copied from the input's files in bounded chunks (or in the kernel with ``copy_file_range``), never
loaded whole, and offsets are aligned. Locations resolve against the model's folder as the user
named it (symlinks in that path are followed), never against the current directory.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import onnx
from onnx import TensorProto, helper

from patchspec.errors import ModelFileError, UsageError, close_matches
from patchspec.model.graph import subgraphs
from patchspec.plugin.contract import StateKey

ALLOWED_KEYS = {"location", "offset", "length", "checksum", "basepath"}
COPY_CHUNK = 8 * 1024 * 1024
KERNEL_CHUNK = 64 * 1024 * 1024
PROTOBUF_LIMIT = 2**31 - 1
ORT_MEMORY_MARKER = "_ORT_MEM_ADDR_"
#: ``write_model``'s progress callback: (bytes done, bytes in all); the CLI's reporter draws it
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ExternalRef:
    """One tensor stored outside the .onnx, checked against patchspec's policy."""

    tensor: str
    location: str
    path: Path
    offset: int
    length: int
    checksum: str | None = None


#: in a layout's ``location``, replaced by the start of the output's digest (a content-addressed name)
DIGEST_FIELD = "{digest}"


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


def iter_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    """Every TensorProto in a graph: initializers, Constant/attribute tensors, subgraphs too."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
        for sub in subgraphs(node):
            yield from iter_tensors(sub)


def is_external(tensor: TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == TensorProto.EXTERNAL


def external_info(tensor: TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def expected_nbytes(tensor: TensorProto) -> int | None:
    """Bytes a tensor's data takes in raw form, or None for types without a fixed size (strings)."""
    if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    count = int(np.prod(tensor.dims, dtype=np.int64)) if len(tensor.dims) else 1
    four_bit = {TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", -1)}
    if tensor.data_type in four_bit:
        return (count + 1) // 2
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


# -- the path policy ----------------------------------------------------------------------------
def check_location(location: str, tensor_name: str, model_path: Path) -> None:
    """Refuse empty, absolute, drive, UNC, ``..`` and ORT-marker locations before any byte is read."""
    where = f"{model_path}: tensor '{tensor_name}'"
    if not location:
        raise ModelFileError(f"{where}: external data has no 'location'")
    if "\x00" in location:
        raise ModelFileError(f"{where}: external data location {location!r} contains a NUL byte")
    if ORT_MEMORY_MARKER in location:
        msg = f"{where}: external data location '{location}' is ONNX Runtime's in-memory marker, not a file"
        raise ModelFileError(msg)
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root or location.startswith(("\\\\", "//")):
        msg = f"{where}: external data location '{location}' is absolute (root, drive or UNC prefix); it must be relative to the model's folder"
        raise ModelFileError(msg)
    if ".." in posix.parts or ".." in windows.parts:
        msg = f"{where}: external data location '{location}' leaves the model's folder ('..'); refusing to read it"
        raise ModelFileError(msg)


def validate_external_data(model: onnx.ModelProto, model_path: Path, *, strict_paths: bool = False,
                           verify_checksums: bool = True) -> list[ExternalRef]:
    """Check every external reference of ``model`` (loaded from ``model_path``) against the policy.

    The model's folder is taken as named (not resolved), so a symlinked model keeps its data next
    to the link. ``strict_paths`` refuses symlinks anywhere below that folder and hard-linked files.
    """
    model_path = Path(os.path.abspath(model_path))
    _refuse_missing_files(model, model_path)
    stats: dict[Path, os.stat_result] = {}
    refs = []
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            refs.append(_check_tensor(tensor, model_path.parent, str(model_path), strict_paths, stats))
    if verify_checksums:
        _verify_checksums(refs, model_path)
    return refs


def _check_tensor(tensor: TensorProto, model_dir: Path, label: str, strict_paths: bool, stats: dict) -> ExternalRef:
    """One reference: keys, location, file, offset and length (``label`` names the model in messages)."""
    where = f"{label}: tensor '{tensor.name}'"
    info = _entries(tensor, where)
    location = info.get("location", "")
    check_location(location, tensor.name, Path(label))
    path = model_dir / location
    if path not in stats:
        stats[path] = _check_file(path, location, where, model_dir, strict_paths)
    size = stats[path].st_size
    offset = _int_field(info, "offset", 0, where)
    expected = _nbytes_or_refuse(tensor, where)
    length = _int_field(info, "length", expected, where)
    if length != expected:
        msg = (f"{where}: external data length {length} in '{location}' does not match its shape "
               f"{list(tensor.dims)} and type {_type_name(tensor)} ({expected} bytes)")
        raise ModelFileError(msg)
    if offset + length > size:
        if is_lfs_pointer(path):
            raise ModelFileError(f"{where}: external data '{location}' is a Git LFS pointer ({size} bytes), not the data",
                                 f"fetch it: git lfs pull --include=\"{location}\" (in the repository the model comes from)")
        msg = (f"{where}: needs bytes {offset}..{offset + length} (offset {offset}, length {length}) of "
               f"'{location}' but the file has {size} bytes; it is truncated or not this model's data")
        raise ModelFileError(msg, "copy the data file again from where the model came from")
    checksum = info.get("checksum", "").strip().lower() or None
    return ExternalRef(tensor.name, location, path, offset, length, checksum)


def _nbytes_or_refuse(tensor: TensorProto, where: str) -> int:
    if any(dim < 0 for dim in tensor.dims):
        raise ModelFileError(f"{where}: negative dimension in shape {list(tensor.dims)}")
    try:
        expected = expected_nbytes(tensor)
    except (KeyError, TypeError, ValueError):
        raise ModelFileError(f"{where}: unknown data type {tensor.data_type}") from None
    if expected is None:
        raise ModelFileError(f"{where}: a {_type_name(tensor)} tensor cannot be stored as external data")
    return expected


def _entries(tensor: TensorProto, where: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key not in ALLOWED_KEYS:
            msg = f"{where}: unknown external_data key '{entry.key}'; allowed: {', '.join(sorted(ALLOWED_KEYS))}"
            raise ModelFileError(msg)
        if entry.key in info:
            raise ModelFileError(f"{where}: external_data key '{entry.key}' is given twice")
        info[entry.key] = entry.value
    return info


def _type_name(tensor: TensorProto) -> str:
    try:
        return TensorProto.DataType.Name(tensor.data_type).lower()
    except ValueError:
        return f"data type {tensor.data_type}"


def _int_field(info: dict, key: str, default: int, where: str) -> int:
    if key not in info:
        return default
    text = info[key].strip()
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ModelFileError(f"{where}: external data {key} {info[key]!r} is not a non-negative integer")
    return int(text)


def _check_file(path: Path, location: str, where: str, model_dir: Path, strict_paths: bool) -> os.stat_result:
    if strict_paths:
        _refuse_links(path, location, where, model_dir)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(_missing_message(path, location, where, model_dir)) from None
    except OSError as exc:
        raise ModelFileError(f"{where}: cannot use external data '{location}': {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ModelFileError(f"{where}: external data '{location}' ({path}) is {kind}")
    if strict_paths and st.st_nlink > 1:
        msg = f"{where}: external data '{location}' has {st.st_nlink} hard links (refused by --strict-paths)"
        raise ModelFileError(msg, "copy the file instead of linking it, or drop --strict-paths")
    return st


def _refuse_links(path: Path, location: str, where: str, model_dir: Path) -> None:
    current = model_dir
    for part in PurePosixPath(location.replace("\\", "/")).parts:
        current = current / part
        if current.is_symlink():
            msg = f"{where}: external data '{location}' goes through the symbolic link {current} (refused by --strict-paths)"
            raise ModelFileError(msg, "copy the file instead of linking it, or drop --strict-paths")


#: the first line of a Git LFS pointer file, left in place of the content when LFS was not pulled
LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def is_lfs_pointer(path: Path) -> bool:
    """A small file that starts like a Git LFS pointer (checked by content, never by name)."""
    try:
        if os.path.getsize(path) > 1024:
            return False
        with open(path, "rb") as handle:
            return handle.read(len(LFS_POINTER)) == LFS_POINTER
    except OSError:
        return False


def _refuse_missing_files(model: onnx.ModelProto, model_path: Path) -> None:
    """One error for every missing data file at once, with its tensor count and where a file of that
    name does exist nearby (a sibling or sub-folder of the model's folder)."""
    counts: dict[str, int] = {}
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            location = external_info(tensor).get("location", "")
            counts[location] = counts.get(location, 0) + 1
    model_dir = model_path.parent
    missing = [loc for loc in counts if loc and not os.path.lexists(model_dir / loc)]
    if len(missing) < 2:
        return  # none, or one: the per-tensor check names it with similar files
    lines = []
    for location in missing:
        nearby = _same_name_nearby(model_dir, PurePosixPath(location.replace("\\", "/")).name)
        seen = f"; a file of that name is at {', '.join(str(p) for p in nearby)}" if nearby else ""
        lines.append(f"  '{location}' ({counts[location]} tensor{'s' * (counts[location] != 1)}){seen}")
    raise ModelFileError(f"{model_path}: {len(missing)} external data files not found in {model_dir}:\n" + "\n".join(lines),
                         "put the data files next to the model (or fetch them: git lfs pull, huggingface-cli download)")


def _same_name_nearby(model_dir: Path, name: str, limit: int = 3) -> list[Path]:
    """Files called ``name`` in the model folder's parent, siblings and sub-folders (two levels)."""
    found = []
    for folder in [model_dir.parent, *sorted(p for p in model_dir.parent.iterdir() if p.is_dir())] \
            if model_dir.parent.is_dir() else []:
        for candidate in [folder / name, *sorted(folder.glob(f"*/{name}"))]:
            if candidate.is_file() and candidate.parent != model_dir and candidate not in found:
                found.append(candidate)
    return found[:limit]


def _missing_message(path: Path, location: str, where: str, model_dir: Path) -> str:
    if path.is_symlink():
        return f"{where}: external data '{location}' is a symbolic link to {os.readlink(path)}, which does not exist"
    folder = path.parent
    names = [p.name for p in folder.iterdir() if not p.name.endswith(".onnx")] if folder.is_dir() else []
    similar = close_matches(path.name, names, limit=5)
    found = "; similar files there: " + ", ".join(repr(n) for n in similar) if similar else "; no similarly named file there"
    if not folder.is_dir():
        found = f"; the folder {folder} does not exist"
    return f"{where}: external data file '{location}' not found in {folder}{found}"


def _verify_checksums(refs: list[ExternalRef], model_path: Path) -> None:
    """ONNX ``checksum`` entries: sha1 of the tensor's bytes (or, as some read the spec, of the file)."""
    whole_file: dict[Path, str] = {}
    for ref in refs:
        if ref.checksum is None or _sha1_range(ref.path, ref.offset, ref.length) == ref.checksum:
            continue
        if ref.path not in whole_file:
            whole_file[ref.path] = _sha1_range(ref.path, 0, ref.path.stat().st_size)
        if whole_file[ref.path] != ref.checksum:
            msg = (f"{model_path}: tensor '{ref.tensor}': bytes {ref.offset}..{ref.offset + ref.length} of "
                   f"'{ref.location}' do not match its sha1 checksum {ref.checksum}; the data file is corrupt or not this model's")
            raise ModelFileError(msg, "copy the data file again from where the model came from")


def _sha1_range(path: Path, offset: int, length: int) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as handle:
        handle.seek(offset)
        remaining = length
        while remaining:
            chunk = handle.read(min(COPY_CHUNK, remaining))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
            del chunk
    return digest.hexdigest()


def data_files(refs: list[ExternalRef]) -> list[Path]:
    """Distinct data files, in first-use order."""
    return list(dict.fromkeys(ref.path for ref in refs))


def read_tensor(tensor: TensorProto, model_dir: Path) -> np.ndarray:
    """The value of a tensor, reading external data through the validated path (never via the CWD)."""
    if not is_external(tensor):
        return onnx.numpy_helper.to_array(tensor)
    folder = Path(os.path.abspath(model_dir))
    ref = _check_tensor(tensor, folder, str(folder), False, {})
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        raw = handle.read(ref.length)
    return onnx.numpy_helper.to_array(_with_raw(tensor, raw))


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


def refuse_input_overwrite(layout: Layout, output: Path, inputs: list[Path]) -> None:
    """Refuse a data file name that would replace the input model or one of its data files."""
    name = layout.data_name(output)
    if name is None:
        return
    target = output.parent / name
    for path in inputs:
        if os.path.abspath(target) == os.path.abspath(path) or (target.exists() and _same_file(target, path)):
            msg = f"{target}: the output's data file would replace the input's '{path.name}'; patchspec never modifies its input"
            raise UsageError(msg, "choose another 'location' in the external_data patch, or another output folder")
    if name == output.name:
        raise UsageError(f"{target}: the output's data file has the model's own name", "choose another 'location'")


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
    return model.ByteSize() + extra


def refuse_inline_overflow(model: onnx.ModelProto, where: str) -> None:
    size = inline_size(model)
    if size > PROTOBUF_LIMIT:
        msg = f"{where}: the model would be {size} bytes ({size / 2**30:.2f} GiB) inline, past protobuf's 2 GiB limit"
        raise ModelFileError(msg, "store the weights in a data file: use '- external_data: {}' without 'inline: true'")


# -- the writer -------------------------------------------------------------------------------------
def write_model(model: onnx.ModelProto, out_path: Path, source_dir: Path, layout: Layout,
                progress: Progress | None = None,
                finalize: Callable[[onnx.ModelProto], None] | None = None) -> list[Path]:
    """Write ``model`` to ``out_path`` (+ its data file) without changing ``model``.

    External tensors are copied from ``source_dir`` in bounded chunks; tensors of at least
    ``size_threshold`` bytes go to the data file, each at an offset that is a multiple of
    ``layout.align``. Files are created new (never appended to, never through a symlink).
    ``finalize`` may still change the graph-only output (metadata, a digest computed meanwhile)
    after the data file is written and before the .onnx is. Returns the files written.
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
            tensor.CopyFrom(_with_raw(tensor, _read_external(tensor, source_dir)))
    written = [out_path]
    moving = [tensor for tensor, external in plan if external]
    if moving:
        data_path = out_path.parent / data_name
        _write_data_file(moving, data_path, data_name, source_dir, layout, progress)
        written.append(data_path)
    if finalize is not None:
        finalize(output)
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
    ref = _check_tensor(tensor, source_dir, str(source_dir), False, {})
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        return handle.read(ref.length)


def _with_raw(tensor: TensorProto, raw: bytes) -> TensorProto:
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.ClearField("data_location")
    inline.raw_data = raw
    return inline


class _Sink:
    """A data file being written: created new, positioned writes, progress over the whole copy."""

    def __init__(self, path: Path, total: int, progress: Progress | None) -> None:
        if path.is_symlink() or path.exists():
            path.unlink()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        self.fd = os.open(path, flags, 0o644)
        self.position, self.done, self.total, self.progress = 0, 0, total, progress
        self.kernel_copy = hasattr(os, "copy_file_range")

    def pad_to(self, align: int) -> int:
        padded = -(-self.position // align) * align if align > 1 else self.position
        if padded > self.position:
            self.write(b"\0" * (padded - self.position), count=False)
        return self.position

    def write(self, data: bytes, count: bool = True) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
            self.position += written
        if count:
            self._advance(len(data))

    def copy_from(self, source_fd: int, offset: int, length: int, digest) -> None:
        """Copy a byte range; in the kernel when no checksum is wanted and the platform allows."""
        end = offset + length
        while offset < end:
            step = min(KERNEL_CHUNK if digest is None and self.kernel_copy else COPY_CHUNK, end - offset)
            copied = self._kernel_copy(source_fd, offset, step) if digest is None and self.kernel_copy else 0
            if not copied:
                chunk = _read_at(source_fd, step, offset)
                if not chunk:
                    raise ModelFileError(f"data file ended {end - offset} bytes early while copying (changed during the run?)")
                if digest is not None:
                    digest.update(chunk)
                self.write(chunk, count=False)
                copied = len(chunk)
                del chunk  # one chunk in memory at a time
            offset += copied
            self._advance(copied)

    def _kernel_copy(self, source_fd: int, offset: int, step: int) -> int:
        try:
            copied = os.copy_file_range(source_fd, self.fd, step, offset, self.position)
        except OSError:
            self.kernel_copy = False  # cross-device, unsupported filesystem: plain reads from now on
            return 0
        self.position += copied
        os.lseek(self.fd, self.position, os.SEEK_SET)
        return copied

    def _advance(self, nbytes: int) -> None:
        self.done += nbytes
        if self.progress is not None:
            self.progress(self.done, self.total)

    def close(self) -> None:
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)


def _read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: no pread; the source fd is ours alone
    return os.read(fd, size)


def _write_data_file(tensors: list[TensorProto], data_path: Path, data_name: str, source_dir: Path,
                     layout: Layout, progress: Progress | None) -> None:
    total = sum(expected_nbytes(t) or 0 for t in tensors)
    sink = _Sink(data_path, total, progress)
    sources: dict[Path, int] = {}
    try:
        for tensor in tensors:
            start = sink.pad_to(layout.align)
            checksum = _place_one(tensor, sink, source_dir, layout, sources)
            _point_at(tensor, data_name, start, sink.position - start, checksum)
    finally:
        for fd in sources.values():
            os.close(fd)
        sink.close()


def _place_one(tensor: TensorProto, sink: _Sink, source_dir: Path, layout: Layout, sources: dict) -> str | None:
    """Write one tensor's bytes at the sink's position; returns the checksum to record, if any."""
    digest = hashlib.sha1(usedforsecurity=False) if layout.checksum else None
    if is_external(tensor):
        ref = _check_tensor(tensor, source_dir, str(source_dir), False, {})
        if ref.path not in sources:
            sources[ref.path] = os.open(ref.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        sink.copy_from(sources[ref.path], ref.offset, ref.length, digest)
        kept = ref.checksum if layout.keep_external else None
        return digest.hexdigest() if digest is not None else kept
    raw = tensor.raw_data if tensor.HasField("raw_data") else onnx.numpy_helper.to_array(tensor).tobytes()
    sink.write(raw)
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest() if digest is not None else None


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
        msg = f"{out_path}: the model would be {size} bytes ({size / 2**30:.2f} GiB) inline, past protobuf's 2 GiB limit"
        raise ModelFileError(msg, "store the weights in a data file: use '- external_data: {}' without 'inline: true'")
    if out_path.is_symlink() or out_path.exists():
        out_path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    with os.fdopen(os.open(out_path, flags, 0o644), "wb") as handle:
        handle.write(model.SerializeToString(deterministic=True))
        handle.flush()
        os.fsync(handle.fileno())
