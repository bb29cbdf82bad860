"""Unpack the xz bundle benchmarks/gpu/pack.sh made into a folder to put first on PYTHONPATH.

usage: python3 benchmarks/gpu/unpack_ort.py .gpu/ort /tmp/ort-gpu
"""

from __future__ import annotations

import lzma
import shutil
import sys
import tarfile
from pathlib import Path

CAPI = "onnxruntime/capi"
PYBIND = "onnxruntime_pybind11_state.cpython-312-x86_64-linux-gnu.so"


def main() -> None:
    bundle, target = Path(sys.argv[1]), Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle / "ortpy.tar.xz") as archive:
        archive.extractall(target, filter="data")
    capi = target / CAPI
    for packed, name in (("cuda.so.xz", "libonnxruntime_providers_cuda.so"), ("pybind.so.xz", PYBIND)):
        with lzma.open(bundle / packed) as source, open(capi / name, "wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 24)
    shutil.copy(bundle / "libonnxruntime_providers_shared.so", capi)
    print(f"onnxruntime-gpu unpacked into {target}")


if __name__ == "__main__":
    main()
