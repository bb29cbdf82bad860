"""A provider's measured floor: how far the original itself moves between that provider and the CPU.

On an accelerator the output and its reference each carry the provider's own arithmetic (TF32
matrix math, another convolution algorithm at another batch size). The floor measures it with the
same inputs: the reference model (the original, unless the case names another) on the provider
against the same model on the CPU, per output, as the largest absolute difference. The comparison
then allows ``max(atol + rtol * |expected|, FLOOR_FACTOR * floor)``
(:func:`patchspec.ort.run.comparison.compare_output`). Both runs go through :class:`References`, so a
CPU row of the same case reuses the CPU run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from patchspec.ort.providers import CPU
from patchspec.ort.run.references import CaseRun, References
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.settings import FLOOR_FACTOR


@dataclass(frozen=True)
class Floor:
    """The floor of one case on one provider: per output, how it was measured, or why it was not."""

    outputs: dict[str, float] = field(default_factory=dict)
    how: str = ""
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"outputs": dict(self.outputs), "how": self.how, "factor": FLOOR_FACTOR, "problem": self.problem}

    def text(self) -> str:
        """``floor bbox_8 2.35e-04, score_8 1e-07 (x4; the original on ... against ...)``."""
        if self.problem:
            return f"floor not measured ({self.problem}): compared at the tolerance alone"
        figures = ", ".join(f"{name} {value:.3g}" for name, value in self.outputs.items()) or "none"
        return f"floor {figures} (x{FLOOR_FACTOR:g}; {self.how})"


def measure_floor(references: References, provider: str, level: str, run: CaseRun) -> Floor:
    """The floor of ``run``'s case on ``provider`` at optimization ``level``."""
    path = references.floor_path(run)
    split = references.settings.split_batch
    how = f"{path.name} on {provider} against {path.name} on {CPU}, same inputs, optimizations {level}" + (
        ", per sample" if split else ""
    )
    try:
        there, _ = references.expected(path, provider, level, run, split)
        here, _ = references.expected(path, CPU, level, run, split)
    except RunFailure as exc:
        return Floor({}, how, exc.message)
    # floating outputs only: an index that moves (a near-tied TopK) must not widen the tolerance to its range
    floating = [name for name in there if name in here and np.issubdtype(there[name].dtype, np.floating)]
    return Floor({name: _max_abs(there[name], here[name]) for name in floating}, how)


def _max_abs(there: np.ndarray, here: np.ndarray) -> float:
    """The largest difference where both sides are finite (NaN/Inf are the comparison's to judge)."""
    if there.shape != here.shape or there.size == 0:
        return 0.0
    a, b = np.asarray(there).astype(np.float64), np.asarray(here).astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(np.where(finite, a - b, 0.0)).max())


__all__ = ["Floor", "measure_floor"]
