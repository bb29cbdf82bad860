"""Where this patchspec runs (a pre-commit hook's environment, a pipx environment, a virtual
environment, another Python) and how to install a plugin's distribution there.

pre-commit and pipx give patchspec an environment of its own: a plugin installed beside the
project is not seen there, and ``pip install`` in the project does not help. A spec that names a
type of a plugin that is not installed gets the fix for the environment it ran in. Read from
``sys`` and the environment variables alone."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

Place = Literal["pre-commit", "pipx", "venv", "python"]

#: the folder pre-commit makes each Python hook's environment in, inside its cache (py_env-python3.11)
PRE_COMMIT_ENV_PREFIX = "py_env-"
#: distributions that provide plugin NAME are published as patchspec-NAME (docs/plugins.md)
DISTRIBUTION_PATTERN = "patchspec-{plugin}"


def place() -> Place:
    """Where this interpreter runs: pre-commit sets ``PRE_COMMIT`` for its hooks and keeps their
    environments in ``py_env-*`` folders; pipx keeps its environments in ``$PIPX_HOME/venvs``, by
    default under a folder named pipx; a virtual environment has a ``pyvenv.cfg``."""
    prefix = Path(sys.prefix)
    if os.environ.get("PRE_COMMIT") or prefix.name.startswith(PRE_COMMIT_ENV_PREFIX):
        return "pre-commit"
    if prefix.parent.name == "venvs" and (
        prefix.parent.parent.name.lower() == "pipx" or _is_pipx_home(prefix.parent.parent)
    ):
        return "pipx"
    return "venv" if (prefix / "pyvenv.cfg").is_file() else "python"


def install_hint(plugin: str) -> str:
    """How to install the distribution that provides plugin ``plugin`` where patchspec runs: its name is
    the convention's guess (a spec that names it in ``plugins:`` gets :func:`requirement_hint`)."""
    distribution = DISTRIBUTION_PATTERN.format(plugin=plugin.replace("_", "-"))
    what = f"the distribution that provides plugin '{plugin}' ({distribution} by convention)"
    named = "; a spec names its plugins' distributions for certain in its plugins: key (docs/spec.md#plugins)"
    return _fix(what, [distribution]) + named


def requirement_hint(requirements: Sequence[str], *, upgrade: bool = False) -> str:
    """How to install ``requirements`` (as a spec's ``plugins:`` writes them) where patchspec runs."""
    return _fix(", ".join(requirements), list(requirements), upgrade=upgrade)


def _fix(what: str, requirements: list[str], *, upgrade: bool = False) -> str:
    where, prefix = place(), Path(sys.prefix)
    quoted = " ".join(shlex.quote(requirement) for requirement in requirements)
    if where == "pre-commit":
        listed = ", ".join(json.dumps(requirement) for requirement in requirements)
        return (
            f"patchspec runs in pre-commit's own environment, which holds only what the hook lists: add {what} "
            "to the patchspec hook's additional_dependencies in .pre-commit-config.yaml "
            f"(additional_dependencies: [{listed}]; docs/build-systems.md#pre-commit)"
        )
    if where == "pipx":
        force = "--force " if upgrade else ""
        return (
            f"patchspec runs in the pipx environment '{prefix.name}', which holds only what pipx put there: "
            f"inject {what}: pipx inject {force}{prefix.name} {quoted}"
        )
    kind = "the virtual environment" if where == "venv" else "the Python"
    return (
        f"install {what} in {kind} patchspec runs from ({prefix}): {sys.executable} -m pip install {quoted}; "
        "'patchspec plugins' lists what is installed there"
    )


def _is_pipx_home(folder: Path) -> bool:
    home = os.environ.get("PIPX_HOME")
    try:
        return bool(home) and folder.resolve() == Path(str(home)).expanduser().resolve()
    except OSError:
        return False
