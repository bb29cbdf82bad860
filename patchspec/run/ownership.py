"""Which existing files a spec's build may replace: the outputs patchspec wrote, and nothing else.

A spec creates new files, or replaces what patchspec wrote as an output: a model that carries
patchspec's stamp (``patchspec.digest`` in its metadata), and the data files such a model at the
output path names. Any other file at a path the spec names (``pyproject.toml``, the tracked
``LICENSE``, a model someone downloaded) is refused before anything is written (exit 2). Forging a
stamp gains nothing: the forged file is a model the forger committed, and it is replaced by a model.

The caller widens the rule from the command line: ``--output`` names the model path itself, and
``--output-dir DIR`` lets specs replace any regular file in DIR (never in ``.git`` or a virtual
environment, which :mod:`patchspec.spec.confine` refuses first).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from patchspec.errors import UsageError
from patchspec.model.external_data import external_info, is_external, iter_tensors
from patchspec.run.stamp import DIGEST_KEY, FILES_KEY
from patchspec.spec.confine import GRANT_HINT, Root, name_problem


def output_names(model_path: Path) -> set[str] | None:
    """The data file names the patchspec output at ``model_path`` names, or None when the file there
    is not a model patchspec wrote (not a regular file, not a model, or no stamp)."""
    import onnx

    try:
        if not stat.S_ISREG(os.lstat(model_path).st_mode):
            return None
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # not a model at all: not patchspec's
        return None
    props = {prop.key: prop.value for prop in model.metadata_props}
    if DIGEST_KEY not in props:
        return None
    names = {external_info(t)["location"] for t in iter_tensors(model.graph) if is_external(t)}
    try:
        recorded = json.loads(props.get(FILES_KEY, "{}"))
    except ValueError:
        recorded = {}
    return names | (set(recorded) if isinstance(recorded, dict) else set())


def refuse_foreign(
    output: Path, data_names: list[str], root: Root, proven: Callable[[Path], bool], *, output_given: bool
) -> None:
    """Exit 2 when the build would replace a file patchspec did not write.

    ``output_given``: the model path came from ``--output`` (the caller's choice: whatever is there
    is replaced); its data files' names still come from the spec. ``proven(path)``: this machine's
    record that patchspec wrote ``path`` (the stat cache's :meth:`~patchspec.run.statcache.StatCache.wrote`),
    for a data file whose model is gone. Files in a folder the caller made an output folder
    (``--output-dir``) may all be replaced."""
    existing = [name for name in data_names if os.path.lexists(output.parent / name)]
    model_exists = os.path.lexists(output)
    if not (existing or (model_exists and not output_given)) or root.granted(output):
        return
    owned = output_names(output) if model_exists else None
    if model_exists and not output_given and owned is None:
        raise UsageError(
            f"{output}: the output would replace a file patchspec did not write (it carries no patchspec stamp)",
            f"remove the file or choose another 'output' if it is not needed, {GRANT_HINT}",
        )
    for name in existing:
        if (owned is None or name not in owned) and not proven(output.parent / name):
            raise UsageError(
                f"{output.parent / name}: the output's data file would replace a file patchspec did not write "
                f"(no patchspec output at {output.name} names it)",
                f"choose another 'location', remove the file, {GRANT_HINT}",
            )


def refuse_data_file(
    output: Path, name: str | None, root: Root, proven: Callable[[Path], bool], *, output_given: bool
) -> None:
    """The output's data file ``name`` (None: no data file) may be written: a data file's name (unless
    the caller made its folder an output folder), and not a file patchspec did not write."""
    if name is None:
        return
    refused = None if root.granted(output) else name_problem(name, model=False)
    if refused:
        raise UsageError(
            f"{output.parent / name}: the output's data file '{name}' {refused}",
            f"choose another 'location', {GRANT_HINT}",
        )
    refuse_foreign(output, [name], root, proven, output_given=output_given)


def protected_files(spec: Path, model: Path, data: list[Path], step_files: list[Path]) -> list[tuple[str, Path]]:
    """Every file a run reads, by what it is: no output or data file may ever replace one."""
    return [
        ("the spec", spec),
        ("the input model", model),
        *(("the input's", path) for path in data),
        *(("a file a step reads", path) for path in step_files),
    ]


__all__ = ["output_names", "protected_files", "refuse_data_file", "refuse_foreign"]
