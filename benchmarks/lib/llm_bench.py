"""``set_batch`` on generated LLM-sized graphs against ``onnx.shape_inference.infer_shapes``.

For each size: the decoder graph of ``llm_graph`` (one baked ``[1, seq, hidden]`` Reshape constant per
layer), timed in this process (``SetBatchPatch().apply`` on a fresh copy of the model, and
``infer_shapes(model)`` with its defaults on the same model: medians of ``repeat`` runs, CPU and
wall), and a fresh child process (``rss_child``) that loads the model, reads its peak RSS
(``VmHWM``), applies ``set_batch`` and reads it again: the growth is what ``set_batch`` holds at its
peak, to compare with the bytes of the weights (a copy of them would show as at least that much).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from lib.llm_graph import llm_model
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

BATCH = 8
TARGET_RATIO = 4.0  # issue 26: set_batch within 4x infer_shapes on the 56,000-node graph


def _timed(run: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(median CPU s, median wall s, last result) of ``repeat`` runs of ``run``."""
    cpu, wall, result = [], [], None
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        result = run()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall), result


def _apply(model: onnx.ModelProto) -> str:
    return SetBatchPatch().apply(model, {"size": BATCH}, patch_context("set_batch", {"size": BATCH})).summary


def weight_bytes(model: onnx.ModelProto) -> int:
    return sum(tensor.ByteSize() for tensor in model.graph.initializer)


def _status_kib(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak) of this process: its own, unlike ``ru_maxrss``, which exec keeps."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status: the memory figures need Linux")


def rss_child(path: str) -> None:
    """In a fresh process: RSS once ``path`` is loaded, and the peak RSS during ``set_batch`` on it.

    The peak is reset after the load (``5 > /proc/self/clear_refs``), so onnx.load's own peak (file
    bytes and parsed model at once) does not hide what set_batch adds. JSON on stdout."""
    model = onnx.load(path)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    loaded = _status_kib("VmRSS")
    summary = _apply(model)
    print(json.dumps({"loaded_kib": loaded, "peak_kib": _status_kib("VmHWM"), "summary": summary}))


def measure(nodes: int, repeat: int, folder: Path, script: Path) -> dict[str, Any]:
    model, layers = llm_model(nodes)
    path = folder / f"llm{nodes}.onnx"
    onnx.save(model, path)
    infer_cpu, infer_wall, _ = _timed(lambda: onnx.shape_inference.infer_shapes(model), repeat)

    def fresh_apply() -> str:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # the benchmark's own copy, outside the timed part below
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        summary = _apply(copy)
        timings.append((time.process_time() - start_cpu, time.perf_counter() - start_wall))
        return summary

    timings: list[tuple[float, float]] = []
    summaries = {fresh_apply() for _ in range(repeat)}
    expected = f"{layers} shape constants rewritten"
    if len(summaries) != 1 or expected not in next(iter(summaries)):
        raise AssertionError(f"{nodes} nodes: expected '{expected}' every time, got {sorted(summaries)}")
    child = subprocess.run(
        [sys.executable, str(script), "--rss-child", str(path)], capture_output=True, text=True, check=True
    )
    memory = json.loads(child.stdout.strip().splitlines()[-1])
    path.unlink()
    return {
        "nodes": len(model.graph.node),
        "layers": layers,
        "model_mib": model.ByteSize() / 2**20,
        "weights_mib": weight_bytes(model) / 2**20,
        "infer_cpu": infer_cpu,
        "infer_wall": infer_wall,
        "cpu": statistics.median(t[0] for t in timings),
        "wall": statistics.median(t[1] for t in timings),
        "loaded_mib": memory["loaded_kib"] / 1024,
        "peak_mib": memory["peak_kib"] / 1024,
        "runs": repeat,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | layers (constants rewritten) | model MiB | weights MiB | `infer_shapes` CPU s | `set_batch` CPU s "
        "| wall s | ratio (CPU) | µs / node | RSS after load MiB | peak RSS in set_batch MiB | growth MiB | runs |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['nodes']:,} | {r['layers']:,} | {r['model_mib']:.1f} | {r['weights_mib']:.1f} | {r['infer_cpu']:.2f} "
            f"| {r['cpu']:.2f} | {r['wall']:.2f} | {r['cpu'] / r['infer_cpu']:.2f}x | {r['cpu'] / r['nodes'] * 1e6:.1f} "
            f"| {r['loaded_mib']:.0f} | {r['peak_mib']:.0f} | {r['peak_mib'] - r['loaded_mib']:.0f} | {r['runs']} |"
        )
    return "\n".join(lines)


def growth(rows: list[dict[str, Any]]) -> str:
    lines = []
    for small, large in zip(rows, rows[1:]):
        lines.append(
            f"- {large['nodes']:,} / {small['nodes']:,} nodes (x{large['nodes'] / small['nodes']:.2f}): `set_batch` "
            f"x{large['cpu'] / small['cpu']:.2f} CPU, `infer_shapes` x{large['infer_cpu'] / small['infer_cpu']:.2f} CPU"
        )
    first = rows[0]
    verdict = "met" if first["cpu"] / first["infer_cpu"] <= TARGET_RATIO else "**not met**"
    lines.append(
        f"- target <= {TARGET_RATIO:g}x `infer_shapes` at {first['nodes']:,} nodes: "
        f"{first['cpu'] / first['infer_cpu']:.2f}x, {verdict}"
    )
    return "\n".join(lines)
