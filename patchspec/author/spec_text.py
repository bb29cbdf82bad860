"""A spec written for a person: YAML with a comment above each step, checked before it is returned.

``init`` and ``derive`` build a :class:`SpecDraft` (plain data) and render it here, so every spec
patchspec writes has the same layout, and none is handed out that patchspec itself would refuse.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from patchspec.printable import escape_controls
from patchspec.spec.confine import Root
from patchspec.spec.load import load_spec


@dataclass
class DraftStep:
    """One item of ``patches`` or ``verify``: its type, its params, and the comment lines above it."""

    type_name: str
    params: dict[str, Any]
    comments: list[str] = field(default_factory=list)


@dataclass
class SpecDraft:
    model: str  # as the spec writes it: relative to the spec's folder
    output: str
    patches: list[DraftStep] = field(default_factory=list)
    verify: list[DraftStep] = field(default_factory=list)
    header: list[str] = field(default_factory=list)  # comment lines at the top


def render(draft: SpecDraft) -> str:
    """The spec's text. Names from the model are data: values go through YAML's own quoting, and each
    comment line has its control characters escaped, so no name can end a comment and start a key."""
    lines = [_comment("", line) for line in draft.header]
    lines += ["patchspec: 1", f"model: {_scalar(draft.model)}", f"output: {_scalar(draft.output)}"]
    for section, steps in (("patches", draft.patches), ("verify", draft.verify)):
        if section == "verify" and not steps:
            continue
        lines.append(f"{section}:" + ("" if steps else " []"))
        for step in steps:
            lines += [_comment("  ", line) for line in step.comments]
            lines += _item(step)
    return "\n".join(lines) + "\n"


def quoted(name: str) -> str:
    """A name from the model as a comment or a message shows it: in single quotes, control characters
    escaped (``'x\\n- y'``), so it reads as one name on one line."""
    return f"'{escape_controls(name)}'"


def _comment(indent: str, line: str) -> str:
    return f"{indent}# {escape_controls(line)}" if line else f"{indent}#"


def root_needed(spec_path: Path, paths: list[Path]) -> Path | None:
    """The ``--root`` that ``apply`` needs for a spec at ``spec_path`` reading ``paths`` (the models):
    None when they lie inside its project root (docs/security.md), else the nearest folder holding
    the spec and them."""
    root = Root.of(spec_path)
    outside = [path for path in paths if not root.holds(path)]
    if not outside:
        return None
    folders = [os.path.realpath(Path(os.path.abspath(spec_path)).parent), *(os.path.realpath(p) for p in outside)]
    return Path(os.path.commonpath(folders))


def output_ref(spec_path: Path, name: str) -> str:
    """Where a drafted spec's output goes, as the spec writes it: ``build/NAME`` at the project's root
    (the folder holding ``.git``, as ``--root`` defaults), one place whichever folder the spec is in,
    never beside the committed models (the lock and stat cache go beside the output)."""
    folder = Path(os.path.abspath(spec_path)).parent
    return Path(os.path.relpath(Root.of(spec_path).folder / "build" / name, folder)).as_posix()


def next_command(spec_path: Path, root: Path | None) -> str:
    """What to run next, as printed: with ``--root`` when the models lie outside the spec's root."""
    return f"patchspec apply {spec_path}" + (f" --root {root}" if root is not None else "")


def checked(draft: SpecDraft, spec_path: Path, registry: Any) -> str:
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
    """A path as a YAML scalar: plain when that reads back the same, else double-quoted (JSON's
    quoting is YAML's), so a newline or a quote in it stays inside the value."""
    plain = not _needs_quotes(text) and yaml.safe_load(f"k: {text}") == {"k": text}
    return text if plain else json.dumps(text, ensure_ascii=False)


def _needs_quotes(text: str) -> bool:
    return (
        not text
        or any(c in text for c in ":#{}[],&*!|>'\"%@`")
        or text != text.strip()
        or escape_controls(text) != text
    )


__all__ = ["DraftStep", "SpecDraft", "checked", "next_command", "quoted", "render", "root_needed"]
