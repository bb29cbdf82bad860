"""The peers, each run as a user would, in the peers venv (``compare_peers.py --peer-worker``)."""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from peers.calls import PEERS_VENV, Json, shell_quote, tool_call
from peers.corpus import BATCH, Shapes, batch_axes, dims_of, model_by_key
from peers.evaluation import evaluate_in_child, run_variant
from real_models import RealModel


def peer_polygraphy(model: RealModel, shapes: Shapes, folder: Path, refdir: Path, tools: Json) -> Json:
    if tools["polygraphy"]["status"] != "installed":
        return {"": {"status": "not installable", "error": tools["polygraphy"]["reason"]}}
    binary = str(PEERS_VENV / "bin" / "polygraphy")
    overrides = [f"{name}:[{','.join(map(str, shape))}]" for name, shape in shapes.items()]
    variants = {}
    for label, extra in (("plain", []), ("--fold-constants", ["--fold-constants"])):
        out = folder / f"polygraphy{'_fold' if extra else ''}.onnx"
        command = [
            binary,
            "surgeon",
            "sanitize",
            str(model.file),
            "--override-input-shapes",
            *overrides,
            *extra,
            "-o",
            str(out),
        ]
        variants[label] = run_variant(command, out, model, refdir)
    return variants


def peer_onnxsim(model: RealModel, shapes: Shapes, folder: Path, refdir: Path, tools: Json) -> Json:
    tool = tools["onnxsim"]
    if tool["status"] != "installed":
        return {"": {"status": "not installable", "error": tool["reason"]}}
    out = folder / "onnxsim.onnx"
    if tool["package"] == "onnxsim":
        overrides = [f"{name}:{','.join(map(str, shape))}" for name, shape in shapes.items()]
        command = [
            str(PEERS_VENV / "bin" / "onnxsim"),
            str(model.file),
            str(out),
            "--overwrite-input-shape",
            *overrides,
        ]
    else:  # onnxslim
        overrides = [f"{name}:{','.join(map(str, shape))}" for name, shape in shapes.items()]
        command = [str(PEERS_VENV / "bin" / "onnxslim"), str(model.file), str(out), "--input-shapes", *overrides]
    return {tool["package"]: run_variant(command, out, model, refdir)}


def chained(commands: list[list[str]], outputs: list[Path]) -> Json:
    """Run tool calls one after the other (each reads the previous one's output); the last one's record, or the
    first refusal, with every command joined by &&."""
    shown, call = [], {}
    for command, out in zip(commands, outputs):
        shown.append(" ".join(shell_quote(c) for c in command))
        call = tool_call(command, out)
        if not call.get("ok"):
            break
    return {**call, "command": " && ".join(shown)}


def peer_make_fixed(model: RealModel, shapes: Shapes, onnx_model: Any, folder: Path, refdir: Path, tools: Json) -> Json:
    if tools["onnxruntime"]["status"] != "installed":
        return {"": {"status": "not installable", "error": tools["onnxruntime"]["reason"]}}
    base = [sys.executable, "-m", "onnxruntime.tools.make_dynamic_shape_fixed"]
    plans = {}
    # one call per batched input, each reading the previous one's output
    outputs = [folder / f"ort_fixed_{index}.onnx" for index in range(len(shapes))]
    sources = [model.file, *outputs[:-1]]
    plans["--input_shape"] = (
        [
            [*base, "--input_name", name, "--input_shape", ",".join(map(str, shape)), str(source), str(out)]
            for (name, shape), source, out in zip(shapes.items(), sources, outputs)
        ],
        outputs,
    )
    # where the batch is a named dim: --dim_param NAME --dim_value 4
    axes = batch_axes(model, onnx_model)
    params = sorted(
        {
            str(dims[axes[i.name]])
            for i in onnx_model.graph.input
            if i.name in axes
            for dims in [dims_of(i)]
            if dims and isinstance(dims[axes[i.name]], str)
        }
    )
    if params:
        outputs = [folder / f"ort_dim_param_{index}.onnx" for index in range(len(params))]
        sources = [model.file, *outputs[:-1]]
        plans["--dim_param"] = (
            [
                [*base, "--dim_param", param, "--dim_value", str(BATCH), str(source), str(out)]
                for param, source, out in zip(params, sources, outputs)
            ],
            outputs,
        )
    variants = {}
    for label, (commands, outputs) in plans.items():
        call = chained(commands, outputs)
        if call.pop("ok", False):
            call.update(evaluate_in_child(sys.executable, model, outputs[-1], refdir))
        variants[label] = call
    return variants


SSI_CHILD = """
import json, sys, onnx
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
source, out, axes, batch, fresh = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
model = onnx.load(source)
for info in model.graph.input:
    if info.name in axes:
        dim = info.type.tensor_type.shape.dim[axes[info.name]]
        dim.Clear()
        dim.dim_value = batch
if fresh:  # drop the annotations the export made at the old batch
    del model.graph.value_info[:]
    for info in model.graph.output:
        info.type.tensor_type.ClearField("shape")
inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
if inferred is None:
    raise SystemExit("SymbolicShapeInference.infer_shapes returned None")
onnx.save(inferred, out)
"""


def peer_symbolic(model: RealModel, onnx_model: Any, folder: Path, refdir: Path, tools: Json) -> Json:
    if tools["onnxruntime"]["status"] != "installed" or tools["sympy"]["status"] != "installed":
        reason = tools["onnxruntime"].get("reason") or tools["sympy"].get("reason")
        return {"": {"status": "not installable", "error": reason}}
    import onnx

    axes = batch_axes(model, onnx_model)
    variants = {}
    # as a user would first try it; then with the export's value_info and output shapes dropped first
    for label, fresh in (("as exported", "0"), ("value_info dropped", "1")):
        out = folder / f"ort_symbolic_{fresh}.onnx"
        command = [sys.executable, "-c", SSI_CHILD, str(model.file), str(out), json.dumps(axes), str(BATCH), fresh]
        call = tool_call(command, out)
        shown = "SymbolicShapeInference.infer_shapes(model, auto_merge=True)" + (
            " after dropping value_info and output shapes" if fresh == "1" else ""
        )
        if not call.pop("ok", False):
            variants[label] = {**call, "command": shown, "ran": False}
            continue
        inferred = onnx.load(str(out), load_external_data=False)
        batches = {}
        for info in inferred.graph.output:
            dims = dims_of(info)
            axis = model.output_axes.get(info.name, 0)
            batches[info.name] = dims[axis] if dims and axis < len(dims) else None
        verdict = evaluate_in_child(sys.executable, model, out, refdir)
        variants[label] = {
            **call,
            "command": shown,
            "ran": True,
            "output_batch": batches,
            "output_batch_is_4": all(b == BATCH for b in batches.values()),
            **verdict,
        }
    return variants


def peer_worker(jobs_file: str, out_file: str) -> None:
    import onnx

    jobs = json.loads(Path(jobs_file).read_text())
    tools, workdir = jobs["tools"], Path(jobs["workdir"])
    refdir = workdir / "ref-peers"
    refdir.mkdir(exist_ok=True)
    results = {}
    for job in jobs["models"]:
        model = model_by_key(job["key"], job["file"])
        onnx_model = onnx.load(str(model.file), load_external_data=False)
        shapes = {name: list(shape) for name, shape in job["shapes"].items()}
        folder = workdir / "peers" / model.key
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        results[model.key] = {
            "polygraphy sanitize": peer_polygraphy(model, shapes, folder, refdir, tools),
            "onnxsim": peer_onnxsim(model, shapes, folder, refdir, tools),
            "ORT make_dynamic_shape_fixed": peer_make_fixed(model, shapes, onnx_model, folder, refdir, tools),
            "ORT symbolic_shape_infer": peer_symbolic(model, onnx_model, folder, refdir, tools),
        }
        print(f"  peers on {model.key}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        Path(out_file).write_text(json.dumps(results, indent=1))  # partial results survive a crash


def peer_versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy", "onnx_graphsurgeon", "onnxsim", "onnxslim"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found
