"""The depfile ``apply --depfile`` writes: one Make rule that Make, Ninja and CMake read back.

Every path is escaped for both readers: a backslash, a space, ``#`` and ``:`` get a backslash, ``$``
is doubled. A newline or another control character cannot be escaped (it would end the rule and
start one of the spec's choosing), so a path holding one is refused; the spec loader refuses them
in every path a spec gives already.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from patchspec.errors import UsageError
from patchspec.spec.confine import control_character


def make_escape(path: Path | str) -> str:
    """``path`` as a Make or Ninja depfile spells it; a control character is refused."""
    text = str(path)
    char = control_character(text)
    if char:
        raise UsageError(
            f"{text!r}: a path with the control character {char} cannot be written into a depfile",
            "rename the file",
        )
    for special, escaped in (("\\", "\\\\"), (" ", "\\ "), ("#", "\\#"), (":", "\\:"), ("$", "$$")):
        text = text.replace(special, escaped)
    return text


def depfile_rule(targets: Iterable[Path | str], dependencies: Iterable[Path | str]) -> str:
    """``targets: dependencies``, each escaped, on one line."""
    return " ".join(map(make_escape, targets)) + ": " + " ".join(map(make_escape, dependencies)) + "\n"


__all__ = ["depfile_rule", "make_escape"]
