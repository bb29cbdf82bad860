"""Benchmark: what a `patchspec` call costs before it does any work, against a bare `python -c pass`.

A build with 50 specs calls patchspec 50 times per no-op build, and pre-commit as many times per
commit, so the CLI's start-up is most of what those runs cost (issue 26). Each figure is the CPU time
(user + system, from the child's rusage) of one fresh process, the minimum and the median of
``--repeat`` runs, for:

- ``python -c pass``, the same interpreter as ``patchspec`` (the baseline);
- ``patchspec --version``;
- ``patchspec validate SPEC`` (schemas and plugins, no model read);
- ``patchspec apply SPEC`` when the output is up to date (the stat cache answers);
- ``patchspec apply --check SPEC`` (the same question, nothing written).

The ratio is median CPU time against the baseline's median, next to issue 26's target for it.
The model is a 1 KiB Relu written into a temporary folder with a ``set_batch: 4`` spec, applied once
before the timing, so what is measured is start-up and the up-to-date check, nothing else.

    .venv/bin/python benchmarks/bench_startup.py               # 20 runs of each
    .venv/bin/python benchmarks/bench_startup.py --repeat 50
    .venv/bin/python benchmarks/bench_startup.py --quick       # seconds; 2 runs each (make test)

``--quick`` runs the same code with 2 runs of each so that ``make test`` fails when the benchmark
breaks; its figures are not the benchmark's. The folder is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lib.processes import compile_like_an_install

PATCHSPEC = Path(sys.executable).with_name("patchspec")
SPEC = "patchspec: 1\nmodel: model.onnx\noutput: out/model_b4.onnx\npatches:\n  - set_batch: 4\n"


@dataclass(frozen=True)
class Command:
    label: str
    argv: list[str]
    target: float | None  # the most it may cost, in baseline runs (issue 26)


COMMANDS = [
    Command("`python -c pass`", [sys.executable, "-c", "pass"], None),
    Command("`patchspec --version`", [str(PATCHSPEC), "--version"], 3.0),
    Command("`patchspec validate SPEC`", [str(PATCHSPEC), "validate", "spec.yaml"], 8.0),
    Command("up-to-date `patchspec apply SPEC`", [str(PATCHSPEC), "apply", "spec.yaml"], 6.0),
    Command("`patchspec apply --check SPEC`", [str(PATCHSPEC), "apply", "--check", "spec.yaml"], 6.0),
]


@dataclass(frozen=True)
class Sample:
    cpu: float  # user + system seconds of the child
    wall: float


def write_model(folder: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "startup", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(folder / "model.onnx"))
    (folder / "spec.yaml").write_text(SPEC)


def run_once(argv: list[str], cwd: Path) -> Sample:
    """One fresh process; its CPU time is the growth of this process's waited-for children's rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) failed with exit {done.returncode}:\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(cpu, wall)


def measure(folder: Path, repeat: int) -> dict[str, list[Sample]]:
    """Every command ``repeat`` times, interleaved (one of each per round) so that a busy moment of
    the machine lands on all of them alike."""
    run_once([str(PATCHSPEC), "-q", "apply", "spec.yaml"], folder)  # the output, and its stat cache
    output = folder / "out" / "model_b4.onnx"
    written = output.stat().st_mtime_ns
    samples: dict[str, list[Sample]] = {c.label: [] for c in COMMANDS}
    for command in COMMANDS:  # one untimed run each: the page cache and .pyc files are warm
        run_once(command.argv, folder)
    for _ in range(repeat):
        for command in COMMANDS:
            samples[command.label].append(run_once(command.argv, folder))
    if output.stat().st_mtime_ns != written:
        raise SystemExit(f"{output} was written again: the timed `apply` was not the up-to-date no-op")
    return samples


def table(samples: dict[str, list[Sample]]) -> str:
    base = statistics.median(s.cpu for s in samples[COMMANDS[0].label])
    lines = [
        "| command | CPU min (s) | CPU median (s) | wall median (s) | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for command in COMMANDS:
        cpu = [s.cpu for s in samples[command.label]]
        median = statistics.median(cpu)
        wall = statistics.median(s.wall for s in samples[command.label])
        ratio = median / base if base > 0 else float("inf")
        if command.target is None:
            target, met = "-", "-"
        else:
            target, met = f"<= {command.target:g}x", "yes" if ratio <= command.target else "**no**"
        lines.append(
            f"| {command.label} | {min(cpu):.3f} | {median:.3f} | {wall:.3f} | {ratio:.2f}x | {target} | {met} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="runs of each command (default 20)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder")
    parser.add_argument("--quick", action="store_true", help="2 runs of each: a check that the harness works")
    args = parser.parse_args()
    if not PATCHSPEC.exists():
        raise SystemExit(f"{PATCHSPEC} not found: run this with the python of the venv patchspec is installed in")
    repeat = 2 if args.quick else args.repeat
    compile_like_an_install()
    folder = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        write_model(folder)
        samples = measure(folder, repeat)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    version = subprocess.run([str(PATCHSPEC), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{version}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; {repeat} runs of each")
    print(table(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
