"""``patchspec --help`` names every exit code, and ``patchspec schema --output`` gives editors a file to point at."""

from __future__ import annotations

import json
import re

from helpers import REPO
from patchspec import errors


def exit_codes_in_help(text: str) -> set[int]:
    """The codes listed under 'Exit codes:' in the help's epilog (``130/143`` is two)."""
    block = text.split("Exit codes:", 1)[1]
    rows = re.findall(r"^\s+(\d+(?:/\d+)*)\s{2,}\S", block, flags=re.M)
    return {int(code) for row in rows for code in row.split("/")}


def test_help_lists_every_exit_code_the_cli_uses(run_cli):
    result = run_cli("--help")
    assert result.exit_code == 0, result.output
    used = {value for name, value in vars(errors).items() if name.startswith("EXIT_") and isinstance(value, int)}
    assert {0, 1, 2, 3, 4, 5, 6, 130, 143} <= used
    missing = used - exit_codes_in_help(result.stdout)
    assert not missing, f"patchspec --help does not list exit code(s) {sorted(missing)}:\n{result.stdout}"


def test_schema_output_writes_the_printed_schema_creating_folders(tmp_path, run_cli):
    printed = run_cli("schema")
    written = run_cli("schema", "--output", ".patchspec/schema.json", cwd=tmp_path)
    assert printed.exit_code == 0 and written.exit_code == 0, printed.output + written.output
    target = tmp_path / ".patchspec" / "schema.json"
    assert json.loads(target.read_text(encoding="utf-8")) == json.loads(printed.stdout)
    assert "wrote .patchspec/schema.json" in written.stdout and "$schema" not in written.stdout
    assert run_cli("-q", "schema", "--output", str(target)).stdout == ""


def test_schema_output_that_cannot_be_written_is_exit_3(tmp_path, run_cli):
    (tmp_path / "file").write_text("not a folder")
    result = run_cli("schema", "--output", str(tmp_path / "file" / "schema.json"))
    assert result.exit_code == 3, result.output
    assert "cannot write the schema" in result.stderr


#: what the README tells a user to run in the project's root, and to put at the top of a spec in specs/
WRITE_SCHEMA = "patchspec schema --output .patchspec/schema.json"
EDITOR_LINE = "# yaml-language-server: $schema=../.patchspec/schema.json"


def test_the_editor_line_in_the_docs_points_at_the_file_schema_output_writes(tmp_path, run_cli):
    for page in ("README.md", "docs/spec.md", "docs/cli.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        assert WRITE_SCHEMA in text and EDITOR_LINE in text, f"{page} must say `{WRITE_SCHEMA}` and `{EDITOR_LINE}`"
        others = set(re.findall(r"yaml-language-server: \$schema=[^\s`]+", text)) - {EDITOR_LINE.removeprefix("# ")}
        assert not others, f"{page} points editors at another schema path: {others}"
    (tmp_path / "specs").mkdir()
    assert run_cli(*WRITE_SCHEMA.split()[1:], cwd=tmp_path).exit_code == 0
    pointed = tmp_path / "specs" / EDITOR_LINE.partition("$schema=")[2]
    assert pointed.resolve() == (tmp_path / ".patchspec" / "schema.json").resolve() and pointed.is_file()
