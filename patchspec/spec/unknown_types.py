"""Why a step's type is unknown, and what to do: a typo (the closest known names), a plugin that is
disabled or failed to load, or a third party's plugin not installed where patchspec runs."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from patchspec.errors import SpecProblem, did_you_mean
from patchspec.install_advice import install_hint
from patchspec.spec.catalog import DISABLE_ENV, Catalog, StepKind
from patchspec.spec.reader import YamlDocument


def unknown_type(
    document: YamlDocument,
    registry: Catalog,
    kind: StepKind,
    index: int,
    type_name: str,
    table: Mapping[str, Any],
    unmet: Sequence[str] = (),
) -> SpecProblem:
    """The problem of step ``index`` of ``kind``'s section, whose type ``type_name`` is not in ``table``;
    ``unmet``: the requirements of the spec's ``plugins:`` that this environment does not meet."""
    doc_path = (kind.section, index, type_name)

    def problem(message: str, hint: str | None) -> SpecProblem:
        return document.problem(doc_path, message, hint, key=doc_path[:2], of_key=True)

    missing = registry.why_missing(type_name)  # its plugin is installed, but disabled or broken
    if missing is not None and missing.disabled:
        hint = (
            f"{missing.label} is installed but not loaded; to use it, remove '{missing.name}' from "
            f"{DISABLE_ENV} (now '{os.environ.get(DISABLE_ENV, '')}')"
        )
        return problem(f"unknown {kind} '{type_name}': plugin '{missing.name}' is disabled by {DISABLE_ENV}", hint)
    if missing is not None:  # no 'did you mean' from other plugins: the type is the broken plugin's
        hint = (
            f"{missing.label} failed to load: {missing.error}; it provides nothing until it is fixed: upgrade "
            f"or reinstall {missing.distribution}, or report it to its author"
        )
        if missing.traceback:
            hint += "; -v shows its traceback"
        message = f"unknown {kind} '{type_name}': plugin '{missing.name}' is installed but failed to load"
        return replace(problem(message, hint), plugin_traceback=missing.traceback)
    plugin = type_name.split(".")[0]
    if "." in type_name and not any(name.startswith(f"{plugin}.") for name in table):
        # a third party's type whose plugin is not installed where patchspec runs
        message = f"unknown {kind} '{type_name}': no installed plugin is named '{plugin}'"
        if unmet:  # the spec says which distributions it needs: name them, not a guess; plugins: says how
            listed = ", ".join(unmet)
            return problem(f"{message} (this spec's plugins: lists {listed}, which this environment lacks)", None)
        return problem(message, install_hint(plugin))
    suggestion = did_you_mean(type_name, table)
    known = None
    if not suggestion:
        known = f"known {kind}s: {', '.join(sorted(table))}; 'patchspec plugins' lists where they come from"
    return problem(f"unknown {kind} '{type_name}'" + suggestion, known)


__all__ = ["unknown_type"]
