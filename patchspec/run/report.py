"""What a run reports: each step's outcome and the run's, as the CLI prints them and ``--json`` writes them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    #: the error as data (``PatchspecError.to_json()``: detail, where, key, node, hint), when it failed
    problem: dict[str, Any] | None = None
    digest: str | None = None  # the output's digest, once computed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
