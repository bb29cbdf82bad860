"""Reading external tensor data through patchspec's own path policy.

onnx and ONNX Runtime disagree on what a valid external reference is (onnx refuses symlinks and
``w..data``; the checker does no size checks; ORT memory-maps the file). patchspec checks every
reference itself before either library reads a byte (``validate_external_data``, ``check_tensor``),
and reads a tensor's bytes only through that check. Locations resolve against the model's folder as
the user named it (symlinks in that path are followed), never against the current directory.
``patchspec.model.data_writer`` writes outputs' data files.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import onnx
from onnx import TensorProto, helper

from patchspec.errors import ModelFileError, did_you_mean
from patchspec.model.data_names import ORT_MEMORY_MARKER
from patchspec.model.graph import subgraphs
from patchspec.printable import shown_path

ALLOWED_KEYS = {"location", "offset", "length", "checksum", "basepath"}
COPY_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class ExternalRef:
    """One tensor stored outside the .onnx, checked against patchspec's policy."""

    tensor: str
    location: str
    path: Path
    offset: int
    length: int
    checksum: str | None = None


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
    count = math.prod(int(d) for d in tensor.dims)  # exact: int64 wraps [2**32, 2**32] round to 0
    four_bit = {TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", -1)}
    if tensor.data_type in four_bit:
        return (count + 1) // 2
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


# -- the path policy ----------------------------------------------------------------------------
def check_location(location: str, tensor_name: str, model_path: Path) -> None:
    """Refuse empty, absolute, drive, UNC, ``..`` and ORT-marker locations before any byte is read."""
    where = f"{shown_path(model_path)}: tensor '{tensor_name}'"
    if not location:
        raise ModelFileError(f"{where}: external data has no 'location'")
    if "\x00" in location:
        raise ModelFileError(f"{where}: external data location {location!r} contains a NUL byte")
    if ORT_MEMORY_MARKER in location:
        msg = f"{where}: external data location '{location}' is ONNX Runtime's in-memory marker, not a file"
        raise ModelFileError(msg)
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    if (
        posix.is_absolute()
        or windows.is_absolute()
        or windows.drive
        or windows.root
        or location.startswith(("\\\\", "//"))
    ):
        msg = f"{where}: external data location '{location}' is absolute (root, drive or UNC prefix); it must be relative to the model's folder"
        raise ModelFileError(msg)
    if ".." in posix.parts or ".." in windows.parts:
        msg = f"{where}: external data location '{location}' leaves the model's folder ('..'); refusing to read it"
        raise ModelFileError(msg)


def validate_external_data(
    model: onnx.ModelProto,
    model_path: Path,
    *,
    strict_paths: bool = False,
    verify_checksums: bool = True,
    roots: tuple[Path, ...] = (),
) -> list[ExternalRef]:
    """Check every external reference of ``model`` (loaded from ``model_path``) against the policy.

    The model's folder is taken as named (not resolved), so a symlinked model keeps its data next
    to the link. ``strict_paths`` refuses symlinks anywhere below that folder and hard-linked files.
    ``roots``: folders a data file's real path (links followed) must lie in (the project root);
    one that leads elsewhere is refused before a byte is read (exit 3, docs/security.md).
    """
    model_path = Path(os.path.abspath(model_path))
    _refuse_missing_files(model, model_path)
    stats: dict[Path, os.stat_result] = {}
    refs = []
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            refs.append(check_tensor(tensor, model_path.parent, str(model_path), strict_paths, stats, roots))
    if verify_checksums:
        _verify_checksums(refs, model_path)
    return refs


def leads_inside(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether ``path``, every link followed, lies in one of ``roots`` (themselves resolved)."""
    real = os.path.realpath(path)
    for root in roots:
        base = os.path.realpath(root).rstrip(os.sep) + os.sep
        if real.startswith(base):
            return True
    return False


def _refuse_escape(where: str, location: str, path: Path, roots: tuple[Path, ...]) -> None:
    msg = (
        f"{where}: external data '{location}' leads to {os.path.realpath(path)}, outside the project "
        f"root {os.path.realpath(roots[0])}; refusing to read it"
    )
    hint = (
        "copy the data file into the project, or run with --root DIR naming a folder that holds its target "
        "(a command-line choice; neither the spec nor the model can widen it)"
    )
    raise ModelFileError(msg, hint)


def check_tensor(
    tensor: TensorProto,
    model_dir: Path,
    label: str,
    strict_paths: bool,
    stats: dict[Path, os.stat_result],
    roots: tuple[Path, ...] = (),
) -> ExternalRef:
    """One reference: keys, location, where its links lead (``roots``), file, offset and length
    (``label`` names the model in messages)."""
    where = f"{shown_path(label)}: tensor '{tensor.name}'"
    info = _entries(tensor, where)
    location = info.get("location", "")
    check_location(location, tensor.name, Path(label))
    path = model_dir / location
    if roots and not leads_inside(path, roots):  # before the file is even stat'ed: its size is not told
        _refuse_escape(where, location, path, roots)
    if path not in stats:
        stats[path] = _check_file(path, location, where, model_dir, strict_paths)
    size = stats[path].st_size
    offset = _int_field(info, "offset", 0, where)
    expected = _nbytes_or_refuse(tensor, where)
    length = _int_field(info, "length", expected, where)
    if length != expected:
        msg = (
            f"{where}: external data length {length} in '{location}' does not match its shape "
            f"{list(tensor.dims)} and type {_type_name(tensor)} ({expected} bytes)"
        )
        raise ModelFileError(msg)
    if offset + length > size:
        if is_lfs_pointer(path):
            raise ModelFileError(
                f"{where}: external data '{location}' is a Git LFS pointer ({size} bytes), not the data",
                f'fetch it: git lfs pull --include="{location}" (in the repository the model comes from)',
            )
        msg = (
            f"{where}: needs bytes {offset}..{offset + length} (offset {offset}, length {length}) of "
            f"'{location}' but the file has {size} bytes; it is truncated or not this model's data"
        )
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
        return str(TensorProto.DataType.Name(tensor.data_type)).lower()
    except ValueError:
        return f"data type {tensor.data_type}"


def _int_field(info: dict[str, str], key: str, default: int, where: str) -> int:
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
        seen = f"; a file of that name is at {', '.join(shown_path(p) for p in nearby)}" if nearby else ""
        lines.append(f"  '{location}' ({counts[location]} tensor{'s' * (counts[location] != 1)}){seen}")
    raise ModelFileError(
        f"{shown_path(model_path)}: {len(missing)} external data files not found in {shown_path(model_dir)}:\n"
        + "\n".join(lines),
        "put the data files next to the model (or fetch them: git lfs pull, huggingface-cli download)",
    )


def _same_name_nearby(model_dir: Path, name: str, limit: int = 3) -> list[Path]:
    """Files called ``name`` in the model folder's parent, siblings and sub-folders (two levels)."""
    found = []
    for folder in (
        [model_dir.parent, *sorted(p for p in model_dir.parent.iterdir() if p.is_dir())]
        if model_dir.parent.is_dir()
        else []
    ):
        for candidate in [folder / name, *sorted(folder.glob(f"*/{name}"))]:
            if candidate.is_file() and candidate.parent != model_dir and candidate not in found:
                found.append(candidate)
    return found[:limit]


def _missing_message(path: Path, location: str, where: str, model_dir: Path) -> str:
    if path.is_symlink():
        return f"{where}: external data '{location}' is a symbolic link to {os.readlink(path)}, which does not exist"
    folder = path.parent
    names = [p.name for p in folder.iterdir() if not p.name.endswith(".onnx")] if folder.is_dir() else []
    found = did_you_mean(path.name, names, limit=5) or "; no similarly named file there"
    if not folder.is_dir():
        found = f"; the folder {shown_path(folder)} does not exist"
    return f"{where}: external data file '{location}' not found in {shown_path(folder)}{found}"


def _verify_checksums(refs: list[ExternalRef], model_path: Path) -> None:
    """ONNX ``checksum`` entries: sha1 of the tensor's bytes (or, as some read the spec, of the file)."""
    whole_file: dict[Path, str] = {}
    for ref in refs:
        if ref.checksum is None or _sha1_range(ref.path, ref.offset, ref.length) == ref.checksum:
            continue
        if ref.path not in whole_file:
            whole_file[ref.path] = _sha1_range(ref.path, 0, ref.path.stat().st_size)
        if whole_file[ref.path] != ref.checksum:
            msg = (
                f"{shown_path(model_path)}: tensor '{ref.tensor}': bytes {ref.offset}..{ref.offset + ref.length} of "
                f"'{ref.location}' do not match its sha1 checksum {ref.checksum}; the data file is corrupt or not this model's"
            )
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
    ref = check_tensor(tensor, folder, str(folder), False, {})
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        raw = handle.read(ref.length)
    return onnx.numpy_helper.to_array(with_raw_data(tensor, raw))


def with_raw_data(tensor: TensorProto, raw: bytes) -> TensorProto:
    """A copy of ``tensor`` with ``raw`` as its inline bytes (its external reference dropped)."""
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.ClearField("data_location")
    inline.raw_data = raw
    return inline
