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

The parts are in ``benchmarks/peers/``: ``corpus`` (the models and the shapes peers get), ``calls`` (child
processes), ``evaluation`` (a produced model against the per-sample run), ``tools`` (the peers), ``venv`` (their
venv) and ``head_to_head``; this script is the command line, the patchspec column and the table.

The peers live in a venv of their own, ``benchmarks/.peers-venv`` (created when missing; it is not the
project's venv and adds nothing to the project's requirements). The script runs the patchspec part in the
interpreter it was started with and re-executes itself with the peers venv's python for the peer part; each
tool call and each evaluation is a child process with a timeout.

    .venv/bin/python benchmarks/compare_peers.py            # from the repo root
    .venv/bin/python benchmarks/compare_peers.py --only minilm_int8 ppocr_det --keep   # writes no JSON
    .venv/bin/python benchmarks/compare_peers.py --quick    # seconds; installs nothing, writes no JSON

Prints a markdown table and writes the details to ``benchmarks/results/peers.json``.

Then the head to head of issue 26, timed: ``patchspec apply --no-verify`` (``set_batch: 4``, ``--force`` so
that every run does the work) against ``polygraphy surgeon sanitize --override-input-shapes x:[4,3,'H','W']``
(the batch set, the other dims kept, as set_batch keeps them) on the PP-OCR v4 detector, alternated
``--rounds`` times (5) after an untimed round; medians of CPU and wall time, and the ratio patchspec /
polygraphy against the target 0.5x (CPU: the steadier figure on a shared machine). polygraphy runs with
``--no-onnxruntime-shape-inference`` (onnx's shape inference, what it uses where onnxruntime's symbolic
shape inference and its sympy are not installed); its default in the peers venv, which has sympy, is timed
once beside it. ``--head-to-head`` runs only this.

    .venv/bin/python benchmarks/compare_peers.py --head-to-head             # about 2 minutes

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
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/peers, also when the peers venv runs this

from peers.calls import PEERS_PY, REPO, SCRIPT, Json, patchspec_binary, run_child, tool_call
from peers.corpus import (
    BATCH,
    GENERATED_KEY,
    PPOCR_WHEEL,
    QUICK_MODELS,
    corpus,
    find_ppocr,
    generated_model,
    override_shapes,
    write_generated,
)
from peers.evaluation import evaluate, evaluate_in_child
from peers.head_to_head import HEAD_TO_HEAD_ROUNDS, head_to_head, head_to_head_lines
from peers.tools import peer_versions, peer_worker
from peers.venv import ensure_peers_venv, installed_peers

from real_models import RealModel  # tests/, on sys.path once peers.corpus is imported

RESULTS = REPO / "benchmarks" / "results" / "peers.json"

COLUMNS = ["patchspec", "polygraphy sanitize", "onnxsim", "ORT make_dynamic_shape_fixed", "ORT symbolic_shape_infer"]


# -- patchspec (run in the interpreter the script was started with) -----------------------------------------
def run_patchspec(model: RealModel, folder: Path, refdir: Path) -> Json:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "patchspec.onnx"
    params: Json = {"size": BATCH}
    if model.batch_inputs:
        params["inputs"] = dict(model.batch_inputs)
    spec = folder / "spec.yaml"
    spec.write_text(
        f"patchspec: 1\nmodel: {json.dumps(str(model.file))}\noutput: {json.dumps(str(out))}\n"
        f"patches:\n  - set_batch: {json.dumps(params)}\n"
    )
    command = [patchspec_binary(), "apply", str(spec), "--no-verify"]
    call = tool_call(command, out)
    call["spec"] = spec.read_text()
    if not call.pop("ok", False):
        return {"set_batch": call}
    return {"set_batch": {**call, **evaluate_in_child(sys.executable, model, out, refdir)}}


# -- the table --------------------------------------------------------------------------------------------------
def cell(variants: Json) -> str:
    parts: list[tuple[str, str]] = []
    for label, result in variants.items():
        text: str = result["status"]
        if result["status"] == "ok" and result.get("input_batch_is_4") is False:
            text += " (input batch not set to 4)"
        if "output_batch_is_4" in result:
            text = f"{text} (outputs batch 4: {'yes' if result['output_batch_is_4'] else 'no'})"
        parts.append((label, text))
    if len({text for _, text in parts}) == 1:
        return parts[0][1]
    return "; ".join(f"{label}: {text}" if label else text for label, text in parts)


def table(results: Json) -> str:
    lines = ["| model | " + " | ".join(COLUMNS) + " |", "| --- |" + " --- |" * len(COLUMNS)]
    for key, row in results.items():
        lines.append(
            f"| {key} | "
            + " | ".join(cell(row.get(column, {})) if row.get(column) else "-" for column in COLUMNS)
            + " |"
        )
    return "\n".join(lines)


def errors(results: Json) -> str:
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
        "--head-to-head",
        action="store_true",
        help="only the timed comparison with polygraphy on the PP-OCR v4 detector (no table, no JSON)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=HEAD_TO_HEAD_ROUNDS,
        help=f"timed runs of each tool in the head to head (default {HEAD_TO_HEAD_ROUNDS}; --quick: 1)",
    )
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
        if args.head_to_head:
            tools = installed_peers() if args.quick else ensure_peers_venv()
            print("\n".join(head_to_head_lines(ppocr_head_to_head(args, workdir, tools))))
            return 0
        return compare(args, workdir, started)
    finally:
        if args.keep:
            print(f"produced models kept in {workdir}")
        elif made:
            shutil.rmtree(workdir, ignore_errors=True)


def ppocr_head_to_head(args: argparse.Namespace, workdir: Path, tools: Json) -> Json:
    """The head to head where it can run: the detector installed, and asked for (always with --quick)."""
    det = find_ppocr().get("det")
    if det is None:
        return {"status": "skipped", "reason": f"the PP-OCR detector is not installed ({PPOCR_WHEEL}; make venv)"}
    if args.only and "ppocr_det" not in args.only:
        return {"status": "skipped", "reason": "ppocr_det is not among the --only models"}
    return head_to_head(det, workdir, 1 if args.quick else args.rounds, tools, args.quick)


def compare(args: argparse.Namespace, workdir: Path, started: float) -> int:
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

    results: dict[str, Json] = {}
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
        "head_to_head": ppocr_head_to_head(args, workdir, tools),
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
    print("\n".join(head_to_head_lines(report["head_to_head"])))
    partial = "--quick" if args.quick else "--only"
    print(f"details: {target or f'not written ({partial} without --json)'}; {report['wall_s']} s")
    if missing:
        print("not installed (skipped): " + ", ".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
