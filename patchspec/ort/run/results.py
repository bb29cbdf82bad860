"""The run verifier's results: one row per provider x case x level, and the verdict over them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patchspec.ort.providers import ProviderSetup
from patchspec.ort.run.comparison import OutputComparison, Tolerances
from patchspec.ort.run.diagnosis import NOT_THE_PATCH
from patchspec.ort.run.floors import Floor
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
    setup: ProviderSetup | None = None
    device: str | None = None
    floor: Floor | None = None
    #: failed outputs on which the original itself differs between optimization levels, by that much
    level_noise: dict[str, float] = field(default_factory=dict)

    def lines(self, twins: tuple[Row, ...] = ()) -> list[str]:
        """Its detail lines; with ``twins`` (the same failure at other levels) one set naming every level."""
        where, ms = self.merged_where(twins), ", ".join(f"{r.seconds * 1000:.1f} ms" for r in (self, *twins))
        lines = [
            f"{where} {o.name}: {'pass' if o.passed else 'FAIL'} max abs {o.max_abs:.3g} max rel {o.max_rel:.3g} ({ms})"
            for o in self.outputs
        ]
        if self.status == "pass" and not self.outputs:
            lines.append(f"{where}: ran, not compared ({ms})")
        if self.floor is not None:
            lines.append(f"{where}: {self.floor.text()}")
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
            **(self.setup.to_json() if self.setup else {}),
            "precision": self.setup.math if self.setup else None,
            "device": self.device,
            "floor": self.floor.to_json() if self.floor else None,
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


def excuse_level_noise(rows: list[Row]) -> None:
    """A case that fails at one optimization level by less than the original itself moves between the
    levels, and passes at another level, passes: the patch is exact where the graph's own arithmetic is
    compared, and the difference is the optimizer's kernels at another batch. The row keeps a note."""
    exact = {(row.provider, row.case): row.optimization for row in rows if row.status == "pass" and row.outputs}
    for row in rows:
        other = exact.get((row.provider, row.case))
        failed = [o for o in row.outputs if not o.passed]
        if row.status != "fail" or other is None or not failed or not row.level_noise:
            continue
        if all(o.name in row.level_noise and o.max_abs < row.level_noise[o.name] for o in failed):
            row.status = "pass"
            row.messages = [
                f"'{o.name}' differs by {o.max_abs:.3g} at optimizations {row.optimization}, less than the original "
                f"itself between optimization levels ({row.level_noise[o.name]:.3g}), and matches at optimizations "
                f"{other}: the optimizer's kernels at another batch, not the patch"
                for o in failed
            ]


def verdict(rows: list[Row], settings: dict[str, Any], tolerances: Tolerances) -> VerifyResult:
    """Failed if any row failed (the summary leads with a failure that is not the patch's doing),
    skipped if none could run, else passed with the worst error and the tolerances that applied.

    ``settings``: ``against``, ``split_batch`` and ``optimizations``, as the report's data gives them."""
    groups = same_failures(rows)
    ran_on = _providers(rows)
    details = (
        *(_provider_line(row) for row in ran_on),
        *(line for row, twins in groups for line in row.lines(twins)),
    )
    data = {
        **settings,
        **tolerances.to_json(),
        "providers": [_provider_json(row) for row in ran_on],
        "results": [row.to_json() for row in rows],
    }
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
    error = _error_text(ran, tolerances)
    cases = len({row.case for row in ran})
    optimizations = settings["optimizations"]
    levels = f" (optimizations {', '.join(optimizations)})" if len(optimizations) > 1 else ""
    math = "".join(f"; {row.provider}: {row.setup.math}" for row in ran_on if row.setup and row.setup.measures_floor)
    return VerifyResult(
        "passed",
        f"{cases} case(s) on {', '.join(sorted({r.provider for r in ran}))}{levels} "
        f"against {settings['against']}{error}{math}{tail}",
        details,
        data,
    )


def _error_text(ran: list[Row], tolerances: Tolerances) -> str:
    """The passed summary's worst error, tolerances, outputs not compared, and any level excused."""
    worst = max((o.max_abs for row in ran for o in row.outputs), default=None)
    error = (
        ""
        if worst is None
        else f", max abs error {worst:.3g} (rtol {tolerances.rtol:g}, atol {tolerances.atol:g}{tolerances.summary()})"
    )
    if tolerances.skipped:
        error += f"; not compared: {', '.join(tolerances.skipped)}"
    noted = [message for row in ran for message in row.messages]
    if noted:  # a level excused by the original's own noise: said in the summary, not under -v only
        error += f"; {noted[0]}" + (f" (and {len(noted) - 1} more)" if len(noted) > 1 else "")
    return error


def _providers(rows: list[Row]) -> list[Row]:
    """The first row of each provider that built a session (it carries the provider's setup)."""
    first: dict[str, Row] = {}
    for row in rows:
        if row.setup is not None:
            first.setdefault(row.provider, row)
    return list(first.values())


def _provider_line(row: Row) -> str:
    """``CUDAExecutionProvider on NVIDIA ... (vendor 0x10de, ...): float32, exact math (use_tf32 0); options use_tf32=0``."""
    assert row.setup is not None
    device = f" on {row.device}" if row.device else ""
    options = f"; options {row.setup.options_text()}" if row.setup.options else ""
    return f"{row.provider}{device}: {row.setup.math}{options}"


def _provider_json(row: Row) -> dict[str, Any]:
    assert row.setup is not None
    return {"provider": row.provider, "device": row.device, "precision": row.setup.math, **row.setup.to_json()}


__all__ = ["Row", "excuse_level_noise", "same_failures", "verdict"]
