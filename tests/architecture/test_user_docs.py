"""The user's documentation names only what a user has.

README.md, docs/ (but the generated docs/reference/) and the examples' READMEs are read by people
who have patchspec and its repository, nothing else: not the team's tracker, its notes or the
documents it wrote the product from. CONTRIBUTING.md is for the team and may use its words.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: (pattern, what to write instead); case-insensitive unless the pattern says otherwise
INTERNAL_WORDS = [
    (r"spec-format", "link docs/spec.md, the spec format's page"),
    (
        r"\bthe contract\b",
        "say which: the spec format (docs/spec.md), the exit codes (docs/cli.md), the plugin contract (docs/api.md)",
    ),
    (r"\bissues? #?\d+", "a tracker number the user cannot look up: say what changed or what the target is"),
    (r"\bshared/", "a folder of the team's, not in the repository"),
    (r"(?-i:\bFAULTS\b)", "the team's list of faults: name the test or the behaviour"),
    (r"\bSTYLE\.md\b", "the team's style notes: not in the repository"),
    (r"\bseed (?:case|model|example)\b", "the team's word for the first case: name the example"),
    (r"\bthe brief\b|\bbrief's\b", "the team's task text: say where the figure comes from"),
]


def user_docs() -> list[Path]:
    pages = [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "examples").glob("*/README.md")),
    ]
    return [page for page in pages if (REPO / "docs" / "reference") not in page.parents]


def test_user_docs_are_found():
    names = {page.relative_to(REPO).as_posix() for page in user_docs()}
    assert {
        "README.md",
        "docs/spec.md",
        "docs/cli.md",
        "docs/patches/set_batch.md",
        "examples/scrfd/README.md",
    } <= names
    assert not [name for name in names if name.startswith("docs/reference/")]


def test_user_docs_use_no_internal_words():
    found = []
    for page in user_docs():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, instead in INTERNAL_WORDS:
                for match in re.finditer(pattern, line, flags=re.I):
                    found.append(f"{page.relative_to(REPO)}:{number}: {match.group(0)!r}: {instead}")
    assert not found, "user docs use words a user has no way to look up:\n" + "\n".join(found)
