"""The commands of README.md, docs/**/*.md and examples/*/README.md, run as written: find the blocks, run them, compare.

Every fenced block that holds commands (``console``, ``sh``, ``bash``, ``shell``, or ``$ `` lines)
carries a marker on the line above it:

- ``<!-- run -->``: the block runs. A ``console`` block's ``$ `` lines run one by one and what each
  prints (stdout and stderr, as a terminal shows them) must be the lines below it, up to the next
  ``$ ``; a ``...`` line stands for any number of lines. A command exits 0 unless its line ends with
  ``# exits N``. An ``sh``/``bash`` block runs whole (heredocs and all) and must exit 0; what it
  prints is not shown, so not compared.
- ``<!-- not run: REASON -->``: the block is left out, and says why (the network, a GPU, minutes of
  work, a placeholder path).
- ``<!-- setup: ... -->`` (an HTML comment of shell lines, hidden from the reader): runs where it
  stands, to make what the page assumes (a model, a spec); must exit 0. ``$DOCS_SCRATCH`` is the
  scratch project's folder (``cd "$DOCS_SCRATCH"`` starts an example afresh).

A page's blocks run in order in one bash process (``cd`` and files carry over from block to block),
in a scratch project: a folder with ``.git`` and copies of ``examples/``, ``specs/`` and ``tests/``,
with the environment's ``bin`` first on PATH. Output is compared after :func:`normal`: versions,
timings, float figures, the providers present, where a plugin is installed; the scratch folder's
path is written as /path/to/project and this checkout's as /path/to/patchspec.

``python tests/docs/doc_blocks.py --write [PAGE ...]`` runs the pages and rewrites each ``console``
block whose output differs with what the commands printed (and their ``# exits N``): transcripts come
from real runs, so the docs cannot drift.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "examples").glob("*/README.md"))]
COMMAND_LANGUAGES = {"console", "sh", "bash", "shell"}
SCRIPT_LANGUAGES = {"sh", "bash", "shell"}
#: how the scratch folder's path reads in a transcript
PROJECT = "/path/to/project"
#: how this checkout's path reads in a transcript (an editable install's files are there)
CHECKOUT = "/path/to/patchspec"
MARK = "@@doc-blocks@@"
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- (run|not run: (?P<reason>.+?)) -->$")
SETUP = re.compile(r"^<!-- setup:\n(?P<script>.*?)\n-->$", re.S | re.M)
EXITS = re.compile(r"\s+# exits (\d+)$")


@dataclass
class Command:
    line: str  # as written, after "$ "
    shown: list[str]  # the lines the doc shows under it
    offset: int = 0  # of its line in the block's body

    @property
    def exits(self) -> int:
        found = EXITS.search(self.line)
        return int(found.group(1)) if found else 0


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    body: list[str]
    marker: str | None  # "run", "not run: ...", or None
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        name = self.page.relative_to(REPO).as_posix() if REPO in self.page.parents else self.page.name
        return f"{name}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.marker == "run"

    @property
    def is_console(self) -> bool:
        return any(line.startswith("$ ") for line in self.body)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` that hold commands, with their markers and commands."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        body, language = lines[index + 1 : end], opening.group(1)
        if language in COMMAND_LANGUAGES or any(line.startswith("$ ") for line in body):
            above = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            marker = MARKER.match(above)
            block = Block(page, index + 1, language, body, marker.group(1) if marker else None)
            block.commands = _commands(body) if block.is_console else []
            found.append(block)
        index = end + 1
    return found


def _commands(body: list[str]) -> list[Command]:
    commands: list[Command] = []
    for offset, line in enumerate(body):
        if commands and commands[-1].line.endswith("\\") and not commands[-1].shown:
            commands[-1].line += "\n" + line  # a command continued on the next line
        elif line.startswith("$ "):
            commands.append(Command(line[2:], [], offset))
        elif commands:
            commands[-1].shown.append(line)
    return commands


def setups(page: Path) -> list[tuple[int, str]]:
    """(line, script) of each hidden setup comment."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group("script")) for m in SETUP.finditer(text)]


def normal(line: str) -> str:
    """A printed line with what differs from machine to machine made one form."""
    line = re.sub(r"\b(onnx|onnxruntime|python|patchspec|numpy|pluggy) \d+\.\d+(\.\d+)?\S*", r"\1 VERSION", line)
    line = re.sub(r"\b\d+(\.\d+)? ?(s|ms|µs)\b", "TIME", line)
    line = re.sub(r"^(\s*from: )/\S+", r"\1PATH", line)  # where a plugin is installed
    line = re.sub(r"max abs (error |difference )?[0-9.]+(e[+-]?\d+)?", r"max abs \1FIGURE", line)
    # the providers present and an accelerator's math clause (a GPU machine runs the same pages)
    line = re.sub(r"case\(s\) on .*? \(optimizations", "case(s) on PROVIDERS (optimizations", line)
    line = re.sub(r"; [A-Za-z]+ExecutionProvider: [^;]*", "", line)
    return re.sub(r"; skipped [A-Za-z, ]+$", "", line).rstrip()


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is ``shown``, a ``...`` line standing for any number of lines."""
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and matches(shown[1:], printed[1:])


@dataclass
class Outcome:
    command: Command
    block: Block
    printed: list[str]
    code: int


def scratch_project(folder: Path) -> Path:
    """A project as a user's checkout of this repository looks: .git, examples/, specs/, tests/ (3 MB)."""
    (folder / ".git").mkdir(parents=True)
    shutil.copytree(REPO / "examples", folder / "examples", ignore=shutil.ignore_patterns("build", "__pycache__"))
    shutil.copytree(REPO / "specs", folder / "specs")
    shutil.copytree(REPO / "tests", folder / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return folder


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHSPEC_", "PRE_COMMIT", "PYTEST"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(PYTHONUNBUFFERED="1", COLUMNS="100", NO_COLOR="1", LC_ALL="C.UTF-8")
    return env


def run_page(page: Path, folder: Path, timeout: float = 600) -> list[Outcome]:
    """Run the page's setups and run-marked blocks in order in one bash; each console command's outcome."""
    steps: list[tuple[int, str, str, Block | None]] = [
        (line, f"the setup at {page.name}:{line}", script, None) for line, script in setups(page)
    ]
    steps += [(block.line, block.where, "\n".join(block.body), block) for block in blocks(page) if block.runs]
    script, keys = ["exec 2>&1", 'export DOCS_SCRATCH="$PWD"'], []
    for _, where, text, block in sorted(steps, key=lambda step: step[0]):
        if block is None or not block.is_console:  # a setup or a script block: must exit 0, as a whole
            script += ["set -e", text, "set +e", f"printf '\\n{MARK} done %s\\n' '{where}'"]
            continue
        for command in block.commands:
            keys.append((block, command))
            script += [
                f"printf '\\n{MARK} command {len(keys) - 1}\\n'",
                "(exit ${__rc:-0})",  # $? is the last command's, as in the user's shell
                command.line,
                "__rc=$?",
                f"printf '\\n{MARK} exit %d\\n' $__rc",
            ]
        script.append(f"printf '\\n{MARK} done %s\\n' '{where}'")
    script.append(f"printf '\\n{MARK} end\\n'")
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=folder,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if f"{MARK} end" not in done.stdout:  # a script block or a setup failed: bash stopped there
        printed = done.stdout.split("\n")
        finished = [line.split(" done ", 1)[1] for line in printed if line.startswith(f"{MARK} done ")]
        tail = "\n".join(line for line in printed[-30:] if line and not line.startswith(MARK))
        after = f"after {finished[-1]}" if finished else "before any block finished"
        raise AssertionError(f"{page.name}: a block or setup failed {after}; the last lines printed:\n{tail}")
    return _outcomes(done.stdout, keys, folder)


def _outcomes(output: str, keys: list[tuple[Block, Command]], folder: Path) -> list[Outcome]:
    outcomes, current, lines = [], None, []
    for line in output.split("\n"):
        if line.startswith(f"{MARK} command "):
            current, lines = int(line.split()[-1]), []
        elif line.startswith(f"{MARK} exit ") and current is not None:
            block, command = keys[current]
            printed = [_placed(text, folder) for text in lines]
            while printed and not printed[-1]:
                printed.pop()
            outcomes.append(Outcome(command, block, printed, int(line.split()[-1])))
            current = None
        elif current is not None:
            lines.append(line)
    return outcomes


def _placed(line: str, folder: Path) -> str:
    """A printed line with the scratch folder's path as a transcript shows it."""
    line = line.replace(str(folder.resolve()), PROJECT).replace(str(folder), PROJECT)
    return line.replace(str(REPO), CHECKOUT).rstrip()


def problems(outcomes: list[Outcome]) -> list[str]:
    found = []
    for outcome in outcomes:
        shown = [normal(line) for line in outcome.command.shown]
        while shown and not shown[-1]:
            shown.pop()
        head = f"{outcome.block.where}: $ {outcome.command.line}"
        if outcome.code != outcome.command.exits:
            found.append(f"{head}\n  exited {outcome.code}, the doc says {outcome.command.exits}")
        if not matches(shown, [normal(line) for line in outcome.printed]):
            diff = "\n".join(["  the doc shows:", *shown, "  it printed:", *outcome.printed])
            found.append(f"{head}\n{diff}")
    return found


def rewrite(page: Path, outcomes: list[Outcome], folder: Path) -> int:
    """Write what each differing command printed (and its exit code) into the page; how many changed."""
    lines = page.read_text(encoding="utf-8").splitlines()
    changed = 0
    for outcome in sorted(outcomes, key=lambda o: (o.block.line, o.command.offset), reverse=True):
        if not problems([outcome]):
            continue
        start = outcome.block.line + outcome.command.offset
        command = EXITS.sub("", outcome.command.line)
        if outcome.code:
            command += f"  # exits {outcome.code}"
        lines[start : start + 1 + len(outcome.command.shown)] = [f"$ {command}", *outcome.printed]
        changed += 1
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    write = "--write" in argv
    chosen = [REPO / name for name in argv if name != "--write"] or PAGES
    status = 0
    for page in chosen:
        if not any(block.runs for block in blocks(page)):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            folder = scratch_project(Path(scratch) / "project")
            outcomes = run_page(page, folder)
            if write:
                print(f"{page.relative_to(REPO)}: {rewrite(page, outcomes, folder)} transcript(s) rewritten")
            elif found := problems(outcomes):
                print("\n".join(found))
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
