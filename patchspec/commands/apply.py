"""``patchspec apply``: patch, verify and write each spec's output; ``--check`` says whether each is
up to date without writing; ``--depfile`` and ``--report`` write what build tools and CI read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from patchspec import __version__
from patchspec.commands.context import (
    State,
    exit_code_of,
    limit_option,
    native_code_option,
    output_dir_option,
    root_option,
    verbosity_options,
)
from patchspec.errors import EXIT_STALE, PatchError, PatchspecError, SpecError, UsageError

if TYPE_CHECKING:
    from patchspec.run.engine import Engine
    from patchspec.run.noop import Request
    from patchspec.run.report import RunReport
    from patchspec.run.request import BuildRequest
    from patchspec.spec.steps import Spec


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", type=click.Path(path_type=Path), help="Input model instead of the spec's (one spec only).")
@click.option("--output", type=click.Path(path_type=Path), help="Output path instead of the spec's (one spec only).")
@click.option("--force", is_flag=True, help="Rebuild even when the output is up to date.")
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing: exit 0 when every output is up to date, 6 when one is missing or stale.",
)
@click.option("--no-verify", is_flag=True, help="Skip the spec's verifiers.")
@click.option(
    "--allow-undecided",
    is_flag=True,
    help="With --no-verify: write a model a patch left with undecided points (otherwise exit 4).",
)
@click.option("--depfile", type=click.Path(path_type=Path), help="Write a Make-format dependency file.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), help="Write a JSON report of the run.")
@native_code_option
@click.option("--strict-paths", is_flag=True, help="Refuse symlinked or hard-linked external data files.")
@root_option
@output_dir_option
@verbosity_options
@limit_option
@click.pass_obj
def apply(
    state: State,
    /,
    specs: tuple[Path, ...],
    check_only: bool,
    report_path: Path | None,
    verbose: int,
    quiet: bool,
    **options: Any,
) -> None:
    """Apply SPEC(s): patch, verify, and write the output atomically.

    The output is written to a temporary folder beside it and moved into place only when every
    patch and verifier passed. If the output already carries the digest of this spec, input and
    plugin versions, nothing is done ("up to date").
    """
    request = build_request(specs, check=check_only, report=report_path, **options)
    state.more(verbose, quiet)
    records = noop_requests(specs, request)
    if request.check:
        check(state, specs, request, records)
    elif request.writes_extras or not all_up_to_date(state, records):
        run_all(state, specs, request, records)


def build_request(specs: tuple[Path, ...], **options: Any) -> BuildRequest:
    """The run's one :class:`BuildRequest`, from the command line; refused (exit 2) where options clash."""
    from patchspec.run.request import BuildRequest

    request = BuildRequest(**options)
    if (request.model or request.output) and len(specs) != 1:
        raise UsageError("--model and --output need exactly one spec")
    if request.check and request.writes_extras:
        raise UsageError("--check writes nothing: it does not take --force, --depfile or --report")
    return request


def run_all(state: State, specs: tuple[Path, ...], request: BuildRequest, records: list[Request]) -> None:
    """Build every spec; the report (``--report``) and the summary say how the run ended, whatever ended it."""
    from patchspec.run.reporter import summary_line

    reports: list[RunReport] = []
    try:
        run_specs(state, specs, request, records, reports)
    except BaseException as exc:  # the report says how the run ended, whatever ended it
        if reports and reports[-1].status not in ("written", "unchanged", "up to date"):
            reports[-1].status, reports[-1].error = "failed", str(exc) or type(exc).__name__
            reports[-1].problem = exc.to_json() if isinstance(exc, PatchspecError) else None
        write_report(state, request.report, reports, exit_code_of(exc), None if reports else exc)
        if len(specs) > 1 and reports:  # closes the output, after the error
            state.closing = summary_line([r.status for r in reports], len(specs))
        raise
    write_report(state, request.report, reports, 0)
    if len(specs) > 1:
        state.echo(summary_line([r.status for r in reports], len(specs)))


def run_specs(
    state: State, specs: tuple[Path, ...], request: BuildRequest, records: list[Request], reports: list[RunReport]
) -> None:
    """Load every spec (all valid before any work), then build each in turn; ``reports`` grows as
    they start, so the caller can report how the run ended whatever ended it."""
    from patchspec.printable import shown_path
    from patchspec.run.engine import Engine
    from patchspec.run.noop import remember
    from patchspec.run.report import RunReport
    from patchspec.run.statcache import identity
    from patchspec.spec.load import load_spec

    spec_identities = [identity(path) for path in specs]  # before the specs are read: see run/noop
    registry = state.registry()
    engine = Engine.of(registry, state.reporter, request)
    loaded_specs = [load_spec(path, registry, root=request.root) for path in specs]
    for index, spec in enumerate(loaded_specs):
        report = RunReport(str(spec.path), str(request.model or spec.model), str(request.output or spec.output))
        reports.append(report)
        state.echo(f"patchspec {spec.path}")
        try:
            engine.apply(spec, request, report)
        except (SpecError, PatchError) as exc:
            raise every_patch_problem(engine, spec, request, report, exc) from None
        if report.status in ("written", "unchanged"):
            shown = shown_path(report.output)
            state.echo(f"wrote {shown}" if report.status == "written" else f"{shown}: unchanged (identical bytes)")
        if records and report.digest and not registry.in_process():
            remember(records[index], spec_identities[index], Path(report.output), report.inputs, report.digest)


def noop_requests(specs: tuple[Path, ...], request: BuildRequest) -> list[Request]:
    """How each spec is asked for, as the stat cache's record of a no-op keeps it (``run/noop``); none
    while a test hands plugins in (``patchspec.testing.registered``): no record can describe those."""
    from patchspec.host.installed import installed_plugins
    from patchspec.run.noop import Request

    plugins = installed_plugins()
    return [] if plugins is None else [Request(spec, request, plugins) for spec in specs]


def every_patch_problem(
    engine: Engine, spec: Spec, request: BuildRequest, report: RunReport, exc: PatchspecError
) -> PatchspecError:
    """A patch that does not fit the model stops the build at the first one: say every step's problem
    with the model at once, as validate and plan do (the error itself where it came from elsewhere)."""
    if request.model is not None or report.verifiers or not spec.patches:
        return exc  # another model than the spec's, or past the patches: the error is the whole story
    from patchspec.errors import combined
    from patchspec.run.model_checks import model_problems

    found = model_problems(engine, spec)
    return combined(found) if found and any(str(exc) in str(problem) for problem in found) else exc


def cached_outputs(requests: list[Request]) -> list[Path] | None:
    """Every output's path when each one is up to date by the stat cache alone; None when one may not
    be (or nothing was asked), and the full check must tell."""
    from patchspec.run.freshness import by_record

    outputs = [by_record(request) for request in requests]
    found = [path for path in outputs if path is not None]
    return found if requests and len(found) == len(requests) else None


def all_up_to_date(state: State, requests: list[Request]) -> bool:
    """The no-op of ``apply``, from the stat cache alone: True (and each spec's lines printed) when
    every output is up to date; False when one may not be, and the full run must tell."""
    from patchspec.printable import shown_path
    from patchspec.run.reporter import summary_line

    outputs = cached_outputs(requests)
    if outputs is None:
        return False
    for request, path in zip(requests, outputs):
        state.echo(f"patchspec {request.spec}")
        state.echo(f"{shown_path(path)}: up to date")
    if len(requests) > 1:
        state.echo(summary_line(["up to date"] * len(requests), len(requests)))
    return True


def check(state: State, specs: tuple[Path, ...], request: BuildRequest, records: list[Request]) -> None:
    """apply --check: one line per output; exit 6 when any would be rebuilt."""
    from patchspec.run.depfile import cwd_relative

    outputs = cached_outputs(records)
    if outputs is not None:
        for path in outputs:
            state.echo(f"{request.output or cwd_relative(path)}: up to date")
        return
    from patchspec.run.engine import Engine
    from patchspec.spec.load import load_spec

    registry = state.registry()
    engine = Engine.of(registry, state.reporter, request)
    stale = []
    for spec in [load_spec(path, registry, root=request.root) for path in specs]:
        verdict, reasons = engine.check(spec, request)
        target = request.output or cwd_relative(spec.output)
        if verdict == "up to date":
            state.echo(f"{target}: up to date")
            continue
        stale.append(f"{target}: {verdict}" + (f": {'; '.join(reasons)}" if reasons else ""))
    for line in stale:
        state.reporter.output(line)
    if stale:
        raise click.exceptions.Exit(EXIT_STALE)


def write_report(
    state: State,
    report_path: Path | None,
    reports: list[RunReport],
    exit_code: int,
    error: BaseException | None = None,
) -> None:
    """The JSON report: the process's exit code and patchspec's version, then one run per spec (its
    fields at the top level when there is one spec); written on every exit, interrupts included."""
    if report_path is None:
        return
    payload: dict[str, Any] = {"exit_code": exit_code, "version": __version__}
    payload.update(reports[0].to_json() if len(reports) == 1 else {"runs": [r.to_json() for r in reports]})
    if error is not None:  # the run ended before any spec started: the error, as text and as data
        payload["error"] = str(error) or type(error).__name__
        payload["problem"] = error.to_json() if isinstance(error, PatchspecError) else None
    from patchspec.run.atomic import write_text_atomically

    try:
        write_text_atomically(report_path, json.dumps(payload, indent=2) + "\n")
    except OSError as exc:  # the report must not hide the run's own outcome
        state.reporter.error(f"{report_path}: cannot write the report: {exc.strerror or exc}")
