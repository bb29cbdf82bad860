"""Re-batch the real-model corpus to a static batch of 4 with patchspec and with peer tools, and check each result.

Peers, each run the way a user would:

- ``polygraphy surgeon sanitize MODEL --override-input-shapes NAME:[4,...] -o OUT`` (and the same with
  ``--fold-constants``);
- ``onnxsim MODEL OUT --overwrite-input-shape NAME:4,...`` (``onnxslim --input-shapes`` when onnxsim cannot
  be installed);
- ``python -m onnxruntime.tools.make_dynamic_shape_fixed --input_name NAME --input_shape 4,...`` (once per
  batched input, chained), and ``--dim_param P --dim_value 4`` where the batch is a named dim;
- onnxruntime's ``SymbolicShapeInference.infer_shapes(model, auto_merge=True)`` after the batch axis of each
  batched input is set to 4;
- ``patchspec apply SPEC --no-verify`` with ``set_batch: {size: 4}`` (patchspec itself).

The corpus is ``tests/real_models.py`` (``MODELS`` and ``NOT_BATCHABLE``) plus the PP-OCR det/rec/cls models of
the rapidocr-onnxruntime wheel. Peer inputs get the declared input shape with the batch axis set to 4 and every
symbolic dim set to the size the corpus feeds use. Every produced model is run on onnxruntime CPU at batch 4
with ``feeds(4)`` and compared, output by output, with ``per_sample_reference`` of the original (the corpus
entry's rtol/atol; shapes must match too); each output's declared rank and fixed dims are checked against
the shape it has at run time. Verdicts:

- ``ok``: runs, matches the per-sample run, every declared output dim is true;
- ``wrong output``: runs, but an output differs or has another shape (the batch folded into another axis);
- ``lies``: matches, but a declared output rank or fixed dim is false;
- ``fails to load`` / ``fails to run``: onnxruntime refuses the model / the run (first line of its error);
- ``tool error``: the tool itself refused (first line of its error); ``tool timeout``;
- ``not installable``: the tool could not be installed.

The peers live in a venv of their own, ``benchmarks/.peers-venv`` (created when missing; it is not the
project's venv and adds nothing to the project's requirements). The script runs the patchspec part in the
interpreter it was started with and re-executes itself with the peers venv's python for the peer part; each
tool call and each evaluation is a child process with a timeout.

    .venv/bin/python benchmarks/compare_peers.py            # from the repo root
    .venv/bin/python benchmarks/compare_peers.py --only minilm_int8 ppocr_det --keep   # writes no JSON
    .venv/bin/python benchmarks/compare_peers.py --quick    # seconds; installs nothing, writes no JSON

Prints a markdown table and writes the details to ``benchmarks/results/peers.json``.

``--quick`` (``make test`` runs it, so that a broken harness fails the suite) runs the whole harness, table
included, on two small models: ``silero_vad_static`` from the corpus (skipped, with the reason, when it is not
installed) and ``generated_reshape``, a Relu + Reshape whose shape constant bakes batch 1, written into the
working folder. It never creates or installs into the peers venv: the peer columns are run only when
``benchmarks/.peers-venv`` already exists, and say ``skipped`` otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
PEERS_VENV = REPO / "benchmarks" / ".peers-venv"
PEERS_PY = PEERS_VENV / "bin" / "python"
RESULTS = REPO / "benchmarks" / "results" / "peers.json"
sys.path.insert(0, str(REPO / "tests"))

from real_models import MODELS, NOT_BATCHABLE, RealModel, per_sample_reference  # noqa: E402

BATCH = 4
TOOL_TIMEOUT = 300  # seconds, each tool call
EVAL_TIMEOUT = 300  # seconds, each run of a produced model (reference included)
# --quick: one small corpus model and one generated here (in the corpus only when asked for)
GENERATED_KEY = "generated_reshape"
QUICK_MODELS = ["silero_vad_static", GENERATED_KEY]
COLUMNS = ["patchspec", "polygraphy sanitize", "onnxsim", "ORT make_dynamic_shape_fixed", "ORT symbolic_shape_infer"]

# -- the PP-OCR models (rapidocr-onnxruntime wheel), with feeds of the sizes tests/plugins/test_set_batch.py uses
PPOCR_WHEEL = "rapidocr-onnxruntime==1.4.4"
PPOCR_SHAPES = {"det": (3, 96, 128), "rec": (3, 48, 320), "cls": (3, 48, 192)}
PPOCR_COVERS = {
    "det": "PP-OCRv4 text detector (Paddle2ONNX): batch, height and width are p2o dim_params; weights in Constant nodes, "
    "Resize neck, ConvTranspose head back to the input size; no batch in any shape constant",
    "rec": "PP-OCRv4 text recognizer (SVTR neck, Paddle2ONNX): batch and width dim_params, height '?'; its Reshapes take "
    "shapes computed at run time",
    "cls": "PP-OCR mobile v2 direction classifier: batch declared -1, height and width share the dim_param '?'; "
    "Reshapes only of [1, C, 1, 1] biases",
}


def ppocr_model(kind: str, path: Path) -> RealModel:
    shape = PPOCR_SHAPES[kind]

    def feeds(batch, shape=shape):
        return {"x": np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32)}

    # an absolute path: CORPUS / "/abs/..." is the absolute path itself
    return RealModel(f"ppocr_{kind}", PPOCR_WHEEL, str(path), PPOCR_COVERS[kind], feeds, rtol=1e-4, atol=1e-5)


def find_ppocr() -> dict[str, Path]:
    try:
        from helpers import ppocr_model_paths  # tests/helpers.py (conftest.py holds fixtures only)
    except ImportError:
        return {}
    return ppocr_model_paths()


def generated_model(path: Path) -> RealModel:
    """The --quick model that needs no wheel: x [1, 4, 8, 8] -> Relu -> Reshape to the constant [1, 4, 64]."""

    def feeds(batch):
        return {"x": np.random.default_rng(0).standard_normal((batch, 4, 8, 8)).astype(np.float32)}

    return RealModel(
        GENERATED_KEY,
        "(generated by compare_peers.py)",
        str(path),
        "generated Relu + Reshape whose shape constant [1, 4, 64] bakes batch 1",
        feeds,
    )


def write_generated(folder: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1, 4, 64], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
        "generated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 64])],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every supported onnxruntime loads
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{GENERATED_KEY}.onnx"
    onnx.save(model, str(path))
    return path


def corpus(ppocr: dict[str, str]) -> list[RealModel]:
    return [
        *MODELS,
        *NOT_BATCHABLE,
        *(ppocr_model(kind, Path(ppocr[kind])) for kind in ("det", "rec", "cls") if kind in ppocr),
    ]


def model_by_key(key: str, original: str) -> RealModel:
    if key == GENERATED_KEY:
        return generated_model(Path(original))
    if key.startswith("ppocr_"):
        return ppocr_model(key.removeprefix("ppocr_"), Path(original))
    return next(m for m in [*MODELS, *NOT_BATCHABLE] if m.key == key)


# -- small helpers ---------------------------------------------------------------------------------------------
def first_error_line(text: str, limit: int = 400) -> str:
    """The line that says what went wrong: polygraphy's first [E] line, else the last exception line (with where
    it was raised when it carries no message), else the first line naming an error, else the last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return ""
    for line in lines:
        if line.startswith("[E]") and "Traceback" not in line:
            return _clip(line, limit)
    exception = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Fail\w*|Exit|Interrupt))(?::|$)")
    hits = [index for index, line in enumerate(lines) if exception.match(line)]
    if hits:
        index = hits[-1]
        line = lines[index]
        if ":" not in line:  # a bare `AssertionError`: say where, and the line that raised it
            where = next((i for i in range(index - 1, -1, -1) if lines[i].startswith("File ")), None)
            if where is not None:
                place = re.match(r'File "([^"]+)", line (\d+), in (\S+)', lines[where])
                code = lines[where + 1] if where + 1 < index else ""
                if place:
                    line += f" in {Path(place[1]).name}:{place[2]} {place[3]}(): {code}"
        return _clip(line, limit)
    errors = [line for line in lines if re.search(r"\berror\b|\bfail", line, re.I)]
    return _clip(errors[0] if errors else lines[-1], limit)


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def dims_of(value_info) -> list | None:
    """Declared dims: int, str (dim_param) or None (unknown); None when the rank itself is not declared."""
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]


def run_child(command: list[str], timeout: float, **kwargs) -> dict:
    """Run a child process; returns rc (None on timeout), output, wall seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as expired:
        out = (
            (expired.stdout or b"").decode(errors="replace")
            if isinstance(expired.stdout, bytes)
            else (expired.stdout or "")
        )
        return {"rc": None, "output": out, "wall_s": round(time.perf_counter() - start, 2)}
    return {
        "rc": done.returncode,
        "output": done.stdout + done.stderr,
        "stdout": done.stdout,
        "wall_s": round(time.perf_counter() - start, 2),
    }


def batch_axes(model: RealModel, onnx_model) -> dict[str, int]:
    """{input: batch axis} for the real (non-initializer) inputs that carry the batch."""
    initializers = {i.name for i in onnx_model.graph.initializer}
    names = [i.name for i in onnx_model.graph.input if i.name not in initializers]
    if model.batch_inputs:
        return dict(model.batch_inputs)
    return {name: model.input_axes.get(name, 0) for name in names if model.input_axes.get(name, 0) is not None}


def override_shapes(model: RealModel, onnx_model) -> dict[str, list[int]]:
    """Declared shape of each batched input, batch axis = 4, symbolic dims = the size feeds(4) uses."""
    feeds = model.feeds(BATCH)
    axes = batch_axes(model, onnx_model)
    shapes = {}
    for info in onnx_model.graph.input:
        if info.name not in axes:
            continue
        declared = dims_of(info) or [None] * feeds[info.name].ndim
        shape = []
        for axis, dim in enumerate(declared):
            if axis == axes[info.name]:
                shape.append(BATCH)
            elif isinstance(dim, int) and dim > 0:
                shape.append(dim)
            else:
                shape.append(int(feeds[info.name].shape[axis]))
        shapes[info.name] = shape
    return shapes


# -- evaluation of one produced model (run in a child, in the venv whose onnxruntime is being used) ------------
def evaluate(key: str, original: str, produced: str, refdir: str) -> dict:
    import onnx
    import onnxruntime as ort

    model = model_by_key(key, original)
    feeds = model.feeds(BATCH)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    providers = ["CPUExecutionProvider"]

    cache = Path(refdir) / f"{key}.npz"
    if cache.is_file():
        with np.load(cache) as stored:
            order = json.loads(str(stored["__order__"]))
            reference = {name: stored[f"o{index}"] for index, name in enumerate(order)}
    else:
        session = ort.InferenceSession(original, options, providers=providers)
        reference = per_sample_reference(model, session, feeds, BATCH)
        order = list(reference)
        np.savez(
            cache, __order__=json.dumps(order), **{f"o{index}": reference[name] for index, name in enumerate(order)}
        )

    try:
        session = ort.InferenceSession(produced, options, providers=providers)
    except Exception as error:
        return {"status": "fails to load", "error": first_error_line(error)}
    wanted = {i.name for i in session.get_inputs()}
    try:
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in wanted})))
    except Exception as error:
        return {"status": "fails to run", "error": first_error_line(error)}

    proto = onnx.load(produced, load_external_data=False)
    declared = {o.name: dims_of(o) for o in proto.graph.output}
    axes = batch_axes(model, proto)
    inputs = {i.name: dims_of(i) for i in proto.graph.input if i.name in axes}
    # the target is a static batch: does each batched input now declare 4 on its batch axis?
    static = all(
        dims is not None and axes[name] < len(dims) and dims[axes[name]] == BATCH for name, dims in inputs.items()
    )
    outputs, wrong, lies = [], [], []
    for index, (name, want) in enumerate(reference.items()):
        have = got.get(name)
        if have is None and index < len(names):  # renamed output: compare by position
            have = got[names[index]]
        row = {"name": name, "expected_shape": list(want.shape)}
        if have is None:
            wrong.append(f"{name}: missing")
            outputs.append(row)
            continue
        row["shape"] = list(have.shape)
        if have.shape != want.shape:
            wrong.append(f"{name}: shape {list(have.shape)}, per-sample {list(want.shape)}")
        else:
            diff = float(np.max(np.abs(have.astype(np.float64) - want.astype(np.float64)))) if have.size else 0.0
            row["max_abs_diff"] = diff
            if not np.allclose(have, want, rtol=model.rtol, atol=model.atol, equal_nan=True):
                wrong.append(f"{name}: values differ (max abs diff {diff:.3g})")
        dims = declared.get(name, declared.get(names[index]) if index < len(names) else None)
        row["declared"] = dims
        if dims is not None:
            if len(dims) != have.ndim or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, have.shape)):
                lies.append(f"{name}: declared {dims}, is {list(have.shape)}")
        outputs.append(row)
    result = {"inputs_declared": inputs, "input_batch_is_4": static, "outputs": outputs, "declared_false": lies}
    if wrong:
        return {"status": "wrong output", "error": wrong[0], "all": wrong, **result}
    if lies:
        return {"status": "lies", "error": lies[0], **result}
    return {"status": "ok", **result}


def evaluate_in_child(python: str, model: RealModel, produced: Path, refdir: Path) -> dict:
    done = run_child(
        [python, str(SCRIPT), "--evaluate", model.key, str(model.file), str(produced), str(refdir)],
        EVAL_TIMEOUT,
        cwd=REPO,
    )
    if done["rc"] is None:
        return {"status": "fails to run", "error": f"timed out after {EVAL_TIMEOUT} s"}
    lines = [line for line in done["stdout"].splitlines() if line.startswith("{")]
    if done["rc"] != 0 or not lines:
        return {
            "status": "fails to run",
            "error": "evaluation crashed: " + first_error_line(done["output"]),
            "rc": done["rc"],
        }
    return json.loads(lines[-1])


# -- peers (run in the peers venv) ----------------------------------------------------------------------------
def tool_call(command: list[str], produced: Path) -> dict:
    """{"ok": True, command, wall_s, log} when the tool wrote its output; else the verdict (status, error)."""
    done = run_child(command, TOOL_TIMEOUT, cwd=produced.parent)
    record = {
        "command": " ".join(_quote(c) for c in command),
        "wall_s": done["wall_s"],
        "log": log_tail(done["output"]),
    }
    if done["rc"] is None:
        return {**record, "status": "tool timeout", "error": f"no answer after {TOOL_TIMEOUT} s"}
    if done["rc"] != 0 or not produced.is_file():
        return {
            **record,
            "status": "tool error",
            "error": first_error_line(done["output"]) or f"exit {done['rc']}",
            "rc": done["rc"],
        }
    return {"ok": True, **record}


def log_tail(text: str, lines: int = 6) -> list[str]:
    """The last lines a tool printed (colour codes removed), for the JSON details."""
    kept = [_clip(re.sub(r"\x1b\[[0-9;]*m", "", line).strip(), 300) for line in text.splitlines() if line.strip()]
    return kept[-lines:]


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[\w./:,=\[\]+-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def run_variant(command: list[str], produced: Path, model: RealModel, refdir: Path) -> dict:
    call = tool_call(command, produced)
    if not call.pop("ok", False):
        return call
    return {**call, **evaluate_in_child(sys.executable, model, produced, refdir)}


def peer_polygraphy(model, shapes, folder, refdir, tools) -> dict:
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


def peer_onnxsim(model, shapes, folder, refdir, tools) -> dict:
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


def chained(commands: list[list[str]], outputs: list[Path]) -> dict:
    """Run tool calls one after the other (each reads the previous one's output); the last one's record, or the
    first refusal, with every command joined by &&."""
    shown, call = [], {}
    for command, out in zip(commands, outputs):
        shown.append(" ".join(_quote(c) for c in command))
        call = tool_call(command, out)
        if not call.get("ok"):
            break
    return {**call, "command": " && ".join(shown)}


def peer_make_fixed(model, shapes, onnx_model, folder, refdir, tools) -> dict:
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
            dims[axes[i.name]]
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


def peer_symbolic(model, onnx_model, folder, refdir, tools) -> dict:
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


def peer_versions() -> dict:
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy", "onnx_graphsurgeon", "onnxsim", "onnxslim"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


# -- the peers venv ---------------------------------------------------------------------------------------------
def pip_install(*requirements: str) -> dict:
    done = run_child([str(PEERS_PY), "-m", "pip", "install", "-q", *requirements], 900)
    if done["rc"] == 0:
        return {"status": "installed"}
    reason = "timed out" if done["rc"] is None else first_error_line(done["output"])
    return {"status": "not installable", "reason": reason}


def ensure_peers_venv() -> dict:
    """Create benchmarks/.peers-venv when missing and install the peers; {tool: {status, package?, reason?}}."""
    if not PEERS_PY.exists():
        print(f"creating {PEERS_VENV.relative_to(REPO)}", file=sys.stderr, flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        made = run_child([base, "-m", "venv", str(PEERS_VENV)], 600)
        if made["rc"] != 0 or not PEERS_PY.exists():
            reason = {"status": "not installable", "reason": "venv: " + first_error_line(made["output"])}
            return {name: dict(reason) for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy")} | {
                "onnxsim": {**reason, "package": "onnxsim"}
            }
        (PEERS_VENV / ".gitignore").write_text("*\n")  # keep the venv out of `git status`
        run_child([str(PEERS_PY), "-m", "pip", "install", "-q", "--upgrade", "pip"], 600)
    print("installing the peers into benchmarks/.peers-venv (pip)", file=sys.stderr, flush=True)
    tools = {}
    base = pip_install("onnx", "onnxruntime", "numpy", "sympy")
    for name in ("onnx", "onnxruntime", "numpy", "sympy"):
        tools[name] = base if base["status"] == "installed" else pip_install(name)
    # `polygraphy surgeon` needs onnx-graphsurgeon; --fold-constants uses onnxruntime
    tools["polygraphy"] = pip_install("polygraphy", "onnx-graphsurgeon")
    tools["onnxsim"] = {**pip_install("onnxsim"), "package": "onnxsim"}
    if tools["onnxsim"]["status"] != "installed":
        tried = tools["onnxsim"]["reason"]
        tools["onnxsim"] = {**pip_install("onnxslim"), "package": "onnxslim", "onnxsim": f"not installable: {tried}"}
    return tools


def installed_peers() -> dict:
    """--quick installs nothing: what benchmarks/.peers-venv already holds; every tool ``skipped`` without it."""
    venv = PEERS_VENV.relative_to(REPO)
    if not PEERS_PY.exists():
        skipped = {
            "status": "skipped",
            "reason": f"{venv} does not exist and --quick installs nothing (a full run creates it)",
        }
        tools = {name: dict(skipped) for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy")}
        return {**tools, "onnxsim": {**skipped, "package": "onnxsim"}}
    done = run_child([str(PEERS_PY), str(SCRIPT), "--versions"], 120, cwd=REPO)
    found = json.loads(done["stdout"].strip().splitlines()[-1]) if done["rc"] == 0 and done["stdout"].strip() else {}

    def status(*packages: str) -> dict:
        absent = [name for name in packages if name not in found]
        if not absent:
            return {"status": "installed"}
        return {"status": "not installable", "reason": f"not in {venv}: {', '.join(absent)} (--quick installs nothing)"}

    tools = {name: status(name) for name in ("onnx", "onnxruntime", "numpy", "sympy")}
    tools["polygraphy"] = status("polygraphy", "onnx_graphsurgeon")
    package = "onnxslim" if "onnxslim" in found and "onnxsim" not in found else "onnxsim"
    tools["onnxsim"] = {**status(package), "package": package}
    return tools


# -- patchspec (run in the interpreter the script was started with) -----------------------------------------
def patchspec_binary() -> str:
    here = Path(sys.executable).with_name("patchspec")
    return str(here if here.exists() else REPO / ".venv" / "bin" / "patchspec")


def run_patchspec(model: RealModel, folder: Path, refdir: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "patchspec.onnx"
    params = {"size": BATCH}
    if model.batch_inputs:
        params["inputs"] = dict(model.batch_inputs)
    spec = folder / "spec.yaml"
    spec.write_text(
        f"patchspec: 1\nmodel: {json.dumps(str(model.file))}\noutput: {json.dumps(str(out))}\n"
        f"patches:\n  - set_batch: {json.dumps(params)}\n"
    )
    command = [patchspec_binary(), "apply", str(spec), "--no-verify", "--root", "/"]  # the corpus lies elsewhere
    call = tool_call(command, out)
    call["spec"] = spec.read_text()
    if not call.pop("ok", False):
        return {"set_batch": call}
    return {"set_batch": {**call, **evaluate_in_child(sys.executable, model, out, refdir)}}


# -- the table --------------------------------------------------------------------------------------------------
def cell(variants: dict) -> str:
    parts = []
    for label, result in variants.items():
        text = result["status"]
        if result["status"] == "ok" and result.get("input_batch_is_4") is False:
            text += " (input batch not set to 4)"
        if "output_batch_is_4" in result:
            text = f"{text} (outputs batch 4: {'yes' if result['output_batch_is_4'] else 'no'})"
        parts.append((label, text))
    if len({text for _, text in parts}) == 1:
        return parts[0][1]
    return "; ".join(f"{label}: {text}" if label else text for label, text in parts)


def table(results: dict) -> str:
    lines = ["| model | " + " | ".join(COLUMNS) + " |", "| --- |" + " --- |" * len(COLUMNS)]
    for key, row in results.items():
        lines.append(
            f"| {key} | "
            + " | ".join(cell(row.get(column, {})) if row.get(column) else "-" for column in COLUMNS)
            + " |"
        )
    return "\n".join(lines)


def errors(results: dict) -> str:
    lines = []
    for key, row in results.items():
        for column in COLUMNS:
            for label, result in row.get(column, {}).items():
                if result.get("status") != "ok" and result.get("error"):
                    name = f"{column} {label}".strip()
                    lines.append(f"- {key} / {name}: {result['status']}: {result['error']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="model keys to run (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder with every produced model")
    parser.add_argument("--workdir", help="working folder (default: a new temporary folder)")
    parser.add_argument(
        "--json",
        help=f"where to write the details (default: {RESULTS.relative_to(REPO)} for a full "
        "run; with --only, nowhere unless given)",
    )
    parser.add_argument(
        "--evaluate", nargs=4, metavar=("KEY", "ORIGINAL", "PRODUCED", "REFDIR"), help=argparse.SUPPRESS
    )
    parser.add_argument("--peer-worker", nargs=2, metavar=("JOBS", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--versions", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a check that the harness runs, in seconds: models {' '.join(QUICK_MODELS)} (unless "
        "--only), peers only if their venv exists, nothing installed, no JSON unless --json "
        "(make test runs it)",
    )
    args = parser.parse_args()

    if args.versions:
        print(json.dumps(peer_versions()))
        return 0

    if args.evaluate:
        print(json.dumps(evaluate(*args.evaluate)))
        return 0
    if args.peer_worker:
        peer_worker(*args.peer_worker)
        return 0

    started = time.perf_counter()
    # a folder that was there before is never removed
    made = args.workdir is None or not Path(args.workdir).exists()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="compare-peers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return compare(args, workdir, started)
    finally:
        if args.keep:
            print(f"produced models kept in {workdir}")
        elif made:
            shutil.rmtree(workdir, ignore_errors=True)


def compare(args, workdir: Path, started: float) -> int:
    import onnx
    import onnxruntime

    tools = installed_peers() if args.quick else ensure_peers_venv()
    models = corpus({kind: str(path) for kind, path in find_ppocr().items()})
    wanted = args.only or (QUICK_MODELS if args.quick else None)
    if wanted and GENERATED_KEY in wanted:
        models.append(generated_model(write_generated(workdir / "generated")))
    if wanted:
        models = [m for m in models if m.key in wanted]
    missing = [m.key for m in models if not m.available()]
    for model in models:
        if not model.available():
            print(
                f"  skipped {model.key}: {model.file} not found (from the {model.wheel} wheel; make venv installs it)",
                file=sys.stderr,
                flush=True,
            )
    models = [m for m in models if m.available()]
    refdir = workdir / "ref-main"
    refdir.mkdir(exist_ok=True)

    results: dict[str, dict] = {}
    jobs = []
    for model in models:
        proto = onnx.load(str(model.file), load_external_data=False)
        jobs.append({"key": model.key, "file": str(model.file), "shapes": override_shapes(model, proto)})
        start = time.perf_counter()
        results[model.key] = {"patchspec": run_patchspec(model, workdir / "patchspec" / model.key, refdir)}
        print(f"  patchspec on {model.key}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)

    peers_out = workdir / "peers.json"
    versions = {
        "main": {
            "python": platform.python_version(),
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__,
        }
    }
    try:
        from importlib import metadata

        versions["main"]["patchspec"] = metadata.version("patchspec")
    except Exception:
        pass
    if PEERS_PY.exists() and tools["onnxruntime"]["status"] == "installed":
        (workdir / "jobs.json").write_text(json.dumps({"tools": tools, "workdir": str(workdir), "models": jobs}))
        subprocess.run(
            [str(PEERS_PY), str(SCRIPT), "--peer-worker", str(workdir / "jobs.json"), str(peers_out)], cwd=REPO
        )
        done = run_child([str(PEERS_PY), str(SCRIPT), "--versions"], 120, cwd=REPO)
        versions["peers"] = json.loads(done["stdout"].strip().splitlines()[-1]) if done["rc"] == 0 else {}
    peers = json.loads(peers_out.read_text()) if peers_out.is_file() else {}
    not_run = {
        "status": "skipped" if tools["onnxruntime"]["status"] == "skipped" else "not installable",
        "error": tools["onnxruntime"].get("reason", "peer run failed"),
    }
    for model in models:
        for column in COLUMNS[1:]:
            results[model.key][column] = peers.get(model.key, {}).get(column, {"": dict(not_run)})

    report = {
        "batch": BATCH,
        "command": "python benchmarks/compare_peers.py" + (" --quick" if args.quick else ""),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": versions,
        "install": tools,
        "models": {
            m.key: {
                "wheel": m.wheel,
                "path": m.path,
                "covers": m.covers,
                "rtol": m.rtol,
                "atol": m.atol,
                "peer_input_shapes": job["shapes"],
            }
            for m, job in zip(models, jobs)
        },
        "missing": missing,
        "results": results,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    # the temporary folder changes every run: name it $WORK in what is kept and shown
    report = json.loads(json.dumps(report).replace(str(workdir), "$WORK"))
    target = Path(args.json) if args.json else (None if args.only or args.quick else RESULTS)
    if target:  # a partial run does not overwrite the full results
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report["results"]))
    print()
    print(errors(report["results"]))
    print()
    print("versions: " + json.dumps(versions))
    partial = "--quick" if args.quick else "--only"
    print(f"details: {target or f'not written ({partial} without --json)'}; {report['wall_s']} s")
    if missing:
        print("not installed (skipped): " + ", ".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
