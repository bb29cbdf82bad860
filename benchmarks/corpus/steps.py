"""One corpus model through each step: the specs written, the commands run, and the judge's verdicts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from feeds import batch_axes, shapes_at
from manifest import REPO, Model

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
PATCHSPEC = str(Path(PYTHON).with_name("patchspec"))
#: the separate venv Polygraphy lives in (never the project's)
POLYGRAPHY = Path(os.environ.get("CORPUS_POLYGRAPHY", str(REPO / ".venv-polygraphy" / "bin" / "polygraphy")))
TIMEOUT = int(os.environ.get("CORPUS_TIMEOUT", "300"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


@dataclass
class Outcome:
    command: str
    exit: int | None  # None: timed out
    seconds: float
    first_lines: str
    traceback: bool
    stdout: str = ""  # whole, for the judge's JSON line; not recorded

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "stdout"}


def run(command: list[str], cwd: Path) -> Outcome:
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
        code: int | None = done.returncode
        text = (done.stderr + done.stdout).strip()
        stdout = done.stdout
    except subprocess.TimeoutExpired as expired:
        code = None
        stdout = ""
        partial = expired.stderr or b""
        text = f"timed out after {TIMEOUT} s; " + (
            partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        )
    lines = [line for line in text.splitlines() if line.strip()]
    shown = " | ".join(lines[:6])[:700]
    if "Traceback (most recent" in text:  # the error itself is at the end
        shown += " ... " + " | ".join(lines[-2:])[:300]
    seconds = round(time.monotonic() - start, 1)
    return Outcome(" ".join(command), code, seconds, shown, "Traceback (most recent" in text, stdout)


def judge(model: Model, original: Path, candidate: Path, batch: int, cwd: Path) -> dict[str, Any]:
    command = [PYTHON, str(HERE / "judge.py"), model.key, str(original), str(candidate), "--batch", str(batch)]
    outcome = run(command, cwd)
    if outcome.exit != 0:
        return {"verdict": "judge error", "detail": outcome.first_lines}
    result: dict[str, Any] = json.loads(outcome.stdout.strip().splitlines()[-1])
    return result


def _spec(model: Model, size: int | str, verify: bool, batch: int) -> dict[str, Any]:
    axes = batch_axes(model.inputs)
    params: dict[str, Any] = {"size": size}
    # plain `set_batch` where the documented detection has all it needs (every batched input on axis 0);
    # the manifest's axes where a state keeps the batch elsewhere or an input has none
    if any(axis not in (0,) for axis in axes.values()):
        params["inputs"] = {name: axis for name, axis in axes.items() if axis is not None}
    spec: dict[str, Any] = {
        "patchspec": 1,
        "model": "model.onnx",
        "output": "out.onnx",
        "patches": [{"set_batch": params}],
    }
    if verify:
        case: dict[str, Any] = {}
        for name, shape in shapes_at(model.inputs, batch).items():
            described = model.inputs[name]
            if isinstance(described, dict) and "value" in described:
                case[name] = {"value": described["value"]}
            elif isinstance(described, dict) and "choices" in described:  # STRING: the values themselves
                case[name] = {"value": _strings(described["choices"], shape)}
            elif isinstance(described, dict):  # the manifest's bounds or fill, as a run case states them
                case[name] = {"shape": shape, **{k: v for k, v in described.items() if k in ("low", "high", "fill")}}
            else:
                case[name] = shape
        # every row judged per sample: split_batch says where an input or output keeps the batch elsewhere
        elsewhere = {name: axis for name, axis in axes.items() if axis != 0}  # None: given whole to every sample
        split: bool | dict[str, Any] = True
        if elsewhere or model.output_axes:
            split = {"inputs": elsewhere} if elsewhere else {}
            split.update({"outputs": dict(model.output_axes)} if model.output_axes else {})
        compare: dict[str, Any] = {"against": "original", "split_batch": split, "rtol": model.rtol, "atol": model.atol}
        spec["verify"] = [{"check": {}}, {"run": {"cases": [{"inputs": case}], "compare": compare}}]
        if not model.runs:  # ONNX Runtime has no kernel for the original: what init writes, the checker alone
            spec["verify"] = [{"check": {}}]
    return spec


def _strings(choices: list[str], shape: list[int]) -> Any:
    """A nested list of ``shape`` that cycles through ``choices`` (a run case's STRING value)."""
    flat = [choices[i % len(choices)] for i in range(int(np.prod(shape)))]
    return np.array(flat, dtype=object).reshape(shape).tolist()


def classify(outcome: Outcome, written: Path, model: Model, original: Path, batch: int, cwd: Path) -> dict[str, Any]:
    """right / refused / wrong ... for one patchspec or Polygraphy run."""
    result: dict[str, Any] = {"run": outcome.as_dict()}
    if outcome.exit is None:
        result["verdict"] = "timeout"
    elif outcome.exit == 5 or outcome.traceback:
        result["verdict"] = "crash"
    elif outcome.exit != 0:
        result["verdict"] = "refused"
    elif not written.is_file():
        result["verdict"] = "crash"
        result["detail"] = "exit 0 but no output written"
    else:
        judged = judge(model, original, written, batch, cwd)
        result["verdict"] = judged["verdict"]
        result["detail"] = judged.get("detail", "")
        if "runtime" in judged:  # judged on onnx.reference: onnxruntime cannot run the model
            result["runtime"] = judged["runtime"]
    return result


def _remove_output(output: Path) -> None:
    """The last run's output and its data file: a data file left without its model is one patchspec can
    no longer prove it wrote, and is refused (the write rule), which is not the model's verdict."""
    for path in (output, output.with_name(output.name + ".data")):
        path.unlink(missing_ok=True)


def _free_name(model: Model, path: Path, size: int | str) -> int | str:
    """``size``, or ``batch_<size>`` where the model already names a dim other than the batch so (a
    waveform's N samples): set_batch rightly refuses a name that would join the two."""
    if isinstance(size, int):
        return size
    axes = batch_axes(model.inputs)
    graph = onnx.load(str(path), load_external_data=False).graph
    used = {
        dim.dim_param
        for info in graph.input
        for axis, dim in enumerate(info.type.tensor_type.shape.dim)
        if axes.get(info.name) != axis
    }
    return f"batch_{size}" if size in used else size


def set_batch(model: Model, work: Path, size: int | str, verify: bool) -> dict[str, Any]:
    batch = size if isinstance(size, int) else 3
    name = f"set_batch_{size}_{'verify' if verify else 'noverify'}"
    spec = work / f"{name}.yaml"
    written = _spec(model, _free_name(model, work / "model.onnx", size), verify, batch)
    spec.write_text(json.dumps(written, indent=2) + "\n")
    output = work / f"{name}.onnx"
    _remove_output(output)
    command = [PATCHSPEC, "apply", spec.name, "--output", output.name, "--force"]
    command += [] if verify else ["--no-verify"]
    result = classify(run(command, work), output, model, work / "model.onnx", batch, work)
    if verify:  # "original": compared per sample (split_batch); "none": the checker alone
        result["compare"] = written["verify"][1]["run"]["compare"]["against"] if model.runs else "none"
    return result


def init_apply(model: Model, work: Path) -> dict[str, Any]:
    spec = work / "init_b4.yaml"
    spec.unlink(missing_ok=True)
    init = run([PATCHSPEC, "init", "model.onnx", "--batch", "4", "--output", spec.name, "--force"], work)
    if init.exit != 0 or init.traceback:
        verdict = "crash" if init.exit == 5 or init.traceback else ("timeout" if init.exit is None else "refused")
        return {"verdict": verdict, "init": init.as_dict()}
    output = work / "init_b4.onnx"
    _remove_output(output)
    applied = run([PATCHSPEC, "apply", spec.name, "--output", output.name, "--force"], work)
    result = classify(applied, output, model, work / "model.onnx", 4, work)
    result["init"] = init.as_dict()
    return result


def suggest(work: Path) -> dict[str, Any]:
    outcome = run([PATCHSPEC, "inspect", "model.onnx", "--suggest"], work)
    if outcome.exit is None:
        verdict = "timeout"
    elif outcome.exit == 5 or outcome.traceback:
        verdict = "crash"
    else:
        verdict = f"exit {outcome.exit}"
    return {"verdict": verdict, "run": outcome.as_dict()}


def polygraphy(model: Model, work: Path) -> dict[str, Any]:
    if not POLYGRAPHY.is_file():
        return {"verdict": "not installed", "detail": f"{POLYGRAPHY} is missing (make corpus-polygraphy)"}
    overrides = [f"{name}:[{','.join(map(str, shape))}]" for name, shape in shapes_at(model.inputs, 4).items()]
    output = work / "polygraphy_b4.onnx"
    _remove_output(output)
    command = [str(POLYGRAPHY), "surgeon", "sanitize", "model.onnx", "--override-input-shapes", *overrides]
    command += ["-o", output.name]
    outcome = run(command, work)
    if outcome.exit not in (0, None):
        return {"verdict": "tool error", "run": outcome.as_dict()}
    return classify(outcome, output, model, work / "model.onnx", 4, work)


def original_at(model: Model, work: Path, batch: int) -> dict[str, Any]:
    """The original itself at the batch: does it already run there, and is it right?"""
    return judge(model, work / "model.onnx", work / "model.onnx", batch, work)


def prepare(model: Model, source: Path, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    target = work / "model.onnx"
    stale = not target.is_file() or target.stat().st_size != source.stat().st_size
    if stale or target.stat().st_mtime < source.stat().st_mtime:  # a model regenerated at the same size
        shutil.copyfile(source, target)
    data = source.with_name(source.name + ".data")  # external data, named as the model's tensors say
    if data.is_file() and not (work / data.name).is_file():
        shutil.copyfile(data, work / data.name)
