"""The project root, and what the paths and names a spec gives may reach (docs/security.md).

A spec may come from a pull request, so it is untrusted input. Every path it gives (``model``,
``output``, the files its steps read) must lead, links followed, into the project root: the nearest
folder above the spec holding ``.git``; without one, the outermost holding a ``pyproject.toml`` with a
``[tool.patchspec]`` table; else the spec's own folder. ``--root DIR``
(the caller's choice, never the spec's) names another. Outputs never go under ``.git`` and are
only ever regular files; no string in a spec holds a control character.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec.errors import SpecError
from patchspec.spec.steps import Spec

#: the environment variable that names the project root, as ``--root`` does
ROOT_ENV = "PATCHSPEC_ROOT"
#: the folder whose presence marks a project root
GIT = ".git"
#: without .git, a project marks its root with a [tool.patchspec] table in this file
PROJECT_FILE = "pyproject.toml"
PATCHSPEC_TABLE = re.compile(r"^\[tool\.patchspec(\.[\w-]+)?\]\s*(#.*)?$", re.M)
#: C0 controls, DEL and C1 controls: never in a path or name (a newline would inject a Make rule)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: names patchspec keeps for itself beside an output: never a data file's ``location``
LOCK_NAME = ".patchspec.lock"
STAGING_PREFIX = ".patchspec-"
CACHE_SUFFIX = ".patchspec-cache.json"
#: a folder holding one of these is a virtual environment: what lies in it runs (a .pth at start-up)
VENV_MARKERS = ("pyvenv.cfg", "conda-meta")
#: folders whose files a package tool imports or runs
TOOL_FOLDER = re.compile(r"site-packages|dist-packages|node_modules|__pycache__|.+\.egg-info|.+\.dist-info", re.I)
#: the one file name ending of a model a spec names as its output
MODEL_SUFFIX = ".onnx"
#: the endings of a data file name a spec chooses: files no tool reads as code or settings
DATA_SUFFIXES = (".data", "_data", ".bin", ".weights", ".w", ".dat", ".pb", ".raw", ".tensors")
#: names Windows keeps for devices, whatever their extension (``nul.onnx`` is the null device)
WINDOWS_DEVICES = frozenset(
    [
        "con",
        "prn",
        "aux",
        "nul",
        "conin$",
        "conout$",
        *(f"com{i}" for i in "123456789"),
        *(f"lpt{i}" for i in "123456789"),
    ]
)
GRANT_HINT = "or pass --output-dir FOLDER to let specs write any file name in that folder (the caller's choice)"
ROOT_HINT = (
    "move the file inside the project root, or run with --root DIR naming a folder that holds it "
    "(a command-line choice; a spec cannot widen its own root)"
)


def project_root(spec_path: Path) -> Path:
    """The nearest folder above the spec that holds ``.git``; without one (a source tarball, a Docker
    build that leaves .git out), the outermost folder above it whose ``pyproject.toml`` has a
    ``[tool.patchspec]`` table; else the spec's folder. The spec as named: a linked spec, as in a
    Bazel sandbox, keeps its folder (spec.folder does the same)."""
    folder = Path(os.path.abspath(spec_path)).parent
    above = (folder, *folder.parents)
    for candidate in above:
        if os.path.lexists(candidate / GIT):
            return candidate
    marked = [candidate for candidate in above if _declares_patchspec(candidate / PROJECT_FILE)]
    return marked[-1] if marked else folder


def _declares_patchspec(pyproject: Path) -> bool:
    """Whether ``pyproject`` is a regular file with a ``[tool.patchspec]`` table (a line of its own)."""
    try:
        if not stat.S_ISREG(os.stat(pyproject).st_mode):
            return False
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return PATCHSPEC_TABLE.search(text) is not None


@dataclass(frozen=True)
class Root:
    """The folder a spec's paths must stay in, whether the command line named it, and the folders the
    caller made output folders (``--output-dir``), where a spec may write any file name."""

    folder: Path
    given: bool = False
    output_dirs: tuple[Path, ...] = ()

    @classmethod
    def of(cls, spec_path: Path, given: Path | None = None, output_dirs: tuple[Path, ...] = ()) -> Root:
        """``--root`` when given, else ``$PATCHSPEC_ROOT`` (the caller's environment, trusted as the
        command line is), else the root of the run in progress (:func:`within`), else
        :func:`project_root`."""
        given = given if given is not None else (Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else None)
        grants = tuple(Path(os.path.realpath(folder)) for folder in output_dirs)
        if given is not None:
            return cls(Path(os.path.realpath(given)), True, grants)
        active = _ACTIVE.get()
        if active is not None:
            return active
        return cls(project_root(spec_path), False, grants)

    def settings_folder(self) -> Path:
        """Where the caller's own settings (``[tool.patchspec]``, ``allow-native-code``) are read: the
        root the caller named, else the outermost folder at or above the root holding ``.git`` (the
        checkout itself; a ``.git`` a pull request adds in a subfolder never counts), else the root."""
        if self.given:
            return self.folder
        repositories = [folder for folder in (self.folder, *self.folder.parents) if os.path.lexists(folder / GIT)]
        return repositories[-1] if repositories else self.folder

    def granted(self, path: Path) -> bool:
        """Whether ``path``'s folder (links followed) lies in a folder the caller made an output folder."""
        real = os.path.realpath(path.parent)
        return any(real == str(d) or real.startswith(str(d).rstrip(os.sep) + os.sep) for d in self.output_dirs)

    def holds(self, path: Path) -> bool:
        """Whether ``path``, links followed (as far as it exists), is the root or inside it."""
        real, base = os.path.realpath(path), os.path.realpath(self.folder)
        return real == base or real.startswith(base.rstrip(os.sep) + os.sep)

    def describe(self) -> str:
        return (
            f"{self.folder} (named by the caller: --root, ${ROOT_ENV} or the build hook)"
            if self.given
            else f"{self.folder}"
        )


#: the root of the run in progress: what onnxruntime sessions built during it may read (ort.data_links)
_ACTIVE: contextvars.ContextVar[Root | None] = contextvars.ContextVar("patchspec_root", default=None)


@contextlib.contextmanager
def within(root: Root) -> Iterator[Root]:
    """Make ``root`` the root of everything this run does (sessions a verifier builds included)."""
    token = _ACTIVE.set(root)
    try:
        yield root
    finally:
        _ACTIVE.reset(token)


def control_character(text: str) -> str | None:
    """The first control character in ``text``, as Python writes it (``'\\n'``), or None."""
    found = CONTROL.search(text)
    return repr(found.group()) if found else None


def control_characters(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, bool]]:
    """(key path, the character, whether it is in a key) for every control character in ``data``."""
    if isinstance(data, str):
        found = control_character(data)
        if found:
            yield path, found, False
    elif isinstance(data, dict):
        for key, value in data.items():
            found = control_character(key) if isinstance(key, str) else None
            if found:
                yield (*path, key), found, True
            yield from control_characters(value, (*path, key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from control_characters(item, (*path, index))


def under_git(path: Path) -> bool:
    """Whether ``path`` (links followed) lies in a ``.git`` folder, where git keeps what it runs."""
    return any(part.lower() == GIT for part in Path(os.path.realpath(path)).parts)


def tool_folder(path: Path, root: Root) -> str | None:
    """Why ``path``'s folder belongs to a tool (a virtual environment, site-packages, node_modules,
    __pycache__, an .egg-info), from its folder up to the root, links followed; else None."""
    folder = Path(os.path.realpath(path.parent))
    top = Path(os.path.realpath(root.folder))
    above = [folder, *folder.parents]
    above = above[: above.index(top) + 1] if top in above else above
    for candidate in above:
        marker = next((m for m in VENV_MARKERS if os.path.lexists(candidate / m)), None)
        if marker:
            return f"would be written in the virtual environment {candidate} (it holds {marker}), whose files run"
    for candidate in above:
        if TOOL_FOLDER.fullmatch(candidate.name):
            return f"would be written in {candidate}, a package tool's folder ({candidate.name}), whose files run"
    return None


def name_problem(name: str, *, model: bool) -> str | None:
    """Why a spec may not give a file this name: a model ends in .onnx, a data file in one of
    :data:`DATA_SUFFIXES`, so nothing a spec creates is a file a tool runs or reads as settings."""
    lowered = name.lower()
    if lowered.split(".")[0].rstrip(" ") in WINDOWS_DEVICES:
        return f"is a device on Windows ({name.split('.')[0].upper()}): no file of that name can be written there"
    if model:
        if lowered.endswith(MODEL_SUFFIX) and len(lowered) > len(MODEL_SUFFIX):
            return None
        return f"is not a model file name: a spec's output must end in {MODEL_SUFFIX}"
    if any(lowered.endswith(suffix) and len(lowered) > len(suffix) for suffix in DATA_SUFFIXES):
        return None
    endings = ", ".join(DATA_SUFFIXES)
    return f"is not a data file name: a spec's data file must end in one of {endings}"


def not_regular(path: Path, *, links_ok: bool = False) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``a FIFO``), else None.

    ``links_ok``: a symbolic link itself is fine (an output link is replaced, never written through).
    """
    try:
        mode = os.lstat(path).st_mode if links_ok else os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or (links_ok and stat.S_ISLNK(mode)):
        return None
    return file_kind(mode)


def file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same real path, or the same inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def read_problem(root: Root, path: Path) -> str | None:
    """Why a file the spec reads may not be read (outside the root, not a regular file), or None."""
    if not root.holds(path):
        return f"resolves to {os.path.realpath(path)}, outside the project root {root.describe()}"
    kind = not_regular(path)
    if kind:
        return f"is {kind}, not a regular file; patchspec reads only regular files"
    return None


def write_problem(root: Root | None, path: Path, protected: list[tuple[str, Path]]) -> str | None:
    """Why ``path`` may not be written (``root`` None: a command-line path, trusted for its place).

    ``protected``: (what it is, path) of every file the run reads: the spec, the model, its data,
    the steps' files; none is ever replaced.
    """
    if root is not None and not root.holds(path.parent):
        return f"would be written in {os.path.realpath(path.parent)}, outside the project root {root.describe()}"
    if root is not None and under_git(path):
        return "would be written inside a .git folder, where git keeps its configuration and hooks"
    tool = tool_folder(path, root) if root is not None else None
    if tool:
        return tool
    kind = not_regular(path, links_ok=True)
    if kind:
        return f"is {kind}; patchspec only ever replaces regular files"
    for what, other in protected:
        if same_file(path, other):
            return f"would replace {what} ({other}); patchspec never modifies what it reads"
    return None


def reserved_name(name: str) -> str | None:
    """Why ``name`` cannot be a data file beside the output (patchspec's own bookkeeping), or None."""
    if name in ("", ".", ".."):
        return f"'{name}' names a folder, not a file"
    folded = name.lower()  # case-insensitive file systems (macOS, Windows) take .PATCHSPEC.LOCK for the lock
    if folded == LOCK_NAME or folded.startswith(STAGING_PREFIX) or folded.endswith(CACHE_SUFFIX):
        return f"'{name}' is a name patchspec keeps for its lock, staging folders and stat cache"
    if name.lower() == GIT:
        return f"'{name}' is git's folder"
    return None


def spec_path_error(spec: Spec, key: str, message: str, hint: str | None = None) -> SpecError:
    """An error located at the envelope key (``model``, ``output``) that gives the refused path."""
    data = spec.document.data
    written = data.get(key) if isinstance(data, dict) else None
    return SpecError([spec.document.problem((key,), f"'{written}' {message}", hint)])


def check_model_path(spec: Spec, root: Root) -> None:
    """The spec's ``model`` (not a ``--model``) leads, links followed, inside the root (a device, a
    FIFO or a directory there is the model loader's to refuse: exit 3, as any unusable model)."""
    if not root.holds(spec.model):
        refused = f"resolves to {os.path.realpath(spec.model)}, outside the project root {root.describe()}"
        raise spec_path_error(spec, "model", refused, ROOT_HINT)


def check_output_path(spec: Spec, output: Path, root: Root | None, protected: list[tuple[str, Path]]) -> None:
    """The output (``root`` None: ``--output``, trusted for its place): see :func:`write_problem`."""
    refused = write_problem(root, output, protected)
    if refused is None and root is not None and not root.granted(output):
        refused = name_problem(output.name, model=True)
    if refused is None:
        return
    hint = ROOT_HINT if root is not None and not root.holds(output.parent) else "choose another 'output'"
    if root is not None and refused.startswith("is not a model"):
        hint = f"name the output NAME.onnx, {GRANT_HINT}"
    if root is None:
        raise SpecError(f"--output {output}: {refused}", hint)
    raise spec_path_error(spec, "output", refused, hint)


__all__ = [
    "CACHE_SUFFIX",
    "CONTROL",
    "DATA_SUFFIXES",
    "GIT",
    "GRANT_HINT",
    "LOCK_NAME",
    "MODEL_SUFFIX",
    "ROOT_ENV",
    "ROOT_HINT",
    "STAGING_PREFIX",
    "Root",
    "check_model_path",
    "check_output_path",
    "control_character",
    "control_characters",
    "file_kind",
    "name_problem",
    "not_regular",
    "project_root",
    "read_problem",
    "reserved_name",
    "same_file",
    "spec_path_error",
    "tool_folder",
    "under_git",
    "within",
    "write_problem",
]
