"""SIGINT and SIGTERM as one exception, :class:`~patchspec.errors.Interrupted`, at any moment.

The CLI installs :func:`handling` for the length of a command: either signal raises ``Interrupted``
(exit 130 or 143) in the main thread, except inside an import, where it is delivered again moments
later, once the module is whole. Work that must not be cut in half, the removal of a staging
folder or the renames that commit an output, runs in :func:`deferred`: a signal that arrives then is
held, and raised as soon as that work is done. So an interrupted run always ends in 130 or 143, with
the previous output in place and no staging folder or temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from patchspec.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_held: list[int] = []  # signals that arrived while deferred, first first
_depth = 0  # how many deferred() blocks the main thread is in
_received: list[int] = []  # every signal of the command in progress, first first


#: seconds before a signal that arrived during an import is delivered again
REDELIVER_AFTER = 0.05


def _raise(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if _depth:
        _held.append(signum)
        return
    if _importing(frame):  # raised inside an import it would become the module's error, an extension
        # module half made (onnxruntime's: 'ImportError: initialization failed'; a later abort at exit)
        timer = threading.Timer(REDELIVER_AFTER, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    raise Interrupted(signum)


def _importing(frame: FrameType | None) -> bool:
    """Whether the main thread is inside an import (a frame of importlib's bootstrap is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def received() -> int | None:
    """The first signal the command in progress received, or None.

    Raised inside an extension module (onnxruntime's import, say) the exception can come out as an
    error of that module's own; the CLI asks this before it reports an error as the run's outcome."""
    return _received[0] if _received else None


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` while inside; the previous handlers come back after.

    Outside the main thread (an embedding that runs patchspec in a worker) signals cannot be handled
    there, and nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _depth
    _received.clear()
    previous = {signum: signal.signal(signum, _raise) for signum in SIGNALS}
    try:
        yield
    finally:
        _depth += 1  # the command has ended: a signal now is held while the handlers go back, then dropped
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _depth -= 1
        _held.clear()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done, then raise the first one that arrived (in
    place of an error the block ended with: the user asked the run to stop)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _held:
            signum = _held[0]
            _held.clear()
            raise Interrupted(signum)


__all__ = ["deferred", "handling", "received"]
