"""Real step contexts for calling a plugin's ``apply`` or ``verify`` directly, without a spec file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from patchspec.errors import SpecLocation
from patchspec.plugin.contract import PatchContext, RunState, VerifyContext
from patchspec.spec.catalog import StepKind
from patchspec.spec.steps import Step


class DetachedSpec:
    """What a context needs of a spec when a test calls a plugin without one: its folder and positions."""

    path = Path("<unit test>")
    verify: tuple[Any, ...] = ()

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def locate(self, step: Step, key: tuple[Any, ...] = ()) -> str:
        return str(self.location(step, key))

    def location(self, step: Step, key: tuple[Any, ...] = ()) -> SpecLocation:
        return SpecLocation(str(self.path), 0, 0, step.label, tuple(key))


def patch_context(
    type_name: str = "patch",
    params: Mapping[str, Any] | None = None,
    *,
    model_dir: Path | str = ".",
    state: RunState | None = None,
    index: int = 0,
) -> PatchContext:
    """A ``PatchContext`` for ``SomePatch().apply(model, params, patch_context(...))`` in a unit test.

    Pass the same ``state`` to several calls to test patches that share run state.
    """
    step = Step(StepKind.PATCH_TYPE, index, type_name, dict(params or {}))
    return PatchContext(
        DetachedSpec(Path(model_dir)),  # type: ignore[arg-type]  # a Spec's interface, no file behind it
        step,
        model_dir=Path(model_dir),
        state=state if state is not None else RunState(),
    )


def verify_context(
    type_name: str,
    params: Mapping[str, Any] | None,
    output: Path | str,
    model: onnx.ModelProto | None = None,
    *,
    original: Path | str | None = None,
) -> VerifyContext:
    """A ``VerifyContext`` to call ``verify`` directly in a unit test: ``output`` (and ``original``,
    default the same file) are model paths; ``context.fail`` raises ``patchspec.VerifierFailed``."""
    output = Path(output)
    step = Step(StepKind.VERIFIER, 0, type_name, dict(params or {}))
    loaded = model if model is not None else onnx.load(str(output), load_external_data=False)
    return VerifyContext(
        DetachedSpec(output.parent),  # type: ignore[arg-type]  # a Spec's interface, no file behind it
        step,
        output_path=output,
        original_path=Path(original) if original is not None else output,
        model=loaded,
    )


__all__ = ["DetachedSpec", "patch_context", "verify_context"]
