"""Fuzzing (issue 12): the YAML reader, spec validation and the expression parser answer arbitrary
input with their own errors (exit 2), never an internal error. A few hundred examples run in
`make test`; PATCHSPEC_FUZZ_EXAMPLES=10000 runs the long version:

    PATCHSPEC_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -q tests/spec/test_fuzz.py
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchspec.errors import PatchspecError
from patchspec.host.registry import PluginRegistry
from patchspec.shapes import expressions
from patchspec.spec.load import load_spec
from patchspec.spec.reader import load_yaml

EXAMPLES = int(os.environ.get("PATCHSPEC_FUZZ_EXAMPLES", "200"))
#: the short run in `make test` is the same every time (CI must not flake); the long run explores
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize="PATCHSPEC_FUZZ_EXAMPLES" not in os.environ,
)
REGISTRY = PluginRegistry.load()
SPEC = Path("fuzz.yaml")

YAML_ALPHABET = st.sampled_from(list("abcxyz019 -:{}[],.#&*!|>'\"%@`\n\t?=") + ["patchspec", "set_batch", "size"])
yaml_text = st.lists(YAML_ALPHABET, max_size=80).map("".join)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["N", "batch", "dim(x, 0)", "original", "float32"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
step_names = st.sampled_from([*REGISTRY.patch_types, *REGISTRY.verifiers, "nope", "acme.x", ""])
steps = st.lists(st.dictionaries(step_names, values, min_size=1, max_size=1), max_size=3)
documents = st.fixed_dictionaries(
    {
        "patchspec": st.one_of(st.just(1), scalars),
        "model": st.one_of(st.just("m.onnx"), scalars),
        "output": st.one_of(st.just("o.onnx"), scalars),
        "patches": st.one_of(steps, values),
    },
    optional={"verify": st.one_of(steps, values), "extra": values},
)


@FUZZ
@given(yaml_text)
def test_the_yaml_reader_never_fails_inside(text):
    try:
        load_yaml(SPEC, text=text)
    except PatchspecError as error:
        assert error.exit_code == 2, error


@FUZZ
@given(documents)
def test_spec_validation_never_fails_inside(document):
    try:
        text = yaml.safe_dump(document, allow_unicode=True)
    except yaml.YAMLError:
        return  # not representable: nothing to validate
    try:
        load_spec(SPEC, REGISTRY, text=text)
    except PatchspecError as error:
        assert error.exit_code == 2 and str(error), error


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("dim()xyz_0123456789+-*/%,. minax'\"")), max_size=40))
def test_the_expression_parser_never_fails_inside(text):
    try:
        expressions.parse(text)
    except expressions.ExpressionError as error:
        assert str(error)
