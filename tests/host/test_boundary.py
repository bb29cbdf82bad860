"""One guarded boundary (issue 19): a fault in a third-party plugin's code is reported as that plugin's.

Every call into plugin code (the schema, ``check_params``, ``dependencies``, ``apply``, ...) goes through
``patchspec.host.boundary``, whether the spec loader, the engine or the test kit makes it. A fault
names the plugin, its distribution and version and the line of its own code, never "a bug in
patchspec", and stops only the steps that use that plugin. The plugins are installed for real.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from helpers import PluginSite
from patchspec.testing import check_patch_type, make_model, run_cli

DIST, VERSION = "faulty-tools", "2.0.1"
LABEL = f"plugin 'fric' ({DIST} {VERSION})"

BAD_SCHEMA = """\
from patchspec import PatchResult, PatchType, hookimpl


class BadSchemaPatch(PatchType):
    name = "fric.bad_schema"
    description = "its schema misspells a type"
    params_schema = {"type": "objet", "properties": {}, "additionalProperties": False}  # the schema

    def apply(self, model, params, context):
        return PatchResult(False, "never")


@hookimpl
def register_patch_types(register):
    register(BadSchemaPatch)
"""

FAULTY = """\
from patchspec import PatchResult, PatchType, hookimpl

NO_PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}


class CheckParamsRaisesPatch(PatchType):
    name = "fric.check_params_raises"
    description = "check_params reads a key the schema does not require"
    params_schema = NO_PARAMS

    def check_params(self, params):
        if params["limit"] > 3:  # check_params raises
            yield ("limit",), "too high"

    def apply(self, model, params, context):
        return PatchResult(False, "never")


class DependenciesRaisesPatch(PatchType):
    name = "fric.dependencies_raises"
    description = "dependencies reads a key the schema does not require"
    params_schema = NO_PARAMS

    def dependencies(self, params):
        return [params["file"]]  # dependencies raises

    def apply(self, model, params, context):
        return PatchResult(False, "never")


class ApplyRaisesPatch(PatchType):
    name = "fric.apply_raises"
    description = "apply divides by zero"
    params_schema = NO_PARAMS

    def apply(self, model, params, context):
        return PatchResult(False, str(1 // 0))  # apply raises


class FinePatch(PatchType):
    name = "fric.fine"
    description = "changes nothing, as it says"
    params_schema = NO_PARAMS

    def apply(self, model, params, context):
        return PatchResult(False, "nothing to do")


class LiePatch(PatchType):
    name = "fric.lie"
    description = "says it modified the model and did not"
    params_schema = NO_PARAMS

    def apply(self, model, params, context):  # apply lies
        return PatchResult(True, "did a lot")


@hookimpl
def register_patch_types(register):
    for cls in (CheckParamsRaisesPatch, DependenciesRaisesPatch, ApplyRaisesPatch, FinePatch, LiePatch):
        register(cls)
"""

#: a spec that uses none of the faulty types: a working type of the same plugin and a built-in
UNAFFECTED = "patchspec: 1\nmodel: model.onnx\noutput: out/fine.onnx\npatches:\n  - fric.fine: {}\n  - set_batch: 2\n"
#: a spec that uses no type of the plugin
BUILTIN_ONLY = "patchspec: 1\nmodel: model.onnx\noutput: out/fine.onnx\npatches:\n  - set_batch: 2\n"


def line_of(source: str, marker: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if marker in line)


def spec_using(type_name: str) -> str:
    return f"patchspec: 1\nmodel: model.onnx\noutput: out/model.onnx\npatches:\n  - {type_name}: {{}}\n"


def step_of(type_name: str) -> str:
    """Where ``spec_using(type_name)`` writes its step's value, and the step's name."""
    return f"faulty.yaml:5:{len(f'  - {type_name}: ') + 1}: patches[0] ({type_name})"


@pytest.fixture
def site(tmp_path, monkeypatch):
    yield PluginSite(tmp_path / "site", monkeypatch, DIST, VERSION)
    sys.modules.pop("fric_plugin", None)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "work").mkdir()
    make = make_model({"x": ("N", 3)})
    (tmp_path / "work" / "model.onnx").write_bytes(make.SerializeToString())
    (tmp_path / "work" / "faulty.yaml").write_text("")
    (tmp_path / "work" / "unaffected.yaml").write_text(UNAFFECTED)
    (tmp_path / "work" / "builtin_only.yaml").write_text(BUILTIN_ONLY)
    return tmp_path / "work"


def assert_the_plugins_fault(stderr: str, plugin_file, line: int, method: str) -> None:
    assert f"  at {plugin_file}:{line} in {method}\n" in stderr, stderr
    assert f"this is a bug in {LABEL}, not in the spec or the model" in stderr, stderr
    assert f"hint: report it to the author of {DIST}" in stderr, stderr
    assert "bug in patchspec" not in stderr and "internal error" not in stderr, stderr


# -- an invalid params_schema: found when the plugin loads, exit 2, the plugin listed as broken ----------


@pytest.mark.parametrize("command", ["validate", "apply"])
def test_an_invalid_schema_is_found_at_load_and_names_the_plugin(site, folder, command):
    plugin_file = site.install(BAD_SCHEMA)
    (folder / "faulty.yaml").write_text(spec_using("fric.bad_schema"))
    code, _, stderr = run_cli([command, "faulty.yaml"], cwd=folder)
    assert code == 2, stderr
    assert "unknown patch type 'fric.bad_schema': plugin 'fric' is installed but failed to load" in stderr
    assert (
        f"hint: {LABEL} failed to load: patch type 'fric.bad_schema': params_schema is not a valid JSON "
        f"Schema: type: 'objet' is not valid under any of the given schemas "
        f"(at {plugin_file}:{line_of(BAD_SCHEMA, '# the schema')} in BadSchemaPatch)"
    ) in stderr
    assert "bug in patchspec" not in stderr and "internal error" not in stderr
    assert not (folder / "out").exists()
    code, _, stderr = run_cli([command, "builtin_only.yaml"], cwd=folder)
    assert code == 0, stderr


def test_a_plugin_with_an_invalid_schema_is_listed_as_broken(site, folder):
    plugin_file = site.install(BAD_SCHEMA)
    code, listing, _ = run_cli(["plugins"])
    assert code == 5
    assert (
        "  BROKEN: patch type 'fric.bad_schema': params_schema is not a valid JSON Schema: type: 'objet' is not "
        f"valid under any of the given schemas (at {plugin_file}:{line_of(BAD_SCHEMA, '# the schema')} in BadSchemaPatch)"
    ) in listing
    (folder / "faulty.yaml").write_text(spec_using("fric.bad_schema"))
    code, stdout, _ = run_cli(["validate", "faulty.yaml", "builtin_only.yaml"], cwd=folder)
    assert code == 2 and "builtin_only.yaml: ok" in stdout


# -- check_params or dependencies raises: exit 5 from validate and apply, only for the specs that use it --


@pytest.mark.parametrize("command", ["validate", "apply"])
@pytest.mark.parametrize("method", ["check_params", "dependencies"])
def test_a_static_check_that_raises_is_a_bug_in_the_plugin(site, folder, command, method):
    plugin_file = site.install(FAULTY)
    (folder / "faulty.yaml").write_text(spec_using(f"fric.{method}_raises"))
    code, _, stderr = run_cli([command, "faulty.yaml"], cwd=folder)
    assert code == 5, stderr
    missing = "limit" if method == "check_params" else "file"
    assert stderr.startswith(
        f"{step_of(f'fric.{method}_raises')}: patch type "
        f"'fric.{method}_raises' {method}() raised KeyError: '{missing}'\n"
    ), stderr
    assert_the_plugins_fault(stderr, plugin_file, line_of(FAULTY, f"# {method} raises"), method)
    assert not (folder / "out").exists()
    code, _, stderr = run_cli([command, "unaffected.yaml"], cwd=folder)
    assert code == 0, stderr


@pytest.mark.parametrize("method", ["check_params", "dependencies"])
def test_validate_goes_on_to_the_next_spec_and_exits_with_the_faults_code(site, folder, method):
    site.install(FAULTY)
    (folder / "faulty.yaml").write_text(spec_using(f"fric.{method}_raises"))
    code, stdout, stderr = run_cli(["validate", "faulty.yaml", "unaffected.yaml"], cwd=folder)
    assert code == 5, stderr
    assert "unaffected.yaml: ok" in stdout
    assert f"this is a bug in {LABEL}" in stderr and "bug in patchspec" not in stderr


# -- apply raises: validate passes (apply is not called), apply exits 5; the test kit says the same ------


def test_an_apply_that_raises_is_a_bug_in_the_plugin_in_a_run_and_in_the_test_kit(site, folder, tmp_path):
    plugin_file = site.install(FAULTY)
    (folder / "faulty.yaml").write_text(spec_using("fric.apply_raises"))
    code, _, stderr = run_cli(["validate", "--no-model", "faulty.yaml"], cwd=folder)
    assert code == 0, stderr  # the spec alone is fine; validate with the model runs the patch and finds the bug
    code, _, stderr = run_cli(["validate", "faulty.yaml"], cwd=folder)
    assert code == 5 and "apply() raised ZeroDivisionError" in stderr, stderr
    code, _, stderr = run_cli(["apply", "faulty.yaml"], cwd=folder)
    assert code == 5, stderr
    assert stderr.startswith(
        f"{step_of('fric.apply_raises')}: patch type 'fric.apply_raises' "
        "apply() raised ZeroDivisionError: integer division or modulo by zero\n"
    ), stderr
    assert_the_plugins_fault(stderr, plugin_file, line_of(FAULTY, "# apply raises"), "apply")
    assert not (folder / "out").exists()
    assert run_cli(["apply", "unaffected.yaml"], cwd=folder)[0] == 0
    module = importlib.import_module("fric_plugin")
    with pytest.raises(AssertionError) as raised:
        check_patch_type(module.ApplyRaisesPatch, tmp_path, noop=(make_model(), {}))
    message = str(raised.value)
    assert message.startswith("patch type 'fric.apply_raises' apply() raised ZeroDivisionError"), message
    assert_the_plugins_fault(message + "\n", plugin_file, line_of(FAULTY, "# apply raises"), "apply")


@pytest.mark.parametrize(
    ("type_name", "said", "marker"),
    [
        ("CheckParamsRaisesPatch", "check_params() raised KeyError: 'limit'", "# check_params raises"),
        ("LiePatch", "apply() returned modified=True but left the model as it was", "# apply lies"),
    ],
)
def test_the_test_kit_checks_the_contract_with_the_engines_code(site, tmp_path, type_name, said, marker):
    plugin_file = site.install(FAULTY)
    cls = getattr(importlib.import_module("fric_plugin"), type_name)
    with pytest.raises(AssertionError) as raised:
        check_patch_type(cls, tmp_path, noop=(make_model(), {}))
    message = str(raised.value)
    assert message.startswith(f"patch type '{cls.name}' {said}"), message
    method = "check_params" if "check_params" in said else "apply"
    assert_the_plugins_fault(message + "\n", plugin_file, line_of(FAULTY, marker), method)


# -- a plugin that leaves the process: SystemExit and KeyboardInterrupt are its fault too (issue 35) -------

EXITING = """\
import sys

from patchspec import PatchResult, PatchType, hookimpl

NO_PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}


class ExitsPatch(PatchType):
    name = "fric.exits"
    description = "calls sys.exit(0) from apply"
    params_schema = NO_PARAMS

    def apply(self, model, params, context):
        sys.exit(0)  # apply exits


class ExitsInCheckPatch(PatchType):
    name = "fric.exits_in_check"
    description = "calls sys.exit() from check_params"
    params_schema = NO_PARAMS

    def check_params(self, params):
        sys.exit()  # check_params exits
        yield

    def apply(self, model, params, context):
        return PatchResult(False, "never")


class InterruptsPatch(PatchType):
    name = "fric.interrupts"
    description = "raises KeyboardInterrupt itself"
    params_schema = NO_PARAMS

    def apply(self, model, params, context):
        raise KeyboardInterrupt  # apply interrupts


@hookimpl
def register_patch_types(register):
    for cls in (ExitsPatch, ExitsInCheckPatch, InterruptsPatch):
        register(cls)
"""


@pytest.mark.parametrize("type_name", ["fric.exits", "fric.interrupts"])
def test_a_plugin_that_exits_or_interrupts_from_apply_is_its_fault_and_nothing_is_written(site, folder, type_name):
    """A plugin's sys.exit(0) got past the guard: apply exited 0, wrote nothing, left the old output."""
    site.install(EXITING)
    (folder / "out").mkdir()
    (folder / "faulty.yaml").write_text(spec_using(type_name))
    code, _, stderr = run_cli(["apply", "faulty.yaml"], cwd=folder)
    assert code == 5, stderr
    assert f"patch type '{type_name}' apply() raised" in stderr and "this is a bug in plugin 'fric'" in stderr
    assert list((folder / "out").iterdir()) == []


def test_a_plugin_that_exits_from_check_params_does_not_stop_validate(site, folder):
    site.install(EXITING)
    (folder / "faulty.yaml").write_text(spec_using("fric.exits_in_check"))
    code, stdout, stderr = run_cli(["validate", "faulty.yaml", "builtin_only.yaml"], cwd=folder)
    assert code == 5, stderr
    assert "check_params() raised SystemExit(None): a plugin must not exit the process" in stderr
    assert "builtin_only.yaml: ok" in stdout  # the next spec is still validated


# -- a shorthand that can never apply: the plugin is listed as broken when it loads ----------------------

SHORTHAND_ON_A_MAPPING = """
from typing import Annotated, TypedDict

from patchspec import Param, PatchResult, PatchType, hookimpl


class Where(TypedDict):
    key: Annotated[str, Param("a metadata key")]


class StampParams(TypedDict):
    where: Annotated[Where, Param("where to stamp")]


class StampPatch(PatchType[StampParams]):
    name = "fric.stamp"
    description = "stamp"
    shorthand = "where"  # the shorthand

    def apply(self, model, params, context):
        return PatchResult(False, "nothing")


@hookimpl
def register_patch_types(register):
    register(StampPatch)
"""


def test_a_shorthand_on_a_mapping_param_is_found_at_load(site, folder):
    """`fric.stamp: {key: a}` is the params themselves: a shorthand naming a mapping never applies."""
    plugin_file = site.install(SHORTHAND_ON_A_MAPPING)
    code, listing, _ = run_cli(["plugins"])
    assert code == 5
    assert (
        "  BROKEN: patch type 'fric.stamp': shorthand 'where' names a param whose value is always a mapping, so it "
        "never applies: 'fric.stamp: {...}' is read as the params themselves; name a param whose value is not a "
        f"mapping, or remove the shorthand (at {plugin_file}:{line_of(SHORTHAND_ON_A_MAPPING, '# the shorthand')} "
        "in StampPatch)"
    ) in listing, listing
    (folder / "faulty.yaml").write_text(spec_using("fric.stamp"))
    code, _, stderr = run_cli(["validate", "faulty.yaml"], cwd=folder)
    assert code == 2 and "plugin 'fric' is installed but failed to load" in stderr, stderr
