#!/bin/bash
# Pack what benchmarks/gpu/on_device.sh needs on an offline H100/H200 machine (Python 3.12, PyTorch's
# CUDA 13 libraries) into folders git ignores, small enough to travel with the working tree (64 MiB):
#   .gpu/ort/     onnxruntime-gpu 1.31.1, sm_90 kernels only (../shared/gpu/make_bundle.sh), re-packed
#                 with xz so that Python's lzma unpacks it there (no zstd binary to carry), without the
#                 parts patchspec never imports (transformers/, quantization/, tools/): 59.9 MB
#   .whl/         jsonschema and its three dependencies for CPython 3.12 (the image has the rest): 0.5 MB
# With the checkout (6.2 MiB on disk) that is 63.7 MiB: the corpus's wheel models do not fit beside it;
# its generated models are committed and travel anyway (corpus_on_cuda.py --pack copies the smallest
# wheel models to a folder for a machine that takes more).
# usage: benchmarks/gpu/pack.sh [SHARED_GPU_DIR]    (default ../shared/gpu; needs pip, zstd, xz)
set -eu
cd "$(dirname "$0")/../.."
SHARED=${1:-../shared/gpu}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
bash "$SHARED/make_bundle.sh" "$T/zst"
rm -rf .gpu/ort && mkdir -p .gpu/ort
cp "$T/zst/libonnxruntime_providers_shared.so" .gpu/ort/
zstd -d -q --long=27 -c "$T/zst/cuda.so.zst" | xz -T1 --lzma2=preset=9e,dict=256MiB -c > .gpu/ort/cuda.so.xz
zstd -d -q -c "$T/zst/pybind.so.zst" | xz -9e -c > .gpu/ort/pybind.so.xz
mkdir "$T/py" && zstd -d -q -c "$T/zst/ortpy.tar.zst" | tar xf - -C "$T/py"
rm -rf "$T"/py/onnxruntime/{transformers,quantization,tools,ThirdPartyNotices.txt}
(cd "$T/py" && tar cf - onnxruntime onnxruntime_gpu-*.dist-info) | xz -9e -c > .gpu/ort/ortpy.tar.xz
rm -rf .whl && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
  referencing==0.37.0 rpds-py==2026.9.1
du -sh .gpu .whl
