"""What a run reports: each step's outcome and the run's, as the CLI prints them and ``--json`` writes them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from patchspec.errors import VerificationFailed

if TYPE_CHECKING:
    from patchspec.host.boundary import Guard
    from patchspec.plugin.contract import VerifyContext
    from patchspec.spec.steps import Spec, Step


@dataclass
class StepOutcome:
    label: str
    status: str  # modified | unchanged | passed | failed | skipped
    summary: str
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunReport:
    spec: str
    model: str
    output: str
    status: str = "running"  # written | up to date | unchanged | planned | verified | failed
    patches: list[StepOutcome] = field(default_factory=list)
    verifiers: list[StepOutcome] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: every file the output depends on besides the spec: model, its data files, verifier inputs
    inputs: list[str] = field(default_factory=list)
    error: str | None = None
    #: what the patches found couples the samples (``COUPLED``): a failed per-sample comparison names it
    coupled: list[str] = field(default_factory=list)
    #: the error as data (``PatchspecError.to_json()``: detail, where, key, node, hint), when it failed
    problem: dict[str, Any] | None = None
    digest: str | None = None  # the output's digest, once computed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verification_failed(
    spec: Spec, failed: list[tuple[Step, StepOutcome, tuple[Any, ...]]], staged: bool, coupled: Sequence[str] = ()
) -> VerificationFailed:
    """The error of failed verifiers: the first one's place, summary and details, then the others'.
    ``staged``: the output was not written (apply), which the message says. ``coupled``: what the
    patches found couples the samples, named as the likely cause of a per-sample difference."""
    step, outcome, key = failed[0]
    message = f"{spec.locate(step, key)}: verification failed: {outcome.summary}"
    if coupled:
        message += (
            f"; the patches found that the model couples samples ({coupled[0]}), so a batch differs from its "
            "samples run one at a time by design: if that is what the model does, accept it in the run "
            "verifier with compare: {coupled: REASON} (batch against batch, without split_batch)"
        )
    if len(failed) > 1:
        others = ", ".join(o.label for _, o, _ in failed[1:])
        message += f" (and {len(failed) - 1} more failed: {others})"
    if staged:
        message += "; nothing was written"
    message += "".join(f"\n    {d}" for d in outcome.details)  # said here only: the step line just says failed
    for _, other, _ in failed[1:]:
        message += f"\n  {other.label}: {other.summary}" + "".join(f"\n    {d}" for d in other.details)
    return VerificationFailed(message)


def verifier_outcome(guard: Guard, step: Step, context: VerifyContext) -> tuple[StepOutcome, tuple[Any, ...]]:
    """Run one verifier through its guard: its outcome, timed, and the key a ``context.fail`` pointed at."""
    started = time.perf_counter()
    result, key = guard.verify(step.params, context)
    seconds = time.perf_counter() - started
    return StepOutcome(step.label, result.status, result.summary, list(result.details), seconds, dict(result.data)), key
