"""A private copy of a model's folder for onnxruntime, when it will not follow the user's links.

onnxruntime >= 1.24 resolves an external-data file's links and refuses one whose real path lies
outside the model's folder ("External data path escapes model directory"). A Hugging Face cache is
made of exactly such links (snapshots/<rev>/model.onnx.data -> ../../blobs/<sha>). For a reference
session, patchspec stages the model: a private temporary folder holding the .onnx and each data
file under the name the model uses, as a hard link where the filesystem allows one (no bytes
copied), else as a copy. The user's files are never moved or changed; the folder is removed when
the session that uses it is gone, and one left by a killed process (its pid is in the name) is
removed by the next.

Staging never makes onnxruntime read what patchspec would refuse: a data file is linked only when
its real path lies in the project root (the nearest folder above the model holding ``.git``, else
the model's folder, or the root the run was given); one that leads elsewhere is refused (exit 3).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

from patchspec.errors import ModelFileError
from patchspec.interrupts import deferred
from patchspec.model.external_data import data_files, validate_external_data
from patchspec.model.io import load_model
from patchspec.run.commit import remove_dead_folders
from patchspec.spec.confine import Root

PREFIX = "patchspec-stage-"


def staged_copy(model_path: Path, owner: object, root: Path | None = None) -> Path:
    """The model at a private path where its data files sit, really, next to it; removed with ``owner``.

    ``root``: the folder every data file must really lie in (default: as :class:`Root` finds it
    for a spec beside the model)."""
    model = load_model(model_path)
    allowed = Root.of(model_path, root).folder
    refs = validate_external_data(model, model_path, roots=(allowed,))
    try:
        remove_dead_folders(Path(tempfile.gettempdir()), PREFIX)
        with deferred():  # made and registered for removal whole: a signal between them left it behind
            folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
            weakref.finalize(owner, shutil.rmtree, folder, True)
        staged = folder / model_path.name
        _link_or_copy(model_path, staged)
        for data in data_files(refs):
            target = folder / data.relative_to(model_path.parent)  # the location the model writes
            target.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(data, target)
    except OSError as exc:  # TMPDIR full, missing or read-only: the machine's fault, not the spec's
        raise ModelFileError(
            f"{model_path}: cannot stage a private copy for onnxruntime in the temporary folder "
            f"({tempfile.gettempdir()}): {exc.strerror or exc}",
            "free space there, or set TMPDIR to a folder with room for the model's data",
        ) from None
    return staged


def _link_or_copy(source: Path, target: Path) -> None:
    real = source.resolve()
    try:
        os.link(real, target)
    except OSError:  # another filesystem, or links not allowed: the bytes, once
        shutil.copyfile(real, target)


__all__ = ["staged_copy"]
