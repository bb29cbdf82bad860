"""Benchmark: patch a model with GiBs of external weights and relocate them, against `cp`.

For each size it generates a chain of MatMul + Add layers with [4096, 4096] float32 weights
(64 MiB each) in one external data file, then times, each in a fresh process:

- ``cp`` of the data file to the same disk (and ``cp`` followed by an fsync of the copy, since
  patchspec fsyncs what it writes);
- ``patchspec apply --no-verify`` of a spec with ``set_batch`` (when that plugin is installed)
  plus ``external_data: {location: new.data, align: 65536}``, twice: a first build (no output, and
  a signing key of its own, so nothing was hashed before: the input and the new data file are both
  hashed) and a clean build (``rm -rf out`` by a user who built from this input before: this user's
  signed store knows both hashes, and the weights are copied in the kernel, read by nobody);
- a plain ``onnx.load`` + ``onnx.save(save_as_external_data=True)`` of the same model.

Peak RSS is each process's own (``/usr/bin/time``, else ``os.wait4``). The patchspec output is then
loaded in ONNX Runtime and compared with the input model. Figures are warm-cache (the data was just written).

    python benchmarks/bench_external_data.py --sizes 1 2 4 --workdir /tmp/ps-bench
    python benchmarks/bench_external_data.py --quick     # seconds: 16 MiB of [1024, 1024] weights, 1 run

Removes its multi-GB files afterwards unless ``--keep`` (and ``--workdir`` itself only when it made
it). ``--quick`` runs the same code at a toy size in a temporary folder so that ``make test`` fails
when the benchmark breaks; its figures are not the benchmark's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

SIDE = 4096
TENSOR_BYTES = SIDE * SIDE * 4
ALIGN = 4096
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # else os.wait4
# --quick: four [1024, 1024] layers (16 MiB), one run
QUICK = {"sizes": [4 * 1024 * 1024 * 4 / 2**30], "side": 1024, "repeat": 1}


def generate(folder: Path, gib: float, side: int = SIDE) -> Path:
    """folder/model.onnx + model.onnx_data: ``gib`` GiB of [side, side] float32 weights."""
    folder.mkdir(parents=True, exist_ok=True)
    layers = max(1, round(gib * 2**30 / (side * side * 4)))
    rng = np.random.default_rng(0)
    nodes, initializers, current = [], [], "x"
    with open(folder / "model.onnx_data", "wb") as data:
        for index in range(layers):
            for name, shape, values in _layer_tensors(index, rng, side):
                data.write(b"\0" * (-data.tell() % ALIGN))
                initializers.append(_external(name, shape, "model.onnx_data", data.tell(), values.nbytes))
                data.write(values.tobytes())
            nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"m{index}"]))
            nodes.append(helper.make_node("Add", [f"m{index}", f"b{index}"], [f"a{index}"]))
            current = f"a{index}"
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", side])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    return folder / "model.onnx"


def _layer_tensors(index: int, rng, side: int):
    scale = np.float32(1.7 / np.sqrt(side))  # keeps activations near 1 through the chain
    weight = (rng.random((side, side), dtype=np.float32) * 2 - 1) * scale
    bias = (rng.random(side, dtype=np.float32) - 0.5) / 10
    return [(f"w{index}", [side, side], weight), (f"b{index}", [side], bias)]


def _external(name: str, dims, location: str, offset: int, length: int) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def timed(command: list[str], workdir: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one fresh process, after flushing earlier writes to disk.

    The command runs under /usr/bin/time: a child forked from this (large) process would report
    this process's pages as its own peak RSS. Where there is no /usr/bin/time (slim images), the
    child's own rusage is used, which can carry this process's peak.
    """
    os.sync()
    report = workdir / "time.txt"
    started = time.perf_counter()
    if not TIME:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(command)}\n{stderr}")
        return seconds, usage.ru_maxrss / 1024  # Linux: KiB
    result = subprocess.run(
        [TIME, "-f", "%M", "-o", str(report), *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(command)}\n{result.stderr}")
    return seconds, int(report.read_text().split()[-1]) / 1024


def has_set_batch() -> bool:
    from patchspec.host.registry import PluginRegistry

    return "set_batch" in PluginRegistry.load().patch_types


def write_spec(folder: Path, model: Path, set_batch: bool) -> Path:
    patches = "  - set_batch: 8\n" if set_batch else ""
    patches += "  - external_data: {location: new.data, align: 65536}\n"
    spec = folder / "spec.yaml"
    spec.write_text(f"patchspec: 1\nmodel: {model}\noutput: {folder / 'out' / 'model.onnx'}\npatches:\n{patches}")
    return spec


ONNX_RESAVE = (
    "import onnx, sys; m = onnx.load(sys.argv[1]); "
    "onnx.save(m, sys.argv[2], save_as_external_data=True, location='resaved.data', size_threshold=1024)"
)


PATCHSPEC: list[str] = []  # --patchspec: the command to time, when not the one beside this interpreter


def patchspec_command() -> list[str]:
    """``--patchspec``, else the ``patchspec`` beside this interpreter (no need for an activated venv),
    else the one on PATH."""
    if PATCHSPEC:
        return PATCHSPEC
    here = Path(sys.executable).with_name("patchspec")
    return [str(here) if here.is_file() else shutil.which("patchspec") or "patchspec"]


def with_key(key: Path) -> dict[str, str]:
    """The environment with patchspec's signing key (and so its shared store of hashes) at ``key``."""
    return {**os.environ, "PATCHSPEC_CACHE_KEY": str(key)}


def measure(folder: Path, model: Path, spec: Path, repeat: int) -> dict[str, tuple[float, float]]:
    """Each command ``repeat`` times in turn. ``patchspec`` is a first build: no output, and a key of
    its own, so nothing was hashed before; ``clean build`` is a build into an emptied output folder
    (``rm -rf out``) by a user who built from this input before."""
    data, out = model.parent / "model.onnx_data", folder / "out"
    patchspec = [*patchspec_command(), "-q", "apply", "--no-verify", "--force", str(spec)]
    runs: dict[str, list[tuple[float, float]]] = {
        name: [] for name in ("cp", "cp+fsync", "patchspec", "clean build", "startup", "onnx load+save")
    }
    shared = with_key(folder / "keys" / "shared" / "cache.key")
    subprocess.run(patchspec, env=shared, check=True, stdout=subprocess.DEVNULL)  # the input hashed once
    for index in range(repeat):
        for name, command, cleanup, env in (
            ("cp", ["cp", str(data), str(folder / "copy.data")], [folder / "copy.data"], None),
            (
                "cp+fsync",
                ["sh", "-c", f"cp '{data}' '{folder / 'copy.data'}' && sync -f '{folder / 'copy.data'}'"],
                [folder / "copy.data"],
                None,
            ),
            ("patchspec", patchspec, [out], with_key(folder / "keys" / str(index) / "cache.key")),
            ("clean build", patchspec, [out], shared),
            ("startup", [*patchspec_command(), "-q", "validate", str(spec)], [], None),
        ):
            _remove(cleanup)
            runs[name].append(timed(command, folder, env))
    resaved = folder / "resaved"  # once: it holds every weight in memory
    resaved.mkdir()
    runs["onnx load+save"].append(
        timed([sys.executable, "-c", ONNX_RESAVE, str(model), str(resaved / "model.onnx")], folder)
    )
    _remove([resaved, folder / "copy.data", folder / "keys"])
    return {name: (statistics.median(t for t, _ in values), max(r for _, r in values)) for name, values in runs.items()}


def _remove(paths) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def check_output(model: Path, output: Path, batch: int, side: int = SIDE) -> str:
    """The output loads in ONNX Runtime, runs, and gives the input model's result."""
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((batch, side)).astype(np.float32)
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    offsets = [
        int(e.value)
        for t in onnx.load(str(output), load_external_data=False).graph.initializer
        for e in t.external_data
        if e.key == "offset"
    ]
    aligned = all(offset % 65536 == 0 for offset in offsets)
    error = float(np.max(np.abs(got - expected)))
    return (
        f"ORT runs the output: max abs diff {error:.3g} vs input, {len(offsets)} offsets all 64 KiB aligned: {aligned}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4], help="GiB of weights per model")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the files go (default: /tmp/patchspec-bench; with --quick, a new temporary folder)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--patchspec", help="the patchspec command to time (another checkout's, to compare)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a check that the benchmark runs, in seconds: --sizes {QUICK['sizes'][0]:g} with "
        f"[{QUICK['side']}, {QUICK['side']}] weights, --repeat 1 (make test runs it)",
    )
    parser.set_defaults(side=SIDE)
    args = parser.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    if args.patchspec:
        PATCHSPEC[:] = args.patchspec.split()
    made_workdir = args.workdir is None or not args.workdir.exists()  # a folder named and already there stays
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="patchspec-bench-")) if args.quick else Path("/tmp/patchspec-bench")
    set_batch = has_set_batch()
    print(
        f"spec patches: {'set_batch: 8 + ' if set_batch else '(set_batch not installed) '}external_data: {{location: new.data, align: 65536}}"
    )
    print(
        "| weights | cp | cp + fsync | patchspec first build | ratio to cp + fsync | clean build | ratio to cp + "
        "fsync | patchspec startup (validate) | patchspec peak RSS | onnx load+save | onnx peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    checks = []
    try:
        for gib in args.sizes:
            folder = args.workdir / f"{gib:g}gib"
            _remove([folder])
            model = generate(folder / "in", gib, args.side)
            spec = write_spec(folder, model, set_batch)
            figures = measure(folder, model, spec, args.repeat)
            cp, cp_sync, ps, clean, start, resave = (
                figures[k] for k in ("cp", "cp+fsync", "patchspec", "clean build", "startup", "onnx load+save")
            )
            print(
                f"| {gib:g} GiB | {cp[0]:.2f} s | {cp_sync[0]:.2f} s | {ps[0]:.2f} s | {ps[0] / cp_sync[0]:.2f}x | "
                f"{clean[0]:.2f} s | {clean[0] / cp_sync[0]:.2f}x | {start[0]:.2f} s | {max(ps[1], clean[1]):.0f} MiB | "
                f"{resave[0]:.2f} s | {resave[1]:.0f} MiB |",
                flush=True,
            )
            if gib == args.sizes[0]:
                checks.append(
                    f"{gib:g} GiB: "
                    + check_output(model, folder / "out" / "model.onnx", 8 if set_batch else 2, args.side)
                )
            if not args.keep:
                _remove([folder])
    finally:
        if not args.keep and made_workdir:  # never a folder that was there before
            _remove([args.workdir])
    for line in checks:
        print(line)


if __name__ == "__main__":
    main()
