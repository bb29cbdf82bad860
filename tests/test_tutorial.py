"""docs/from-model-to-spec.md teaches the four cases; tests/docs/test_doc_commands.py runs every
`$ command` of its console blocks, in order, and checks what each prints."""

from __future__ import annotations

import re

from helpers import REPO

TUTORIAL = REPO / "docs" / "from-model-to-spec.md"


def commands() -> list[tuple[str, int]]:
    """(command, expected exit code) for each `$ ` line of the console blocks; `# exits N` sets the code."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                command, _, comment = line[2:].partition("  # ")
                code = re.fullmatch(r"exits (\d+)", comment.strip())
                found.append((command.strip(), int(code.group(1)) if code else 0))
    return found


def test_the_tutorial_has_the_four_cases():
    text = TUTORIAL.read_text(encoding="utf-8")
    listed = [c for c, _ in commands()]
    assert len(re.findall(r"^## \d\. ", text, flags=re.M)) == 4
    for verb in ("patchspec init", "patchspec derive", "patchspec inspect", "--suggest", "patchspec apply"):
        assert any(verb in c for c in listed), verb
