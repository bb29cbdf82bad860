"""The ``patchspec`` command line. Each command is a thin shell over the engine."""

from __future__ import annotations

import json
import signal
import sys
import traceback
from pathlib import Path

import click

from patchspec import __version__
from patchspec.errors import (
    EXIT_INTERNAL,
    EXIT_STALE,
    Interrupted,
    ModelFileError,
    PatchspecError,
    PluginError,
    SpecError,
    UsageError,
    did_you_mean,
)
from patchspec.plugin.registry import DISABLE_ENV, PluginRegistry
from patchspec.run.commit import write_text_atomically
from patchspec.run.depfile import make_escape
from patchspec.run.engine import Engine, RunReport
from patchspec.run.reporter import Reporter, summary_line
from patchspec.spec.load import combined_schema, load_spec
from patchspec.spec.steps import Spec

EXAMPLES = """
\b
Typical use, from a model to a verified spec:
  patchspec init det.onnx --output specs/det.yaml   a commented starter spec
  patchspec validate specs/det.yaml                 check it, no model needed
  patchspec plan specs/det.yaml                     what each patch changes
  patchspec apply specs/det.yaml                    patch, verify, write
  patchspec inspect det.onnx --shape x=1,3,640,640  dims and who shares them
  patchspec schema --output .patchspec/schema.json  the schema, for editors

\b
Exit codes:
  0        ok or up to date
  1        verification failed; nothing was written
  2        invalid spec or command line
  3        a file cannot be used (model missing or corrupt, output unwritable)
  4        a patch cannot apply to this model
  5        internal error: a bug in patchspec or in a plugin
  6        apply --check: an output is stale or missing
  130/143  interrupted (SIGINT/SIGTERM); nothing is left half-written
"""


class _State:
    """What every command prints through: the one :class:`Reporter` of this process."""

    def __init__(self, reporter: Reporter | None = None) -> None:
        self.reporter = reporter if reporter is not None else Reporter()
        #: a line that closes the run, printed after the error if there is one (apply's summary)
        self.closing: str | None = None

    @property
    def verbosity(self) -> int:
        return self.reporter.verbosity

    @verbosity.setter
    def verbosity(self, value: int) -> None:
        self.reporter.verbosity = value

    def echo(self, text: str) -> None:
        self.reporter.line(text)

    def more(self, verbose: int, quiet: bool) -> None:
        """``-q``/``-v`` given after the command, as the contract writes them, add to those before it."""
        self.verbosity = -1 if quiet or self.verbosity < 0 else self.verbosity + verbose


def _verbosity_options(command):
    command = click.option("-q", "--quiet", "quiet", is_flag=True, help="Only errors.")(command)
    return click.option("-v", "--verbose", "verbose", count=True, help="More detail (every step's details).")(command)


@click.group(epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchspec")
@click.option("-v", "--verbose", count=True, help="More detail (every step's details).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Patch ONNX models declaratively from a reviewed YAML spec."""
    if not isinstance(ctx.obj, _State):  # main hands its own in, to print the errors through it
        ctx.obj = _State()
    ctx.obj.verbosity = -1 if quiet else verbose


def _registry() -> PluginRegistry:
    return PluginRegistry.load()


def _engine(state: _State, registry: PluginRegistry, strict_paths: bool = False) -> Engine:
    return Engine(registry, state.reporter, strict_paths=strict_paths)


@cli.command()
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
@click.option("--depfile", type=click.Path(path_type=Path), help="Write a Make-format dependency file.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), help="Write a JSON report of the run.")
@click.option("--strict-paths", is_flag=True, help="Refuse symlinked or hard-linked external data files.")
@_verbosity_options
@click.pass_obj
def apply(
    state: _State,
    specs,
    model,
    output,
    force,
    check_only,
    no_verify,
    depfile,
    report_path,
    strict_paths,
    verbose,
    quiet,
) -> None:
    """Apply SPEC(s): patch, verify, and write the output atomically.

    The output is written to a temporary folder beside it and moved into place only when every
    patch and verifier passed. If the output already carries the digest of this spec, input and
    plugin versions, nothing is done ("up to date").
    """
    if (model or output) and len(specs) != 1:
        raise UsageError("--model and --output need exactly one spec")
    if check_only and (force or depfile or report_path):
        raise UsageError("--check writes nothing: it does not take --force, --depfile or --report")
    state.more(verbose, quiet)
    if check_only:
        _check(state, specs, model, output, no_verify, strict_paths)
        return
    reports: list[RunReport] = []
    try:
        registry = _registry()
        engine = _engine(state, registry, strict_paths)
        loaded_specs = [load_spec(path, registry) for path in specs]  # every spec valid before any work
        for spec in loaded_specs:
            report = RunReport(str(spec.path), str(model or spec.model), str(output or spec.output))
            reports.append(report)
            state.echo(f"patchspec {spec.path}")
            engine.apply(spec, model=model, output=output, force=force, no_verify=no_verify, report=report)
            if report.status in ("written", "unchanged"):
                state.echo(
                    f"wrote {report.output}"
                    if report.status == "written"
                    else f"{report.output}: unchanged (identical bytes)"
                )
            if depfile:
                _write_depfile(depfile, report, spec, model, output)
    except BaseException as exc:  # the report says how the run ended, whatever ended it
        if reports and reports[-1].status not in ("written", "unchanged", "up to date"):
            reports[-1].status, reports[-1].error = "failed", str(exc) or type(exc).__name__
            reports[-1].problem = exc.to_json() if isinstance(exc, PatchspecError) else None
        _write_report(state, report_path, reports, exit_code_of(exc), None if reports else exc)
        if len(specs) > 1 and reports:  # closes the output, after the error
            state.closing = summary_line([r.status for r in reports], len(specs))
        raise
    _write_report(state, report_path, reports, 0)
    if len(specs) > 1:
        state.echo(summary_line([r.status for r in reports], len(specs)))


@cli.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def validate(state: _State, specs, as_json: bool) -> None:
    """Check SPEC(s) against the schema and each plugin's rules; no model is read."""
    registry = _registry()
    problems = []
    results = []
    for path in specs:
        try:
            load_spec(path, registry)
            results.append({"spec": str(path), "ok": True, "problems": []})
            if not as_json:
                state.echo(f"{path}: ok")
        except PatchspecError as exc:
            problems.append(exc)
            results.append({"spec": str(path), "ok": False, "problems": _problems_of(exc)})
    if as_json:
        state.reporter.output(json.dumps({"specs": results}, indent=2))
        if problems:
            raise click.exceptions.Exit(problems[0].exit_code)
        return
    if problems:  # every spec's problems, with the first one's exit code (5 for a plugin's fault)
        error = UsageError("\n".join(str(p) for p in problems))
        error.exit_code = problems[0].exit_code
        error.plugin_tracebacks = tuple(dict.fromkeys(t for p in problems for t in p.plugin_tracebacks))
        raise error


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--model", type=click.Path(path_type=Path), help="Input model instead of the spec's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@_verbosity_options
@click.pass_obj
def plan(state: _State, spec_path, model, as_json: bool, verbose: int, quiet: bool) -> None:
    """Load the model and say what each patch would change, and each input's and output's shape
    before -> after; -v adds each patch's details. Writes nothing."""
    state.more(verbose, quiet)
    registry = _registry()
    spec = load_spec(spec_path, registry)
    engine = Engine(registry, Reporter.to(lambda _: None) if as_json else state.reporter)
    report = engine.plan(spec, model)
    if as_json:
        state.reporter.output(json.dumps(report.to_json(), indent=2))


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="Model to verify instead of the spec's output.")
@_verbosity_options
@click.pass_obj
def verify(state: _State, spec_path, output, verbose: int, quiet: bool) -> None:
    """Run only the spec's verifiers against the existing output."""
    state.more(verbose, quiet)
    registry = _registry()
    spec = load_spec(spec_path, registry)
    engine = _engine(state, registry)
    target = (output or spec.output).absolute()
    report = RunReport(str(spec.path), str(spec.model), str(target))
    engine.verify(spec, target, spec.model, report, check_params=True)
    state.echo(f"{target}: verified")


@cli.command()
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the schema to this file (its folders are created) instead of printing it.",
)
@click.pass_obj
def schema(state: _State, output: Path | None) -> None:
    """Print the JSON Schema of specs (core + every installed plugin), for editors.

    \b
    For an editor with the YAML language server, write it once, then name it in each spec
    (the path is relative to the spec):
      patchspec schema --output .patchspec/schema.json
      # yaml-language-server: $schema=../.patchspec/schema.json

    A plugin that fails to load is left out with a warning on stderr, and the exit status is 5:
    the schema is incomplete (disable the plugin with PATCHSPEC_DISABLE_PLUGINS to leave it out on purpose).
    """
    registry = _registry()
    text = json.dumps(combined_schema(registry), indent=2, sort_keys=True)
    if output is None:
        click.echo(text)
    else:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write_text(output, text + "\n")
        except OSError as exc:
            raise ModelFileError(f"{output}: cannot write the schema: {exc.strerror or exc}") from exc
        state.echo(f"wrote {output}")
    broken = registry.broken()
    if broken:
        lines = [f"warning: the schema above leaves out {len(broken)} plugin(s) that failed to load:"]
        lines += [f"  {info.label}: {info.error}" for info in broken]
        names = ",".join(info.name for info in broken)
        hint = (
            f"fix or reinstall them ('patchspec plugins' shows why), or leave them out on purpose: "
            f"{DISABLE_ENV}={names} patchspec schema"
        )
        raise PluginError(
            "\n".join(lines), hint, "\n".join(info.traceback for info in broken if info.traceback) or None
        )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def plugins(state: _State, as_json: bool) -> None:
    """List installed plugins: name, version, what each provides, where it was loaded from."""
    registry = _registry()
    if as_json:
        state.reporter.output(json.dumps([vars(p) for p in [*registry.plugins, *registry.disabled]], indent=2))
        return
    for info in registry.plugins:
        kind = "built-in" if info.builtin else info.distribution
        state.reporter.output(f"{info.name} ({kind} {info.version})")
        if info.patch_types:
            state.reporter.output(f"  patch types: {', '.join(info.patch_types)}")
        if info.verifiers:
            state.reporter.output(f"  verifiers:   {', '.join(info.verifiers)}")
        state.reporter.output(f"  from: {info.location or info.module}")
        if info.error:
            state.reporter.output(f"  BROKEN: {info.error}")
            if info.traceback and state.verbosity > 0:
                state.reporter.output("    " + info.traceback.rstrip("\n").replace("\n", "\n    "))
    if registry.disabled:
        names = ", ".join(f"{info.name}" for info in registry.disabled)
        state.reporter.output(f"disabled by {DISABLE_ENV} (installed, not loaded): {names}")
    for name in registry.disabled_unknown:
        installed = [info.name for info in [*registry.plugins, *registry.disabled]]
        state.reporter.error(
            f"warning: {DISABLE_ENV} names '{name}', which is not an installed plugin" + did_you_mean(name, installed)
        )


@cli.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(path_type=Path))
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    metavar="NAME=D0,D1,...",
    help="Input shape for the lint (repeatable); default: 1 on axis 0, 64, 96, ... elsewhere.",
)
@click.option(
    "--value",
    "values",
    multiple=True,
    metavar="NAME=V[,V...]",
    help="Value an input is fed for the lint (repeatable), e.g. --value sr=16000; default: what the graph "
    "says an integer input needs, else random.",
)
@click.option("--all", "unfold", is_flag=True, help="Unfold every subgraph, dim_param use and list (also -v).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (always every detail).")
@click.option(
    "--suggest",
    is_flag=True,
    help="List the shape constants that bake the export's input sizes, and the spec lines that free them "
    "(reads the graph only; no lint run).",
)
@click.pass_obj
def inspect_command(
    state: _State, model_path: Path, shapes, values, unfold: bool, as_json: bool, suggest: bool
) -> None:
    """Inputs, outputs, lint findings, ops, weights, metadata, dim_params, external data, subgraphs.

    The lint runs the model on ONNX Runtime at the given (or default) input shapes and reports every
    dim_param that is bound to different sizes, with the patch that fixes it. Never writes anything.
    When the external data is missing (or a Git LFS pointer), the graph is still shown, the lint is
    skipped and the missing files are listed at the end (exit 3).

    \b
    --suggest instead finds constants a tracer baked from the export's input sizes (a Reshape to
    [1, 85, 96] for a 64x96 image at stride 8) and prints the rename_dims / replace_initializer
    lines that make them follow the inputs, e.g.:
      patchspec inspect models/det.onnx --suggest
    """
    from patchspec.ort.inspection import parse_shape_options, parse_value_options
    from patchspec.ort.report import format_inspection, inspect_model

    if suggest:
        from patchspec.author.suggest import format_suggestions, suggest_report

        data = suggest_report(model_path)
        click.echo(json.dumps(data, indent=2) if as_json else format_suggestions(data))
        return
    try:
        data = inspect_model(model_path, parse_shape_options(shapes), parse_value_options(values))
    except PatchspecError as exc:
        if not as_json:
            raise
        # --json always prints JSON on stdout: the error as data, with the same exit code
        error = {
            "model": str(model_path),
            "error": exc.to_json(),
        }
        click.echo(json.dumps(error, indent=2))
        raise click.exceptions.Exit(exc.exit_code) from None
    click.echo(json.dumps(data, indent=2) if as_json else format_inspection(data, unfold or state.verbosity > 0))
    problem = data["external_data_problem"]
    if problem and as_json:
        raise click.exceptions.Exit(problem["exit_code"])
    if problem:  # the missing files, once, at the end (on stderr, as any error)
        raise ModelFileError(problem["message"], problem["hint"])


@cli.command("init")
@click.argument("model_path", metavar="MODEL", type=click.Path(path_type=Path))
@click.option("--batch", type=click.IntRange(min=1), help="A static batch of this size.")
@click.option("--dynamic", metavar="NAME", help="A symbolic batch with this name (the default: N).")
@click.option(
    "--output",
    "spec_path",
    type=click.Path(path_type=Path),
    help="Where to write the spec (default: MODEL's name with .patchspec.yaml, in the current folder).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing spec.")
@click.pass_obj
def init_command(state: _State, model_path: Path, batch, dynamic, spec_path, force: bool) -> None:
    """Write a commented starter spec for MODEL: its batch, dim names to tell apart, and a verify block.

    \b
    It finds which inputs (and which axes) carry the batch, trying set_batch on the graph alone;
    gives integer inputs values where the graph says what they are (a sample rate compared with
    16000 to choose a branch, token ids below an embedding table's row count, a 0/1 mask), and
    flags the others; verifies against the original, one sample at a time when the original's batch
    is fixed. The weights are never read. Nothing is written when the spec exists (use --force).

    \b
    Examples:
      patchspec init models/det.onnx                 # symbolic batch N
      patchspec init models/det.onnx --batch 8 --output specs/det_b8.yaml
      patchspec apply specs/det_b8.yaml              # next: build and verify

    Exit codes: 0 written, 2 bad options or the spec exists, 3 the model cannot be read,
    4 set_batch cannot batch the model (the reason is printed).
    """
    from patchspec.author.init import draft_spec

    if batch is not None and dynamic is not None:
        raise UsageError("give --batch N (static) or --dynamic NAME (symbolic), not both")
    spec_path = spec_path or Path(f"{model_path.stem}.patchspec.yaml")
    if spec_path.exists() and not force:
        raise UsageError(
            f"{spec_path} exists; nothing was written", "give another --output, or --force to overwrite it"
        )
    result = draft_spec(model_path, spec_path, batch if batch is not None else (dynamic or "N"), _registry())
    width = max([len("input")] + [len(row.name) for row in result.rows])
    state.echo(f"{'input'.ljust(width)}  batch axis  how it was decided")
    for row in result.rows:
        axis = "-" if row.axis is None else str(row.axis)
        state.echo(
            f"{row.name.ljust(width)}  {axis.ljust(10)}  {row.how}" + (f"; values: {row.values}" if row.values else "")
        )
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(result.text, encoding="utf-8")
    for note in result.notes:
        state.echo(f"flagged: {note}")
    state.echo(f"wrote {spec_path}; next: patchspec apply {spec_path}")


@cli.command("derive")
@click.argument("a_path", metavar="A", type=click.Path(path_type=Path))
@click.argument("b_path", metavar="B", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "spec_path",
    type=click.Path(path_type=Path),
    help="Where to write the spec (default: A's name with .patchspec.yaml, in the current folder).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing spec (and its .npy files).")
@click.pass_obj
def derive_command(state: _State, a_path: Path, b_path: Path, spec_path, force: bool) -> None:
    """Write the spec that makes model A work at any input size, from A and B: one network exported
    (traced) at two input sizes.

    \b
    Tracers bake sizes into constants (a Reshape to [1, 11, 2, 15, 2, -1] for an 11x15 grid). derive
    pairs the two graphs node for node, fits each integer constant that differs as an expression of
    the input dims (dim(x, 2) // 8, dim(x, 2) * dim(x, 3) // 64, or -1 in a Reshape), adds an int64
    input for sizes no input dim holds (a merger's grid: value(sizes, 0)), and frees the input dims
    that differ. The spec has replace_initializer and rename_dims patches, and a verify block:
    check, and run at A's sizes against A and at B's sizes against B. Weights are never read.

    \b
    Example:
      patchspec derive det_640x640.onnx det_480x736.onnx --output specs/det_any.yaml
      patchspec apply specs/det_any.yaml             # next: build and verify

    Exit codes: 0 written, 2 bad command line or the spec exists (use --force), 3 a model cannot be
    read, 4 the graphs differ in structure or an entry fits no expression (the nodes are named).
    """
    from patchspec.author.derive import derive, write

    if a_path.resolve() == b_path.resolve():
        raise UsageError(f"A and B are the same file ({a_path}): give two exports of the model at two input sizes")
    spec_path = spec_path or Path(f"{a_path.stem}.patchspec.yaml")
    if spec_path.is_dir():
        raise UsageError(f"--output {spec_path} is a folder: give the spec's file name")
    if spec_path.exists() and not force:
        raise UsageError(
            f"{spec_path} exists; nothing was written", "give another --output, or --force to overwrite it"
        )
    result = derive(a_path, b_path, spec_path, _registry())
    existing = [str(path) for path in result.arrays if path.exists()]
    if existing and not force:
        raise UsageError(f"{', '.join(existing)} exists; nothing was written", "give another --output, or --force")
    write(result)
    if result.rows:
        width = max(len("constant"), *(len(row.constant) for row in result.rows))
        state.echo(f"{'constant'.ljust(width)}  {'A -> B':<14}  expression")
        for row in result.rows:
            state.echo(f"{row.constant.ljust(width)}  {f'{row.a} -> {row.b}':<14}  {row.expression}")
    for line in result.freed:
        state.echo(f"freed input dim {line}")
    for note in result.notes:
        state.echo(f"note: {note}")
    files = "".join(f", {path.name}" for path in result.arrays)
    state.echo(f"wrote {spec_path}{files}; next: patchspec apply {spec_path}")


@cli.command(name="cmake-path")
def cmake_path() -> None:
    """Print the folder of patchspec's CMake module, for CMAKE_MODULE_PATH (include(Patchspec))."""
    click.echo(Path(__file__).resolve().parent / "cmake")


@cli.command(name="bazel-path")
def bazel_path() -> None:
    """Print the folder of patchspec's Bazel rules, a repository (local_repository, patchspec.bzl)."""
    click.echo(Path(__file__).resolve().parent / "bazel")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def env(state: _State, as_json: bool) -> None:
    """Versions of patchspec, onnx and every ONNX Runtime distribution; available providers."""
    from patchspec.ort.environment import environment, environment_lines

    if as_json:
        state.reporter.output(json.dumps(environment(), indent=2))
        return
    for line in environment_lines():
        state.reporter.output(line)


def _write_depfile(depfile: Path, report: RunReport, spec: Spec, model, output) -> None:
    # paths as the build tool names them: Make and Ninja match targets by their spelling
    model_path, *others = map(Path, report.inputs)
    deps = [spec.path, model or _cwd_relative(model_path), *map(_cwd_relative, others)]
    target = output or _cwd_relative(Path(report.output))
    # the output's data files are outputs too (grouped targets): deleting one makes the rule run
    data = [_cwd_relative(Path(f)) for f in report.files if Path(f).absolute() != Path(report.output).absolute()]
    targets = " ".join(_make_escape(p) for p in [target, *data])
    text = f"{targets}: " + " ".join(_make_escape(p) for p in deps) + "\n"
    _atomic_write_text(depfile, text)


def _cwd_relative(path: Path) -> Path:
    """``path`` relative to the current directory when inside it, else absolute."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _make_escape(path: Path) -> str:
    return make_escape(path)


def _check(state: _State, specs, model, output, no_verify: bool, strict_paths: bool) -> None:
    """apply --check: one line per output; exit 6 when any would be rebuilt."""
    registry = _registry()
    engine = _engine(state, registry, strict_paths)
    stale = []
    for spec in [load_spec(path, registry) for path in specs]:
        verdict, reasons = engine.check(spec, model=model, output=output, no_verify=no_verify)
        target = output or _cwd_relative(spec.output)
        if verdict == "up to date":
            state.echo(f"{target}: up to date")
            continue
        stale.append(f"{target}: {verdict}" + (f": {'; '.join(reasons)}" if reasons else ""))
    for line in stale:
        state.reporter.output(line)
    if stale:
        raise click.exceptions.Exit(EXIT_STALE)


def _problems_of(exc: PatchspecError) -> list[dict]:
    """The error as data: each problem of an invalid spec, or the one error, with its fields."""
    if isinstance(exc, SpecError):
        return [problem.to_json() for problem in exc.problems]
    return [exc.to_json()]


def _write_report(
    state: _State,
    report_path: Path | None,
    reports: list[RunReport],
    exit_code: int,
    error: BaseException | None = None,
) -> None:
    """The JSON report: the process's exit code and patchspec's version, then one run per spec (its
    fields at the top level when there is one spec); written on every exit, interrupts included."""
    if report_path is None:
        return
    payload: dict = {"exit_code": exit_code, "version": __version__}
    payload.update(reports[0].to_json() if len(reports) == 1 else {"runs": [r.to_json() for r in reports]})
    if error is not None:  # the run ended before any spec started: the error, as text and as data
        payload["error"] = str(error) or type(error).__name__
        payload["problem"] = error.to_json() if isinstance(error, PatchspecError) else None
    try:
        _atomic_write_text(report_path, json.dumps(payload, indent=2) + "\n")
    except OSError as exc:  # the report must not hide the run's own outcome
        state.reporter.error(f"{report_path}: cannot write the report: {exc.strerror or exc}")


def _atomic_write_text(path: Path, text: str) -> None:
    write_text_atomically(path, text)


def _raise_interrupt(signum, frame):
    raise Interrupted(signum)


def exit_code_of(exc: BaseException) -> int:
    """The exit code ``main`` turns ``exc`` into (the contract's table)."""
    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if isinstance(exc, click.ClickException):
        return 2
    if isinstance(exc, (click.exceptions.Abort, KeyboardInterrupt)):
        return 130
    if isinstance(exc, Interrupted):
        return int(exc.exit_code)
    if isinstance(exc, PatchspecError):
        return int(exc.exit_code)
    return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turn errors into one message and the contract's exit code.

    Every error is printed once, on stderr, through the run's reporter (its status line cleared
    first). ``-v`` adds a traceback only for a bug (exit 5) or a plugin that failed to load (its own
    traceback): an expected failure's message says all there is to say."""
    state = _State(Reporter())  # made here: under a test runner, sys.stdout is the captured one now
    reporter = state.reporter
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        returned = cli.main(args=argv, prog_name="patchspec", standalone_mode=False, obj=state)
        return returned if isinstance(returned, int) else 0  # click hands back an Exit's code here
    except click.exceptions.Exit as exc:
        return exit_code_of(exc)
    except click.ClickException as exc:
        reporter.close()
        exc.show()
        return exit_code_of(exc)
    except (click.exceptions.Abort, KeyboardInterrupt, Interrupted) as exc:
        reporter.close()
        reporter.error("interrupted")
        return exit_code_of(exc)
    except PatchspecError as exc:
        reporter.close()
        if (
            reporter.verbose and exc.plugin_tracebacks
        ):  # the plugin's code is what failed: patchspec's frames would not help
            for text in exc.plugin_tracebacks:
                reporter.output(text.rstrip("\n"), err=True)
        elif reporter.verbose and exit_code_of(exc) == EXIT_INTERNAL:
            reporter.output(_traceback(exc), err=True)
        reporter.error(_only_the_error(str(exc)) if reporter.quiet else str(exc))
        return exit_code_of(exc)
    except Exception as exc:  # a bug: one line unless -v
        reporter.close()
        if reporter.verbose:
            reporter.output(_traceback(exc), err=True)
        reporter.error(f"internal error: {type(exc).__name__}: {exc}\n{_bug_line(reporter.verbose)}")
        return exit_code_of(exc)
    finally:
        reporter.close()
        if state.closing:
            reporter.line(state.closing)


def _only_the_error(text: str) -> str:
    """What ``-q`` prints of an error: its first line and its hints, not the details under it (a failed
    verifier's per-case lines). A spec error's located problems are each a line of their own: kept."""
    lines = text.splitlines()
    return "\n".join([lines[0]] + [line for line in lines[1:] if not line.startswith("    ") or "hint:" in line])


def _traceback(exc: BaseException) -> str:
    """The traceback of a bug, without its last line: the error printed right after it says that."""
    lines = list(traceback.TracebackException.from_exception(exc).format())
    said = list(traceback.format_exception_only(type(exc), exc))
    return "".join(lines[: len(lines) - len(said)]).rstrip("\n")


def _bug_line(traceback_shown: bool = False) -> str:
    import platform

    import onnx

    try:
        import onnxruntime

        ort = onnxruntime.__version__
    except Exception:  # pragma: no cover - reported, not fatal
        ort = "not importable"
    return (
        f"this is a bug in patchspec {__version__} (python {platform.python_version()}, onnx {onnx.__version__}, "
        f"onnxruntime {ort}); "
        + ("report it with the traceback above" if traceback_shown else "rerun with -v for the traceback and report it")
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
