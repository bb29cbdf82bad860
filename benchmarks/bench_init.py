"""Time and peak memory of `patchspec init` and `patchspec inspect --suggest` as the weights grow.

Both read the graph only: their time and peak RSS must not grow with the external data. The model
is bench_set_batch's memory model (a MatMul chain over ``--sizes-gib`` GiB of external weights and a
baked Reshape); each command runs in a fresh process, next to `patchspec --version` as the floor::

    .venv/bin/python benchmarks/bench_init.py --sizes-gib 0.0625 2 --repeat 3

``--quick`` (what ``make test`` runs) uses one 64 MiB model and one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_set_batch import TENSOR_BYTES, big_model  # a sibling script, not a package
from lib.processes import child

PATCHSPEC = str(Path(sys.executable).with_name("patchspec"))
QUICK = {"sizes_gib": [TENSOR_BYTES / 2**30], "repeat": 1}


def measure(command: list[str], cwd: Path, repeat: int) -> tuple[float, float, float]:
    """(median wall s, median CPU s, max peak RSS MiB) over ``repeat`` fresh processes."""
    runs = [child(command, cwd) for _ in range(repeat)]
    return (
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        max(r.rss_mib for r in runs),
    )


def bench(work: Path, gib: float, repeat: int) -> list[tuple]:
    folder = work / f"{gib:g}"
    folder.mkdir()
    model, _ = big_model(folder, gib)
    commands = {
        "patchspec --version": [PATCHSPEC, "--version"],
        "patchspec init --batch 4": [PATCHSPEC, "init", model.name, "--batch", "4", "--output", "spec.yaml", "--force"],
        "patchspec inspect --suggest": [PATCHSPEC, "inspect", model.name, "--suggest"],
    }
    size = (folder / "big.onnx.data").stat().st_size / 2**30
    return [(size, label, *measure(command, folder, repeat)) for label, command in commands.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[0.0625, 2], help="GiB of external weights")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (median time, max RSS)")
    parser.add_argument("--workdir", type=Path, help="where the temporary folder goes (default: the system's)")
    parser.add_argument("--quick", action="store_true", help="one 64 MiB model, one run (make test runs it)")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    work = Path(tempfile.mkdtemp(prefix="patchspec-bench-init-", dir=args.workdir))
    try:
        rows = [row for gib in args.sizes_gib for row in bench(work, gib, args.repeat)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.repeat} run(s), peak RSS the max\n")
    print("| external weights (GiB) | command | wall (s) | CPU (s) | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- |")
    for size, label, wall, cpu, rss in rows:
        print(f"| {size:.2f} | {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
