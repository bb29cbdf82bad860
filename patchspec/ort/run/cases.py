"""The run verifier's work: every case on the output per provider and level, against its reference.

:func:`run_verification` is what the built-in ``run`` verifier's ``verify`` calls. The output runs
first (its session freed before any reference is built), then each case's reference
(:mod:`patchspec.ort.run.references`), then the comparison (:mod:`patchspec.ort.run.comparison`) and,
where an output differs, the diagnosis (:mod:`patchspec.ort.run.diagnosis`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from patchspec.ort.environment import device_name
from patchspec.ort.native_code import check_native_code
from patchspec.ort.providers import CPU, provider_setup
from patchspec.ort.run.case_fit import declared_shape_problems, value_notes
from patchspec.ort.run.comparison import Tolerances, nonfinite_problems
from patchspec.ort.run.diagnosis import original_fails_too, unstable_reference_notes
from patchspec.ort.run.feeds import (
    default_case,
    feed_shape_problems,
    make_feeds,
)
from patchspec.ort.run.floors import measure_floor
from patchspec.ort.run.references import CaseRun, References, ReferenceSettings
from patchspec.ort.run.results import Row, excuse_level_noise, verdict
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import BatchSplit, ProviderUnusable, Session, provider_skip_reasons
from patchspec.plugin.contract import VerifyContext, VerifyResult
from patchspec.spec.confine import Root


def run_verification(params: Mapping[str, Any], context: VerifyContext) -> VerifyResult:
    """Run ``params`` (the run verifier's, as it receives them: schema defaults filled in) on the staged
    output. They are read as given: no default is applied a second time here.

    Raises :class:`patchspec.ort.native_code.NativeCodeRefused` (exit 2) before anything runs when
    the params name custom-op libraries that the caller has not allowed.
    """
    libraries = list(params.get("custom_op_libraries", []))
    settings = Root.of(context.spec.path).settings_folder()  # --root, $PATCHSPEC_ROOT or the outermost .git
    check_native_code(libraries, settings, context.location(("custom_op_libraries",)))
    return _Run(params, context).result()


class _Run:
    def __init__(self, params: Mapping[str, Any], context: VerifyContext) -> None:
        self.params = params
        self.context = context
        compare = params["compare"]  # the loader filled in the schema's defaults, at every depth
        split = compare.get("split_batch", False)
        self.optimizations = list(params["optimizations"])
        self.tolerances = Tolerances.from_params(compare)
        self.required = set(params["require"])
        self.max_elements = int(params["max_elements"])
        self.timeout = float(params["timeout"])
        self.libraries = tuple(context.resolve(p) for p in params.get("custom_op_libraries", []))
        given = params["provider_options"]
        self.setups = {provider: provider_setup(provider, given.get(provider)) for provider in params["providers"]}
        settings = ReferenceSettings(
            against=compare["against"],
            original=context.original_path,
            resolve=context.resolve,
            split_batch=bool(split),
            split=BatchSplit(split.get("inputs", {}), split.get("outputs", {}))
            if isinstance(split, dict)
            else BatchSplit(),
            libraries=self.libraries,
            timeout=self.timeout,
            provider_options={provider: setup.options for provider, setup in self.setups.items()},
        )
        self.references = References(settings, context.progress)

    def result(self) -> VerifyResult:
        providers = self.params["providers"]
        reasons = provider_skip_reasons(providers)
        rows: list[Row] = []
        for provider in providers:
            reason = reasons[provider]
            if reason:
                rows.append(self._unavailable(provider, reason))
            else:
                rows.extend(self._provider_rows(provider))
        settings = self.references.settings
        shown = {"against": settings.against, "split_batch": settings.split_batch, "optimizations": self.optimizations}
        return verdict(rows, shown, self.tolerances)

    def _unavailable(self, provider: str, reason: str) -> Row:
        if provider in self.required:
            return Row(provider, None, "fail", [f"required provider {provider} cannot run: {reason}"])
        return Row(provider, None, "skip", [reason])

    def _provider_rows(self, provider: str) -> list[Row]:
        rows = []
        setup = self.setups[provider]
        device = device_name(provider, setup.options)
        for level in self.optimizations:
            label = level if len(self.optimizations) > 1 else ""
            try:
                runs = self._run_output(provider, level)
            except ProviderUnusable as exc:
                return [self._unavailable(provider, exc.text())]
            except RunFailure as exc:
                excuse = original_fails_too(self.context.original_path, provider, level, self.libraries, setup.options)
                rows.append(Row(provider, None, "fail", [*excuse, exc.text()], label, setup=setup, device=device))
                continue
            self.references.run_all(provider, level, runs)
            if setup.measures_floor:  # one session per model for every case's floor, not one per case
                self.references.run_all(provider, level, runs, floor=True)
                self.references.run_all(CPU, level, runs, floor=True)
            rows += [self._case_row(provider, level, label, run) for run in runs]
        excuse_level_noise(rows)
        for row in rows:
            row.setup, row.device = setup, device
        return rows

    def _run_output(self, provider: str, level: str) -> list[CaseRun]:
        """Every case on the output at one level; the session is freed before any reference is built,
        so the output's and the reference's weights are never in memory together."""
        self.context.progress(f"{provider}, optimizations {level}: building the session")
        options = self.setups[provider].options
        session = Session(self.context.output_path, provider, level, self.libraries, self.timeout, options=options)
        cases = self.params.get("cases") or [default_case(session.inputs)]
        runs = []
        for index, case in enumerate(cases):
            self.context.progress(f"{provider} case {index} ({index + 1} of {len(cases)}), optimizations {level}")
            run = CaseRun(index, case)
            try:
                run.feeds = make_feeds(case["inputs"], session.inputs, self.context.resolve, self.max_elements)
                misfit = feed_shape_problems(run.feeds, session.inputs)
                if misfit:
                    raise RunFailure("the case does not fit the output's inputs: " + "; ".join(misfit))
                run.outputs, run.seconds = session.run(run.feeds)
            except RunFailure as exc:
                notes = value_notes(self.context.model, run.feeds)
                run.failure = exc.text() + "".join(f"; {note}" for note in notes)
            runs.append(run)
        del session
        return runs

    def _case_row(self, provider: str, level: str, label: str, run: CaseRun) -> Row:
        row = Row(provider, run.index, "pass", optimization=label, seconds=run.seconds)
        if run.failure is not None or run.outputs is None:
            row.messages.append(run.failure or "no outputs")
        else:
            row.messages += declared_shape_problems(self.context.model, run.outputs)
            try:
                expected, row.reference_seconds = self.references.outputs(provider, level, run)
                if expected is None:
                    row.messages += nonfinite_problems(run.outputs)
                else:
                    if self.setups[provider].measures_floor:
                        row.floor = measure_floor(self.references, provider, level, run)
                    floors = row.floor.outputs if row.floor else None
                    clean = not row.messages  # no other problem: a level that passes may excuse this one
                    row.outputs, failed = self.tolerances.compare(run.outputs, expected, floors)
                    row.messages += [o.message for o in failed]
                    if failed:
                        noises = unstable_reference_notes(
                            self.references,
                            self.tolerances,
                            self.optimizations,
                            (self.setups[provider], level),
                            run,
                            expected,
                            failed,
                        )
                        row.messages += [noise.message for noise in noises]
                        row.level_noise = {n.output: n.figure for n in noises if n.between_levels and clean}
            except RunFailure as exc:
                row.messages.append(exc.text())
        if row.messages:  # every message is a reason to fail: a lie, a NaN, a difference, an error
            row.status = "fail"
        return row


__all__ = ["run_verification"]
