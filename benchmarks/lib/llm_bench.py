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
#: runs ``patchspec ARGS`` in a fresh process in a folder: its CPU seconds (bench_set_batch's ``child``)
CliRun = Callable[[list[str], Path], float]


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


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph with every large initializer an external stub (never read): the memory control."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for tensor in light.graph.initializer:
        if tensor.ByteSize() > 4096:
            name, dtype, dims = tensor.name, tensor.data_type, list(tensor.dims)
            tensor.Clear()
            tensor.name, tensor.data_type, tensor.data_location = name, dtype, onnx.TensorProto.EXTERNAL
            tensor.dims.extend(dims)
            tensor.external_data.add(key="location", value="never-read.bin")
    return light


def rss_child(path: str) -> None:
    """In a fresh process: RSS once ``path`` is loaded, and the peak RSS during ``set_batch`` on it.

    The peak is reset after the load (``5 > /proc/self/clear_refs``), so onnx.load's own peak (file
    bytes and parsed model at once) does not hide what set_batch adds. JSON on stdout."""
    model = onnx.load(path, load_external_data=False)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    loaded = _status_kib("VmRSS")
    summary = _apply(model)
    print(json.dumps({"loaded_kib": loaded, "peak_kib": _status_kib("VmHWM"), "summary": summary}))


def _peak_growth_mib(script: Path, path: Path) -> float:
    """Peak RSS that ``set_batch`` adds in a fresh process that has loaded ``path`` (``rss_child``)."""
    child = subprocess.run(
        [sys.executable, str(script), "--rss-child", str(path)], capture_output=True, text=True, check=True
    )
    memory = json.loads(child.stdout.strip().splitlines()[-1])
    return float(memory["peak_kib"] - memory["loaded_kib"]) / 1024


def measure(nodes: int, repeat: int, folder: Path, script: Path, cli: CliRun) -> dict[str, Any]:
    model, layers = llm_model(nodes)
    path, stubbed = folder / f"llm{nodes}.onnx", folder / f"llm{nodes}_no_weights.onnx"
    onnx.save(model, path)
    onnx.save(without_weights(model), stubbed)
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
    growth_mib, control_mib = _peak_growth_mib(script, path), _peak_growth_mib(script, stubbed)
    authoring = {
        label: cli(command + [path.name], folder)
        for label, command in (("init", ["init", "--batch", "4", "--output", "spec.yaml", "--force"]),)
    }
    authoring["suggest"] = cli(["inspect", path.name, "--suggest"], folder)
    path.unlink()
    stubbed.unlink()
    return {
        "nodes": len(model.graph.node),
        "layers": layers,
        "model_mib": model.ByteSize() / 2**20,
        "weights_mib": weight_bytes(model) / 2**20,
        "infer_cpu": infer_cpu,
        "infer_wall": infer_wall,
        "cpu": statistics.median(t[0] for t in timings),
        "wall": statistics.median(t[1] for t in timings),
        "growth_mib": growth_mib,
        "control_mib": control_mib,
        "init_cpu": authoring["init"],
        "suggest_cpu": authoring["suggest"],
        "runs": repeat,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | layers (constants rewritten) | model MiB | weights MiB | `infer_shapes` CPU s | `set_batch` CPU s "
        "| wall s | ratio (CPU) | µs / node | peak RSS added MiB | same, weights removed | `init` CPU s "
        "| `inspect --suggest` CPU s | runs |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['nodes']:,} | {r['layers']:,} | {r['model_mib']:.1f} | {r['weights_mib']:.1f} | {r['infer_cpu']:.2f} "
            f"| {r['cpu']:.2f} | {r['wall']:.2f} | {r['cpu'] / r['infer_cpu']:.2f}x | {r['cpu'] / r['nodes'] * 1e6:.1f} "
            f"| {r['growth_mib']:.0f} | {r['control_mib']:.0f} | {r['init_cpu']:.2f} | {r['suggest_cpu']:.2f} | {r['runs']} |"
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
