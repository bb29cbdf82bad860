"""Every script in benchmarks/ runs with ``--quick``, so that a benchmark the code has moved away from fails
``make test`` instead of rotting (bench_set_batch.py crashed unnoticed after the plugin API changed).

``--quick`` runs a script's own code end to end at toy sizes, in a temporary folder it removes, writing
nothing to docs/ or benchmarks/results/. These tests check that it exits 0, prints its figures (rows
of its table, with numbers) and leaves nothing behind; never what the figures are.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
S = r"\d+\.\d\d"  # a figure, as the tables print them
NOT_OURS = {".ses"}  # onnxruntime writes its session id file to $TMPDIR

# lines each script's --quick must print (multiline regexes on its stdout)
FIGURES = {
    "ab_rounds.py": [
        rf"^  \S*patchspec: A {S}s \(cpu {S}s\) B {S}s ratio {S} load [\d.]+$",
        rf"^\S*patchspec first build: median {S}x \({S}-{S}\); A {S}s, cpu {S}s; B {S}s; load [\d.]+-[\d.]+$",
    ],
    "bench_apply.py": [
        rf"^\| MatMul chain, [\d.]+ GiB external weights \| patchspec apply [^|]+\| {S} \| {S} \| \d+ \|$",
        rf"^\| MatMul chain, [\d.]+ GiB external weights \| onnx.load \+ onnx.save [^|]+\| {S} \| {S} \| \d+ \|$",
    ],
    "bench_external_data.py": [
        rf"^\| [\d.]+ GiB \| {S} s \| {S} s \| {S} s \| {S}x \| {S} s \| {S}x \| {S} s \| \d+ MiB \| {S} s "
        r"\| \d+ MiB \|$",
        r"^[\d.]+ GiB: ORT runs the output: max abs diff 0 vs input, \d+ offsets all 64 KiB aligned: True$",
    ],
    "bench_init.py": [
        rf"^\| [\d.]+ \| patchspec init --batch 4 \| {S} \| {S} \| \d+ \|$",
        rf"^\| [\d.]+ \| patchspec inspect --suggest \| {S} \| {S} \| \d+ \|$",
        rf"^\| [\d,]+ \| [\d.]+ \| {S} \| {S} \| {S}x \| \d+ \| \d+ \| -?{S} \| {S} \| {S}x \| \d+ \| {S} \| {S} \| {S}x \| \d+ \| 1 \|$",
    ],
    "bench_verify_memory.py": [rf"^\| \d+ \| {S} \| \d+ \| \d+ \|$"],
    "bench_noop.py": [rf"^\| [\d.]+ \| {S} \| {S} \| {S} \| {S} \| {S} \|$"],
    "bench_startup.py": [
        r"^\| `python -c pass` \| \d+\.\d{3} \| \d+\.\d{3} \| \d+\.\d{3} \| 1\.00x \| - \| - \|$",
        *(
            rf"^\| {command} \| \d+\.\d{{3}} \| \d+\.\d{{3}} \| \d+\.\d{{3}} \| {S}x \| <= {target}x \| (yes|\*\*no\*\*) \|$"
            for command, target in (
                ("`patchspec --version`", 3),
                ("`patchspec validate SPEC`", 8),
                ("up-to-date `patchspec apply SPEC`", 6),
                ("`patchspec apply --check SPEC`", 6),
            )
        ),
    ],
    "bench_set_batch.py": [
        rf"^\| [\d,]+ \| \d+ \| [\d.]+ \| [\d.]+ \| {S} \| {S} \| {S} \| {S}x \| [\d.]+ \| -?\d+ \| -?\d+ \| {S} \| {S} \| 1 \|$",
        r"^- target <= 4x `infer_shapes` at [\d,]+ nodes: [\d.]+x, (met|\*\*not met\*\*)$",
        rf"^\| 400 \| [\d.]+ \| 20 \| 20 \| {S} \| {S} \| \d+\.\d+ \| \d+ \| {S} \| {S} \| \d+\.\d+ \| 1 / 1 \|$",
        r"^- 400 / 200 nodes \(x2\): `patchspec apply` x[\d.]+ wall",
        rf"^\| [\d.]+ GiB \| {S} \| {S} \| \d+ \| \d+ \| (yes|\*\*no\*\*) \| 1 \| [\d.]+ \| 1 \|$",
    ],
    "same_outputs.py": [r"^3 runs compared \(3 wrote files\), 0 differ$"],
    "compare_peers.py": [
        r"^\| model \| patchspec \| polygraphy sanitize \|",
        r"^\| generated_reshape \| ok \| [^|]+ \| [^|]+ \| [^|]+ \| [^|]+ \|$",
        r"^details: not written \(--quick without --json\); [\d.]+ s$",
        r"^head to head, ppocr_det(: skipped: .+| \(PP-OCRv4 detector, static batch 4; medians\):)$",
    ],
}


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_runs_quick(script, tmp_path):
    assert script in FIGURES, f"benchmarks/{script}: give it --quick and list the figures it prints in FIGURES"
    results = digests(BENCHMARKS / "results")
    temporary = tmp_path / "tmp"  # the scripts' temporary folders go here: it must be empty afterwards
    temporary.mkdir()
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    shown = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, shown
    for figure in FIGURES[script]:
        assert re.search(figure, done.stdout, re.MULTILINE), f"no line matches {figure!r}\n{shown}"
    left = sorted(p.name for p in temporary.iterdir() if p.name not in NOT_OURS)
    assert not left, f"left behind in the temporary folder: {left}"
    assert digests(BENCHMARKS / "results") == results, "--quick wrote to benchmarks/results"
