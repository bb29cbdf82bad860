"""The spec's model and output as paths: the message for a model that is not there, and the refusal
of an output that is the input itself."""

from __future__ import annotations

from pathlib import Path

from patchspec.errors import ModelFileError, UsageError
from patchspec.printable import shown_path
from patchspec.spec.steps import Spec


def missing_model(spec: Spec, model_path: Path) -> ModelFileError:
    """The spec's model does not exist: where the spec names it, as written, as resolved, and the rule."""
    data = spec.document.data
    written = data.get("model") if isinstance(data, dict) else None
    nearby = sorted(p.name for p in model_path.parent.glob("*.onnx"))[:5] if model_path.parent.is_dir() else []
    found = (
        f"; .onnx files there: {', '.join(nearby)}"
        if nearby
        else (
            "" if model_path.parent.is_dir() else f"; the folder {shown_path(model_path.parent)} does not exist either"
        )
    )
    msg = f"{written} does not exist (resolved to {model_path}){found}"
    return ModelFileError(
        msg,
        f"paths in a spec are relative to the spec's folder ({spec.path.resolve().parent}), "
        "not to the current directory",
        where=spec.document.location(("model",)),
    )


def refuse_same_file(model: Path, output: Path) -> None:
    """The output is the input model (the same path, or a link or hard link to it): exit 2."""
    same = model.resolve() == output.resolve()
    if not same and output.exists():
        try:
            same = model.samefile(output)
        except OSError:
            same = False
    if same:
        raise UsageError(
            f"{output}: the output is the input model; patchspec never modifies its input",
            "choose another 'output' (e.g. under build/)",
        )


__all__ = ["missing_model", "refuse_same_file"]
