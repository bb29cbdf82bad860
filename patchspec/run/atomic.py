"""Write a small file whole or not at all: the depfile, the report, the stat cache, the schema.

A new file of an unpredictable name beside the target (``mkstemp``: ``O_EXCL``, never through a link
planted there), renamed over it. SIGINT and SIGTERM wait while the temporary file is made or removed,
so an interrupted write leaves neither a half-written target nor a ``.tmp`` behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from patchspec.interrupts import deferred


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) whole or not at all; an OSError goes on to the caller."""
    temporary: str | None = None
    try:
        with deferred():  # the name is known before a signal can end the run
            fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        if temporary is not None:
            with deferred():
                Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["write_text_atomically"]
