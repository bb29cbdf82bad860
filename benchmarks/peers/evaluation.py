"""One produced model run on onnxruntime at batch 4 and compared with the per-sample run of the original
(in a child, in the venv whose onnxruntime is being used)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from peers.calls import REPO, SCRIPT, Json, first_error_line, run_child, tool_call
from peers.corpus import BATCH, batch_axes, dims_of, model_by_key
from real_models import RealModel, per_sample_reference

EVAL_TIMEOUT = 300  # seconds, each run of a produced model (reference included)


def evaluate(key: str, original: str, produced: str, refdir: str) -> Json:
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
        return {"status": "fails to load", "error": first_error_line(str(error))}
    wanted = {i.name for i in session.get_inputs()}
    try:
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in wanted})))
    except Exception as error:
        return {"status": "fails to run", "error": first_error_line(str(error))}

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


def evaluate_in_child(python: str, model: RealModel, produced: Path, refdir: Path) -> Json:
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
    verdict: Json = json.loads(lines[-1])
    return verdict


def run_variant(command: list[str], produced: Path, model: RealModel, refdir: Path) -> Json:
    call = tool_call(command, produced)
    if not call.pop("ok", False):
        return call
    return {**call, **evaluate_in_child(sys.executable, model, produced, refdir)}
