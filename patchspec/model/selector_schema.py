"""What a node selector (``select``) may say, checked without a model: its JSON Schema, and the
checks the schema cannot make (unknown keys, ``re:`` patterns that do not compile, ``expect``).

Kept apart from :mod:`patchspec.model.selectors`, which selects nodes in a model, so that ``validate``
reads a selector without importing onnx.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from patchspec.errors import did_you_mean

PATTERN_KEYS = ("op_type", "name", "domain", "consumes", "produces")
TENSOR_KEYS = ("after", "before")
DEFAULT_EXPECT = "1+"
_EXPECT_FORM = re.compile(r"^([0-9]+)\+$")


def _patterns(description: str) -> dict[str, Any]:
    return {
        "description": description + "; a glob, or 're:' + a Python regex matched in full; a list means any of",
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
        ],
    }


def _tensor_names(description: str) -> dict[str, Any]:
    return {
        "description": description + "; one tensor name or a list of them (exact names)",
        "anyOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        ],
    }


SELECTOR_SCHEMA: dict[str, Any] = {
    "description": "node selector: every given field must hold (AND); a list means any of (OR)",
    "type": "object",
    "properties": {
        "op_type": _patterns("operator type of the node (Conv, Resize, ...)"),
        "name": _patterns("name of the node"),
        "domain": _patterns("operator domain of the node ('' is the default ONNX domain)"),
        "consumes": _patterns("name of any input tensor of the node"),
        "produces": _patterns("name of any output tensor of the node"),
        "after": _tensor_names("nodes downstream of (reachable from) these tensors"),
        "before": _tensor_names("nodes upstream of (reaching) these tensors"),
        "graph": {
            "description": "'main' (default): the main graph only; 'all': also nodes inside If/Loop/Scan subgraphs",
            "enum": ["main", "all"],
        },
        "expect": {
            "description": "how many nodes must match: an integer (exactly), or 'N+' (at least N); default '1+'",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^[0-9]+\+$"},
            ],
        },
    },
    "additionalProperties": False,
}

Key = tuple[str | int, ...]  # a path into the spec, ('select', 'after', 0)


# -- static checks ---------------------------------------------------------------------------------
def check_selector(selector: Any) -> Iterator[tuple[Key, str]]:
    """Problems found without a model: unknown keys, invalid ``re:`` patterns, bad ``expect``."""
    if not isinstance(selector, dict):
        yield (
            (),
            f"a selector is a mapping of {', '.join(SELECTOR_SCHEMA['properties'])}, got {type(selector).__name__}",
        )
        return
    known = SELECTOR_SCHEMA["properties"]
    for key in selector:
        if key not in known:
            yield (key,), f"unknown selector key '{key}'" + did_you_mean(str(key), known)
    for key in PATTERN_KEYS:
        for index, pattern in _indexed(selector.get(key)):
            problem = _regex_problem(pattern)
            if problem:
                yield (key,) if index is None else (key, index), problem
    if "expect" in selector:
        try:
            parse_expect(selector["expect"])
        except ValueError as exc:
            yield ("expect",), str(exc)


def _indexed(value: Any) -> Iterator[tuple[int | None, Any]]:
    if value is None:
        return
    if isinstance(value, list):
        yield from enumerate(value)
    else:
        yield None, value


#: the longest ``re:`` pattern a selector takes
MAX_PATTERN = 500


def _regex_problem(pattern: Any) -> str | None:
    if not isinstance(pattern, str) or not pattern.startswith("re:"):
        return None
    if len(pattern) > MAX_PATTERN:
        return f"a regular expression of {len(pattern)} characters; a selector's patterns have at most {MAX_PATTERN}"
    try:
        re.compile(pattern[3:])
    except re.error as exc:
        return f"invalid regular expression {pattern[3:]!r}: {exc}; fix it or use a glob (without 're:')"
    if _backtracks(pattern[3:]):
        return (
            f"the regular expression {pattern[3:]!r} repeats a repetition or an alternation ('(a+)+', '(a|ab)*'): "
            "matching it can take exponential time on a node name; write it without the nested repeat"
        )
    return None


def _backtracks(pattern: str) -> bool:
    """Whether ``pattern`` repeats (max > 1) something that itself repeats or branches, the shapes that
    make Python's backtracking matcher exponential (ReDoS); a spec may come from a pull request."""
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef,unused-ignore]

    def walk(items: Any, inside_repeat: bool) -> bool:
        for op, arg in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                _low, high, body = arg
                repeats = high is sre_parse.MAXREPEAT or high > 1
                if inside_repeat and repeats:
                    return True
                if walk(body, inside_repeat or repeats):
                    return True
            elif name == "BRANCH":
                if inside_repeat:
                    return True
                if any(walk(branch, inside_repeat) for branch in arg[1]):
                    return True
            elif name == "SUBPATTERN":
                if walk(arg[-1], inside_repeat):
                    return True
            elif name in ("ASSERT", "ASSERT_NOT") and walk(arg[1], inside_repeat):
                return True
        return False

    return walk(sre_parse.parse(pattern), False)


def parse_expect(expect: Any) -> tuple[int, bool]:
    """``3`` -> (3, exact); ``"2+"`` -> (2, at least). Raises ValueError for anything else."""
    if isinstance(expect, int) and not isinstance(expect, bool) and expect >= 0:
        return expect, True
    if isinstance(expect, str):
        found = _EXPECT_FORM.match(expect.strip())
        if found:
            return int(found.group(1)), False
    msg = f"'expect' must be a non-negative integer (exactly N) or a string 'N+' (at least N), got {expect!r}"
    raise ValueError(msg)


__all__ = [
    "DEFAULT_EXPECT",
    "PATTERN_KEYS",
    "SELECTOR_SCHEMA",
    "TENSOR_KEYS",
    "Key",
    "check_selector",
    "parse_expect",
]
