"""A spec's ``plugins:``: the distributions its types come from, checked against what is installed
where patchspec runs before any step is read.

patchspec cannot know which distribution provides a type it has never seen; a spec that says so
(``plugins: [patchspec-stamp>=1.0]``) gets, for a missing or too old plugin, the distribution's name
and the command that installs it in the environment patchspec runs in (a pre-commit hook's, a pipx
one, a virtual environment). Each item is a distribution name with an optional version range, as pip
writes it; extras, markers and URLs are refused (they are the installer's business, not the spec's).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any

from patchspec.errors import SpecProblem
from patchspec.install_advice import requirement_hint
from patchspec.spec.reader import YamlDocument

#: the spec's key
KEY = "plugins"
#: the entry-point group a plugin registers under (patchspec.plugin.hookspecs.NAME, to this package's right)
GROUP = "patchspec"

SCHEMA: dict[str, Any] = {
    "description": (
        "the distributions that provide this spec's plugin types, each a name with an optional version range "
        "(patchspec-acme>=0.1); checked when the spec is read, and named with the install command when missing"
    ),
    "type": "array",
    "items": {"type": "string", "minLength": 1},
}


@dataclass(frozen=True)
class Requirements:
    """What checking ``plugins:`` found: its problems, and the requirements not met here (as written),
    which an unknown type's hint names."""

    problems: tuple[SpecProblem, ...] = ()
    unmet: tuple[str, ...] = ()


def check_requirements(document: YamlDocument) -> Requirements:
    """Each item of the spec's ``plugins:`` against the distributions installed where patchspec runs."""
    data = document.data if isinstance(document.data, dict) else {}
    items = data.get(KEY)
    if not isinstance(items, list) or not items:
        return Requirements()  # absent, or not a list: the envelope's schema says so
    problems, unmet = [], []
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            continue  # the envelope's schema says so
        found = _problem(item.strip())
        if found is not None:
            message, hint, met = found
            problems.append(document.problem((KEY, index), message, hint, key=(KEY, index)))
            if not met:
                unmet.append(item.strip())
    return Requirements(tuple(problems), tuple(unmet))


def _problem(text: str) -> tuple[str, str | None, bool] | None:
    """(message, hint, whether the requirement is met) for a requirement that is not a plain one or
    not met here; None when a distribution installed here satisfies it and registers a plugin."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        message = f"{text!r} is not a distribution name with an optional version range, such as 'patchspec-acme>=0.1'"
        return message, None, True
    if requirement.url or requirement.marker or requirement.extras:
        what = "a URL" if requirement.url else "a marker" if requirement.marker else "extras"
        message = (
            f"{text!r} has {what}: a spec names a distribution and an optional version range only "
            f"('{requirement.name}{requirement.specifier}'); how it is installed is the installer's business"
        )
        return message, None, True
    try:
        distribution = metadata.distribution(requirement.name)
    except metadata.PackageNotFoundError:
        return f"{text} is not installed where patchspec runs", requirement_hint([text]), False
    version = distribution.version
    if not requirement.specifier.contains(version, prereleases=True):
        message = f"{distribution.metadata['Name']} {version} is installed; this spec needs {text}"
        return message, requirement_hint([text], upgrade=True), False
    if not any(entry.group == GROUP for entry in distribution.entry_points):
        message = (
            f"{distribution.metadata['Name']} {version} is installed but registers no patchspec plugin "
            f"(no entry point in the '{GROUP}' group): is it the plugin's distribution?"
        )
        return message, None, True
    return None


__all__ = ["KEY", "SCHEMA", "Requirements", "check_requirements"]
