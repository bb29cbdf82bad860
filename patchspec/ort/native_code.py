"""Native code runs only where the caller said so: custom-op libraries behind an opt-in.

A shared library's constructor runs as soon as onnxruntime loads it, so a spec that names one
(``run: {custom_op_libraries: [...]}``) would run any code its author chose, in CI, on a pull
request. patchspec loads none unless the person running it allowed native code: with
``--allow-native-code`` on the command line, or in the project's own settings, never in the spec::

    # pyproject.toml of the outermost repository above the spec (or of --root, when the caller names it)
    [tool.patchspec]
    allow-native-code = true

or ``PATCHSPEC_ALLOW_NATIVE_CODE=1`` in the caller's environment. A ``.git`` and a ``pyproject.toml``
that a pull request adds in a subfolder never count (:meth:`Root.settings_folder`).

Without it, a spec that names a library is refused with exit 2 before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from patchspec.errors import SpecLocation, UsageError

#: the command-line option and the key under ``[tool.patchspec]`` in the project's pyproject.toml
OPTION = "--allow-native-code"
SETTING = "allow-native-code"

_allowed_by_caller: ContextVar[bool] = ContextVar("patchspec_allow_native_code", default=False)


class NativeCodeRefused(UsageError):
    """A spec names native code (a custom-op library) and the caller has not allowed it: exit 2."""


def allow_native_code(allowed: bool = True) -> None:
    """What ``--allow-native-code`` sets for this run (the caller's choice, like ``--output``)."""
    _allowed_by_caller.set(allowed)


def allowed_by_project(root: Path) -> bool:
    """``[tool.patchspec] allow-native-code = true`` in ``root/pyproject.toml``."""
    path = root / "pyproject.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return _setting(text) is True


def _setting(text: str) -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the one line this needs, read by hand
        section = re.search(r"^\[tool\.patchspec\]\s*$(?P<body>.*?)(?=^\[|\Z)", text, flags=re.M | re.S)
        found = re.search(
            rf"^\s*{SETTING}\s*=\s*(true|false)\s*(#.*)?$", section.group("body") if section else "", re.M
        )
        return None if found is None else found.group(1) == "true"
    try:
        settings = tomllib.loads(text).get("tool", {}).get("patchspec", {})
    except tomllib.TOMLDecodeError:
        return None
    return settings.get(SETTING) if isinstance(settings, dict) else None


def check_native_code(libraries: Sequence[str], root: Path, where: SpecLocation | None = None) -> None:
    """Raise :class:`NativeCodeRefused` when ``libraries`` (paths as the spec gives them) is not empty
    and neither the caller nor the project allowed native code. Every path counts the same:
    relative, ``../`` or absolute. ``root``: the project root (:class:`patchspec.spec.confine.Root`),
    whose ``pyproject.toml`` may allow it; ``where``: the place in the spec that names them."""
    if not libraries or _allowed_by_caller.get():
        return
    if allowed_by_project(root):
        return
    msg = (
        f"the spec names native code to load ({', '.join(libraries)}): a custom-op library runs its own "
        f"code when loaded, so patchspec loads one only where the person running it allowed native code"
    )
    hint = (
        f"if you trust this spec, pass {OPTION}, or set '{SETTING} = true' under [tool.patchspec] in "
        f"{root / 'pyproject.toml'} (the spec itself cannot allow it)"
    )
    raise NativeCodeRefused(msg, hint, where=where)


__all__ = ["OPTION", "SETTING", "NativeCodeRefused", "allow_native_code", "check_native_code"]
