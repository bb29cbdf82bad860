"""The head to head of issue 26: patchspec against polygraphy on the PP-OCR v4 detector, timed."""

from __future__ import annotations

import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from lib.processes import compile_like_an_install

from peers.calls import (
    PEERS_VENV,
    TOOL_TIMEOUT,
    Json,
    first_error_line,
    patchspec_binary,
    run_child,
    shell_quote,
    tool_env,
)
from peers.corpus import BATCH, batch_axes, dims_of, ppocr_model
from real_models import RealModel

HEAD_TO_HEAD_TARGET = 0.5  # patchspec's time at most half of `polygraphy surgeon sanitize`'s
HEAD_TO_HEAD_ROUNDS = 5


def timed_run(command: list[str], cwd: Path) -> tuple[float, float] | str:
    """(wall, CPU) seconds of one run of ``command``, CPU from the child's rusage; its error line if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run_child(command, TOOL_TIMEOUT, cwd=cwd, env=tool_env(cwd))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done["rc"] != 0:
        return first_error_line(done["output"]) or f"exit {done['rc']}"
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def batch_only_overrides(model: RealModel, onnx_model: Any) -> list[str]:
    """``x:[4,3,'H','W']``: the batch axis set to 4, every other dim as the model declares it (the job
    ``set_batch: 4`` does; the table's peers get every dim fixed instead)."""
    axes = batch_axes(model, onnx_model)
    overrides = []
    for info in onnx_model.graph.input:
        if info.name in axes:
            dims = [BATCH if axis == axes[info.name] else d for axis, d in enumerate(dims_of(info) or [])]
            shown = [str(d) if isinstance(d, int) and d > 0 else f"'{d or '?'}'" for d in dims]
            overrides.append(f"{info.name}:[{','.join(shown)}]")
    return overrides


def head_to_head_commands(det: Path, folder: Path, quick: bool) -> dict[str, list[str]]:
    import onnx

    overrides = batch_only_overrides(ppocr_model("det", det), onnx.load(str(det), load_external_data=False))
    spec = folder / "spec.yaml"
    spec.write_text(
        f"patchspec: 1\nmodel: {json.dumps(str(det))}\noutput: patchspec.onnx\npatches:\n  - set_batch: {BATCH}\n"
    )
    sanitize = [str(PEERS_VENV / "bin" / "polygraphy"), "surgeon", "sanitize", str(det)]
    sanitize += ["--override-input-shapes", *overrides, "-o", str(folder / "polygraphy.onnx")]
    commands = {
        "patchspec apply --no-verify": [
            patchspec_binary(),
            "-q",
            "apply",
            str(spec),
            "--no-verify",
            "--force",
            "--root",
            "/",
        ],
        # onnx's shape inference: what polygraphy uses where onnxruntime's symbolic one (sympy) is not there
        "polygraphy surgeon sanitize": [*sanitize, "--no-onnxruntime-shape-inference"],
    }
    if not quick:  # the default where sympy is installed, as in the peers venv: tens of seconds a run
        commands["polygraphy surgeon sanitize, onnxruntime's symbolic shape inference"] = sanitize
    return commands


def head_to_head(det: Path, workdir: Path, rounds: int, tools: Json, quick: bool = False) -> Json:
    """The commands of :func:`head_to_head_commands` alternated ``rounds`` times after one untimed round
    (page cache, .pyc files); the slow default of polygraphy runs once, untimed round included; medians,
    and the ratio of patchspec's time to polygraphy's (onnx shape inference)."""
    if tools["polygraphy"]["status"] != "installed":
        return {"status": "skipped", "reason": f"polygraphy: {tools['polygraphy'].get('reason', 'not installed')}"}
    folder = workdir / "head-to-head"
    folder.mkdir(parents=True, exist_ok=True)
    compile_like_an_install()
    commands = head_to_head_commands(det, folder, quick)
    slow = list(commands)[2:]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for round_ in range(rounds + 1):
        for name, command in commands.items():
            if name in slow and round_ != 1:
                continue
            result = timed_run(command, folder)
            if isinstance(result, str):
                return {"status": "tool error", "tool": name, "error": result}
            samples[name].append(result)
    timings: dict[str, Json] = {}
    for name, command in commands.items():
        timed = samples[name] if name in slow else samples[name][1:]  # [0]: the untimed round
        timings[name] = {
            "command": " ".join(shell_quote(c) for c in command),
            "runs": len(timed),
            "wall_s": statistics.median(w for w, _ in timed),
            "cpu_s": statistics.median(c for _, c in timed),
        }
    ours, theirs = (timings[name] for name in list(commands)[:2])
    return {
        "status": "ok",
        "target": HEAD_TO_HEAD_TARGET,
        "timings": timings,
        "ratio_wall": ours["wall_s"] / theirs["wall_s"],
        "ratio_cpu": ours["cpu_s"] / theirs["cpu_s"],
    }


def head_to_head_lines(result: Json) -> list[str]:
    if result["status"] != "ok":
        return [f"head to head, ppocr_det: {result['status']}: {result.get('reason') or result.get('error')}"]
    lines = [f"head to head, ppocr_det (PP-OCRv4 detector, static batch {BATCH}; medians):"]
    for name, timed in result["timings"].items():
        lines.append(f"  {name}: {timed['wall_s']:.2f} s wall, {timed['cpu_s']:.2f} s CPU ({timed['runs']} runs)")
    met = "met" if result["ratio_cpu"] <= result["target"] else "NOT met"
    lines.append(
        f"  ratio patchspec / polygraphy: {result['ratio_cpu']:.2f}x CPU, {result['ratio_wall']:.2f}x wall "
        f"(target <= {result['target']}x: {met})"
    )
    return lines
