"""The corpus's own judge: a re-batched model against the original run once per sample.

It does not use patchspec's verifiers. The original runs on ONNX Runtime (CPU) once per sample, at its
own batch (1, or the static batch it was exported at: the sample is repeated to fill it and the first
row kept); the candidate runs once on the whole batch. Each candidate output must equal the per-sample
outputs joined on some axis (concatenated, or stacked where a squeeze dropped the batch at one sample),
within the manifest's tolerances, and every fixed dim the candidate declares for an output must hold.

    python benchmarks/corpus/judge.py KEY ORIGINAL CANDIDATE --batch 4     # prints one JSON line

Verdicts: ``right``, ``wrong`` (another value or shape), ``lies`` (right values, a declared output dim
is false), ``fails to load``, ``fails to run``, and ``not runnable`` where the runtime cannot load the
original itself (nothing to judge against). A model the manifest marks ``runs = false`` (ONNX Runtime has
no kernel for one of its old-opset nodes) is run on onnx's reference evaluator instead, for the original
and the candidate alike; its result says ``"runtime": "onnx.reference"``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from feeds import batch_axes, make_feeds
from manifest import Model, load


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


class ReferenceSession:
    """onnx's reference evaluator behind the calls the judge makes of an ONNX Runtime session, for the
    models ONNX Runtime cannot run (``runs = false``). Like ONNX Runtime, it refuses a feed whose shape
    contradicts a fixed dim the model declares for that input."""

    def __init__(self, path: Path) -> None:
        self.model = onnx.load(str(path), load_external_data=False)
        self.evaluator = ReferenceEvaluator(self.model)
        initializers = {i.name for i in self.model.graph.initializer}
        self.inputs = [v for v in self.model.graph.input if v.name not in initializers]

    def get_inputs(self) -> list[_Named]:
        return [_Named(v.name) for v in self.inputs]

    def get_outputs(self) -> list[_Named]:
        return [_Named(v.name) for v in self.model.graph.output]

    def run(self, names: None, feeds: dict[str, np.ndarray]) -> list[Any]:
        for value in self.inputs:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
            shape = feeds[value.name].shape
            if len(dims) != len(shape) or any(d and d != s for d, s in zip(dims, shape, strict=False)):
                raise ValueError(f"Got invalid dimensions for input {value.name}: declared {dims}, fed {list(shape)}")
        return list(self.evaluator.run(names, feeds))


class Session(Protocol):
    """What the judge calls of a session: ONNX Runtime's, or a ReferenceSession."""

    def get_inputs(self) -> list[Any]: ...

    def get_outputs(self) -> list[Any]: ...

    def run(self, names: None, feeds: dict[str, np.ndarray]) -> list[Any]: ...


def _session(path: Path, model: Model) -> Session:
    if not model.runs:
        return ReferenceSession(path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session: Session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session


def _load_error(path: Path, model: Model) -> str | None:
    """Why the runtime cannot load the model at ``path`` (None: it can)."""
    try:
        _session(path, model)
    except Exception as error:
        return str(error).strip().splitlines()[0][:300]
    return None


def _as_array(value: Any) -> np.ndarray:
    """ZipMap outputs (a list of {label: probability}) become [rows, labels] arrays."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        keys = sorted(value[0])
        return np.array([[row[k] for k in keys] for row in value])
    return np.asarray(value)


def _run(session: Session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return {name: _as_array(value) for name, value in zip(names, outputs, strict=True)}


def per_sample(model: Model, session: Session, feeds: dict[str, np.ndarray], batch: int) -> list[dict[str, np.ndarray]]:
    axes = batch_axes(model.inputs)
    parts = []
    for index in range(batch):
        sample = {}
        for name, array in feeds.items():
            axis = axes.get(name)
            if axis is None:
                sample[name] = array
                continue
            piece = np.take(array, [index], axis=axis)
            if model.old_batch > 1:
                piece = np.concatenate([piece] * model.old_batch, axis=axis)
            sample[name] = piece
        outputs = _run(session, sample)
        if model.old_batch > 1:
            outputs = {n: v[:1] if v.ndim and v.shape[0] == model.old_batch else v for n, v in outputs.items()}
        parts.append(outputs)
    return parts


def join(arrays: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-sample arrays joined the way that gives ``shape``: concatenated on an axis where each has
    size 1, else stacked (a batch squeezed away at one sample). None when nothing fits: a batch folded
    into another axis (``[1, 4 * 7600, 10]`` for per-sample ``[1, 7600, 10]``) is no join."""
    first = arrays[0]
    for axis in (a for a in range(first.ndim) if first.shape[a] == 1):
        joined = np.concatenate(arrays, axis=axis)
        if joined.shape == tuple(shape):
            return joined
    for axis in range(first.ndim + 1):
        stacked = np.stack(arrays, axis=axis)
        if stacked.shape == tuple(shape):
            return stacked
    return None


def _declared(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    declared = {}
    for value in model.graph.output:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        declared[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return declared


def close(candidate: np.ndarray, reference: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    if candidate.dtype.kind in "OUS" or reference.dtype.kind in "OUS":  # strings: equal or not
        differ = float(np.mean(candidate.astype(str) != reference.astype(str))) if candidate.size else 0.0
        return differ == 0.0, differ
    if candidate.dtype.kind in "biu" and reference.dtype.kind in "biu":
        differ = float(np.mean(candidate != reference)) if candidate.size else 0.0
        # an argmax over near-equal scores may flip where batched kernels round differently
        return differ <= (0.0 if atol < 0.01 else 0.02), differ
    a = candidate.astype(np.float64)
    b = reference.astype(np.float64)
    error = float(np.max(np.abs(a - b))) if a.size else 0.0
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)), error


def _replicated(model: Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same feeds with the first sample repeated over the whole batch."""
    axes = batch_axes(model.inputs)
    out = {}
    for name, array in feeds.items():
        axis = axes.get(name)
        out[name] = array if axis is None else np.repeat(np.take(array, [0], axis=axis), array.shape[axis], axis=axis)
    return out


def judge(model: Model, original: Path, candidate: Path, batch: int) -> dict[str, Any]:
    proto = onnx.load(str(original), load_external_data=False)
    feeds = make_feeds(proto, model.inputs, batch)
    verdict = _judge(model, original, candidate, feeds, batch, model.rtol, model.atol)
    if model.replicate and verdict["verdict"] == "right":
        strict = _judge(model, original, candidate, _replicated(model, feeds), batch, 1e-3, 1e-4)
        if strict["verdict"] != "right":
            strict["detail"] = "one sample repeated: " + strict["detail"]
            verdict = strict
    if not model.runs:
        verdict["runtime"] = "onnx.reference"
    return verdict


def _judge(
    model: Model, original: Path, candidate: Path, feeds: dict[str, np.ndarray], batch: int, rtol: float, atol: float
) -> dict[str, Any]:
    try:
        session = _session(candidate, model)
    except Exception as error:
        unloadable = _load_error(original, model)
        if unloadable is not None:
            hint = "" if not model.runs else " (say runs = false in models.toml to judge it on onnx.reference)"
            return {"verdict": "not runnable", "detail": f"the original does not load: {unloadable}{hint}"}
        return {"verdict": "fails to load", "detail": str(error).strip().splitlines()[0][:300]}
    try:
        got = _run(session, feeds)
    except Exception as error:
        return {"verdict": "fails to run", "detail": str(error).strip().splitlines()[0][:300]}
    parts = per_sample(model, _session(original, model), feeds, batch)
    details = []
    verdict = "right"
    for name, value in got.items():
        joined = join([p[name] for p in parts], value.shape) if name in parts[0] else None
        if joined is None:
            shapes = [list(p[name].shape) for p in parts] if name in parts[0] else "absent"
            details.append(f"{name}: shape {list(value.shape)} is no join of the per-sample {shapes}")
            verdict = "wrong"
            continue
        ok, largest = close(value, joined, rtol, atol)
        if not ok:
            details.append(f"{name}: differs from the per-sample run (max error {largest:.3g})")
            verdict = "wrong"
    if verdict == "right":
        declared = _declared(onnx.load(str(candidate), load_external_data=False))
        exported = _declared(onnx.load(str(original), load_external_data=False))
        for name, value in got.items():
            dims = declared.get(name)
            if dims is None:
                continue
            if len(dims) != value.ndim or any(
                d is not None and d > 0 and d != s for d, s in zip(dims, value.shape, strict=False)
            ):
                inherited = exported.get(name) is not None and len(exported[name]) == len(dims) != value.ndim
                note = f" (the original declares rank {len(dims)} too)" if inherited else ""
                details.append(f"{name}: declared {dims}, is {list(value.shape)}{note}")
                verdict = "lies"
    return {"verdict": verdict, "detail": "; ".join(details)[:600]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("key")
    parser.add_argument("original", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    model = next((m for m in load().models if m.key == args.key), None)
    if model is None:
        raise SystemExit(f"judge: no model {args.key!r} in models.toml")
    print(json.dumps(judge(model, args.original, args.candidate, args.batch)))


if __name__ == "__main__":
    main()
