#!/bin/bash
# The GPU checks of docs/providers.md in one run, on an offline H100/H200 machine whose python3 holds
# PyTorch (and so CUDA 13's libraries), with what benchmarks/gpu/pack.sh packed into .gpu/ and .whl/.
# Writes its logs to $OUT (default /tmp/gpu-out). Steps, most important first, each under a timeout:
#   make demo (the README's spec lists CUDAExecutionProvider), the providers table (table_on_cuda.py;
#   TABLE=0 skips it), make test (CUDA present), the corpus on CUDA (corpus_on_cuda.py; CORPUS=0 skips it).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
SUITE_S=${SUITE_S:-230}; CORPUS_S=${CORPUS_S:-110}
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_BUILD_ISOLATION=0
step() { echo; echo "== $(date +%T) $*"; }

step "setup"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 benchmarks/gpu/unpack_ort.py .gpu/ort /tmp/ort-gpu || exit 1
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
export PYTHONPATH=/tmp/ort-gpu
export LD_LIBRARY_PATH="$(find "$SP/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')${LD_LIBRARY_PATH:-}"
python3 -m pip install -q --no-deps .whl/*.whl
python3 -c "import setuptools; print('setuptools', setuptools.__version__)"
ln -sfn "$(dirname "$(dirname "$(command -v python3)")")" .venv   # make's .venv: the image's Python

step "make demo"
timeout 120 make demo 2>&1 | tee "$OUT/demo.log"; echo "make demo: exit ${PIPESTATUS[0]}"
python3 -m pip install -q --no-deps -e examples/plugin-acme
python3 -m patchspec env 2>&1 | tee "$OUT/env.log"
python3 -m patchspec -v apply specs/scrfd_b32.yaml --force 2>&1 | grep -v "CPUExecutionProvider case" | head -40

step "providers table"
[ "${TABLE:-1}" = 0 ] || timeout 90 python3 benchmarks/gpu/table_on_cuda.py --out "$OUT/table.json" 2>&1 | tee "$OUT/table.log"

step "make test (CUDA present), xdist, then the failures again one at a time"
touch .venv/.installed   # the second layer's tools (ruff, mypy, pre-commit) cannot be installed offline
export PYTEST_ADDOPTS="-n 14"
timeout "$SUITE_S" make test 2>&1 | tee "$OUT/suite_full.log" | tail -40; echo "make test: exit ${PIPESTATUS[0]}"
PYTEST_ADDOPTS="" timeout 40 python3 -m pytest -q --lf tests 2>&1 | tail -25 | tee "$OUT/suite_lf.log"

step "corpus on CUDA"
[ "${CORPUS:-1}" = 0 ] || timeout "$CORPUS_S" python3 benchmarks/gpu/corpus_on_cuda.py --models .gpu/models --jobs 12 --out "$OUT/corpus.json" 2>&1 | tee "$OUT/corpus.log"
step "done"
