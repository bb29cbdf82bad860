"""Measuring a command as a fresh process: wall time, CPU time and peak RSS, repeated within a budget."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
#: GNU time gives the child's own peak RSS; without it, os.wait4's rusage does
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    rss_mib: float
    stdout: str


def child(command: list[str], cwd: Path) -> Run:
    """One fresh process: wall time from this clock, CPU and peak RSS from /usr/bin/time or os.wait4."""
    report, out, err = cwd / "time.txt", cwd / "stdout.txt", cwd / "stderr.txt"
    wrapped = [TIME, "-f", "%U %S %M", "-o", str(report), *command] if TIME else command
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        start = time.perf_counter()
        process = subprocess.Popen(wrapped, cwd=cwd, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    text = out.read_text(errors="replace")
    if process.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} exited {process.returncode}:\n{text[-2000:]}{err.read_text(errors='replace')[-2000:]}"
        )
    if TIME:
        user, system, rss_kib = report.read_text().split()[-3:]
        return Run(wall, float(user) + float(system), int(rss_kib) / 1024, text)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text)  # Linux: KiB


def repeated(measure: Callable[[], T], times: int, budget_s: float) -> list[T]:
    """Up to ``times`` results of ``measure()``; no further run once one more would pass ``budget_s`` seconds."""
    results: list[T] = []
    start = time.perf_counter()
    while len(results) < times:
        results.append(measure())
        spent = time.perf_counter() - start
        if spent + spent / len(results) > budget_s:
            break
    return results


def compile_like_an_install() -> None:
    """Write the bytecode of patchspec and its plugins, as ``pip install`` does: an editable checkout
    run with PYTHONDONTWRITEBYTECODE=1 (as here) would otherwise compile ~80 modules on every start,
    about 0.1 s, which no installed copy pays."""
    import compileall

    import patchspec
    import patchspec_plugins

    for package in (patchspec, patchspec_plugins):
        compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)
