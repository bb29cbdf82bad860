"""What every command shares: the process's :class:`State` (its one reporter and the way to load the
plugin registry), the ``-q``/``-v`` options a command repeats, and the exit code of an exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from patchspec.errors import EXIT_INTERNAL, Interrupted, PatchspecError
from patchspec.run.reporter import Reporter

if TYPE_CHECKING:
    from patchspec.host.registry import PluginRegistry

F = TypeVar("F", bound=Callable[..., object])


def load_registry() -> PluginRegistry:
    """A fresh registry of the installed plugins (the default of :attr:`State.registry`)."""
    from patchspec.host.registry import PluginRegistry

    return PluginRegistry.load()


class State:
    """What every command prints through: the one :class:`Reporter` of this process, and
    :attr:`registry`, which loads the plugins (``patchspec.cli`` points it at its own hook)."""

    def __init__(self, reporter: Reporter | None = None) -> None:
        self.reporter = reporter if reporter is not None else Reporter()
        #: a line that closes the run, printed after the error if there is one (apply's summary)
        self.closing: str | None = None
        self.registry: Callable[[], PluginRegistry] = load_registry

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


def verbosity_options(command: F) -> F:
    """``-q`` and ``-v`` on a command, adding to the group's own."""
    command = click.option("-q", "--quiet", "quiet", is_flag=True, help="Only errors.")(command)
    return click.option("-v", "--verbose", "verbose", count=True, help="More detail (every step's details).")(command)


def native_code_option(command: F) -> F:
    """``--allow-native-code``: load the custom-op libraries a spec names (the caller's choice, never
    the spec's; see docs/security.md). Set on every invocation, so one run's choice never leaks into
    the next in the same process."""

    def remember(ctx: click.Context, param: click.Parameter, allowed: bool) -> bool:
        from patchspec.ort.native_code import allow_native_code

        allow_native_code(allowed)
        return allowed

    return click.option(
        "--allow-native-code",
        is_flag=True,
        envvar="PATCHSPEC_ALLOW_NATIVE_CODE",
        expose_value=False,
        callback=remember,
        help="Load the custom-op libraries the spec's run verifier names (native code runs when loaded).",
    )(command)


def exit_code_of(exc: BaseException) -> int:
    """The exit code ``patchspec.cli.main`` turns ``exc`` into (the contract's table): a signal's
    (130, 143) whenever one arrived, whatever error it surfaced as."""
    from patchspec.interrupts import received

    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if received() is not None:
        return int(Interrupted(received() or 0).exit_code)
    if isinstance(exc, click.ClickException):
        return 2
    if isinstance(exc, (click.exceptions.Abort, KeyboardInterrupt)):
        return 130
    if isinstance(exc, Interrupted):
        return int(exc.exit_code)
    if isinstance(exc, PatchspecError):
        return int(exc.exit_code)
    return EXIT_INTERNAL


def root_option(command: F) -> F:
    """``--root DIR``: the project root the spec's paths must stay in (docs/security.md)."""
    return click.option(
        "--root",
        type=click.Path(path_type=Path, file_okay=False),
        envvar="PATCHSPEC_ROOT",
        help="Project root the spec's files must lie in (default: the nearest folder above the spec "
        "holding .git, else the spec's folder). Also $PATCHSPEC_ROOT.",
    )(command)


def output_dir_option(command: F) -> F:
    """``--output-dir DIR`` (repeatable): a folder the caller makes an output folder (docs/security.md)."""
    return click.option(
        "--output-dir",
        "output_dirs",
        multiple=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="Let specs write any file name in DIR and replace any file there (never in .git or a "
        "virtual environment). Without it a spec writes only NAME.onnx and data files (.data, .bin, ...) "
        "and replaces only files patchspec wrote. Repeatable.",
    )(command)


def limit_option(command: F) -> F:
    """``--limit NAME=VALUE`` (repeatable): raise a limit a spec cannot lift (patchspec.limits)."""

    def remember(ctx: click.Context, param: click.Parameter, given: tuple[str, ...]) -> tuple[str, ...]:
        from patchspec import limits

        try:
            limits.use(limits.parse(given))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        return given

    return click.option(
        "--limit",
        "limits",
        multiple=True,
        metavar="NAME=VALUE",
        expose_value=False,
        callback=remember,
        help="Raise a limit a spec cannot lift: timeout (s, 600), max-elements (per input, 2**27), "
        "case-bytes (all inputs of a case, 2 GiB), align (bytes, 65536). Repeatable.",
    )(command)
