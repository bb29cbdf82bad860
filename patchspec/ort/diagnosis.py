"""When the output differs from its reference: is it the patch, or the reference's own noise?

The original is run against itself (at another optimization level, and batched against per
sample); where it differs from itself beyond the tolerance too, the difference is not evidence
against the patch, and the message says so with its figure and the way out. When the output has
no session at all, :func:`original_fails_too` asks whether the original has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from patchspec.ort.comparison import OutputComparison, Tolerances, compare_output
from patchspec.ort.references import CaseRun, References
from patchspec.ort.sessions import Feeds, RunFailure, Session

#: how the messages begin that say a failure is not the patch's doing: the summary leads with them
NOT_THE_PATCH = ("the reference is unstable", "the original fails the same way")

#: (how it was run, optimization level, per sample?): one way of running the reference again
Rerun = tuple[str, str, bool]


def unstable_reference_notes(
    references: References,
    tolerances: Tolerances,
    optimizations: Sequence[str],
    where: tuple[str, str],
    run: CaseRun,
    expected: Feeds,
    failed: list[OutputComparison],
) -> list[str]:
    """One note per failed output on which the reference disagrees with itself; ``where`` is
    (provider, optimization level) of the failed run."""
    provider, level = where
    path = references.model_path(run)
    if path is None:
        return []
    split_batch = references.settings.split_batch
    reruns = [
        (f"at optimizations {level} and {other}", other, split_batch) for other in _other_levels(level, optimizations)
    ]
    if split_batch:
        reruns.append(("run batched and per sample", level, False))
    notes = []
    for comparison in failed:
        noise = _noise(references, tolerances, (path, provider), run, comparison.name, expected, reruns)
        if noise is not None:
            notes.append(_noise_message(comparison, noise))
    return notes


def _other_levels(level: str, optimizations: Sequence[str]) -> list[str]:
    given = [other for other in optimizations if other != level]
    return given or ["disabled" if level != "disabled" else "all"]


def _noise(
    references: References,
    tolerances: Tolerances,
    reference: tuple[Path, str],
    run: CaseRun,
    name: str,
    expected: Feeds,
    reruns: list[Rerun],
) -> tuple[str, float] | None:
    """(how, max abs difference) of the first way the reference disagrees with itself on ``name``."""
    path, provider = reference
    want = expected[name]
    for how, level, split in reruns:
        try:
            again, _ = references.expected(path, provider, level, run, split)
        except RunFailure:
            continue  # e.g. an original that refuses the batch: that comparison cannot be made
        if name not in again or run.outputs is None:
            continue
        tolerance = tolerances.of(name, run.outputs[name], want)
        check = compare_output(name, again[name], want, tolerance.rtol, tolerance.atol)
        if not check.passed:
            return how, check.max_abs
    return None


def _noise_message(comparison: OutputComparison, noise: tuple[str, float]) -> str:
    how, figure = noise
    suggested = float(f"{max(figure, comparison.max_abs) * 2:.1g}")
    return (
        f"the reference is unstable on '{comparison.name}': the original itself differs by {figure:.3g} "
        f"(max abs) {how}, so a difference of {comparison.max_abs:.3g} is not evidence against the patch. "
        f"Give real inputs (file: x.npy) for this case, or set this output's tolerance or skip it: "
        f"compare: {{outputs: {{{comparison.name}: {{atol: {suggested:g}}}}}}} or "
        f"compare: {{outputs: {{{comparison.name}: skip}}}}"
    )


def original_fails_too(original: Path, provider: str, level: str, libraries: Sequence[Path] = ()) -> list[str]:
    """When the output has no session, whether the original has one: if not, the patch is not the cause."""
    try:
        Session(original, provider, level, libraries)
    except RunFailure as exc:
        return [
            f"the original fails the same way on {provider} ({exc.detail}), so this is "
            "not the patch's doing: onnxruntime here cannot run the model; run it on a provider that can, or "
            "drop 'run' from verify"
        ]
    return []


__all__ = ["NOT_THE_PATCH", "original_fails_too", "unstable_reference_notes"]
