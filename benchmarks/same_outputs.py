"""Byte-identical outputs: run set_batch and init over a corpus with two versions of patchspec, compare.

A speed-up must not change one output byte. For each model (distinct by content), this runs in a
scratch folder of its own, always at the same path so that specs and stamps are the same text:

- ``patchspec apply --root / --no-verify --force --allow-undecided`` of ``set_batch: 4`` and of
  ``set_batch: N`` (a spec naming the model by its absolute path, output ``out.onnx``);
- ``patchspec init MODEL --batch 4 --output spec.yaml``.

and records each run's exit code, the first line of its stderr, its stdout, and the sha256 of every
file it wrote (the output model, its data files, the spec init wrote; patchspec's hidden bookkeeping
files are recorded but not compared). ``record`` writes that as
JSON; ``compare`` says which runs differ between two records.

The version run is the one ``python`` imports: ``--pythonpath`` puts another checkout first (a folder
holding ``patchspec`` and ``patchspec_plugins``, e.g. links to a worktree's ``patchspec/`` and
``plugins/``); the first run prints which ``patchspec`` was imported, to check it.

    python benchmarks/same_outputs.py record base.json --models /work/corpus-models --pythonpath /tmp/base
    python benchmarks/same_outputs.py record mine.json --models /work/corpus-models
    python benchmarks/same_outputs.py compare base.json mine.json
    python benchmarks/same_outputs.py --quick      # seconds: a toy model, this version against itself
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CLI = "from patchspec.cli import script; script()"
WHERE = "import patchspec, patchspec_plugins; print(patchspec.__file__, patchspec_plugins.__file__)"
#: (label, arguments after the CLI, spec text or None); {model} is the model's absolute path
RUNS = (
    ("set_batch 4", ["apply", "--root", "/", "--no-verify", "--force", "--allow-undecided", "spec.yaml"], "4"),
    ("set_batch N", ["apply", "--root", "/", "--no-verify", "--force", "--allow-undecided", "spec.yaml"], "N"),
    ("init", ["init", "{model}", "--batch", "4", "--output", "spec.yaml"], None),
)
SPEC = "patchspec: 1\nmodel: {model}\noutput: out.onnx\npatches:\n  - set_batch: {size}\n"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def models(roots: list[Path], max_mb: float, name: str = "*.onnx") -> list[Path]:
    """Every file named ``name`` under ``roots`` up to ``max_mb``, one per distinct content, sorted by path."""
    seen: dict[str, Path] = {}
    for path in sorted(p for root in roots for p in root.rglob(name) if p.is_file()):
        if path.stat().st_size <= max_mb * 1e6:
            seen.setdefault(sha256(path), path)
    return sorted(seen.values())


def run_one(python: str, env: dict[str, str], work: Path, model: Path, run: tuple, timeout: float) -> dict:
    """One run in a fresh ``work`` folder: exit code, stderr's first line, stdout, written files' sha256."""
    _label, args, size = run
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if size is not None:
        (work / "spec.yaml").write_text(SPEC.format(model=model, size=size))
    before = {p for p in work.rglob("*") if p.is_file()}
    argv = [python, "-c", CLI, *(a.format(model=model) for a in args)]
    start = _children_cpu()
    try:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, out, err = "timeout", "", ""
    files = {str(p.relative_to(work)): sha256(p) for p in sorted(work.rglob("*")) if p.is_file() and p not in before}
    if size is None and (work / "spec.yaml").is_file():
        files["spec.yaml"] = sha256(work / "spec.yaml")
    shutil.rmtree(work, ignore_errors=True)
    return {
        "code": code,
        "stderr": (err.splitlines() or [""])[0],
        "stdout": out,
        "files": files,
        "cpu": _children_cpu() - start,
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    where = subprocess.run([args.python, "-c", WHERE], env=env, cwd="/", capture_output=True, text=True, check=True)
    print(f"imports: {where.stdout.strip()}", file=sys.stderr)
    found = models(args.models, args.max_mb, args.name)
    results: dict[str, dict] = {"imports": where.stdout.strip(), "runs": {}}
    for number, model in enumerate(found, 1):
        for run in RUNS:
            key = f"{model} :: {run[0]}"
            results["runs"][key] = run_one(args.python, env, args.work, model, run, args.timeout)
            print(f"[{number}/{len(found)}] {key}: {results['runs'][key]['code']}", file=sys.stderr, flush=True)
        args.output.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


def _shown(run: dict, field: str) -> object:
    """A run's field as compared: patchspec's own bookkeeping files (``.out.onnx.patchspec-cache.json``,
    the lock: identities and times, never output bytes) are left out."""
    if field != "files":
        return run[field]
    return {name: digest for name, digest in run["files"].items() if not Path(name).name.startswith(".")}


def compare(args: argparse.Namespace) -> int:
    one, two = (json.loads(Path(p).read_text())["runs"] for p in (args.first, args.second))
    differing = 0
    for key in sorted(set(one) | set(two)):
        a, b = one.get(key), two.get(key)
        fields = ("code", "stderr", "stdout", "files")
        changed = [f for f in fields if a is None or b is None or _shown(a, f) != _shown(b, f)]
        if changed:
            differing += 1
            print(f"DIFFERS {key}: {', '.join(changed)}")
            for field in changed:
                print(
                    f"  {field}: {None if a is None else a[field]!r}\n  {' ' * len(field)}  {None if b is None else b[field]!r}"
                )
    written = sum(1 for key in one if one[key]["files"])
    print(f"{len(set(one) | set(two))} runs compared ({written} wrote files), {differing} differ")
    return 1 if differing else 0


def quick() -> int:
    """A check that this script runs, in seconds: a toy model (one baked Reshape), recorded twice with
    this interpreter's patchspec in a temporary folder it removes, and the two records compared."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = Path(tempfile.mkdtemp(prefix="patchspec-same-outputs-"))
    try:
        shape = numpy_helper.from_array(np.array([1, 12], dtype=np.int64), "shape")
        node = helper.make_node("Reshape", ["x", "shape"], ["y"])
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])
        graph = helper.make_graph([node], "toy", [x], [y], [shape])
        (folder / "models").mkdir()
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "models/toy.onnx")
        for name in ("one.json", "two.json"):
            argv = ["record", str(folder / name), "--models", str(folder / "models"), "--work", str(folder / "work")]
            main(argv)
        return main(["compare", str(folder / "one.json"), str(folder / "two.json")])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a check that this script runs, on a toy model")
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="run every model with one version and write the results as JSON")
    rec.add_argument("output", type=Path)
    rec.add_argument("--models", type=Path, nargs="+", required=True, help="folders searched for .onnx files")
    rec.add_argument("--python", default=sys.executable, help="the interpreter whose patchspec is run")
    rec.add_argument("--pythonpath", help="PYTHONPATH for the runs: another checkout's packages first")
    rec.add_argument("--work", type=Path, default=Path("/tmp/patchspec-same-outputs"), help="the scratch folder")
    rec.add_argument("--max-mb", type=float, default=300, help="skip models larger than this")
    rec.add_argument("--name", default="*.onnx", help="the file names searched for (a glob)")
    rec.add_argument("--timeout", type=float, default=600, help="seconds before a run is stopped")
    cmp = sub.add_parser("compare", help="the runs that differ between two records")
    cmp.add_argument("first")
    cmp.add_argument("second")
    args = parser.parse_args(argv)
    if args.quick:
        return quick()
    if args.command is None:
        parser.error("give a command: record or compare")
    return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
