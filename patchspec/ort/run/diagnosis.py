"""When the output differs from its reference: is it the patch, or the reference's own noise?

The original is run against itself (at another optimization level, and batched against per
sample); where it differs from itself beyond the tolerance too, the difference is not evidence
against the patch, and the message says so with its figure and the way out. On an accelerator,
where the original is stable on the CPU the same way, the cause is the provider's arithmetic, and
the message names it and its settings instead of asking for a hand-set tolerance. When the output
has no session at all, :func:`original_fails_too` asks whether the original has one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchspec.ort.providers import CPU, ProviderSetup
from patchspec.ort.run.comparison import OutputComparison, Tolerances, compare_output
from patchspec.ort.run.references import CaseRun, References
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Feeds, Session

#: how the messages begin that say a failure is not the patch's doing: the summary leads with them
NOT_THE_PATCH = (
    "the reference is unstable",
    "the original itself is not per sample",
    "the original fails the same way",
)
#: the rerun that runs the original batched against its samples one at a time
BATCHED = "run batched and per sample"

#: (how it was run, optimization level, per sample?): one way of running the reference again
Rerun = tuple[str, str, bool]


@dataclass(frozen=True)
class Noise:
    """The original differing from itself on one compared output, and the message that says so."""

    output: str
    figure: float  # the original's own max abs difference
    message: str
    #: rerun at another optimization level on a provider where that is the original's own noise (not its
    #: batched run, not an accelerator's arithmetic): a level that passes may excuse this one
    between_levels: bool


def unstable_reference_notes(
    references: References,
    tolerances: Tolerances,
    optimizations: Sequence[str],
    where: tuple[ProviderSetup, str],
    run: CaseRun,
    expected: Feeds,
    failed: list[OutputComparison],
) -> list[Noise]:
    """One note per failed output on which the reference disagrees with itself; ``where`` is
    (the provider's setup, optimization level) of the failed run."""
    setup, level = where
    provider = setup.provider
    path = references.model_path(run)
    if path is None:
        return []
    split_batch = references.settings.split_batch
    reruns = [
        (f"at optimizations {level} and {other}", other, split_batch) for other in _other_levels(level, optimizations)
    ]
    if split_batch:
        reruns.append((BATCHED, level, False))
    notes = []
    for comparison in failed:
        noise = _noise(references, tolerances, (path, provider), run, comparison, expected, reruns)
        if noise is None:
            continue
        where_rerun = [rerun for rerun in reruns if rerun[0] == noise[0]]
        if provider != CPU and _stable_on_cpu(references, tolerances, (path, level), run, comparison, where_rerun):
            notes.append(Noise(comparison.name, noise[1], _arithmetic_message(comparison, noise, setup), False))
        else:
            levels = noise[0] != BATCHED and math.isfinite(noise[1])
            notes.append(Noise(comparison.name, noise[1], _noise_message(comparison, noise), levels))
    return notes


def _stable_on_cpu(
    references: References,
    tolerances: Tolerances,
    reference: tuple[Path, str],
    run: CaseRun,
    comparison: OutputComparison,
    rerun: list[Rerun],
) -> bool:
    """Whether the original (``reference``: its path and the failed run's level) agrees with itself
    on the CPU, run the way (``rerun``) it did not agree with itself on the accelerator."""
    path, level = reference
    try:
        want, _ = references.expected(path, CPU, level, run, references.settings.split_batch)
    except RunFailure:
        return False
    plain = OutputComparison(comparison.name, False, comparison.max_abs, comparison.max_rel)  # no floor on the CPU
    return _noise(references, tolerances, (path, CPU), run, plain, want, rerun) is None


def _other_levels(level: str, optimizations: Sequence[str]) -> list[str]:
    given = [other for other in optimizations if other != level]
    return given or ["disabled" if level != "disabled" else "all"]


def _noise(
    references: References,
    tolerances: Tolerances,
    reference: tuple[Path, str],
    run: CaseRun,
    comparison: OutputComparison,
    expected: Feeds,
    reruns: list[Rerun],
) -> tuple[str, float] | None:
    """(how, max abs difference) of the first way the reference disagrees with itself on the
    compared output, judged as the output was (with its floor, if it had one)."""
    path, provider = reference
    name = comparison.name
    want = expected[name]
    for how, level, split in reruns:
        try:
            again, _ = references.expected(path, provider, level, run, split)
        except RunFailure:
            continue  # e.g. an original that refuses the batch: that comparison cannot be made
        if name not in again or run.outputs is None:
            continue
        tolerance = tolerances.of(name, run.outputs[name], want)
        check = compare_output(name, again[name], want, tolerance.rtol, tolerance.atol, floor=comparison.floor)
        if not check.passed:
            return how, check.max_abs
    return None


def _noise_message(comparison: OutputComparison, noise: tuple[str, float]) -> str:
    how, figure = noise
    if not math.isfinite(figure):  # not noise: the two ways of running give other shapes or a NaN
        return (
            f"the original's '{comparison.name}' is not the same {how} (a difference of {figure:.3g}: another "
            f"shape, or NaN in one of them), so the comparison says nothing about the patch. If the output "
            f"keeps the batch on another axis, give it: split_batch: {{outputs: {{{comparison.name}: AXIS}}}}; "
            f"if a sample's output depends on the others, the model couples samples: compare: {{coupled: REASON}}"
        )
    suggested = float(f"{max(figure, comparison.max_abs) * 2:.1g}")
    if how == BATCHED:  # the reference itself is not N independent samples: coupling first, never atol first
        return (
            f"the original itself is not per sample on '{comparison.name}': run batched it differs by {figure:.3g} "
            f"(max abs) from its samples run one at a time, so a difference of {comparison.max_abs:.3g} is not "
            "evidence against the patch: a batch of this model is not N independent samples (an op couples "
            "them, or its batched arithmetic differs). If a sample's output depends on the others by design, "
            "accept it: compare: {coupled: REASON} (batch against batch); if it is arithmetic, give real inputs "
            f"(file: x.npy) or the tolerance the original itself needs: compare: {{outputs: "
            f"{{{comparison.name}: {{atol: {suggested:g}}}}}}}"
        )
    return (
        f"the reference is unstable on '{comparison.name}': the original itself differs by {figure:.3g} "
        f"(max abs) {how}, so a difference of {comparison.max_abs:.3g} is not evidence against the patch. "
        f"Give real inputs (file: x.npy) for this case, or widen this output's tolerance to what the "
        f"original itself allows: compare: {{outputs: {{{comparison.name}: {{atol: {suggested:g}}}}}}}"
    )


def _arithmetic_message(comparison: OutputComparison, noise: tuple[str, float], setup: ProviderSetup) -> str:
    how, figure = noise
    provider = setup.provider
    way_out = f"the {CPU} run checks the patch exactly; keep it in providers"
    if setup.fast_options:
        kept = ", ".join(f"{k}: {v}" for k, v in setup.fast_options.items())
        way_out += f", and drop {kept} from {provider}'s provider_options: its exact math is the default"
    return (
        f"the reference is unstable on '{comparison.name}' on {provider}: the original itself differs by "
        f"{figure:.3g} (max abs) {how} there and not on {CPU}, so a difference of {comparison.max_abs:.3g} "
        f"is {provider}'s arithmetic ({setup.math}; options {setup.options_text()}), not evidence against "
        f"the patch: {way_out}"
    )


def original_fails_too(
    original: Path,
    provider: str,
    level: str,
    libraries: Sequence[Path] = (),
    options: Mapping[str, str] | None = None,
) -> list[str]:
    """When the output has no session, whether the original has one: if not, the patch is not the cause."""
    try:
        Session(original, provider, level, libraries, options=options)
    except RunFailure as exc:
        return [
            f"the original fails the same way on {provider} ({exc.detail}), so this is "
            "not the patch's doing: onnxruntime here cannot run the model; run it on a provider that can, or "
            "drop 'run' from verify"
        ]
    return []


__all__ = ["NOT_THE_PATCH", "Noise", "original_fails_too", "unstable_reference_notes"]
