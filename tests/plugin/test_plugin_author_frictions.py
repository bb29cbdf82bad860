"""Frictions a third-party plugin author hit (issue 10), each pinned by the message a user sees.

Third-party plugins here are installed for real: a ``*.dist-info`` folder with an
``entry_points.txt`` on ``sys.path``, which ``importlib.metadata`` finds as it finds pip's.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import PluginSite
from patchspec.spec.catalog import DISABLE_ENV
from patchspec.testing import make_model, registered, run_cli, run_spec

DIST, VERSION = "fric-tools", "1.2.3"

# line numbers below are asserted: keep the first lines of each source as they are
WORKING = """\
from patchspec import PatchResult, PatchType, Verifier, VerifyResult, hookimpl


def count_things(model):
    return len(model.graph.node) // 0


class ExplodePatch(PatchType):
    name = "fric.explode"
    description = "calls a helper that divides by zero"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        return PatchResult(bool(count_things(model)), "never")


class LiePatch(PatchType):
    name = "fric.lie"
    description = "says it modified the model and did not"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        return PatchResult(True, "did nothing")


class NoSuchTensorPatch(PatchType):
    name = "fric.cannot"
    description = "cannot apply: context.fail"
    params_schema = {"type": "object", "properties": {"tensor": {"type": "string", "description": "a tensor"}},
                     "additionalProperties": False}

    def apply(self, model, params, context):
        context.fail(f"tensor {params['tensor']!r} not found", key=("tensor",))


class GateVerifier(Verifier):
    name = "fric.gate"
    description = "fails through context.fail, or returns a failed verdict with details"
    shorthand = "mode"
    params_schema = {"type": "object", "properties": {"mode": {"enum": ["fail", "result", "pass"], "description": "how"}},
                     "required": ["mode"], "additionalProperties": False}

    def verify(self, params, context):
        if params["mode"] == "fail":
            context.fail("the output has no 'gate' input", key=("mode",), hint="add it with add_input")
        if params["mode"] == "result":
            return VerifyResult("failed", "gate closed", ("first-detail-line", "second-detail-line"))
        return VerifyResult("passed", "gate open")


@hookimpl
def register_patch_types(register):
    register(ExplodePatch)
    register(LiePatch)
    register(NoSuchTensorPatch)


@hookimpl
def register_verifiers(register):
    register(GateVerifier)
"""
EXPLODE_LINE = 5  # ``return len(model.graph.node) // 0`` in count_things

BROKEN_ON_IMPORT = """\
from patchspec import hookimpl


def connect():
    raise ConnectionError("cannot reach the fric licence server")


connect()
"""
RAISE_LINE = 5


@pytest.fixture
def site(tmp_path, monkeypatch):
    yield PluginSite(tmp_path / "site", monkeypatch, DIST, VERSION)
    sys.modules.pop("fric_plugin", None)


def written(folder: Path) -> list[Path]:
    out = folder / "out"
    return sorted(out.rglob("*")) if out.exists() else []


# -- 1. VerifyContext.fail means "verification failed" (exit 1), PatchContext.fail "cannot apply" (4) --


def test_verifier_context_fail_is_a_failed_verification_exit_1_nothing_written(site, tmp_path):
    site.install(WORKING)
    run = run_spec(tmp_path, "patches: []\nverify:\n  - fric.gate: {mode: fail}\n  - check: {}\n", make_model())
    run.assert_failed(1)
    assert written(tmp_path) == []
    # reported like a failed verifier: its line on stdout, its story in the error, the other verifiers still ran
    assert "fric.gate" in run.stdout and "failed" in run.stdout and "the output has no 'gate' input" not in run.stdout
    assert "hint: add it with add_input" in run.stderr
    assert "check" in run.stdout and "passed" in run.stdout
    assert run.stderr.splitlines()[0] == (
        "spec.yaml:6:23: verify[0] (fric.gate) > mode: verification failed: the output has no 'gate' input; "
        "nothing was written"
    )


def test_verifier_context_fail_in_the_report_is_a_failed_verifier(site, tmp_path):
    site.install(WORKING)
    run = run_spec(tmp_path, "patches: []\nverify:\n  - fric.gate: fail\n", make_model(), args=("--report", "r.json"))
    run.assert_failed(1)
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(v["label"], v["status"], v["summary"]) for v in report["verifiers"]] == [
        ("verify[0] (fric.gate)", "failed", "the output has no 'gate' input")
    ]


def test_patch_context_fail_still_exits_4(site, tmp_path):
    site.install(WORKING)
    run = run_spec(tmp_path, "patches:\n  - fric.cannot: {tensor: w}\n", make_model())
    run.assert_failed(4, match="spec.yaml:5:27: patches[0] (fric.cannot) > tensor: tensor 'w' not found")
    assert written(tmp_path) == []


# -- 2. a plugin bug names the plugin, the step once, the exception and the plugin's own line ----------


def test_plugin_exception_names_plugin_step_exception_and_plugin_line(site, tmp_path):
    plugin_file = site.install(WORKING)
    run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model())
    run.assert_failed(5)
    assert "Traceback" not in run.output
    assert written(tmp_path) == []
    err = run.stderr
    assert err.startswith(
        "spec.yaml:5:19: patches[0] (fric.explode): patch type 'fric.explode' apply() raised "
        "ZeroDivisionError: integer division or modulo by zero\n"
    ), err
    assert err.count("patches[0]") == 1, err  # the step once
    assert f"  at {plugin_file}:{EXPLODE_LINE} in count_things\n" in err  # innermost frame of the plugin's code
    assert "patchspec/run" not in err and "engine.py" not in err
    assert f"this is a bug in plugin 'fric' ({DIST} {VERSION})" in err
    assert (
        f"hint: report it to the author of {DIST} with this message; rerun with -v to see the plugin's traceback" in err
    )


def test_plugin_exception_with_v_shows_the_plugins_traceback_not_patchspecs(site, tmp_path):
    plugin_file = site.install(WORKING)
    run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model(), args=("-v",))
    run.assert_failed(5)
    traceback_text = run.stderr.split("spec.yaml:5:19:")[0]
    assert traceback_text.startswith("Traceback (most recent call last):"), run.stderr
    assert f'File "{plugin_file}", line {EXPLODE_LINE}, in count_things' in traceback_text
    assert "in apply" in traceback_text
    assert "patchspec/run/engine.py" not in traceback_text and "patchspec/cli.py" not in traceback_text
    assert traceback_text.rstrip().endswith("ZeroDivisionError: integer division or modulo by zero")


def test_plugin_contract_breach_points_at_the_method_that_broke_it(site, tmp_path):
    plugin_file = site.install(WORKING)
    run = run_spec(tmp_path, "patches:\n  - fric.lie: {}\n", make_model())
    run.assert_failed(
        5, match="spec.yaml:5:15: patches[0] (fric.lie): patch type 'fric.lie' apply() returned modified=True"
    )
    assert run.stderr.count("patches[0]") == 1
    assert f"  at {plugin_file}:22 in apply\n" in run.stderr
    assert f"this is a bug in plugin 'fric' ({DIST} {VERSION})" in run.stderr
    assert f"report it to the author of {DIST}" in run.stderr


# -- 3. a plugin that fails to import: its file:line, and with -v its traceback ------------------------


def test_import_failure_without_v_is_one_line_with_the_plugins_file_and_line(site, tmp_path):
    plugin_file = site.install(BROKEN_ON_IMPORT)
    run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model(), command="validate")
    run.assert_failed(2)
    assert "Traceback" not in run.stderr
    cause = (
        f"failed to import fric_plugin: ConnectionError: cannot reach the fric licence server "
        f"(at {plugin_file}:{RAISE_LINE} in connect)"
    )
    assert cause in run.stderr
    code, listing, stderr = run_cli(["plugins"])
    assert code == 5 and f"  BROKEN: {cause}" in listing  # a CI step that checks its plugins fails
    assert "installed plugin failed to load: plugin 'fric' (fric-tools 1.2.3)" in stderr


def test_import_failure_with_v_shows_the_plugins_traceback(site, tmp_path):
    plugin_file = site.install(BROKEN_ON_IMPORT)
    run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model(), command="validate")
    verbose = run_cli(["-v", "validate", "spec.yaml"], cwd=tmp_path)
    assert verbose[0] == 2 == run.exit_code
    stderr = verbose[2]
    assert stderr.startswith("Traceback (most recent call last):"), stderr
    assert f'File "{plugin_file}", line 8, in <module>' in stderr
    assert f'File "{plugin_file}", line {RAISE_LINE}, in connect' in stderr
    assert "ConnectionError: cannot reach the fric licence server" in stderr
    for ours in ("patchspec/cli.py", "patchspec/spec/load.py", "patchspec/host/registry.py", "<frozen importlib"):
        assert ours not in stderr, stderr
    code, listing, _ = run_cli(["-v", "plugins"])
    assert code == 5 and f'File "{plugin_file}", line {RAISE_LINE}, in connect' in listing


# -- 4. the unknown type of a broken plugin: no did-you-mean from others -------------------------------


def test_unknown_type_of_a_broken_plugin_says_it_failed_to_load_without_did_you_mean(site, tmp_path):
    site.install(BROKEN_ON_IMPORT)
    run = run_spec(tmp_path, "patches:\n  - fric.set_batch: 4\n", make_model(), command="validate")
    run.assert_failed(2)
    assert "did you mean" not in run.stderr, run.stderr  # not the built-in set_batch
    assert (
        "spec.yaml:5:5: patches[0]: unknown patch type 'fric.set_batch': plugin 'fric' is installed but failed to load"
    ) in run.stderr
    assert (
        f"hint: plugin 'fric' ({DIST} {VERSION}) failed to load: failed to import fric_plugin: "
        "ConnectionError: cannot reach the fric licence server"
    ) in run.stderr


# -- 5. PATCHSPEC_DISABLE_PLUGINS leaves a trace ------------------------------------------------------


def test_disabled_plugin_is_listed_as_disabled(site, monkeypatch):
    site.install(WORKING)
    monkeypatch.setenv(DISABLE_ENV, "fric")
    code, listing, _ = run_cli(["plugins"])
    assert code == 0
    assert "disabled by PATCHSPEC_DISABLE_PLUGINS (installed, not loaded): fric" in listing
    code, as_json, _ = run_cli(["plugins", "--json"])
    [entry] = [p for p in json.loads(as_json) if p["name"] == "fric"]
    assert entry["disabled"] is True and entry["distribution"] == DIST and entry["patch_types"] == []


def test_disable_names_no_installed_plugin_warns(site, monkeypatch):
    site.install(WORKING)
    monkeypatch.setenv(DISABLE_ENV, "frick")
    code, _, stderr = run_cli(["plugins"])
    assert code == 0
    assert (
        "warning: PATCHSPEC_DISABLE_PLUGINS names 'frick', which is not an installed plugin (did you mean 'fric'?)"
        in stderr
    )


def test_unknown_type_of_a_disabled_plugin_says_it_is_disabled(site, tmp_path, monkeypatch):
    site.install(WORKING)
    monkeypatch.setenv(DISABLE_ENV, "fric")
    run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model(), command="validate")
    run.assert_failed(
        2, match="unknown patch type 'fric.explode': plugin 'fric' is disabled by PATCHSPEC_DISABLE_PLUGINS"
    )
    assert "remove 'fric' from PATCHSPEC_DISABLE_PLUGINS" in run.stderr


# -- 6. patchspec schema with a broken plugin ---------------------------------------------------------


def test_schema_with_a_broken_plugin_prints_the_rest_warns_and_exits_5(site, monkeypatch):
    site.install(BROKEN_ON_IMPORT)
    code, stdout, stderr = run_cli(["schema"])
    assert code == 5
    schema = json.loads(stdout)
    branches = schema["properties"]["patches"]["items"]["oneOf"]
    assert any("set_batch" in b["properties"] for b in branches)
    assert f"plugin 'fric' ({DIST} {VERSION})" in stderr and "failed to load" in stderr
    assert "PATCHSPEC_DISABLE_PLUGINS=fric patchspec schema" in stderr
    monkeypatch.setenv(DISABLE_ENV, "fric")
    code, disabled_stdout, stderr = run_cli(["schema"])
    assert (code, stderr) == (0, "")
    assert json.loads(disabled_stdout) == schema


# -- 7. a failed verifier's details are printed once ---------------------------------------------------


def test_failed_verifier_details_print_once_with_the_error(site, tmp_path):
    site.install(WORKING)
    run = run_spec(tmp_path, "patches: []\nverify:\n  - fric.gate: result\n", make_model())
    run.assert_failed(1)
    assert run.output.count("first-detail-line") == 1 and run.output.count("gate closed") == 1
    assert run.stderr == (
        "spec.yaml:6:16: verify[0] (fric.gate): verification failed: gate closed; nothing was written\n"
        "    first-detail-line\n    second-detail-line\n"
    )


def test_quiet_prints_the_error_line_only_once(site, tmp_path):
    site.install(WORKING)
    run = run_spec(
        tmp_path, "patches: []\nverify:\n  - fric.gate: result\n  - fric.gate: fail\n", make_model(), args=("-q",)
    )
    run.assert_failed(1)
    assert run.stdout == ""
    assert run.stderr.count("first-detail-line") == 0  # -q: the error line (and its hints), not the details
    rest = run.stderr.splitlines()[1:]  # the other failed verifier's summary and its hint, nothing more
    assert rest == ["  verify[1] (fric.gate): the output has no 'gate' input", "    hint: add it with add_input"]
    assert run.stderr.splitlines()[0] == (
        "spec.yaml:6:16: verify[0] (fric.gate): verification failed: gate closed "
        "(and 1 more failed: verify[1] (fric.gate)); nothing was written"
    )


def test_verify_command_failure_is_one_line_too(site, tmp_path):
    site.install(WORKING)
    run_spec(tmp_path, "patches: []\nverify:\n  - fric.gate: pass\n", make_model()).assert_success()
    (tmp_path / "spec.yaml").write_text((tmp_path / "spec.yaml").read_text().replace("pass", "result"))
    code, stdout, stderr = run_cli(["verify", "spec.yaml"], cwd=tmp_path)
    assert code == 1 and (stdout + stderr).count("first-detail-line") == 1
    assert stderr.splitlines()[0] == "spec.yaml:6:16: verify[0] (fric.gate): verification failed: gate closed"


# -- 8. enum mismatches get a did-you-mean -------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("verify:\n  - run: {optimizations: [al]}\n", "verify[0] (run) > optimizations.0: 'al' is not one of"),
        (
            "patches:\n  - add_input: {name: z, dtype: flot32, shape: [1]}\n",
            "patches[0] (add_input) > dtype: 'flot32' is not one of",
        ),
    ],
)
def test_enum_mismatch_says_did_you_mean(tmp_path, item, expected):
    spec = item if item.startswith("patches") else "patches: []\n" + item
    run = run_spec(tmp_path, spec, make_model(), command="validate")
    run.assert_failed(2, match=expected)
    suggestion = "(did you mean 'all'?)" if "al]" in item else "(did you mean 'float32'"
    assert suggestion in run.stderr.splitlines()[0]


# -- 9. a shorthand value's error names the key it stands for -----------------------------------------


def test_shorthand_type_error_names_the_key_and_the_shorthand(tmp_path):
    run = run_spec(tmp_path, "patches:\n  - set_batch: [1]\n", make_model(), command="validate")
    run.assert_failed(2)
    assert run.stderr == (
        "spec.yaml:5:16: patches[0] (set_batch) > size: [1] is not of type 'integer' or 'string' "
        "(set_batch: VALUE is short for set_batch: {size: VALUE})\n"
    )


def test_shorthand_value_of_the_right_type_reports_the_broken_rule_not_another_type(tmp_path):
    run = run_spec(tmp_path, "patches:\n  - set_batch: 0\n", make_model(), command="validate")
    run.assert_failed(
        2,
        match="patches[0] (set_batch) > size: 0 is less than the minimum of 1 "
        "(set_batch: VALUE is short for set_batch: {size: VALUE})",
    )


def test_in_process_plugin_bug_has_a_readable_label(tmp_path):
    import types

    module = types.ModuleType("fric_inline")
    exec(compile(textwrap.dedent(WORKING), "fric_inline", "exec"), module.__dict__)
    with registered(module, name="fric"):
        run = run_spec(tmp_path, "patches:\n  - fric.explode: {}\n", make_model())
    run.assert_failed(5, match="this is a bug in plugin 'fric' (registered in process), not in the spec")
    assert "report it to the author of plugin 'fric'" in run.stderr
