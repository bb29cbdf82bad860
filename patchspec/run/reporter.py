"""The one way patchspec talks to the user: lines on stdout, errors on stderr, progress on a terminal.

Every command prints through a :class:`Reporter`. ``-q`` (verbosity -1) silences all but errors;
a stream that is not a terminal gets plain lines: no progress, no colour, no wrapping, so a pipe or
a build log sees exactly the text. On a terminal, lines wrap at word boundaries with their
continuation indented under the text, the words that say how a step ended are coloured (unless
``NO_COLOR`` is set), and any task that runs longer than :data:`DELAY` seconds shows what it does
on one status line on stderr, overwritten in place and cleared before the next line is printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING

import click

from patchspec.printable import printable

if TYPE_CHECKING:
    from patchspec.run.report import StepOutcome

#: seconds a task runs before the status line shows it (fast steps never flicker)
DELAY = 1.0
#: seconds between redraws of the status line
TICK = 0.2
#: the column a step's summary starts at: ``  name ..... status    summary``
STEP_COLUMN = 38

Echo = Callable[[str], None]
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)

_COLOURS = {
    "passed": "green",
    "modified": "green",
    "written": "green",
    "pass": "green",
    "failed": "red",
    "FAIL": "red",
    "skipped": "yellow",
}
_WORDS = re.compile(r"\b(FAIL|pass)\b(?=[: ])")
_COUNTS = re.compile(r"\b([1-9]\d*) (failed|written)\b")


def is_terminal(stream: IO[str] | None) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def wants_colour(stream: IO[str] | None) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


def wrap(text: str, width: int, hang: int | None = None) -> str:
    """Each line of ``text`` wrapped at word boundaries to ``width``; continuation lines are indented
    ``hang`` columns (default: the line's own indent plus two), never breaking a word or a path."""
    out = []
    for line in text.split("\n"):
        lead = len(line) - len(line.lstrip(" "))
        indent = lead + (6 if line.lstrip().startswith("hint: ") else 2) if hang is None else hang
        if len(line) <= width or width - indent < 20:
            out.append(line)
            continue
        out += textwrap.wrap(
            line,
            width,
            initial_indent="",
            subsequent_indent=" " * indent,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    return "\n".join(out)


def _human_bytes(count: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count:.0f} B"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def summary_line(statuses: list[str], total: int) -> str:
    """``3 specs: 2 written, 1 up to date, 0 failed``: how each spec of a run ended (``unchanged`` and
    ``not run``, after a failure stopped the run, only where there are some)."""
    counts = dict.fromkeys(("written", "up to date", "unchanged", "failed"), 0)
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    counts["not run"] = total - len(statuses)
    always = ("written", "up to date", "failed")
    return f"{total} specs: " + ", ".join(f"{n} {what}" for what, n in counts.items() if n or what in always)


class Task:
    """Something running now: its label, what it does at the moment, and bytes done where counted."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.text = ""
        self.started = self.since = time.monotonic()
        self.done = self.total = 0

    def say(self, text: str) -> None:
        """What the task does from now on (a case, a level); its clock restarts."""
        self.text, self.since = text, time.monotonic()

    def advance(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def render(self, now: float) -> str:
        head = f"{self.label}: {self.text}" if self.text else self.label
        if not self.total:
            return f"{head} ... {now - self.since:.0f} s"
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "?"
        filled = int(20 * self.done / self.total)
        return (
            f"{head} [{'#' * filled}{'-' * (20 - filled)}] {100 * self.done // self.total:3d}%  "
            f"{_human_bytes(self.done)}/{_human_bytes(self.total)}  {_human_bytes(rate)}/s  ETA {eta}"
        )


class Reporter:
    """Where everything a command says goes; ``verbosity`` is -1 (``-q``), 0, or 1 and up (``-v``)."""

    def __init__(
        self, verbosity: int = 0, out: IO[str] | None = None, err: IO[str] | None = None, *, echo: Echo | None = None
    ) -> None:
        self.verbosity = verbosity
        self._echo = echo  # a plain sink (an embedding such as the hatch hook): lines only
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        terminal = echo is None
        self.out_tty, self.err_tty = terminal and is_terminal(self.out), terminal and is_terminal(self.err)
        self.out_colour, self.err_colour = terminal and wants_colour(self.out), terminal and wants_colour(self.err)
        self._lock = threading.RLock()
        self._tasks: list[Task] = []
        self._drawn = ""  # the status line on the terminal now ("" when there is none)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @classmethod
    def to(cls, echo: Echo, verbosity: int = 0) -> Reporter:
        """A reporter that hands every line to ``echo``: no terminal, no progress, errors raised only."""
        return cls(verbosity, echo=echo)

    # -- what the user reads ----------------------------------------------------------------------------
    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    @property
    def verbose(self) -> bool:
        return self.verbosity > 0

    @property
    def shows_progress(self) -> bool:
        return self.err_tty and not self.quiet

    @property
    def on_terminal(self) -> bool:
        """Whether stdout is a terminal (timings and other extras are for a person, not a log)."""
        return self.out_tty

    def line(self, text: str = "", hang: int | None = None) -> None:
        """A line on stdout (nothing with ``-q``); on a terminal wrapped, continuation under ``hang``."""
        if self.quiet:
            return
        text = printable(text)
        if self._echo is not None:
            self._echo(text)
            return
        if self.out_tty:
            text = wrap(text, self._width(self.out), hang)
        self._write(self.out, self._paint_words(text) if self.out_colour else text)

    __call__ = line

    def step(self, name: str, status: str, summary: str, seconds: float = 0.0) -> None:
        """``  name ........ status    summary``: one patch or verifier, as it ends."""
        name, summary = printable(name), printable(summary)
        if self.on_terminal and seconds >= DELAY:
            summary = f"{summary} ({seconds:.1f} s)" if summary else f"({seconds:.1f} s)"
        dots = "." * max(2, 24 - len(name))
        text = f"  {name} {dots} {status:<9} {summary}".rstrip()
        if self._echo is None and self.out_tty:
            text = wrap(text, self._width(self.out), STEP_COLUMN)
        if self.quiet:
            return
        if self._echo is not None:
            self._echo(text)
            return
        if self.out_colour:
            head, rest = text[: len(f"  {name} {dots} ")], text[len(f"  {name} {dots} ") :]
            word = rest.split(" ", 1)[0]
            text = head + self._paint(word, _COLOURS.get(word)) + rest[len(word) :]
        self._write(self.out, text)

    def outcome(self, name: str, outcome: StepOutcome, verbose: bool = False) -> None:
        """A patch's or verifier's line as it ends; its details with ``verbose``. A failed step's line
        says only that: its summary and details are the error's, said once."""
        if outcome.status == "failed":
            self.step(name, "failed", "", outcome.seconds)
            return
        self.step(name, outcome.status, outcome.summary, outcome.seconds)
        if verbose:
            for line in outcome.details:
                self.detail(line)

    def detail(self, text: str) -> None:
        """A detail under a step line."""
        self.line(f"      {text}", hang=8)

    def output(self, text: str, err: bool = False) -> None:
        """A command's product (JSON, a listing): always printed, even with ``-q``, exactly as given but
        for characters that would steer the terminal (:func:`patchspec.printable.printable`)."""
        text = printable(text)
        if self._echo is not None and not err:
            self._echo(text)
            return
        self._write(self.err if err else self.out, text)

    def error(self, text: str) -> None:
        """An error (or a warning) on stderr, printed whatever the verbosity; on a terminal wrapped,
        its first line in red."""
        text = printable(text)
        if self.err_tty:
            text = wrap(text, self._width(self.err))
        if self.err_colour:
            first, _, rest = text.partition("\n")
            text = click.style(first, fg="red", bold=True) + ("\n" + rest if rest else "")
        self._write(self.err, text)

    def io_table(self, rows: list[tuple[str, str, str, str]]) -> None:
        """``plan``'s closing table: under ``inputs:`` and ``outputs:``, ``name  before -> after``."""
        width = max((len(name) for _, name, _, _ in rows), default=0)
        section = None
        for kind, name, before, after in rows:
            if kind != section:
                section = kind
                self.line(f"  {kind}:")
            change = f"{before}  (unchanged)" if before == after else f"{before} -> {after}"
            self.line(f"    {name.ljust(width)}  {change}", hang=width + 6)

    # -- progress ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def task(self, label: str) -> Iterator[Task]:
        """A task that shows on the status line once it has run :data:`DELAY` seconds (terminal only)."""
        task = Task(label)
        if not self.shows_progress:
            yield task
            return
        with self._lock:
            self._tasks.append(task)
            self._start_ticker()
        try:
            yield task
        finally:
            self._end(task)

    @contextlib.contextmanager
    def bytes(self, label: str) -> Iterator[Progress | None]:
        """A byte-counting task (hashing, copying): bytes, rate and ETA, gone once every byte is done;
        None when nothing is shown, so the caller can skip counting altogether."""
        if not self.shows_progress:
            yield None
            return

        with self.task(label) as task:

            def advance(done: int, total: int) -> None:
                task.advance(done, total)
                if done >= total:
                    self._end(task)

            yield advance

    def _end(self, task: Task) -> None:
        with self._lock:
            if task in self._tasks:
                self._tasks.remove(task)
            if not self._tasks:
                self._clear()

    def close(self) -> None:
        """Stop the status line (and its thread); the terminal is left on a fresh line."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            self._clear()

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="patchspec-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self._lock:
                now = time.monotonic()
                shown = [task.render(now) for task in self._tasks if now - task.started >= DELAY]
                if shown:
                    width = self._width(self.err) - 1
                    status = " | ".join(shown)
                    status = status if len(status) <= width else status[: max(width - 3, 0)] + "..."
                    if status != self._drawn:  # one write per change (the seconds tick once a second)
                        self.err.write(f"\r{status}\x1b[K")
                        self.err.flush()
                        self._drawn = status
                else:
                    self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.err.write("\r\x1b[K")
            self.err.flush()
            self._drawn = ""

    # -- plumbing ---------------------------------------------------------------------------------------
    def _write(self, stream: IO[str], text: str) -> None:
        with self._lock:
            self._clear()  # the status line goes first: no message runs into it
            click.echo(text, file=stream, color=True)

    def _width(self, stream: IO[str]) -> int:
        """The terminal's width (``COLUMNS`` first, as ``shutil`` reads it), at least 40."""
        given = os.environ.get("COLUMNS", "")
        if given.isdigit() and int(given) > 0:
            return max(int(given), 40)
        try:
            columns = os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both of the first two
            columns = 0
        return max(columns, 40) if columns else 80  # a terminal that does not say its size: 80

    def _paint(self, word: str, colour: str | None) -> str:
        return click.style(word, fg=colour, bold=colour == "red" or None) if colour else word

    def _paint_words(self, text: str) -> str:
        text = _WORDS.sub(lambda m: self._paint(m.group(1), _COLOURS[m.group(1)]), text)
        return _COUNTS.sub(lambda m: self._paint(m.group(0), _COLOURS[m.group(2)]), text)


__all__ = ["DELAY", "Reporter", "Task", "is_terminal", "summary_line", "wants_colour", "wrap"]
