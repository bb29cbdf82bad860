"""Peak memory of `patchspec apply` with a `run` check, as the external weights grow.

The run verifier builds one session at a time (the output's runs every case and is freed before the
reference's is built), and onnxruntime maps external data rather than copying it, so the peak must
stay near onnxruntime's own for one session, not grow with two copies of the weights. The model is
bench_set_batch's memory model (a MatMul chain over ``--sizes-gib`` GiB of external weights), re-batched
to 2 and compared per sample with the original at optimizations all and disabled, in a fresh process::

    .venv/bin/python benchmarks/bench_verify_memory.py --sizes-gib 1 2

``--quick`` (what ``make test`` runs): one 64 MiB model.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_set_batch import SIDE, TENSOR_BYTES, big_model  # a sibling script, not a package
from lib.processes import child

PATCHSPEC = str(Path(sys.executable).with_name("patchspec"))
SPEC = (
    "patchspec: 1\nmodel: big.onnx\noutput: out/big_b2.onnx\npatches:\n  - set_batch: 2\nverify:\n  - run:\n"
    f"      cases: [{{inputs: {{x: [2, {SIDE}]}}}}]\n      compare: {{split_batch: true}}\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[1, 2], help="GiB of external weights")
    parser.add_argument("--workdir", type=Path, help="where the temporary folder goes (default: the system's)")
    parser.add_argument("--quick", action="store_true", help="one 64 MiB model (make test runs it)")
    args = parser.parse_args(argv)
    sizes = [TENSOR_BYTES / 2**30] if args.quick else args.sizes_gib
    work = Path(tempfile.mkdtemp(prefix="patchspec-bench-verify-", dir=args.workdir))
    rows = []
    try:
        for gib in sizes:
            folder = work / f"{gib:g}"
            folder.mkdir()
            big_model(folder, gib)
            (folder / "spec.yaml").write_text(SPEC)
            run = child([PATCHSPEC, "apply", "spec.yaml", "--force"], folder)
            if "run ..................... passed" not in run.stdout:
                raise SystemExit(f"the run check did not pass:\n{run.stdout[-2000:]}")
            weights = (folder / "big.onnx.data").stat().st_size / 2**20
            rows.append((weights, run.wall_s, run.rss_mib, (1.3 * weights + 300)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| external weights (MiB) | apply + run, wall (s) | peak RSS (MiB) | target: 1.3 x weights + 300 (MiB) |")
    print("| --- | --- | --- | --- |")
    for weights, wall, rss, target in rows:
        print(f"| {weights:.0f} | {wall:.2f} | {rss:.0f} | {target:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
