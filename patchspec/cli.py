"""The ``patchspec`` command line: the click group, its global options, and the shell that turns every
error into one message and the contract's exit code. Each command lives in ``patchspec.commands``."""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import click

from patchspec import __version__
from patchspec.commands.apply import apply
from patchspec.commands.build_paths import bazel_path, cmake_path
from patchspec.commands.context import State, exit_code_of, load_registry
from patchspec.commands.derive import derive_command
from patchspec.commands.env import env
from patchspec.commands.init import init_command
from patchspec.commands.inspect import inspect_command
from patchspec.commands.plan import plan
from patchspec.commands.plugins import plugins
from patchspec.commands.schema import schema
from patchspec.commands.validate import validate
from patchspec.commands.verify import verify
from patchspec.errors import EXIT_INTERNAL, Interrupted, PatchspecError
from patchspec.interrupts import handling, received
from patchspec.run.reporter import Reporter

if TYPE_CHECKING:
    from patchspec.host.registry import PluginRegistry

__all__ = ["cli", "main"]

#: read by the OpenBLAS that numpy's wheels bundle, once, when numpy is imported
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"

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


@click.group(epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchspec")
@click.option("-v", "--verbose", count=True, help="More detail (every step's details).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Patch ONNX models declaratively from a reviewed YAML spec."""
    if not isinstance(ctx.obj, State):  # main hands its own in, to print the errors through it
        ctx.obj = State()
    ctx.obj.verbosity = -1 if quiet else verbose
    ctx.obj.registry = _registry  # looked up now: a test may have replaced it


for _command in (
    apply,
    validate,
    plan,
    verify,
    schema,
    plugins,
    inspect_command,
    init_command,
    derive_command,
    cmake_path,
    bazel_path,
    env,
):
    cli.add_command(_command)


#: the registry every command loads; tests replace it (``monkeypatch.setattr(patchspec.cli, "_registry", ...)``)
_registry: Callable[[], PluginRegistry] = load_registry


#: the start of the warning a deprecated name of patchspec's API gives (patchspec.api's __getattr__)
DEPRECATED_NAME = r"patchspec\.api\.\w+ (is deprecated|was renamed)"


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turn errors into one message and the contract's exit code.

    Every error is printed once, on stderr, through the run's reporter (its status line cleared
    first). ``-v`` adds a traceback only for a bug (exit 5) or a plugin that failed to load (its own
    traceback): an expected failure's message says all there is to say."""
    # patchspec's numpy work is element-wise on small arrays, so OpenBLAS's worker threads, which numpy
    # starts at import and which spin, only burn CPU: about 0.1 s a run on 2 cores. A user's setting wins.
    os.environ.setdefault(BLAS_THREADS_ENV, "1")
    state = State(Reporter())  # made here: under a test runner, sys.stdout is the captured one now
    with handling(), warnings.catch_warnings():
        if not sys.warnoptions:  # a plugin's use of a deprecated name is shown (Python hides it outside
            # __main__), once per line of the plugin that uses it; the user's -W settings win
            warnings.filterwarnings("default", DEPRECATED_NAME, DeprecationWarning)
        try:
            return _run(argv, state)
        except Interrupted as exc:  # arrived while the outcome was being reported: the run still stops
            return exc.exit_code


def script() -> NoReturn:
    """The ``patchspec`` command (the console script, ``python -m patchspec``): :func:`main`, then exit
    with its code. A run a signal stopped (130, 143) has cleaned up and chosen its code; it leaves at
    once, without the interpreter's teardown, where an onnxruntime session destroyed with its threads
    could still abort the process ("terminate called without an active exception", exit -6)."""
    code = main()
    if received() is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _run(argv: list[str] | None, state: State) -> int:
    reporter = state.reporter
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
    except Exception as exc:
        if received() is None:
            return _failed(exc, reporter)
        # the signal was raised inside code that turned it into an error of its own (an extension
        # module whose import it cut short says "ImportError: initialization failed"): the run stops
        reporter.close()
        reporter.error("interrupted")
        return exit_code_of(exc)
    finally:
        reporter.close()
        if state.closing:
            reporter.line(state.closing)


def _failed(exc: Exception, reporter: Reporter) -> int:
    """Say what failed, once, and return its exit code: the contract's for a PatchspecError, 5 for a bug."""
    if isinstance(exc, PatchspecError):
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
    reporter.close()  # a bug: one line unless -v
    if reporter.verbose:
        reporter.output(_traceback(exc), err=True)
    reporter.error(f"internal error: {type(exc).__name__}: {exc}\n{_bug_line(reporter.verbose)}")
    return exit_code_of(exc)


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
