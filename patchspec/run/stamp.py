"""The digest and stamp of an output: what it was built from, and whether it still is.

An output's metadata records patchspec's version, the digest of everything it was built from, those
parts one by one (so a stale output names the input that changed) and its own data files by size
and pieces digest (``patchspec.model.data_pieces``: so a changed data file is found with a stat, or
a read where its identity changed). A record of another form (``{size, sha256}``, as patchspec wrote it
before) proves nothing: such an output is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from patchspec import __version__
from patchspec.model.data_pieces import PREFIX as PIECES
from patchspec.model.data_pieces import Range, fingerprint
from patchspec.model.external_data import data_files, external_info, is_external, iter_tensors, validate_external_data
from patchspec.printable import shown_path

VERSION_KEY = "patchspec.version"
DIGEST_KEY = "patchspec.digest"
#: what the digest was made of, part by part (JSON), so a stale output can name the input that changed
INPUTS_KEY = "patchspec.inputs"
#: the output's own data files as the build wrote them (JSON: name -> size, pieces digest and the
#: fingerprint of the ranges it is cut by), checked like inputs
FILES_KEY = "patchspec.files"


def digest_of(parts: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def stamp_model(model: onnx.ModelProto, parts: dict[str, str], files: dict[str, dict[str, Any]]) -> None:
    """Record in ``model``'s metadata what it was built from (``parts``) and its data files (``files``)."""
    keep = [p for p in model.metadata_props if p.key not in (VERSION_KEY, DIGEST_KEY, INPUTS_KEY, FILES_KEY)]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    stamps = (
        (VERSION_KEY, __version__),
        (DIGEST_KEY, digest_of(parts)),
        (INPUTS_KEY, json.dumps(parts, sort_keys=True)),
        (FILES_KEY, json.dumps(files, sort_keys=True)),
    )
    for key, value in stamps:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def data_ranges(model: onnx.ModelProto) -> dict[str, list[Range]]:
    """Each data file ``model`` points at, by location: its tensors' ranges (offset, length)."""
    ranges: dict[str, list[Range]] = {}
    for tensor in iter_tensors(model.graph):
        if is_external(tensor):
            info = external_info(tensor)
            try:
                piece = (int(info.get("offset", "0")), int(info["length"]))
            except (KeyError, ValueError):
                piece = (0, 0)  # no length: the record's cut (the writer's) is not this model's
            ranges.setdefault(info.get("location", ""), []).append(piece)
    return ranges


def data_record(
    model: onnx.ModelProto, folder: Path, pieces: Callable[[Path, list[Range]], str]
) -> dict[str, dict[str, Any]]:
    """Size, pieces digest and cut of each data file ``model`` (written in ``folder``) points at."""
    return {
        name: {"size": (folder / name).stat().st_size, "pieces": pieces(folder / name, cut), "ranges": fingerprint(cut)}
        for name, cut in data_ranges(model).items()
    }


@dataclass(frozen=True)
class OutputStamp:
    """What an existing output says of the build that wrote it, and of the data files that build wrote."""

    digest: str
    parts: dict[str, Any] | None  # what the digest was made of (None: written before patchspec recorded it)
    data_files: list[Path]
    #: the data files as the build wrote them, name -> {size, pieces, ranges} (None: not recorded)
    recorded: dict[str, dict[str, Any]] | None = None
    complete: bool = True  # the data files hold every tensor the model points at (sizes suffice)
    folder: Path = Path()  # the output's folder, where the recorded names are
    ranges: dict[str, list[Range]] | None = None  # each data file's tensor ranges, by the model

    @classmethod
    def read(cls, output: Path) -> OutputStamp | None:
        """The stamp of ``output``; None when it is not a patchspec output, or when its data files
        are incomplete and no record says which (``data_changes`` names them where one does)."""
        if not output.is_file():
            return None
        try:
            model = onnx.load(str(output), load_external_data=False)
        except Exception:
            return None
        props = {prop.key: prop.value for prop in model.metadata_props}
        if DIGEST_KEY not in props:
            return None
        parts, recorded = _json_dict(props.get(INPUTS_KEY)), _recorded_files(props.get(FILES_KEY))
        try:
            files, complete = data_files(validate_external_data(model, output, verify_checksums=False)), True
        except Exception:
            if recorded is None:
                return None
            files, complete = [output.parent / name for name in recorded], False
        if recorded is not None:
            files = [output.parent / name for name in recorded]
        return cls(props[DIGEST_KEY], parts, files, recorded, complete, output.parent, data_ranges(model))

    def data_changes(self, pieces: Callable[[Path, list[Range]], str]) -> list[str]:
        """How the output's data files differ from what the build recorded, each named by its path;
        [] when they are as built. A size is a stat; ``pieces`` (the stat cache's pieces digest, cut
        by the model's ranges) reads a file only when its identity changed since it was last hashed."""
        if self.recorded is None:
            return (
                ["the output's data files were not recorded by the patchspec that built it"] if self.data_files else []
            )
        changes = []
        for name, built in self.recorded.items():
            path = self.folder / name
            try:
                size = os.stat(path).st_size
            except OSError:
                changes.append(f"{shown_path(path)} is missing")
                continue
            if size != built["size"]:
                changes.append(f"{shown_path(path)} changed (size {built['size']} -> {size})")
            elif pieces(path, (self.ranges or {}).get(name, [])) != built["pieces"]:
                changes.append(f"{shown_path(path)} changed (same size, different content)")
        if not changes and not self.complete:
            changes.append("the output is incomplete (its model points past its data files)")
        return changes


def _json_dict(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _recorded_files(text: str | None) -> dict[str, dict[str, Any]] | None:
    """The ``patchspec.files`` record, if well formed and of this form (else None: the data files
    cannot be checked, and the output is rebuilt)."""
    record = _json_dict(text)
    if record is None:
        return None
    for name, entry in record.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and isinstance(entry.get("pieces"), str)
            and entry["pieces"].startswith(PIECES)
        ):
            return None
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return None
    return record


def input_changes(built_from: dict[str, str] | None, parts: dict[str, str], paths: dict[str, Path]) -> list[str]:
    """What differs between the parts an output was built from and today's: a file by its path
    (``paths``: part name -> file), a version with both values."""
    if built_from is None:
        return ["built by a patchspec that did not record its inputs"]
    changed = []
    for name in parts:
        if name not in built_from:
            changed.append(f"{shown_path(paths[name]) if name in paths else name} is new")
        elif built_from[name] != parts[name]:
            changed.append(
                f"{shown_path(paths[name])} changed"
                if name in paths
                else f"{name} changed ({built_from[name]} -> {parts[name]})"
            )
    changed += [f"{name} is gone" for name in built_from if name not in parts]
    return changed or ["the digest differs"]
