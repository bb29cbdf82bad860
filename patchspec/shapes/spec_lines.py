"""Patches to paste into a spec, as data and as text: the one place that writes them as YAML.

set_batch and the static verifier suggest patches that settle what they cannot settle themselves.
They build a ``SpecFix`` (a patch type and its params, in order) and print ``spec_lines(fix)``:
the entry for the ``patches:`` list, indented as it sits there, in flow style so that tensor names
and shape expressions are quoted safely.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: a param value as these suggestions use it: numbers, strings, lists and mappings of them
FlowValue = int | str | Sequence["FlowValue"] | Mapping[str | int, "FlowValue"]


@dataclass(frozen=True)
class SpecFix:
    """One entry of a spec's ``patches:`` list: ``patch`` with ``params`` (in the order written)."""

    patch: str
    params: tuple[tuple[str, FlowValue], ...]


def flow(value: FlowValue) -> str:
    """A value in YAML flow style: numbers bare, strings quoted (JSON strings are YAML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {flow(item)}" for key, item in value.items()) + "}"
    return "[" + ", ".join(flow(item) for item in value) + "]"


def spec_lines(fix: SpecFix, indent: str = "  ") -> str:
    """The patch as lines for a spec's ``patches:`` list (``indent`` before the dash)."""
    lines = [f"{indent}- {fix.patch}:"]
    lines += [f"{indent}    {key}: {flow(value)}" for key, value in fix.params]
    return "\n".join(lines)


__all__ = ["SpecFix", "flow", "spec_lines"]
