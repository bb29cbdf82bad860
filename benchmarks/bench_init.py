"""Time and peak memory of `patchspec init` and `patchspec inspect --suggest` as the weights grow.

Both read the graph only: their time and peak RSS must not grow with the external data. The model
is bench_set_batch's memory model (a MatMul chain over ``--sizes-gib`` GiB of external weights and a
baked Reshape); each command runs in a fresh process, next to `patchspec --version` as the floor::

    .venv/bin/python benchmarks/bench_init.py --sizes-gib 0.0625 2 --repeat 3

``--llm-nodes 56000 112000 224000`` adds the scaling table (target: linear to 224,000 nodes, near
set_batch's 4x ``infer_shapes``): the LLM decoder graph of ``lib/llm_graph.py`` at those sizes,
``init --batch 4`` and ``inspect --suggest`` against ``onnx.shape_inference.infer_shapes`` on the
same model (CPU). ``init`` also runs on the same graph with its weights in an external file (never
read: the peak RSS difference over the weights' size is how many copies of them ``init`` holds,
1 being the model as read), with a symbolic batch (``init`` then runs the original), and with 32
more float inputs (an export's past_key_values)::

    nice .venv/bin/python benchmarks/bench_init.py --sizes-gib --llm-nodes 56000 112000 224000 --repeat 1

``--quick`` (what ``make test`` runs) uses one 64 MiB model, an 800-node LLM graph and one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_set_batch import TENSOR_BYTES, big_model  # a sibling script, not a package
from lib.llm_graph import llm_model
from lib.processes import child

PATCHSPEC = str(Path(sys.executable).with_name("patchspec"))
QUICK = {"sizes_gib": [TENSOR_BYTES / 2**30], "repeat": 1, "llm_nodes": [800]}


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


# -- LLM-sized graphs: init and inspect --suggest against onnx's C++ infer_shapes ----------------------
#: float inputs added for the past_key_values variant (an LLM export's cache: two per layer)
CACHE_INPUTS = 32


def _llm_files(folder: Path, nodes: int) -> tuple[onnx.ModelProto, int, dict[str, Path]]:
    """The decoder graph of ``llm_graph`` three ways: weights in the file, the same weights in an
    external data file (graph-only readers never read it: the memory control), and the first with a
    symbolic batch on ``input_ids`` (init then runs the original to see whether it runs at the batch)."""
    model, layers = llm_model(nodes)
    paths = {"file": folder / "llm.onnx", "outside": folder / "llm_outside.onnx", "symbolic": folder / "llm_n.onnx"}
    onnx.save(model, paths["file"])
    outside = onnx.ModelProto()
    outside.CopyFrom(model)
    onnx.save(outside, paths["outside"], save_as_external_data=True, location="llm_outside.onnx.data")
    symbolic = onnx.ModelProto()
    symbolic.CopyFrom(model)
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(symbolic, paths["symbolic"])
    paths["cache"] = folder / "llm_cache.onnx"
    onnx.save(_with_cache_inputs(model), paths["cache"])
    return model, layers, paths


def _with_cache_inputs(model: onnx.ModelProto, count: int = CACHE_INPUTS) -> onnx.ModelProto:
    """``model`` with ``count`` more float inputs, each passed through to an output of its own, as an
    LLM export's past_key_values come in and present_key_values go out."""
    cached = onnx.ModelProto()
    cached.CopyFrom(model)
    for index in range(count):
        shape = [1, 4, 32, 16]
        cached.graph.input.append(helper.make_tensor_value_info(f"past_{index}", TensorProto.FLOAT, shape))
        cached.graph.node.append(helper.make_node("Identity", [f"past_{index}"], [f"present_{index}"]))
        cached.graph.output.append(helper.make_tensor_value_info(f"present_{index}", TensorProto.FLOAT, shape))
    return cached


def _infer_cpu(model: onnx.ModelProto, repeat: int) -> float:
    """Median CPU seconds of ``onnx.shape_inference.infer_shapes(model)`` with its defaults."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        onnx.shape_inference.infer_shapes(model)
        times.append(time.process_time() - start)
    return statistics.median(times)


def llm_row(work: Path, nodes: int, repeat: int) -> dict[str, float]:
    folder = work / f"llm{nodes}"
    folder.mkdir()
    model, layers, paths = _llm_files(folder, nodes)

    def init(path: Path) -> tuple[float, float, float]:
        return measure(
            [PATCHSPEC, "init", path.name, "--batch", "4", "--output", "spec.yaml", "--force"], folder, repeat
        )

    row = {"nodes": len(model.graph.node), "layers": layers, "weights_mib": _weight_mib(model)}
    row["infer_cpu"] = _infer_cpu(model, repeat)
    _, row["init_cpu"], row["init_rss"] = init(paths["file"])
    written = (folder / "spec.yaml").read_text()
    if "set_batch:" not in written or "split_batch: true" not in written:
        raise AssertionError(f"{nodes} nodes: init wrote no set_batch or no per-sample case:\n{written}")
    _, _, row["outside_rss"] = init(paths["outside"])
    _, row["symbolic_cpu"], row["symbolic_rss"] = init(paths["symbolic"])
    _, row["cache_cpu"], _ = init(paths["cache"])
    suggest = [PATCHSPEC, "inspect", paths["file"].name, "--suggest"]
    _, row["suggest_cpu"], row["suggest_rss"] = measure(suggest, folder, repeat)
    shutil.rmtree(folder)
    return row


def _weight_mib(model: onnx.ModelProto) -> float:
    return sum(tensor.ByteSize() for tensor in model.graph.initializer) / 2**20


def llm_table(rows: list[dict[str, float]], repeat: int) -> list[str]:
    lines = [
        "| nodes | weights MiB | `infer_shapes` CPU s | `init --batch 4` CPU s | ratio | peak RSS MiB "
        "| same, weights outside the file | weights held (x) | `init`, symbolic batch, CPU s | ratio | peak RSS MiB "
        f"| `init`, {CACHE_INPUTS} more float inputs, CPU s | `inspect --suggest` CPU s | ratio | peak RSS MiB | runs |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        held = (r["init_rss"] - r["outside_rss"]) / r["weights_mib"]
        lines.append(
            f"| {r['nodes']:,} | {r['weights_mib']:.1f} | {r['infer_cpu']:.2f} | {r['init_cpu']:.2f} "
            f"| {r['init_cpu'] / r['infer_cpu']:.2f}x | {r['init_rss']:.0f} | {r['outside_rss']:.0f} | {held:.2f} "
            f"| {r['symbolic_cpu']:.2f} | {r['symbolic_cpu'] / r['infer_cpu']:.2f}x | {r['symbolic_rss']:.0f} "
            f"| {r['cache_cpu']:.2f} | {r['suggest_cpu']:.2f} | {r['suggest_cpu'] / r['infer_cpu']:.2f}x | {r['suggest_rss']:.0f} | {repeat} |"
        )
    for small, large in zip(rows, rows[1:]):
        ratios = ", ".join(
            f"{label} x{large[key] / small[key]:.2f}"
            for label, key in (
                ("`infer_shapes`", "infer_cpu"),
                ("`init`", "init_cpu"),
                ("`init` (symbolic batch)", "symbolic_cpu"),
                (f"`init` ({CACHE_INPUTS} more inputs)", "cache_cpu"),
                ("`inspect --suggest`", "suggest_cpu"),
            )
        )
        lines.append(
            f"- {large['nodes']:,} / {small['nodes']:,} nodes (x{large['nodes'] / small['nodes']:.2f}): {ratios} CPU"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[0.0625, 2], help="GiB of external weights")
    parser.add_argument(
        "--llm-nodes",
        type=int,
        nargs="*",
        default=[],
        help="also the LLM decoder graph at about these node counts (the table in the docs: 56000 112000 224000)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (median time, max RSS)")
    parser.add_argument("--workdir", type=Path, help="where the temporary folder goes (default: the system's)")
    parser.add_argument("--quick", action="store_true", help="one 64 MiB model, one run (make test runs it)")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    work = Path(tempfile.mkdtemp(prefix="patchspec-bench-init-", dir=args.workdir))
    try:
        rows = [row for gib in args.sizes_gib for row in bench(work, gib, args.repeat)]
        llm_rows = [llm_row(work, nodes, args.repeat) for nodes in args.llm_nodes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.repeat} run(s), peak RSS the max\n")
    print("| external weights (GiB) | command | wall (s) | CPU (s) | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- |")
    for size, label, wall, cpu, rss in rows:
        print(f"| {size:.2f} | {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")
    if llm_rows:
        print("\nLLM decoder graph (benchmarks/lib/llm_graph.py); CPU of fresh processes, median; peak RSS the max\n")
        print("\n".join(llm_table(llm_rows, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
