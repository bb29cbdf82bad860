"""A spec written for a person: YAML with a comment above each step, checked before it is returned.

``init`` and ``derive`` build a :class:`SpecDraft` (plain data) and render it here, so every spec
patchspec writes has the same layout, and none is handed out that patchspec itself would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from patchspec.spec.load import load_spec


@dataclass
class DraftStep:
    """One item of ``patches`` or ``verify``: its type, its params, and the comment lines above it."""

    type_name: str
    params: dict
    comments: list[str] = field(default_factory=list)


@dataclass
class SpecDraft:
    model: str  # as the spec writes it: relative to the spec's folder
    output: str
    patches: list[DraftStep] = field(default_factory=list)
    verify: list[DraftStep] = field(default_factory=list)
    header: list[str] = field(default_factory=list)  # comment lines at the top


def render(draft: SpecDraft) -> str:
    lines = [f"# {line}" if line else "#" for line in draft.header]
    lines += ["patchspec: 1", f"model: {_scalar(draft.model)}", f"output: {_scalar(draft.output)}"]
    for section, steps in (("patches", draft.patches), ("verify", draft.verify)):
        if section == "verify" and not steps:
            continue
        lines.append(f"{section}:" + ("" if steps else " []"))
        for step in steps:
            lines += [f"  # {line}" if line else "  #" for line in step.comments]
            lines += _item(step)
    return "\n".join(lines) + "\n"


def checked(draft: SpecDraft, spec_path: Path, registry) -> str:
    """The rendered text, after the spec loader accepted it as ``spec_path`` (raises SpecError if not)."""
    text = render(draft)
    load_spec(spec_path, registry, text=text)
    return text


def _item(step: DraftStep) -> list[str]:
    if not step.params:
        return [f"  - {step.type_name}: {{}}"]
    body = yaml.safe_dump(step.params, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)
    return [f"  - {step.type_name}:"] + [f"      {line}" for line in body.rstrip("\n").splitlines()]


def _scalar(text: str) -> str:
    return yaml.safe_dump(text, default_style=None).splitlines()[0] if _needs_quotes(text) else text


def _needs_quotes(text: str) -> bool:
    return not text or any(c in text for c in ":#{}[],&*!|>'\"%@`") or text != text.strip()


__all__ = ["DraftStep", "SpecDraft", "checked", "render"]
