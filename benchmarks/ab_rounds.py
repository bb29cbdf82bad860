"""A/B rounds: whole ``patchspec apply`` processes against a durable copy, interleaved.

Per round, for each patchspec command given: its build (A) then ``cp`` + ``sync -f`` of the input's
data file (B), each whole process timed after a ``sync``; one warm-up round; the ratio A/B taken
pair by pair, its median (min-max), the median A, its CPU and B, and the load average at each A.
A first build (the default) gets a signing key, and so a stat cache store, of its own each time:
it has never seen its input. ``--clean``: one key per command, primed by one unmeasured build, so
each build has seen its input before (``rm -rf out`` is all that is new).

The work folder is made by ``bench_external_data.py``'s generator on first use (2 GiB: ``in/``,
``spec.yaml`` with ``set_batch: 8`` and ``external_data: {location: new.data, align: 65536}``).

    python benchmarks/ab_rounds.py /tmp/psb2 5 .venv/bin/patchspec /path/to/old/patchspec

``--quick``: one round of the ``patchspec`` beside this interpreter on 16 MiB of [1024, 1024]
weights, in a temporary folder it removes (``make test`` runs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

COPY = "rm -f copy.data; cp in/model.onnx_data copy.data && sync -f copy.data"


def timed(shell: str, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``shell`` run in ``work``, after a ``sync``."""
    subprocess.run(["sync"], check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(["sh", "-c", shell], cwd=work, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def prepare(work: Path, gib: float, side: int | None = None) -> None:
    if (work / "spec.yaml").is_file():
        return
    path = Path(__file__).with_name("bench_external_data.py")
    spec = importlib.util.spec_from_file_location("bench_external_data", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = bench.generate(work / "in", gib) if side is None else bench.generate(work / "in", gib, side=side)
    bench.write_spec(work, model, set_batch=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, nargs="?")
    parser.add_argument("rounds", type=int, nargs="?", default=5)
    parser.add_argument("commands", nargs="*", help="patchspec commands to time, in turn")
    parser.add_argument("--clean", action="store_true", help="builds that have seen their input before")
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="one toy round in a temporary folder")
    args = parser.parse_intermixed_args()
    if args.quick:
        work = Path(tempfile.mkdtemp(prefix="patchspec-ab-"))
        try:
            prepare(work, 1 / 64, side=1024)
            here = Path(sys.executable).with_name("patchspec")
            run_rounds(work, 1, [str(here) if here.is_file() else "patchspec"], clean=False)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    if args.workdir is None or not args.commands:
        parser.error("give WORKDIR ROUNDS CMD..., or --quick")
    work = args.workdir.absolute()
    prepare(work, args.gib)
    run_rounds(work, args.rounds, args.commands, args.clean)


def run_rounds(work: Path, rounds: int, commands: list[str], clean: bool) -> None:
    """The rounds, then one line per command: median ratio (min-max), A, its CPU, B and the load."""

    def env_for(index: int) -> dict[str, str]:
        name = f"primed-{index}" if clean else uuid.uuid4().hex
        return {**os.environ, "PATCHSPEC_CACHE_KEY": str(work / "keys" / name / "cache.key")}

    builds = [f"rm -rf out && {command} -q apply --no-verify --force spec.yaml" for command in commands]
    if clean:
        for index, build in enumerate(builds):
            timed(build, work, env_for(index))
    rows: dict[str, list[tuple[float, float, float, float]]] = {command: [] for command in commands}
    for number in range(rounds + 1):
        for index, (command, build) in enumerate(zip(commands, builds)):
            load = os.getloadavg()[0]
            a, cpu = timed(build, work, env_for(index))
            b, _ = timed(COPY, work, dict(os.environ))
            if number:  # the first round warms up
                rows[command].append((a, cpu, b, load))
                print(
                    f"  {command}: A {a:.2f}s (cpu {cpu:.2f}s) B {b:.2f}s ratio {a / b:.2f} load {load:.1f}", flush=True
                )
    kind = "clean" if clean else "first"
    for command, got in rows.items():
        ratios = [a / b for a, _, b, _ in got]
        print(
            f"{command} {kind} build: median {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
            f"A {statistics.median(g[0] for g in got):.2f}s, cpu {statistics.median(g[1] for g in got):.2f}s; "
            f"B {statistics.median(g[2] for g in got):.2f}s; load {min(g[3] for g in got):.1f}-{max(g[3] for g in got):.1f}"
        )


if __name__ == "__main__":
    main()
