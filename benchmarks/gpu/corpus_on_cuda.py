"""The corpus on a real GPU: every correct set_batch patch passes on CUDAExecutionProvider, a wrong one fails.

For each corpus model that set_batch gets right on the CPU (benchmarks/results/corpus.json) and whose
outputs can be compared per sample, three runs of `patchspec`, each verifying on
[CPUExecutionProvider, CUDAExecutionProvider] with CUDA required:

- ``exact``: the spec as a user writes it; verification gets CUDA's exact-math settings (use_tf32 0);
- ``fast``: ``provider_options: {CUDAExecutionProvider: {use_tf32: 1}}``, the tolerance widened by the
  measured floor;
- ``wrong``: the correct output with two samples of its first batched output swapped (and, separately,
  the last sample replaced by the one before: a dropped sample), checked with ``patchspec verify
  --output``: it must fail (exit 1).

usage (on the GPU machine; benchmarks/gpu/on_device.sh runs it):
    python3 benchmarks/gpu/corpus_on_cuda.py --models .gpu/models --out OUT.json
    python3 benchmarks/gpu/corpus_on_cuda.py --pack .gpu/models    (here: copy the wheel models it needs)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "corpus"))

from feeds import make_feeds  # noqa: E402
from manifest import GENERATED, Manifest, Model, load, models_folder  # noqa: E402
from steps import _spec  # noqa: E402

CUDA = "CUDAExecutionProvider"
BATCH = 4
#: wheel models carried to the GPU machine: the smallest the CPU gets right, within the 64 MiB the
#: working tree may take beside the onnxruntime-gpu bundle
CARRY_BYTES = 240_000


def _right_on_cpu() -> set[str]:
    results = json.loads((REPO / "benchmarks" / "results" / "corpus.json").read_text())["models"]
    return {key: row for key, row in results.items() if row.get("set_batch_4_verify", {}).get("verdict") == "right"}


def candidates(manifest: Manifest, folder: Path) -> list[tuple[Model, Path]]:
    right = _right_on_cpu()
    chosen = []
    for model in manifest.models:
        if model.key not in right or not model.runs:
            continue
        spec = _spec(model, BATCH, True, BATCH)
        if spec["verify"][1]["run"]["compare"]["against"] != "original":  # not comparable per sample
            continue
        generated = bool(manifest.packages[model.package].generator)
        path = GENERATED / model.package / model.path if generated else model.file(folder)
        chosen.append((model, path))
    return chosen


def pack(target: Path) -> None:
    manifest = load()
    wheel_models = [(m, p) for m, p in candidates(manifest, models_folder()) if GENERATED not in p.parents]
    wheel_models = [(m, p) for m, p in wheel_models if p.is_file()]
    wheel_models.sort(key=lambda item: item[1].stat().st_size)
    shutil.rmtree(target, ignore_errors=True)
    total = 0
    for model, path in wheel_models:
        size = path.stat().st_size
        if total + size > CARRY_BYTES:
            break
        copy = model.file(target)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
        total += size
        print(f"carry {model.key} ({size} bytes)")
    print(f"{total} bytes of wheel models in {target}")


def _patchspec(*args: str, cwd: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "patchspec", *args], cwd=cwd, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def _on_gpu(spec: dict[str, Any], fast: bool, provider: str) -> dict[str, Any]:
    run = spec["verify"][1]["run"]
    run["providers"] = list(dict.fromkeys(["CPUExecutionProvider", provider]))
    run["require"] = [provider]
    if fast and provider == CUDA:
        run["provider_options"] = {CUDA: {"use_tf32": 1}}
    return spec


def corrupt(source: Path, target: Path, order: list[int]) -> str | None:
    """Write ``source`` with one output of batch BATCH re-ordered along the batch; its name (None: none).

    A floating output first: a label or a string can be the same for two samples, and swapping equal
    values is no error to catch."""
    model = onnx.load(str(source))
    batched = [
        o
        for o in model.graph.output
        if o.type.tensor_type.shape.dim[:1] and o.type.tensor_type.shape.dim[0].dim_value == BATCH
    ]
    floating = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
    batched.sort(key=lambda o: o.type.tensor_type.elem_type not in floating)
    if not batched:
        return None
    output = batched[0]
    inner = output.name + "__before_wrong"
    for node in model.graph.node:
        node.output[:] = [inner if name == output.name else name for name in node.output]
    indices = output.name + "__order"  # a Constant node: an initializer must be an input below IR 4
    value = numpy_helper.from_array(np.array(order, dtype=np.int64))
    model.graph.node.append(helper.make_node("Constant", [], [indices], value=value))
    model.graph.node.append(helper.make_node("Gather", [inner, indices], [output.name], axis=0))
    onnx.save(model, str(target))
    return output.name


def differs(model: Model, right: Path, wrong: Path, output: str) -> bool:
    """Whether the wrong output really differs from the right one on the case's inputs, on the CPU (two
    equal samples swapped, or a model whose samples all give the same output, are nothing to catch)."""
    import onnxruntime

    feeds = make_feeds(onnx.load(str(right)), model.inputs, BATCH)
    values = [
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run([output], feeds)[0]
        for path in (right, wrong)
    ]
    return not np.array_equal(values[0], values[1])


def one(model: Model, source: Path, work: Path, provider: str) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, work / "model.onnx")
    row: dict[str, Any] = {"key": model.key, "package": model.package}
    for math in ("exact", "fast"):
        spec = work / f"{math}.yaml"
        spec.write_text(json.dumps(_on_gpu(_spec(model, BATCH, True, BATCH), math == "fast", provider), indent=2))
        start = time.monotonic()
        code, text = _patchspec(
            "apply", spec.name, "--output", f"{math}.onnx", "--force", "--report", f"{math}.json", cwd=work
        )
        report = json.loads((work / f"{math}.json").read_text()) if (work / f"{math}.json").is_file() else {}
        runs = [v for v in report.get("verifiers", []) if v["label"].endswith("(run)")]
        row[math] = {
            "exit": code,
            "seconds": round(time.monotonic() - start, 1),
            "summary": runs[0]["summary"] if runs else text[-400:],
            "cuda": [line for line in (runs[0]["details"] if runs else []) if provider in line][:4],
        }
    if row["exact"]["exit"] == 0:
        for name, order in (("swapped", [1, 0, 2, 3]), ("dropped", [0, 1, 2, 2])):
            changed = corrupt(work / "exact.onnx", work / f"{name}.onnx", order)
            if changed is None:
                row[name] = {"exit": None, "summary": "no output with the batch on axis 0"}
                continue
            code, text = _patchspec("verify", "exact.yaml", "--output", f"{name}.onnx", cwd=work)
            changed_values = differs(model, work / "exact.onnx", work / f"{name}.onnx", changed)
            last = text.splitlines()[-1][:300] if text else ""
            row[name] = {"exit": code, "output": changed, "differs": changed_values, "summary": last}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, help="copy the wheel models to carry into this folder, then stop")
    parser.add_argument("--models", type=Path, default=Path(".gpu/models"), help="the carried wheel models")
    parser.add_argument("--out", type=Path, default=Path("corpus_on_cuda.json"))
    parser.add_argument("--provider", default=CUDA, help="CPUExecutionProvider: a dry run of this script")
    parser.add_argument("--jobs", type=int, default=4, help="models at a time")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="these models only")
    parser.add_argument("--work", type=Path, default=Path("/tmp/corpus-on-cuda"))
    args = parser.parse_args()
    if args.pack:
        pack(args.pack)
        return
    chosen = [(m, p) for m, p in candidates(load(), args.models.resolve()) if p.is_file()]
    chosen = [(m, p) for m, p in chosen if not args.only or m.key in args.only]
    rows = []
    with ThreadPoolExecutor(args.jobs) as pool:  # each model's runs are processes of their own
        futures = [pool.submit(one, m, p, args.work / m.key, args.provider) for m, p in chosen]
        for future in as_completed(futures):
            row = future.result()
            rows.append(row)
            marks = " ".join(f"{k}={row[k]['exit']}" for k in ("exact", "fast", "swapped", "dropped") if k in row)
            print(f"{row['key']:32} {marks}  {row['exact']['summary'][:160]}", flush=True)
            args.out.write_text(json.dumps(sorted(rows, key=lambda r: r["key"]), indent=1))
    passed = sum(r["exact"]["exit"] == 0 and r["fast"]["exit"] == 0 for r in rows)
    wrong = [r[k] for r in rows for k in ("swapped", "dropped") if r.get(k, {}).get("differs")]
    same = sum(r.get(k, {}).get("differs") is False for r in rows for k in ("swapped", "dropped"))
    print(
        f"{len(rows)} models: {passed} correct patches pass on CUDA (exact and fast math); "
        f"{sum(w['exit'] == 1 for w in wrong)} of {len(wrong)} wrong outputs fail "
        f"({same} more changed nothing: equal samples swapped)"
    )


if __name__ == "__main__":
    main()
