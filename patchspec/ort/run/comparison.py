"""Outputs against a reference: which tolerance applies to each, and where they differ beyond it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Feeds
from patchspec.ort.settings import DEFAULT_ATOL, DEFAULT_RTOL, DTYPE_TOLERANCES, FLOOR_FACTOR, PRECISION


@dataclass(frozen=True)
class OutputComparison:
    """One output of one case on one provider, against its reference."""

    name: str
    passed: bool
    max_abs: float
    max_rel: float
    message: str = ""
    worst_index: tuple[int, ...] | None = None
    floor: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": "pass" if self.passed else "fail",
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "worst_index": list(self.worst_index) if self.worst_index else None,
            "floor": self.floor,
            "message": self.message,
        }


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    skip: bool = False


@dataclass
class Tolerances:
    """compare's rtol/atol, per element type and per output, as the run verifier's params give them;
    ``applied`` records the element types whose tolerance was used (for the summary)."""

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    by_dtype: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DTYPE_TOLERANCES))
    per_output: dict[str, Tolerance] = field(default_factory=dict)
    applied: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def from_params(cls, compare: Mapping[str, Any]) -> Tolerances:
        """From ``compare`` as the verifier receives it (schema defaults filled in, so ``rtol`` and ``atol``
        are there): ``rtol``, ``atol``, ``tolerances``, ``outputs``."""
        rtol, atol = float(compare["rtol"]), float(compare["atol"])
        by_dtype = dict(DTYPE_TOLERANCES)
        for dtype, given in compare.get("tolerances", {}).items():
            default_rtol, default_atol = by_dtype.get(dtype, (rtol, atol))
            by_dtype[dtype] = (float(given.get("rtol", default_rtol)), float(given.get("atol", default_atol)))
        per_output = {
            name: Tolerance(rtol, atol, True)
            if given == "skip"
            else Tolerance(float(given.get("rtol", rtol)), float(given.get("atol", atol)))
            for name, given in compare.get("outputs", {}).items()
        }
        return cls(rtol, atol, by_dtype, per_output)

    def of(self, name: str, actual: np.ndarray, expected: np.ndarray) -> Tolerance:
        """compare.outputs for this output, else the coarser side's element type's, else compare.rtol/atol."""
        if name in self.per_output:
            return self.per_output[name]
        sides = [str(a.dtype) for a in (actual, expected) if str(a.dtype) in PRECISION]
        coarser = min(sides, key=PRECISION.index) if sides else None
        if coarser is None or coarser not in self.by_dtype:
            return Tolerance(self.rtol, self.atol)
        self.applied[coarser] = self.by_dtype[coarser]
        return Tolerance(*self.by_dtype[coarser])

    def compare(
        self, outputs: Feeds, expected: Feeds, floors: dict[str, float] | None = None
    ) -> tuple[list[OutputComparison], list[OutputComparison]]:
        """Every output the reference has and compare.outputs does not skip: (all, the failed ones).
        ``floors``: the provider's measured floor per output (:mod:`patchspec.ort.run.floors`), if any."""
        compared = []
        for name in outputs:
            if name not in expected:
                continue
            tolerance = self.of(name, outputs[name], expected[name])
            if not tolerance.skip:
                floor = (floors or {}).get(name)
                compared.append(
                    compare_output(name, outputs[name], expected[name], tolerance.rtol, tolerance.atol, floor=floor)
                )
        if not compared and not any(name in expected for name in outputs):
            msg = (
                f"nothing compared: the output's outputs ({', '.join(outputs)}) and the reference's "
                f"({', '.join(expected)}) share no name"
            )
            raise RunFailure(msg)
        return compared, [o for o in compared if not o.passed]

    def to_json(self) -> dict[str, Any]:
        return {
            "rtol": self.rtol,
            "atol": self.atol,
            "tolerances": {k: list(v) for k, v in self.by_dtype.items()},
            "applied_tolerances": {k: list(v) for k, v in self.applied.items()},
            "outputs": {
                name: ("skip" if t.skip else {"rtol": t.rtol, "atol": t.atol}) for name, t in self.per_output.items()
            },
        }

    def summary(self) -> str:
        """``; float16 outputs rtol 0.01, atol 0.001; 'y' rtol ...``: what applied besides rtol/atol."""
        used = "".join(f"; {dtype} outputs rtol {r:g}, atol {a:g}" for dtype, (r, a) in sorted(self.applied.items()))
        return used + "".join(
            f"; '{name}' rtol {t.rtol:g}, atol {t.atol:g}" for name, t in self.per_output.items() if not t.skip
        )

    @property
    def skipped(self) -> list[str]:
        return [name for name, t in self.per_output.items() if t.skip]


def compare_output(
    name: str, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, *, floor: float | None = None
) -> OutputComparison:
    """``|actual - expected| <= max(atol + rtol * |expected|, FLOOR_FACTOR * floor)`` everywhere; NaN/Inf
    only where the reference has them. ``floor``: the provider's measured floor for this output, if any."""
    if actual.shape != expected.shape:
        msg = f"output '{name}' has shape {list(actual.shape)}, the reference {list(expected.shape)}"
        return OutputComparison(name, False, float("inf"), float("inf"), msg, floor=floor)
    if np.asarray(actual).dtype.kind in "OUS" or np.asarray(expected).dtype.kind in "OUS":
        return _compare_exactly(name, np.asarray(actual), np.asarray(expected))
    got, want = _as_float(actual), _as_float(expected)
    finite = np.isfinite(got) & np.isfinite(want)
    same_special = (np.isnan(got) & np.isnan(want)) | (~np.isfinite(want) & (got == want))
    stray = ~finite & ~same_special
    if stray.any():
        index = _index(np.argmax(stray), got.shape)
        count = int(stray.sum())
        msg = (
            f"output '{name}' has {count} NaN/Inf value(s) where the reference differs, "
            f"first at index {index}: got {got[index]}, expected {want[index]}"
        )
        return OutputComparison(name, False, float("inf"), float("inf"), msg, index, floor)
    if not finite.any():
        return OutputComparison(name, True, 0.0, 0.0, floor=floor)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf positions are masked out below
        error = np.where(finite, np.abs(got - want), 0.0)
        scale = np.where(finite, np.abs(want), 0.0)
    relative = np.divide(error, scale, out=np.zeros_like(error), where=scale > 0)
    excess = error - np.maximum(atol + rtol * scale, FLOOR_FACTOR * (floor or 0.0))
    worst = _index(np.argmax(np.where(finite, excess, -np.inf)), got.shape)
    max_abs, max_rel = float(error.max()), float(relative.max())
    if excess[worst] <= 0:
        return OutputComparison(name, True, max_abs, max_rel, "", worst, floor)
    over = int((finite & (excess > 0)).sum())
    widened = f", floor {FLOOR_FACTOR:g} x {floor:.3g}" if floor else ""
    msg = (
        f"output '{name}' differs beyond tolerance (rtol {rtol:g}, atol {atol:g}{widened}) in {over} of {got.size} "
        f"elements; worst at index {worst}: got {got[worst]:.7g}, expected {want[worst]:.7g}, "
        f"abs error {error[worst]:.3g}, rel error {relative[worst]:.3g}"
    )
    return OutputComparison(name, False, max_abs, max_rel, msg, worst, floor)


def nonfinite_problems(outputs: Feeds) -> list[str]:
    """NaN/Inf in outputs when there is no reference to say they are expected."""
    problems = []
    for name, array in outputs.items():
        values = _as_float(array)
        bad = ~np.isfinite(values)
        if bad.any():
            index = _index(np.argmax(bad), values.shape)
            problems.append(f"output '{name}' has {int(bad.sum())} NaN/Inf value(s), first at index {index}")
    return problems


def _compare_exactly(name: str, actual: np.ndarray, expected: np.ndarray) -> OutputComparison:
    """A STRING output (labels, a ZipMap's keys) passes only when every element is the same; the
    errors are 0 or infinite, as strings have no distance (a float conversion ended in exit 5)."""
    differs = np.asarray(actual.astype(str) != expected.astype(str))
    if not differs.any():
        return OutputComparison(name, True, 0.0, 0.0)
    index = _index(np.argmax(differs), actual.shape)
    count = int(differs.sum())
    msg = (
        f"output '{name}' has {count} string(s) unlike the reference's, "
        f"first at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
    )
    return OutputComparison(name, False, float("inf"), float("inf"), msg, index)


def _as_float(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def _index(flat: int | np.integer[Any], shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


__all__ = ["OutputComparison", "Tolerance", "Tolerances", "compare_output", "nonfinite_problems"]
