"""Measure ``patchspec apply --no-verify --force``: wall time and peak RSS, next to plain onnx.

Every measurement runs in a fresh child process; its peak RSS and CPU time (user + system) come
from ``os.wait4`` (the rusage of that one child), its wall time from the parent's clock, so Python
start-up and imports are included, as a user would see them. CPU time is the figure to trust when
the machine is busy with other work (the load average is printed with the table). Cases:

- the PP-OCR det/rec/cls models from the rapidocr-onnxruntime wheel, spec ``set_batch: 4``, next
  to ``onnx.load`` + ``onnx.save`` (and, for det, ``onnx.load`` + ``infer_shapes`` + ``onnx.save``);
- generated models with 1 GiB and 2 GiB of external weights, spec ``set_batch: 4`` (a graph-only
  patch), next to ``onnx.load`` + ``onnx.save`` with external data;
- optionally ``polygraphy surgeon sanitize --override-input-shapes`` on PP-OCR det (``--polygraphy``).

    python benchmarks/bench_apply.py                 # prints a markdown table
    python benchmarks/bench_apply.py --sizes-gib 1 2 --repeat 3 --polygraphy /tmp/polyvenv/bin/polygraphy
    python benchmarks/bench_apply.py --quick         # seconds: PP-OCR det and 64 MiB of weights, 1 run

Generated files go to a temporary folder (``--workdir``) that is removed at the end. ``--quick`` runs
the same code at toy sizes so that ``make test`` fails when the benchmark breaks; its figures are
not the benchmark's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

WIDTH = 4096  # each weight is WIDTH x WIDTH float32 = 64 MiB
TENSOR_BYTES = WIDTH * WIDTH * 4
PATCHSPEC = (
    [sys.executable, "-m", "patchspec"]
    if importlib.util.find_spec("patchspec.__main__")
    else [str(Path(sys.executable).with_name("patchspec"))]
)

# --quick: one run; det only (it has the most rows), one 64 MiB weight
QUICK = {"repeat": 1, "sizes_gib": [TENSOR_BYTES / 2**30], "kinds": ["det"]}

ONNX_COPY = "import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"
ONNX_INFER = (
    "import onnx, sys; m = onnx.load(sys.argv[1]); onnx.save(onnx.shape_inference.infer_shapes(m), sys.argv[2])"
)
# onnx refuses to write over a data file left by the previous repetition: remove it first
ONNX_COPY_EXTERNAL = (
    "import onnx, os, sys; os.path.exists('copy.onnx.data') and os.remove('copy.onnx.data'); "
    "m = onnx.load(sys.argv[1]); "
    "onnx.save(m, sys.argv[2], save_as_external_data=True, location='copy.onnx.data')"
)


@dataclass
class Row:
    case: str
    tool: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    note: str = ""


def measure(command: list[str], cwd: Path) -> tuple[float, float, float]:
    """Run ``command`` once in a fresh child: (wall seconds, CPU seconds, peak RSS in MiB)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        msg = f"{' '.join(command)} exited {child.returncode}: {stderr.decode(errors='replace')[-2000:]}"
        raise RuntimeError(msg)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux reports KiB


def repeat(case: str, tool: str, command: list[str], cwd: Path, times: int, note: str = "") -> Row:
    runs = [measure(command, cwd) for _ in range(times)]
    wall, cpu = (statistics.median(run[i] for run in runs) for i in (0, 1))
    return Row(case, tool, wall, cpu, max(run[2] for run in runs), note)


def ppocr_models() -> dict[str, Path]:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(list(spec.submodule_search_locations)[0]) / "models"
    found = {}
    for path in sorted(folder.glob("*.onnx")):
        for kind in ("det", "rec", "cls"):
            if f"_{kind}_" in path.name:
                found[kind] = path
    return found


def write_spec(folder: Path, model: Path, output: str, batch: int = 4) -> Path:
    spec = folder / f"{model.stem}_b{batch}.yaml"
    spec.write_text(f"patchspec: 1\nmodel: {model}\noutput: {output}\npatches:\n  - set_batch: {batch}\n")
    return spec


def make_big_model(folder: Path, gib: float) -> Path:
    """A MatMul chain whose weights (``gib`` GiB, 64 MiB each) live in one external data file."""
    count = max(1, round(gib * (1 << 30) / TENSOR_BYTES))
    block = np.random.default_rng(0).standard_normal((WIDTH, WIDTH), dtype=np.float32) * (1.0 / WIDTH)
    raw = block.tobytes()
    model_path, data_name = folder / f"big_{gib:g}gib.onnx", f"big_{gib:g}gib.onnx.data"
    weights, nodes, value_info = [], [], []
    with open(folder / data_name, "wb") as sink:
        for index in range(count):
            tensor = TensorProto(name=f"w{index}", data_type=TensorProto.FLOAT, dims=[WIDTH, WIDTH])
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", data_name),
                ("offset", str(index * TENSOR_BYTES)),
                ("length", str(TENSOR_BYTES)),
            ):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            sink.write(raw)
            weights.append(tensor)
            source, target = ("x" if index == 0 else f"h{index - 1}"), ("y" if index == count - 1 else f"h{index}")
            nodes.append(helper.make_node("MatMul", [source, f"w{index}"], [target]))
            if target != "y":
                value_info.append(helper.make_tensor_value_info(target, TensorProto.FLOAT, [1, WIDTH]))
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        weights,
        value_info=value_info,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model_path.write_bytes(model.SerializeToString())
    return model_path


def bench_ppocr(work: Path, times: int, kinds: list[str] | None = None) -> list[Row]:
    rows = []
    for kind, model in ppocr_models().items():
        if kinds is not None and kind not in kinds:
            continue
        spec = write_spec(work, model, f"out_{kind}_b4.onnx")
        case = f"PP-OCR {kind} ({model.stat().st_size / 2**20:.1f} MiB)"
        rows.append(
            repeat(
                case,
                "patchspec apply --no-verify --force (set_batch: 4)",
                # the model lies in site-packages, outside the spec's folder: the caller names the root
                [*PATCHSPEC, "-q", "apply", "--no-verify", "--force", "--root", "/", str(spec)],
                work,
                times,
            )
        )
        rows.append(
            repeat(
                case, "onnx.load + onnx.save", [sys.executable, "-c", ONNX_COPY, str(model), "copy.onnx"], work, times
            )
        )
        if kind == "det":
            rows.append(
                repeat(
                    case,
                    "onnx.load + infer_shapes + onnx.save",
                    [sys.executable, "-c", ONNX_INFER, str(model), "copy.onnx"],
                    work,
                    times,
                )
            )
    return rows


def bench_external(work: Path, sizes_gib: list[float], times: int) -> list[Row]:
    rows = []
    for gib in sizes_gib:
        folder = work / f"ext{gib:g}"
        folder.mkdir()
        model = make_big_model(folder, gib)
        spec = write_spec(folder, model, "out_b4.onnx")
        case = f"MatMul chain, {gib:g} GiB external weights"
        rows.append(
            repeat(
                case,
                "patchspec apply --no-verify --force (set_batch: 4)",
                [*PATCHSPEC, "-q", "apply", "--no-verify", "--force", str(spec)],
                folder,
                times,
            )
        )
        rows.append(
            repeat(
                case,
                "onnx.load + onnx.save (external data)",
                [sys.executable, "-c", ONNX_COPY_EXTERNAL, str(model), "copy.onnx"],
                folder,
                times,
            )
        )
        shutil.rmtree(folder)  # multi-GB: free the disk before the next size
    return rows


def bench_polygraphy(work: Path, polygraphy: str, times: int) -> list[Row]:
    det = ppocr_models().get("det")
    if det is None:
        return []
    case = f"PP-OCR det ({det.stat().st_size / 2**20:.1f} MiB)"
    rows = []
    for extra, tool in (
        ([], "polygraphy surgeon sanitize --override-input-shapes x:[4,3,'H','W']"),
        (["--fold-constants"], "same + --fold-constants"),
    ):
        command = [
            polygraphy,
            "surgeon",
            "sanitize",
            str(det),
            "--override-input-shapes",
            "x:[4,3,'H','W']",
            *extra,
            "-o",
            str(work / "poly_det.onnx"),
        ]
        rows.append(repeat(case, tool, command, work, times))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| case | tool | wall s (median) | CPU s (median) | peak RSS MiB (max) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        tool = f"{row.tool} ({row.note})" if row.note else row.tool
        lines.append(f"| {row.case} | {tool} | {row.wall_s:.2f} | {row.cpu_s:.2f} | {row.peak_rss_mib:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median wall, max RSS)")
    parser.add_argument(
        "--sizes-gib", type=float, nargs="*", default=[1, 2], help="external-weight model sizes (64 MiB steps)"
    )
    parser.add_argument("--polygraphy", help="path of a polygraphy executable to compare with (optional)")
    parser.add_argument("--workdir", type=Path, help="where generated files go (default: a temporary folder)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a check that the benchmark runs, in seconds: PP-OCR det only, --sizes-gib "
        f"{QUICK['sizes_gib'][0]:g} --repeat 1 (make test runs it)",
    )
    parser.set_defaults(kinds=None)
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if not ppocr_models():
        print("PP-OCR models not found: pip install --no-deps rapidocr-onnxruntime==1.4.4", file=sys.stderr)
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="patchspec-bench-", dir=args.workdir))
    try:
        rows = bench_ppocr(work, args.repeat, args.kinds)
        if args.polygraphy:
            rows += bench_polygraphy(work, args.polygraphy, min(args.repeat, 2))
        rows += bench_external(work, args.sizes_gib, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"python {sys.version.split()[0]}, onnx {onnx.__version__}, {os.cpu_count()} CPUs, {load}\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
