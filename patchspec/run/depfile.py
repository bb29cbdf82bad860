"""The depfile ``apply --depfile`` writes: one Make rule that Make, Ninja and CMake read back.

A depfile is read as Makefile text, so a path in it is a small program: a ``;`` starts a recipe
that Make runs, ``=`` makes the line a variable assignment, ``*?[`` glob, ``(`` names an archive
member, ``%`` makes a pattern rule, ``|`` starts order-only prerequisites, a leading ``~`` is the
home folder, and a newline ends the rule. Four characters have an escape that Make, Ninja and CMake
all read back the same: a space, ``#`` and ``:`` take a backslash, ``$`` is doubled. Every other
character a build tool may treat specially is refused, naming the path, before anything is written:
a file name outside :data:`PLAIN` cannot reach a depfile at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchspec.errors import UsageError
from patchspec.spec.confine import control_character

if TYPE_CHECKING:
    from patchspec.run.freshness import LoadedInput

#: what a path may hold as it is: letters and digits of any script, ``. _ - + , @ /``, ``~`` past the start
PLAIN = re.compile(r"[\w.\-+,@/~]")
#: escaped for Make, Ninja and CMake alike
ESCAPES = {" ": "\\ ", "#": "\\#", ":": "\\:", "$": "$$"}


def depfile_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be written into a depfile (the characters, as Python writes them), or None."""
    text = Path(path).as_posix()
    control = control_character(text)
    if control:  # cannot be escaped: a newline would end the rule and start one of the file's choosing
        return f"{text!r} holds the control character {control}, so it cannot be named in a depfile"
    refused = sorted({char for char in text if char not in ESCAPES and not PLAIN.fullmatch(char)})
    if text.startswith("~"):
        refused.insert(0, "~")
    if not refused:
        return None
    shown = " ".join(repr(char) for char in refused)
    return (
        f"{text!r} holds {shown}, which Make, Ninja or CMake would read as part of a rule "
        "(a ';' runs a command), so it cannot be named in a depfile"
    )


def refuse_unwritable(paths: Iterable[Path | str]) -> None:
    """Exit 2 before anything is written when one of ``paths`` cannot be named in the depfile."""
    for path in paths:
        problem = depfile_problem(path)
        if problem:
            raise UsageError(
                f"--depfile: {problem}",
                "rename the file to letters, digits and . _ - + , @ (spaces, # : $ are escaped), "
                "or run without --depfile",
            )


def make_escape(path: Path | str) -> str:
    """``path`` as a depfile spells it; anything but :data:`PLAIN` and :data:`ESCAPES` is refused."""
    refuse_unwritable([path])
    return "".join(ESCAPES.get(char, char) for char in Path(path).as_posix())


def _rule(targets: Iterable[Path | str], dependencies: Iterable[Path | str]) -> str:
    """``targets: dependencies``, each escaped, on one line."""
    return " ".join(map(make_escape, targets)) + ": " + " ".join(map(make_escape, dependencies)) + "\n"


def cwd_relative(path: Path) -> Path:
    """``path`` relative to the current directory when inside it, else absolute: Make and Ninja match
    a target by its spelling, so a depfile names files as the build names them."""
    try:
        return path.absolute().relative_to(Path.cwd())
    except ValueError:
        return path.absolute()


@dataclass(frozen=True)
class Depfile:
    """The depfile of one build: where it goes (``--depfile``, the caller's path), the files the output
    depends on, and the output model as the build names it (``--model``/``--output`` as given)."""

    path: Path
    output: Path
    dependencies: tuple[Path, ...]

    @classmethod
    def of(
        cls, path: Path, loaded: LoadedInput, step_files: list[Path], model: Path | None, output: Path | None
    ) -> Depfile:
        """The build's depfile: ``model`` and ``output`` as the command line gave them, else relative to
        the current folder; ``step_files``: every file a step reads. Refused (exit 2) before anything is
        written when one of the paths cannot be named in a depfile."""
        inputs = [*loaded.data_paths, *step_files]
        spelled_model = model or cwd_relative(loaded.model_path)
        spelled_output = output or cwd_relative(loaded.output_path)
        made = cls(path, spelled_output, (loaded.spec.path, spelled_model, *map(cwd_relative, inputs)))
        refuse_unwritable([made.output, *made.dependencies])
        return made

    def data_files(self, names: Iterable[str]) -> list[Path]:
        """The output's data files (refused now, before they are written, when one cannot be named)."""
        files = [self.output.parent / name for name in names]
        refuse_unwritable(files)
        return files

    def write(self, data_names: Iterable[str]) -> None:
        """The rule, written whole or not at all: the output and its data files (grouped targets:
        deleting one makes the rule run) from everything they were built from."""
        from patchspec.run.atomic import write_text_atomically

        write_text_atomically(self.path, _rule([self.output, *self.data_files(data_names)], self.dependencies))


__all__ = [
    "ESCAPES",
    "PLAIN",
    "Depfile",
    "cwd_relative",
    "depfile_problem",
    "make_escape",
    "refuse_unwritable",
]
