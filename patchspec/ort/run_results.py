"""The run verifier's results: one row per provider x case x level, and the verdict over them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patchspec.ort.comparison import OutputComparison, Tolerances
from patchspec.ort.diagnosis import NOT_THE_PATCH
from patchspec.plugin.contract import VerifyResult


@dataclass
class Row:
    """One provider x case: its verdict, timings, and one comparison per output."""

    provider: str
    case: int | None
    status: str  # pass | fail | skip
    messages: list[str] = field(default_factory=list)
    optimization: str = ""
    outputs: list[OutputComparison] = field(default_factory=list)
    seconds: float = 0.0
    reference_seconds: float = 0.0

    def lines(self, twins: tuple[Row, ...] = ()) -> list[str]:
        """Its detail lines; with ``twins`` (the same failure at other levels) one set naming every level."""
        where, ms = self.merged_where(twins), ", ".join(f"{r.seconds * 1000:.1f} ms" for r in (self, *twins))
        lines = [
            f"{where} {o.name}: {'pass' if o.passed else 'FAIL'} max abs {o.max_abs:.3g} max rel {o.max_rel:.3g} ({ms})"
            for o in self.outputs
        ]
        if self.status == "pass" and not self.outputs:
            lines.append(f"{where}: ran, not compared ({ms})")
        label = {"fail": "FAIL", "skip": "skipped"}.get(self.status, "note")
        return lines + [f"{where}: {label}: {m}" for m in self.messages]

    @property
    def where(self) -> str:
        return self.merged_where(())

    def merged_where(self, twins: tuple[Row, ...]) -> str:
        levels = ", ".join(r.optimization for r in (self, *twins) if r.optimization)
        level = f" (optimizations {levels})" if levels else ""
        return self.provider + ("" if self.case is None else f" case {self.case}") + level

    def failure(self) -> tuple[Any, ...] | None:
        """What makes two failed rows the same failure (all but the level and the timings); None if it passed."""
        if self.status != "fail":
            return None
        return (
            self.provider,
            self.case,
            tuple(self.messages),
            tuple((o.name, o.passed, f"{o.max_abs:.3g}", f"{o.max_rel:.3g}") for o in self.outputs),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "case": self.case,
            "optimization": self.optimization,
            "status": self.status,
            "seconds": self.seconds,
            "reference_seconds": self.reference_seconds,
            "outputs": [o.to_json() for o in self.outputs],
            "messages": list(self.messages),
        }


def same_failures(rows: list[Row]) -> list[tuple[Row, tuple[Row, ...]]]:
    """The rows in order, each with its twins: the same failure at the other optimization levels,
    said once (``case 0 (optimizations all, disabled): FAIL: ...``)."""
    groups: list[tuple[Row, list[Row]]] = []
    for row in rows:
        key = row.failure()
        twin_of = next((group for group in groups if key is not None and group[0].failure() == key), None)
        if twin_of is None:
            groups.append((row, []))
        else:
            twin_of[1].append(row)
    return [(row, tuple(twins)) for row, twins in groups]


def verdict(rows: list[Row], settings: dict[str, Any], tolerances: Tolerances) -> VerifyResult:
    """Failed if any row failed (the summary leads with a failure that is not the patch's doing),
    skipped if none could run, else passed with the worst error and the tolerances that applied.

    ``settings``: ``against``, ``split_batch`` and ``optimizations``, as the report's data gives them."""
    groups = same_failures(rows)
    details = tuple(line for row, twins in groups for line in row.lines(twins))
    data = {**settings, **tolerances.to_json(), "results": [row.to_json() for row in rows]}
    failed = [row for row in rows if row.status == "fail"]
    ran = [row for row in rows if row.status == "pass"]
    skipped = sorted({row.provider for row in rows if row.status == "skip"})
    tail = f"; skipped {', '.join(skipped)}" if skipped else ""
    if failed:
        first, twins = next((row, twins) for row, twins in groups if row.status == "fail")
        reason = next((m for m in first.messages if m.startswith(NOT_THE_PATCH)), first.messages[0])
        where = first.merged_where(twins)
        summary = f"{len(failed)} of {len(rows)} runs failed; first: {where}: {reason}"
        quoted = f"{where}: FAIL: {reason}"  # the summary says it: the details do not say it again
        return VerifyResult("failed", summary, tuple(line for line in details if line != quoted), data)
    if not ran:
        return VerifyResult("skipped", f"no listed provider can run here{tail}", details, data)
    worst = max((o.max_abs for row in ran for o in row.outputs), default=None)
    error = (
        ""
        if worst is None
        else f", max abs error {worst:.3g} (rtol {tolerances.rtol:g}, atol {tolerances.atol:g}{tolerances.summary()})"
    )
    if tolerances.skipped:
        error += f"; not compared: {', '.join(tolerances.skipped)}"
    cases = len({row.case for row in ran})
    optimizations = settings["optimizations"]
    levels = f" (optimizations {', '.join(optimizations)})" if len(optimizations) > 1 else ""
    return VerifyResult(
        "passed",
        f"{cases} case(s) on {', '.join(sorted({r.provider for r in ran}))}{levels} "
        f"against {settings['against']}{error}{tail}",
        details,
        data,
    )


__all__ = ["Row", "same_failures", "verdict"]
