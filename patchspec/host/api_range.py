"""A plugin's ``PATCHSPEC_API`` range, checked against this patchspec's :data:`patchspec.PLUGIN_API`.

A range is comma-separated clauses, each an operator and a dotted version (``>=1.3,<2``); a missing
component counts as 0 (``2`` is ``2.0``). Only what a plugin needs: no pre-releases, no wildcards.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*\Z")
_OPERATORS: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}


def _version(text: str, width: int) -> tuple[int, ...]:
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (width - len(parts)))


def range_problem(required: object, have: str) -> str | None:
    """Why ``have`` does not satisfy the range ``required``, or None; a malformed range says so."""
    if not isinstance(required, str) or not required.strip():
        return f"PATCHSPEC_API must be a range such as '>=1.3,<2', not {required!r}"
    for clause in required.split(","):
        found = _CLAUSE.match(clause)
        if found is None:
            return f"PATCHSPEC_API {required!r}: {clause.strip()!r} is not OPERATOR VERSION (>=1.3, <2, ...)"
        width = max(len(found.group(2).split(".")), len(have.split(".")))
        if not _OPERATORS[found.group(1)](_version(have, width), _version(found.group(2), width)):
            return f"it requires plugin API {required}, and this patchspec has plugin API {have}"
    return None


__all__ = ["range_problem"]
