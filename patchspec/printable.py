"""Text from a model or a spec, made safe to print: no character of it can steer a terminal or a log.

A tensor name, a ``producer_name`` or a ``doc_string`` is the model author's text. Printed as it is,
an escape sequence (CSI ``\\x1b[``, OSC ``\\x1b]``, a C1 control) would move the cursor, retitle the
terminal or hide what came before; a ``\\r`` or a Unicode line or paragraph separator would overwrite a
line; a newline would start a line of the author's choosing (``::error::`` in a GitHub Actions log).
"""

from __future__ import annotations

import os
import re
from typing import TypeVar, cast

T = TypeVar("T")

#: C0 controls but newline and tab, DEL, C1 controls (NEL included), and the Unicode line breaks
_STEERING = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]"
#: the same and newline and tab: for a name, which must read as one name on one line
_BREAKING = "[\x00-\x1f\x7f-\x9f\u2028\u2029]"


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or f"\\u{ord(char):04x}"


def printable(text: str) -> str:
    """``text`` with every character that steers a terminal or rewrites a line escaped; newlines and
    tabs kept (patchspec's own messages have several lines)."""
    return re.sub(_STEERING, _escape, text)


def escape_controls(text: str) -> str:
    """``text`` on one line: every control or line-breaking character escaped (``\\n``, ``\\u001b``)."""
    return re.sub(_BREAKING, _escape, text)


def one_line_strings(value: T) -> T:
    """``value`` (JSON-like data read from a model) with every string in it, keys too, on one line."""
    if isinstance(value, str):
        return cast(T, escape_controls(value))
    if isinstance(value, dict):
        return cast(T, {one_line_strings(key): one_line_strings(item) for key, item in value.items()})
    if isinstance(value, list):
        return cast(T, [one_line_strings(item) for item in value])
    return value


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as git prints it: relative to the current folder when it lies below it, else as given."""
    text = os.fspath(path)
    try:
        relative = os.path.relpath(os.path.abspath(text))
    except (ValueError, OSError):  # another drive (Windows), or no current folder any more
        return text
    return text if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


__all__ = ["escape_controls", "one_line_strings", "printable", "shown_path"]
