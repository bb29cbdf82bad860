"""The contract every patch type and verifier keeps (onnx-ir's pass contract).

- A no-op application reports ``modified=False`` and leaves the serialized model byte-identical.
- A verifier never changes the model it is given, or any file.

Each registered type needs a case below, with explicit params; a built-in whose module is not
written yet is skipped with that reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from patchspec.errors import PatchError
from patchspec.host.registry import PluginRegistry
from patchspec.model.io import load_model
from patchspec.plugin.contract import PatchContext, PatchResult, VerifyContext, VerifyResult
from patchspec.spec.load import combined_schema, load_spec
from patchspec.spec.reader import load_yaml
from patchspec.testing import make_model

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    type_name: str
    params: str  # the step's value as written in a spec (YAML)
    model: Callable[[], onnx.ModelProto]
    why: str  # why this application changes nothing

    @property
    def id(self) -> str:
        return f"{self.type_name}-{self.why}"


def model_with_weight() -> onnx.ModelProto:
    """x [N, 3] + w (a 3-element initializer) -> y."""
    weight = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], dtype=np.float32), "w")
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    return make_model({"x": ("N", 3)}, {"y": ("N", 3)}, nodes=[node], initializers=[weight])


NO_OP_CASES = [
    Case("set_batch", "N", lambda: make_model({"x": ("N", 3, 8, 8)}), "batch already N"),
    Case("set_batch", "{size: 4}", lambda: make_model({"x": (4, 3, 8, 8)}), "batch already 4"),
    Case("rename_dims", "{tensor: x, axes: {0: N}}", lambda: make_model({"x": ("N", 3, 8, 8)}), "axis already named"),
    Case("rename_dims", "{tensor: x, axes: {1: 3}}", lambda: make_model({"x": ("N", 3, 8, 8)}), "axis already 3"),
    Case("replace_initializer", "{initializer: w, value: [1.0, 2.0, 3.0]}", model_with_weight, "same value"),
    Case("external_data", "{inline: true}", model_with_weight, "inline model stays inline"),
    Case("external_data", "{size_threshold: 4096}", model_with_weight, "layout only"),
    Case("acme.strip_doc_strings", "{}", lambda: make_model(), "no doc strings"),
]

#: patch types with no no-op application: every valid one changes the model. For these the
#: contract checked is that an application refused with context.fail changes nothing.
REFUSED_CASES = [
    Case(
        "add_input",
        "{name: x, dtype: float32, shape: [N, 3, 8, 8]}",
        lambda: make_model({"x": ("N", 3, 8, 8)}),
        "input exists",
    ),
]

VERIFIER_CASES = [
    Case("check", "{}", model_with_weight, "checker"),
    Case("static", "{value_info: true}", model_with_weight, "symbolic batch fails"),
    Case("static", "{}", lambda: make_model({"x": (2, 3, 8, 8)}), "static model passes"),
    Case("lint", "{inputs: {x: [2, 3]}}", model_with_weight, "lint"),
    Case("run", "{cases: [{inputs: {x: [2, 3]}}], compare: {against: original}}", model_with_weight, "run and compare"),
    Case("acme.max_nodes", "{limit: 0}", model_with_weight, "over the limit"),
]

BUILTIN_MODULES = {
    "set_batch": "set_batch",
    "rename_dims": "rename_dims",
    "replace_initializer": "replace_initializer",
    "add_input": "add_input",
    "external_data": "external_data",
    "check": "verify_check",
    "static": "verify_static",
    "lint": "verify_lint",
    "run": "verify_run",
}


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.load()


def require(registry: PluginRegistry, case: Case, kind: str) -> None:
    """Skip a type that does not exist yet (built-in not written, example plugin not installed)."""
    table = registry.patch_types if kind == "patch type" else registry.verifiers
    if case.type_name in table:
        return
    module = BUILTIN_MODULES.get(case.type_name)
    if module is not None and not (REPO / "plugins" / f"{module}.py").is_file():
        pytest.skip(f"plugin module not written yet: plugins/{module}.py")
    if module is None and case.type_name.startswith("acme."):
        pytest.skip("patchspec-acme is not installed: pip install -e examples/plugin-acme (make test does)")
    broken = {p.name: p.error for p in registry.broken()}
    pytest.fail(f"{kind} {case.type_name!r} is not registered; broken plugins: {broken}")


def load_case(folder: Path, case: Case, section: str, registry: PluginRegistry):
    """Save the case's model, write a spec with its one step, load both as the engine does."""
    onnx.save(case.model(), str(folder / "model.onnx"))
    other = "verify: []\n" if section == "patches" else "patches: []\n"
    text = (
        f"patchspec: 1\nmodel: model.onnx\noutput: out/model.onnx\n{other}"
        f"{section}:\n  - {case.type_name}: {case.params}\n"
    )
    spec_path = folder / "spec.yaml"
    spec_path.write_text(text)
    schema_says_valid(load_yaml(spec_path).data, combined_schema(registry))
    spec = load_spec(spec_path, registry)
    step = (spec.patches if section == "patches" else spec.verify)[0]
    return spec, step, load_model(folder / "model.onnx")


def schema_says_valid(data: dict, schema: dict) -> None:
    """The schema editors get from ``patchspec schema`` accepts what the validator accepts."""
    problem = None
    try:
        jsonschema.Draft202012Validator(schema).validate(data)
    except jsonschema.ValidationError as exc:
        problem = f"patchspec schema rejects a valid spec: {exc.message} at {list(exc.absolute_path)}"
    except Exception as exc:  # an unresolvable $ref: jsonschema wraps referencing's errors
        problem = f"patchspec schema cannot be used: {type(exc).__name__}: {str(exc)[:300]}"
    if problem:  # outside the except block: the schema is too long for a chained traceback
        pytest.fail(problem)


def serialized(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


@pytest.mark.parametrize("case", NO_OP_CASES, ids=lambda c: c.id)
def test_no_op_reports_unmodified_and_changes_no_byte(case, registry, tmp_path):
    require(registry, case, "patch type")
    spec, step, model = load_case(tmp_path, case, "patches", registry)
    before = serialized(model)
    result = registry.patch_types[case.type_name]().apply(
        model, step.params, PatchContext(spec, step, model_dir=tmp_path)
    )
    assert isinstance(result, PatchResult), f"apply() returned {type(result).__name__}"
    assert result.modified is False, f"{case.type_name} ({case.why}) reported modified: {result.summary}"
    assert serialized(model) == before, f"{case.type_name} ({case.why}) reported no change but changed the model"
    assert isinstance(result.summary, str) and result.summary and "\n" not in result.summary


@pytest.mark.parametrize("case", REFUSED_CASES, ids=lambda c: c.id)
def test_refused_application_changes_no_byte(case, registry, tmp_path):
    require(registry, case, "patch type")
    spec, step, model = load_case(tmp_path, case, "patches", registry)
    before = serialized(model)
    with pytest.raises(PatchError) as refused:
        registry.patch_types[case.type_name]().apply(model, step.params, PatchContext(spec, step, model_dir=tmp_path))
    assert f"{spec.path}:" in refused.value.message  # located at the spec line
    assert serialized(model) == before


@pytest.mark.parametrize("case", VERIFIER_CASES, ids=lambda c: c.id)
def test_verifier_changes_neither_the_model_nor_any_file(case, registry, tmp_path):
    require(registry, case, "verifier")
    spec, step, model = load_case(tmp_path, case, "verify", registry)
    files_before = snapshot(tmp_path)
    model_before = serialized(model)
    path = tmp_path / "model.onnx"
    context = VerifyContext(spec, step, output_path=path, original_path=path, model=model)
    result = registry.verifiers[case.type_name]().verify(step.params, context)
    assert isinstance(result, VerifyResult) and result.status in ("passed", "failed", "skipped"), result
    assert serialized(model) == model_before, f"verifier {case.type_name} changed the model it was given"
    assert snapshot(tmp_path) == files_before, f"verifier {case.type_name} changed files next to the model"


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), os.stat(p).st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("kind", ["patch type", "verifier"])
def test_every_registered_type_has_a_contract_case(kind, registry):
    if kind == "patch type":
        table, cases = registry.patch_types, NO_OP_CASES + REFUSED_CASES
    else:
        table, cases = registry.verifiers, VERIFIER_CASES
    covered = {case.type_name for case in cases}
    missing = sorted(set(table) - covered)
    assert not missing, (
        f"add a contract case to tests/plugin/test_builtin_contract.py for {kind}s: {', '.join(missing)}"
    )


# -- the test kit's contract checks, on every built-in (as a third party runs them on its plugin) ----------
#: an application that changes the model, per patch type that has one
CHANGE_CASES = {
    "set_batch": (lambda: make_model({"x": (1, 3, 8, 8)}), "{size: 4}"),
    "rename_dims": (lambda: make_model({"x": ("N", 3, 8, 8)}), "{tensor: x, axes: {0: batch}}"),
    "replace_initializer": (model_with_weight, "{initializer: w, value: [4.0, 5.0, 6.0]}"),
    "add_input": (lambda: make_model({"x": ("N", 3)}), "{name: scale, dtype: float32, shape: [1]}"),
}


def _yaml(text: str):
    import yaml

    return yaml.safe_load(text)


@pytest.mark.parametrize("name", sorted(BUILTIN_MODULES), ids=str)
def test_the_test_kit_contract_checks_pass_on_every_builtin(name, registry, tmp_path):
    from patchspec.testing import check_patch_type, check_verifier

    if name in registry.verifiers:
        for case in (c for c in VERIFIER_CASES if c.type_name == name):
            check_verifier(registry.verifiers[name], tmp_path / case.why, case.model(), _yaml(case.params))
        return
    cls = registry.patch_types[name]
    change = CHANGE_CASES.get(name)
    noops = [c for c in NO_OP_CASES if c.type_name == name]
    refused = [(c.model(), _yaml(c.params)) for c in REFUSED_CASES if c.type_name == name]
    check_patch_type(
        cls,
        tmp_path,
        change=(change[0](), _yaml(change[1])) if change else None,
        noop=(noops[0].model(), _yaml(noops[0].params)) if noops else None,
        refused=refused,
    )


def test_the_contract_checks_catch_a_lying_patch(tmp_path):
    from patchspec import PatchResult, PatchType
    from patchspec.testing import check_patch_type

    class Liar(PatchType):
        name = "liar.producer"
        description = "Sets the producer and says it did nothing."
        params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def apply(self, model, params, context):
            model.producer_name = "liar"
            return PatchResult(False, "nothing to do")

    with pytest.raises(AssertionError, match="apply\\(\\) returned modified=False but changed the model"):
        check_patch_type(Liar, tmp_path, noop=(make_model(), {}))
    Liar.params_schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    with pytest.raises(AssertionError, match="not 'additionalProperties': false"):
        check_patch_type(Liar, tmp_path, noop=(make_model(), {}))


def test_check_verifier_counts_context_fail_as_a_failed_verdict(tmp_path):
    from patchspec import Verifier
    from patchspec.testing import check_verifier, verify_context

    class Gate(Verifier):
        name = "gate.closed"
        description = "Always fails through context.fail."
        params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def verify(self, params, context):
            context.fail("gate closed", hint="open it")

    result = check_verifier(Gate, tmp_path, make_model(), {}, expect="failed")
    assert result.summary == "gate closed" and result.details == ("hint: open it",)
    from patchspec import VerificationFailed, VerifierFailed

    assert not issubclass(VerifierFailed, VerificationFailed)  # one verifier's verdict, not the run's
    onnx.save(make_model(), str(tmp_path / "m.onnx"))
    with pytest.raises(VerifierFailed, match="gate closed"):
        Gate().verify({}, verify_context("gate.closed", {}, tmp_path / "m.onnx"))


def test_typed_params_must_name_what_the_schema_names():
    """Params (a TypedDict) and params_schema say the same keys, or the test kit says which differ."""
    from typing import TypedDict

    import pytest

    from patchspec import PatchType
    from patchspec.testing.checks import check_declaration

    class Wrong(TypedDict, total=False):
        size: int
        sise: int

    class Typo(PatchType):
        Params = Wrong
        name = "typo"
        description = "A patch whose typed params name a key its schema does not."
        params_schema = {
            "type": "object",
            "additionalProperties": False,
            "properties": {"size": {"type": "integer", "description": "the size"}},
        }

    with pytest.raises(AssertionError, match=r"Params names \['sise'\] the schema does not"):
        check_declaration(Typo)
