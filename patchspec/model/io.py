"""Load an input model, graph only, with one clear error for each way a file can be unusable."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from patchspec.errors import ModelFileError
from patchspec.model.external_data import LFS_POINTER
from patchspec.printable import shown_path


@dataclass(frozen=True)
class FileStamp:
    """Identity of a file at a moment: if any field changes, the file changed under us."""

    path: Path
    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileStamp:
        st = os.stat(path)
        return cls(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def unchanged(self) -> bool:
        try:
            return FileStamp.of(self.path) == self
        except OSError:
            return False


#: the largest .onnx protobuf can parse (2 GiB); a bigger file is not a model
MAX_MODEL_BYTES = 2**31


def load_model(path: Path) -> onnx.ModelProto:
    """Parse ``path`` without reading external weights; refuse what is not a usable ONNX model."""
    raw = read_regular_file(path, MAX_MODEL_BYTES, "an ONNX model")
    if not raw:
        raise ModelFileError(f"{shown_path(path)}: not an ONNX model (0 bytes)")
    if raw.startswith(LFS_POINTER):
        raise ModelFileError(
            f"{shown_path(path)}: a Git LFS pointer ({len(raw)} bytes), not the model",
            f'fetch it: git lfs pull --include="{path.name}" (in the repository it comes from)',
        )
    model = onnx.ModelProto()
    try:
        model.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError):
        raise ModelFileError(f"{shown_path(path)}: not an ONNX model (parse failed)") from None
    _check_complete(model, path, len(raw))
    _check_versions(model, path)
    return model


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    A device (``/dev/zero``), a FIFO or a socket is refused: the file is opened non-blocking (a
    FIFO would block forever), checked on the open descriptor, and never more than its size at that
    moment is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ModelFileError(f"{shown_path(path)}: No such file or directory") from None
    except OSError as exc:
        raise ModelFileError(f"{shown_path(path)}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ModelFileError(f"{shown_path(path)}: is a directory, not {what}")
        if not stat.S_ISREG(st.st_mode):
            raise ModelFileError(
                f"{shown_path(path)}: is not a regular file (a device, FIFO or socket), not {what}",
                "name the file itself; patchspec reads only regular files",
            )
        if st.st_size > limit:
            raise ModelFileError(f"{shown_path(path)}: {st.st_size} bytes, more than {what} can be ({limit} bytes)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(st.st_size)
    except OSError as exc:
        raise ModelFileError(f"{shown_path(path)}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _check_complete(model: onnx.ModelProto, path: Path, size: int) -> None:
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelFileError(f"{shown_path(path)}: not an ONNX model (no graph in {size} bytes)")
    if model.ir_version >= 3 and not model.opset_import:
        raise ModelFileError(f"{shown_path(path)}: not an ONNX model (no opset_import; the file may be truncated)")


def _check_versions(model: onnx.ModelProto, path: Path) -> None:
    if model.ir_version > onnx.IR_VERSION:
        msg = f"{shown_path(path)}: IR version {model.ir_version} is newer than the installed onnx {onnx.__version__} supports ({onnx.IR_VERSION})"
        raise ModelFileError(msg, "upgrade onnx and onnxruntime, or export the model with an older IR version")
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            msg = f"{shown_path(path)}: opset {opset.version} is newer than the installed onnx {onnx.__version__} supports ({newest})"
            raise ModelFileError(msg, "upgrade onnx and onnxruntime")
