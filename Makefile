# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the PP-OCR det/rec/cls models ship inside this wheel; it is only a source of real models
RAPIDOCR := rapidocr-onnxruntime==1.4.4

.PHONY: demo test venv clean bench
.DELETE_ON_ERROR:

venv: $(STAMP)

$(STAMP): pyproject.toml examples/plugin-acme/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q -e examples/plugin-acme
	$(PY) -m pip install -q --no-deps $(RAPIDOCR)
	touch $@

demo: $(STAMP)
	$(PY) examples/scrfd/make_scrfd.py models/scrfd_like.onnx
	$(VENV)/bin/patchspec apply specs/scrfd_b32.yaml

# two runs: the example plugin's tests have a conftest of their own
test: $(STAMP)
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q -p no:cacheprovider examples/plugin-acme/tests

bench: $(STAMP)
	$(PY) benchmarks/bench_apply.py

clean:
	rm -rf $(VENV) build models/scrfd_like.onnx
