"""Measure ``set_batch`` on large graphs: time against node count and ``infer_shapes``, and peak RSS.

``set_batch`` follows the batch by evaluating every tensor's shape at two batch sizes in one pass
in graph order (``patchspec.shapes.evaluate`` + ``patchspec.shapes.batch.tracker``) and rewrites the shape
constants that bake the old batch. This script checks that the cost grows with the graph, not
faster, that it stays within a few times ONNX's own C++ ``infer_shapes``, and that weights are never
loaded or copied. Three parts:

0. **LLM-sized graphs** (``--llm-nodes``, default 56,000 / 112,000 / 224,000): the decoder graph of
   ``lib/llm_graph.py`` (one baked batch-1 Reshape constant per layer), ``SetBatchPatch().apply``
   in this process against ``onnx.shape_inference.infer_shapes`` on the same model (CPU medians),
   and the peak RSS of a fresh process during ``set_batch`` against the bytes of the weights
   (``lib/llm_bench.py``).

1. **Scaling.** Generated models of N nodes (default 2,500 / 5,000 / 10,000 / 20,000): a chain of
   Relu / Add / Mul on ``x`` [1, C, H, W] (C, H, W small; one shared one-element weight) where
   every 20th node is a Reshape with its own constant, alternately ``[1, C, -1]`` and
   ``[1, C, H, W]``: each bakes batch 1, so N nodes carry N / 20 baked constants. Spec
   ``set_batch: 8``. Timed: ``patchspec apply --no-verify --force`` in a fresh process (start-up,
   load, patch, digest, write), and ``SetBatchPatch().apply(model, {"size": 8}, ctx)`` alone, in
   this process, on a model already in memory. The number of constants rewritten is read from the
   apply summary (``N shape constants rewritten``) and must equal the number of baked constants.
2. **Memory.** A MatMul chain with ``--sizes-gib`` GiB of [4096, 4096] float32 weights (64 MiB each)
   in one external data file, written block by block, followed by one baked Reshape. Spec
   ``set_batch: 8`` only (no ``external_data`` patch). Measured: wall time and peak RSS of
   ``patchspec apply --no-verify --force``; the target is a peak RSS under 300 MB.

Every child runs under ``/usr/bin/time -f %M`` when it exists: a child forked straight from this
process (which holds the 20k-node models) could be charged this process's pages as its peak RSS.
Without it, the child's own rusage from ``os.wait4`` is used. Times are medians of ``--repeat``
runs (fewer once another run would take a measurement past ``--budget-s``); RSS is the largest.

    python benchmarks/bench_set_batch.py                       # prints markdown tables
    nice python benchmarks/bench_set_batch.py --nodes --sizes-gib --repeat 3   # the LLM part alone
    python benchmarks/bench_set_batch.py --nodes 2500 5000 10000 20000 --sizes-gib 2 --repeat 3
    python benchmarks/bench_set_batch.py --profile 20000       # cProfile of the in-process apply
    python benchmarks/bench_set_batch.py --quick               # seconds: toy sizes, 1 run

Generated files go to a temporary folder under ``--workdir`` (default: the system's temporary
folder, /tmp), removed at the end. ``--quick`` runs both parts through the same code at toy sizes,
so that ``make test`` fails when the benchmark breaks; its figures are not the benchmark's.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from lib import llm_bench
from lib.processes import TIME, child, repeated
from onnx import TensorProto, helper, numpy_helper

from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

C, H, W = 4, 8, 8  # the scaling model's activation: 256 floats at batch 1
EVERY = 20  # one Reshape per this many nodes
BATCH = 8
SIDE = 4096  # memory model: [SIDE, SIDE] float32 weights, 64 MiB each
TENSOR_BYTES = SIDE * SIDE * 4
RSS_TARGET_MB = 300
PATCHSPEC = str(Path(sys.executable).with_name("patchspec"))
REWRITTEN = re.compile(r"(\d+) shape constants? rewritten")
# --quick: both parts, same code, toy sizes (two node counts, so that the ratios are computed too)
QUICK = {"nodes": [200, 400], "sizes_gib": [TENSOR_BYTES / 2**30], "repeat": 1, "llm_nodes": [800, 1600]}


def context():
    """A real PatchContext with a fresh RunState per call, as a spec run would give ``set_batch``."""
    return patch_context("set_batch", {"size": BATCH})


# -- models -----------------------------------------------------------------------------------------------
def scaling_model(nodes: int) -> tuple[onnx.ModelProto, int]:
    """A chain of ``nodes`` nodes, every EVERY-th a Reshape with its own batch-1 constant: (model, baked)."""
    flat, full = [1, C, -1], [1, C, H, W]
    graph_nodes, initializers = [], [numpy_helper.from_array(np.array([0.5], dtype=np.float32), "k")]
    current, rank4, baked = "x", True, 0
    elementwise = ("Relu", "Add", "Mul")
    for index in range(nodes):
        out = f"t{index}"
        if index % EVERY == EVERY - 1:
            shape = f"shape{index}"
            initializers.append(numpy_helper.from_array(np.array(flat if rank4 else full, dtype=np.int64), shape))
            graph_nodes.append(helper.make_node("Reshape", [current, shape], [out], name=f"reshape{index}"))
            rank4, baked = not rank4, baked + 1
        else:
            op = elementwise[index % len(elementwise)]
            inputs = [current] if op == "Relu" else [current, "k"]
            graph_nodes.append(helper.make_node(op, inputs, [out], name=f"n{index}"))
        current = out
    graph_nodes[-1].output[0] = "y"
    out_dims = full if rank4 else [1, C, H * W]
    graph = helper.make_graph(
        graph_nodes,
        f"chain{nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, full)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, baked


def big_model(folder: Path, gib: float) -> tuple[Path, int]:
    """x [1, SIDE] -> MatMul chain (``gib`` GiB of external weights) -> Reshape [1, 64, 64]: (path, baked)."""
    count = max(1, round(gib * 2**30 / TENSOR_BYTES))
    block = (np.random.default_rng(0).standard_normal((SIDE, SIDE), dtype=np.float32) * (1.0 / SIDE)).tobytes()
    data_name = "big.onnx.data"
    weights, nodes, current = [], [], "x"
    with open(folder / data_name, "wb") as sink:  # one 64 MiB block in memory, written ``count`` times
        for index in range(count):
            tensor = TensorProto(
                name=f"w{index}", data_type=TensorProto.FLOAT, dims=[SIDE, SIDE], data_location=TensorProto.EXTERNAL
            )
            for key, value in (
                ("location", data_name),
                ("offset", str(index * TENSOR_BYTES)),
                ("length", str(TENSOR_BYTES)),
            ):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            sink.write(block)
            weights.append(tensor)
            nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"h{index}"]))
            current = f"h{index}"
    weights.append(numpy_helper.from_array(np.array([1, 64, SIDE // 64], dtype=np.int64), "shape_out"))
    nodes.append(helper.make_node("Reshape", [current, "shape_out"], ["y"], name="reshape_out"))
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, SIDE // 64])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "big.onnx"
    path.write_bytes(model.SerializeToString())
    return path, 1


def write_spec(folder: Path, model: Path, output: str) -> Path:
    """model and output are relative to the spec file, which sits in ``folder``."""
    spec = folder / f"{model.stem}_b{BATCH}.yaml"
    spec.write_text(f"patchspec: 1\nmodel: {model.name}\noutput: {output}\npatches:\n  - set_batch: {BATCH}\n")
    return spec


# -- measuring ---------------------------------------------------------------------------------------------
def patchspec_cpu(arguments: list[str], cwd: Path) -> float:
    """CPU seconds of one ``patchspec ARGUMENTS`` in a fresh process."""
    return child([PATCHSPEC, *arguments], cwd).cpu_s


def apply_cli(spec: Path, times: int, budget_s: float) -> tuple[float, float, float, int, int]:
    """``patchspec apply --no-verify --force``: (median wall, median CPU, max RSS MiB, rewritten, runs)."""
    runs = repeated(
        lambda: child([PATCHSPEC, "apply", "--no-verify", "--force", spec.name], spec.parent), times, budget_s
    )
    found = {int(m.group(1)) for run in runs for m in [REWRITTEN.search(run.stdout)] if m}
    if len(found) != 1:
        raise SystemExit(f"no single 'N shape constants rewritten' in the apply output:\n{runs[-1].stdout}")
    return (
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        max(r.rss_mib for r in runs),
        found.pop(),
        len(runs),
    )


def apply_in_process(model: onnx.ModelProto, times: int, budget_s: float) -> tuple[float, float, int, int]:
    """``SetBatchPatch().apply`` alone on a fresh copy each time: (median wall s, median CPU s, rewritten, runs)."""

    def once() -> tuple[float, float, int]:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        fresh = context()
        wall, cpu = time.perf_counter(), time.process_time()
        result = SetBatchPatch().apply(copy, {"size": BATCH}, fresh)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        match = REWRITTEN.search(result.summary)
        return wall, cpu, int(match.group(1)) if match else -1

    runs = repeated(once, times, budget_s)
    counts = {run[2] for run in runs}
    if len(counts) != 1:
        raise SystemExit(f"the in-process apply rewrote a different number of constants each time: {counts}")
    return (
        statistics.median(run[0] for run in runs),
        statistics.median(run[1] for run in runs),
        counts.pop(),
        len(runs),
    )


def check_all_rewritten(what: str, rewritten: int, baked: int) -> None:
    if rewritten != baked:  # not a bare assert: python -O would drop it
        raise AssertionError(
            f"{what}: {rewritten} shape constants rewritten, but the model bakes batch 1 "
            f"into {baked}: set_batch missed {baked - rewritten}"
        )


# -- the two parts ------------------------------------------------------------------------------------------
def bench_scaling(work: Path, sizes: list[int], times: int, budget_s: float) -> list[dict]:
    rows = []
    for nodes in sizes:
        folder = work / f"chain{nodes}"
        folder.mkdir()
        model, baked = scaling_model(nodes)
        path = folder / f"chain{nodes}.onnx"
        onnx.save(model, path)
        in_s, in_cpu, in_count, in_runs = apply_in_process(model, times, budget_s)
        check_all_rewritten(f"{nodes} nodes, in-process", in_count, baked)
        wall, cpu, rss, cli_count, cli_runs = apply_cli(write_spec(folder, path, "out.onnx"), times, budget_s)
        check_all_rewritten(f"{nodes} nodes, patchspec apply", cli_count, baked)
        rows.append(
            dict(
                nodes=nodes,
                baked=baked,
                rewritten=cli_count,
                wall=wall,
                cpu=cpu,
                rss=rss,
                inproc=in_s,
                inproc_cpu=in_cpu,
                size_mib=path.stat().st_size / 2**20,
                runs=f"{cli_runs} / {in_runs}",
            )
        )
        print(f"  {nodes} nodes: apply {wall:.2f} s, in-process set_batch {in_s:.2f} s", file=sys.stderr, flush=True)
        shutil.rmtree(folder)
    return rows


def bench_memory(work: Path, sizes_gib: list[float], times: int, budget_s: float) -> list[dict]:
    rows = []
    for gib in sizes_gib:
        folder = work / f"big{gib:g}"
        folder.mkdir()
        path, baked = big_model(folder, gib)
        os.sync()  # the data was just written: do not charge its write-back to the first run
        wall, cpu, rss, count, runs = apply_cli(write_spec(folder, path, "out/big_b8.onnx"), times, budget_s)
        check_all_rewritten(f"{gib:g} GiB model", count, baked)
        out_data = sum(p.stat().st_size for p in (folder / "out").iterdir() if p.suffix != ".onnx")
        rows.append(
            dict(
                gib=gib,
                data_gib=(folder / "big.onnx.data").stat().st_size / 2**30,
                out_gib=out_data / 2**30,
                wall=wall,
                cpu=cpu,
                rss=rss,
                rewritten=count,
                runs=runs,
            )
        )
        print(f"  {gib:g} GiB: apply {wall:.2f} s, peak RSS {rss:.0f} MiB", file=sys.stderr, flush=True)
        shutil.rmtree(folder)  # GiBs: free the disk before the next size
    return rows


def profile(nodes: int, top: int = 15) -> str:
    model, _ = scaling_model(nodes)
    profiler = cProfile.Profile()
    profiler.enable()
    SetBatchPatch().apply(model, {"size": BATCH}, context())
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


# -- tables --------------------------------------------------------------------------------------------------
def scaling_table(rows: list[dict]) -> str:
    lines = [
        "| nodes | model MiB | baked constants | rewritten | `patchspec apply` wall s | CPU s | s / 1k nodes "
        "| peak RSS MiB | in-process `set_batch` wall s | CPU s | s / 1k nodes | runs (apply / in-process) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        k = r["nodes"] / 1000
        lines.append(
            f"| {r['nodes']:,} | {r['size_mib']:.1f} | {r['baked']:,} | {r['rewritten']:,} | {r['wall']:.2f} "
            f"| {r['cpu']:.2f} | {r['wall'] / k:.3f} | {r['rss']:.0f} | {r['inproc']:.2f} | {r['inproc_cpu']:.2f} "
            f"| {r['inproc'] / k:.3f} | {r['runs']} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict]) -> str:
    lines = []
    for small, large in zip(rows, rows[1:]):
        factor = large["nodes"] / small["nodes"]
        lines.append(
            f"- {large['nodes']:,} / {small['nodes']:,} nodes (x{factor:g}): `patchspec apply` "
            f"x{large['wall'] / small['wall']:.2f} wall (x{large['cpu'] / small['cpu']:.2f} CPU), in-process "
            f"`set_batch` x{large['inproc'] / small['inproc']:.2f} wall (x{large['inproc_cpu'] / small['inproc_cpu']:.2f} CPU)"
        )
    return "\n".join(lines)


def memory_table(rows: list[dict]) -> str:
    lines = [
        "| external weights | `patchspec apply` wall s | CPU s | peak RSS MiB | peak RSS MB | "
        f"under {RSS_TARGET_MB} MB | rewritten | output data GiB | runs |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        mb = r["rss"] * 2**20 / 1e6
        lines.append(
            f"| {r['data_gib']:.2f} GiB | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss']:.0f} | {mb:.0f} "
            f"| {'yes' if mb < RSS_TARGET_MB else '**no**'} | {r['rewritten']} | {r['out_gib']:.2f} | {r['runs']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes", type=int, nargs="*", default=[2500, 5000, 10000, 20000], help="node counts of the scaling models"
    )
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[2], help="GiB of external weights")
    parser.add_argument(
        "--llm-nodes",
        type=int,
        nargs="*",
        default=[56000, 112000, 224000],
        help="node counts of the generated LLM graphs, timed against infer_shapes",
    )
    parser.add_argument("--rss-child", metavar="MODEL", help=argparse.SUPPRESS)  # lib/llm_bench.rss_child
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median time, max RSS)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="no further repetition of a measurement once it would pass this many seconds (a slow case runs once)",
    )
    parser.add_argument("--workdir", type=Path, help="where the temporary folder goes (default: the system's, /tmp)")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="NODES",
        help="only print a cProfile (top 15, cumulative) of the in-process set_batch at NODES nodes",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a check that the benchmark runs, in seconds: --nodes {' '.join(map(str, QUICK['nodes']))} "
        f"--sizes-gib {QUICK['sizes_gib'][0]:g} --repeat 1 (make test runs it)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if args.rss_child:
        llm_bench.rss_child(args.rss_child)
        return 0
    if args.profile:
        print(profile(args.profile))
        return 0
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="patchspec-bench-set-batch-", dir=args.workdir))
    try:
        llm = []
        for nodes in args.llm_nodes:
            llm.append(llm_bench.measure(nodes, args.repeat, work, Path(__file__).resolve(), patchspec_cpu))
            print(f"  LLM graph, {nodes} nodes: set_batch {llm[-1]['cpu']:.2f} s CPU", file=sys.stderr, flush=True)
        scaling = bench_scaling(work, args.nodes, args.repeat, args.budget_s)
        memory = bench_memory(work, args.sizes_gib, args.repeat, args.budget_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    rss_source = "/usr/bin/time %M" if TIME else "os.wait4 ru_maxrss"
    print(
        f"python {sys.version.split()[0]}, onnx {onnx.__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs, {load}; peak RSS from {rss_source}; times: median of up to {args.repeat} runs, "
        f"fewer once a measurement would pass {args.budget_s:g} s\n"
    )
    if llm:
        print(f"### LLM-sized graphs: set_batch: {BATCH} against onnx.shape_inference.infer_shapes\n")
        print(llm_bench.table(llm) + "\n")
        print(llm_bench.growth(llm) + "\n")
    if scaling:
        print(
            f"### Scaling (chain of Relu/Add/Mul on [1, {C}, {H}, {W}], one Reshape in {EVERY}, set_batch: {BATCH})\n"
        )
        print(scaling_table(scaling) + "\n")
        print(ratios(scaling) + "\n")
    if memory:
        print(f"### Memory (MatMul chain with external weights + one baked Reshape, set_batch: {BATCH})\n")
        print(memory_table(memory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
