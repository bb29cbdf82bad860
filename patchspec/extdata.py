"""External tensor data: patchspec's own path policy, a validated reader and a streaming writer.

onnx and ONNX Runtime disagree on what a valid external reference is (onnx refuses symlinks and
``w..data``; the checker does no size checks; ORT memory-maps the file). patchspec checks every
reference itself before either library reads a byte, and writes data files itself: tensors are
copied from the input's files in bounded chunks, never loaded whole, and offsets are aligned.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper

from .errors import ModelFileError, did_you_mean

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


@dataclass(frozen=True)
class Layout:
    """How the output stores tensor data."""

    location: str | None  # data file name next to the output; None: everything inline
    size_threshold: int = 1024
    align: int = 4096
    checksum: bool = False


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
            if attr.HasField("g"):
                yield from iter_tensors(attr.g)
            for sub in attr.graphs:
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
    if tensor.data_type in (TensorProto.INT4, TensorProto.UINT4) or tensor.data_type == getattr(TensorProto, "FLOAT4E2M1", -1):
        return (count + 1) // 2
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return count * itemsize


def check_location(location: str, tensor_name: str, model_path: Path) -> None:
    """Refuse absolute, drive, UNC and ``..`` locations before any byte is read."""
    where = f"{model_path}: tensor '{tensor_name}'"
    if not location:
        raise ModelFileError(f"{where}: external data has no 'location'")
    if "\x00" in location:
        raise ModelFileError(f"{where}: external data location contains a NUL byte")
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or location.startswith(("\\\\", "//")):
        raise ModelFileError(f"{where}: external data location '{location}' is absolute; it must be relative to the model's folder")
    if ".." in posix.parts or ".." in windows.parts:
        raise ModelFileError(f"{where}: external data location '{location}' escapes the model's folder ('..'); refusing to read it")


def validate_external_data(model: onnx.ModelProto, model_path: Path, *, strict_paths: bool = False) -> list[ExternalRef]:
    """Check every external reference of ``model`` (loaded from ``model_path``) against the policy."""
    model_dir = model_path.resolve().parent
    refs = []
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            refs.append(_check_tensor(tensor, model_path, model_dir, strict_paths))
    return refs


def _check_tensor(tensor: TensorProto, model_path: Path, model_dir: Path, strict_paths: bool) -> ExternalRef:
    where = f"{model_path}: tensor '{tensor.name}'"
    info = external_info(tensor)
    unknown = sorted(set(info) - ALLOWED_KEYS)
    if unknown:
        raise ModelFileError(f"{where}: unknown external_data key(s) {unknown}; allowed: {sorted(ALLOWED_KEYS)}")
    location = info.get("location", "")
    check_location(location, tensor.name, model_path)
    offset = _int_field(info, "offset", 0, where)
    path = model_dir / location
    _check_file(path, location, where, model_dir, strict_paths)
    size = path.stat().st_size
    expected = expected_nbytes(tensor)
    length = _int_field(info, "length", -1, where)
    if length < 0:
        length = size - offset if expected is None else expected
    if expected is not None and length != expected:
        raise ModelFileError(f"{where}: external length {length} does not match its shape and type ({expected} bytes)")
    if offset + length > size:
        raise ModelFileError(
            f"{where}: needs bytes {offset}..{offset + length} of '{location}' but the file has {size} bytes (truncated?)"
        )
    return ExternalRef(tensor.name, location, path, offset, length)


def _int_field(info: dict, key: str, default: int, where: str) -> int:
    if key not in info:
        return default
    text = info[key]
    if not re.fullmatch(r"[0-9]+", text or ""):
        raise ModelFileError(f"{where}: external data {key} {text!r} is not a non-negative integer")
    return int(text)


def _check_file(path: Path, location: str, where: str, model_dir: Path, strict_paths: bool) -> None:
    if strict_paths and (path.is_symlink() or any(p.is_symlink() for p in path.relative_to(model_dir).parents if str(p) != ".")):
        raise ModelFileError(f"{where}: external data '{location}' is a symbolic link (refused by --strict-paths)")
    if not path.exists():
        siblings = [p.name for p in model_dir.iterdir() if p.is_file()] if model_dir.is_dir() else []
        raise ModelFileError(f"{where}: external data file '{location}' not found in {model_dir}" + did_you_mean(location, siblings))
    if not path.is_file():
        raise ModelFileError(f"{where}: external data '{location}' is not a regular file")


def data_files(refs: list[ExternalRef]) -> list[Path]:
    """Distinct data files, in first-use order."""
    return list(dict.fromkeys(ref.path for ref in refs))


def read_tensor(tensor: TensorProto, model_dir: Path) -> np.ndarray:
    """The value of a tensor, reading external data through the validated path (never via the CWD)."""
    if not is_external(tensor):
        return onnx.numpy_helper.to_array(tensor)
    info = external_info(tensor)
    offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
    with open(model_dir / info["location"], "rb") as handle:
        handle.seek(offset)
        raw = handle.read() if length < 0 else handle.read(length)
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = TensorProto.DEFAULT
    inline.raw_data = raw
    return onnx.numpy_helper.to_array(inline)


def default_layout(model: onnx.ModelProto, output: Path) -> Layout:
    """Inline stays inline; external data goes to ``<output file name>.data`` next to the output."""
    if any(is_external(t) for t in iter_tensors(model.graph)):
        return Layout(location=output.name + ".data")
    return Layout(location=None)


def write_model(model: onnx.ModelProto, out_path: Path, source_dir: Path, layout: Layout, progress=None) -> list[Path]:
    """Write ``model`` to ``out_path`` (+ its data file) without changing ``model``.

    External tensors are copied from ``source_dir`` in chunks; with a ``layout.location``, inline
    tensors of at least ``size_threshold`` bytes move to the data file too, each at an offset that
    is a multiple of ``layout.align``. Returns the files written.
    """
    written = [out_path]
    output = onnx.ModelProto()
    output.CopyFrom(model)
    tensors = list(iter_tensors(output.graph))
    if layout.location is None:
        for tensor in tensors:
            if is_external(tensor):
                _inline(tensor, source_dir)
    else:
        data_path = out_path.parent / layout.location
        with open(data_path, "wb") as sink:
            for tensor in tensors:
                _place(tensor, sink, source_dir, layout, progress)
            sink.flush()
            os.fsync(sink.fileno())
        written.append(data_path)
    _write_proto(output, out_path)
    return written


def _inline(tensor: TensorProto, source_dir: Path) -> None:
    array = read_tensor(tensor, source_dir)
    tensor.CopyFrom(_with_raw(tensor, array.tobytes()))


def _with_raw(tensor: TensorProto, raw: bytes) -> TensorProto:
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = TensorProto.DEFAULT
    inline.raw_data = raw
    return inline


def _place(tensor: TensorProto, sink, source_dir: Path, layout: Layout, progress) -> None:
    if is_external(tensor):
        info = external_info(tensor)
        source, offset, length = source_dir / info["location"], int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
        if length is None:
            length = os.path.getsize(source) - offset
        start = _pad_to(sink, layout.align)
        _copy_range(source, offset, length, sink, progress)
    else:
        if tensor.data_type == TensorProto.STRING or not tensor.name:
            return
        raw = _raw_bytes(tensor)
        if len(raw) < layout.size_threshold:
            return
        start = _pad_to(sink, layout.align)
        sink.write(raw)
        length = len(raw)
        if progress:
            progress(length)
    tensor.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        tensor.ClearField(field)
    del tensor.external_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", layout.location), ("offset", str(start)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _raw_bytes(tensor: TensorProto) -> bytes:
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return onnx.numpy_helper.to_array(tensor).tobytes()


def _pad_to(sink, align: int) -> int:
    position = sink.tell()
    padded = -(-position // align) * align if align > 1 else position
    if padded != position:
        sink.write(b"\0" * (padded - position))
    return padded


def _copy_range(source: Path, offset: int, length: int, sink, progress) -> None:
    with open(source, "rb") as handle:
        handle.seek(offset)
        remaining = length
        while remaining:
            chunk = handle.read(min(COPY_CHUNK, remaining))
            if not chunk:
                raise ModelFileError(f"{source}: ended {remaining} bytes early while copying (changed during the run?)")
            sink.write(chunk)
            remaining -= len(chunk)
            if progress:
                progress(len(chunk))


def _write_proto(model: onnx.ModelProto, out_path: Path) -> None:
    size = model.ByteSize()
    if size > 2**31 - 1:
        msg = f"{out_path}: the model would be {size / 2**30:.2f} GiB inline, past protobuf's 2 GiB limit"
        raise ModelFileError(msg, "store the weights as external data: add '- external_data: {}' to the patches")
    with open(out_path, "wb") as handle:
        handle.write(model.SerializeToString(deterministic=True))
        handle.flush()
        os.fsync(handle.fileno())
