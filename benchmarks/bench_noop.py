"""Benchmark: an up-to-date `patchspec apply` on a model with GiBs of external weights.

Issue 11's target: the no-op costs at most 2x `patchspec --version`, measured in the same run,
because the stat cache (patchspec/run/statcache.py) answers "unchanged" with a stat per file
instead of hashing the weights again. Each figure is the median of ``--repeat`` fresh processes:

- ``patchspec --version`` (the CLI's start-up);
- ``patchspec apply`` when the output is up to date (stat cache present);
- the same after ``touch`` of the data file (one re-hash, still up to date);
- the same with the cache file deleted (every input hashed, the cost before the cache).

    python benchmarks/bench_noop.py --sizes-gib 2 --repeat 3 --workdir /tmp/ps-noop
    python benchmarks/bench_noop.py --quick          # seconds: 16 MiB of [1024, 1024] weights, 1 run

Removes its files afterwards unless ``--keep``. ``--quick`` runs the same code at a toy size in a
temporary folder (removed) so that ``make test`` fails when the benchmark breaks; its figures are
not the benchmark's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_external_data import SIDE, generate

PATCHSPEC = Path(sys.executable).with_name("patchspec")
SPEC = "patchspec: 1\nmodel: model.onnx\noutput: out/model.onnx\npatches: [{set_batch: 4}]\n"
# --quick: four [1024, 1024] layers (16 MiB), one run of each
QUICK = {"sizes_gib": [4 * 1024 * 1024 * 4 / 2**30], "side": 1024, "repeat": 1}


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return elapsed


def median(argv: list[str], cwd: Path, repeat: int, before=None) -> float:
    samples = []
    for _ in range(repeat):
        if before is not None:
            before()
        samples.append(timed(argv, cwd))
    return statistics.median(samples)


def measure(folder: Path, gib: float, repeat: int, side: int = SIDE) -> dict:
    model = generate(folder, gib, side)
    if model.name != "model.onnx":
        model.rename(folder / "model.onnx")
    (folder / "spec.yaml").write_text(SPEC)
    apply = [str(PATCHSPEC), "apply", "--no-verify", "spec.yaml"]
    timed(apply, folder)  # the build
    data = next(p for p in folder.iterdir() if p.suffix not in (".onnx", ".yaml") and p.is_file())
    cache = folder / "out" / ".model.onnx.patchspec-cache.json"
    row = {
        "GiB": gib,
        "--version": median([str(PATCHSPEC), "--version"], folder, repeat),
        "no-op": median(apply, folder, repeat),
        "after touch": median(apply, folder, repeat, before=lambda: os.utime(data)),
        "no cache": median(apply, folder, repeat, before=lambda: cache.unlink(missing_ok=True)),
    }
    row["no-op / --version"] = row["no-op"] / row["--version"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="+", default=[2.0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="default: /tmp/ps-noop; with --quick, a new temporary folder")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a check that the benchmark runs, in seconds: --sizes-gib {QUICK['sizes_gib'][0]:g} "
        f"with [{QUICK['side']}, {QUICK['side']}] weights, --repeat 1 (make test runs it)",
    )
    parser.set_defaults(side=SIDE)
    args = parser.parse_args()
    temporary = args.quick and args.workdir is None
    if args.quick:
        vars(args).update(QUICK)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="ps-noop-")) if temporary else Path("/tmp/ps-noop")
    print("| GiB | --version (s) | no-op (s) | after touch (s) | no cache (s) | no-op / --version |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for gib in args.sizes_gib:
            folder = args.workdir / f"{gib:g}GiB"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                r = measure(folder, gib, args.repeat, args.side)
            finally:
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
            print(
                f"| {gib:g} | {r['--version']:.2f} | {r['no-op']:.2f} | {r['after touch']:.2f} | "
                f"{r['no cache']:.2f} | {r['no-op / --version']:.2f} |",
                flush=True,
            )
    finally:
        if temporary and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
