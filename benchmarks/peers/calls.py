"""Child processes: a tool call with a timeout, what it printed, the first line that says what went wrong."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "compare_peers.py"  # re-run in the peers venv for --evaluate, --peer-worker
PEERS_VENV = REPO / "benchmarks" / ".peers-venv"
PEERS_PY = PEERS_VENV / "bin" / "python"
TOOL_TIMEOUT = 300  # seconds, each tool call
Json = dict[str, Any]  # a JSON object of the details


def first_error_line(text: str, limit: int = 400) -> str:
    """The line that says what went wrong: polygraphy's first [E] line, else the last exception line (with where
    it was raised when it carries no message), else the first line naming an error, else the last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return ""
    for line in lines:
        if line.startswith("[E]") and "Traceback" not in line:
            return _clip(line, limit)
    exception = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Fail\w*|Exit|Interrupt))(?::|$)")
    hits = [index for index, line in enumerate(lines) if exception.match(line)]
    if hits:
        index = hits[-1]
        line = lines[index]
        if ":" not in line:  # a bare `AssertionError`: say where, and the line that raised it
            where = next((i for i in range(index - 1, -1, -1) if lines[i].startswith("File ")), None)
            if where is not None:
                place = re.match(r'File "([^"]+)", line (\d+), in (\S+)', lines[where])
                code = lines[where + 1] if where + 1 < index else ""
                if place:
                    line += f" in {Path(place[1]).name}:{place[2]} {place[3]}(): {code}"
        return _clip(line, limit)
    errors = [line for line in lines if re.search(r"\berror\b|\bfail", line, re.I)]
    return _clip(errors[0] if errors else lines[-1], limit)


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run_child(command: list[str], timeout: float, **kwargs: Any) -> Json:
    """Run a child process; returns rc (None on timeout), output, wall seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as expired:
        out = (
            (expired.stdout or b"").decode(errors="replace")
            if isinstance(expired.stdout, bytes)
            else (expired.stdout or "")
        )
        return {"rc": None, "output": out, "wall_s": round(time.perf_counter() - start, 2)}
    return {
        "rc": done.returncode,
        "output": done.stdout + done.stderr,
        "stdout": done.stdout,
        "wall_s": round(time.perf_counter() - start, 2),
    }


def tool_call(command: list[str], produced: Path) -> Json:
    """{"ok": True, command, wall_s, log} when the tool wrote its output; else the verdict (status, error)."""
    done = run_child(command, TOOL_TIMEOUT, cwd=produced.parent, env=tool_env(produced.parent))
    record = {
        "command": " ".join(shell_quote(c) for c in command),
        "wall_s": done["wall_s"],
        "log": log_tail(done["output"]),
    }
    if done["rc"] is None:
        return {**record, "status": "tool timeout", "error": f"no answer after {TOOL_TIMEOUT} s"}
    if done["rc"] != 0 or not produced.is_file():
        return {
            **record,
            "status": "tool error",
            "error": first_error_line(done["output"]) or f"exit {done['rc']}",
            "rc": done["rc"],
        }
    return {"ok": True, **record}


def tool_env(folder: Path) -> dict[str, str]:
    """The environment of a tool call: its temporary files (polygraphy's ``tmp_polygraphy_*.onnx``, which it
    leaves behind) go to the working folder, which is removed at the end."""
    return {**os.environ, "TMPDIR": str(folder)}


def log_tail(text: str, lines: int = 6) -> list[str]:
    """The last lines a tool printed (colour codes removed), for the JSON details."""
    kept = [_clip(re.sub(r"\x1b\[[0-9;]*m", "", line).strip(), 300) for line in text.splitlines() if line.strip()]
    return kept[-lines:]


def shell_quote(text: str) -> str:
    return text if re.fullmatch(r"[\w./:,=\[\]+-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def patchspec_binary() -> str:
    here = Path(sys.executable).with_name("patchspec")
    return str(here if here.exists() else REPO / ".venv" / "bin" / "patchspec")
