"""``patchspec --help`` names every exit code, and ``patchspec schema --output`` gives editors a file to point at."""

from __future__ import annotations

import json
import re

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
