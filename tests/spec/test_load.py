"""Spec validation through the CLI: every problem listed, located, sorted, with suggestions (exit 2)."""

import os
import types

import onnx
import pytest
from onnx import helper

import patchspec.cli
from helpers import graph_model, tensor_info, write_spec
from patchspec import PatchResult, PatchType, hookimpl
from patchspec.host.registry import PluginRegistry
from patchspec.testing import make_model, run_spec

HEADER = "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n"


class ToleranceProbe(PatchType):
    """A test patch type whose schema takes the values YAML 1.1 gets wrong."""

    name = "probe.tolerance"
    description = "records its parameters; changes nothing"
    params_schema = {
        "type": "object",
        "properties": {
            "atol": {"type": "number", "description": "a float written as 1e-5"},
            "label": {"type": "string", "description": "a string that YAML 1.1 reads as a bool"},
            "mode": {"type": "integer", "description": "an integer with a leading zero"},
        },
        "additionalProperties": False,
    }
    seen: list = []

    def apply(self, model, params, context):
        ToleranceProbe.seen.append(dict(params))
        return PatchResult(False, "nothing changed")


@hookimpl
def register_patch_types(register):
    register(ToleranceProbe)


@pytest.fixture
def probe_plugin(monkeypatch):
    module = types.ModuleType("probe_plugin")
    module.register_patch_types = register_patch_types
    monkeypatch.setattr(patchspec.cli, "_registry", lambda: PluginRegistry.load(extra=[("probe", module)]))
    ToleranceProbe.seen = []
    return ToleranceProbe


def small_model(folder, name="m.onnx"):
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 3])], [tensor_info("y", [1, 3])]
    )
    onnx.save(model, folder / name)
    return folder / name


def error_lines(result):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line for line in result.stderr.strip().splitlines() if not line.startswith("  hint:")]


# -- the spec file itself -----------------------------------------------------------------------
def test_missing_spec(tmp_path, run_cli):
    result = run_cli("validate", tmp_path / "spec.yaml")
    assert error_lines(result) == [f"{tmp_path / 'spec.yaml'}: No such file or directory"]


def test_spec_is_a_directory(tmp_path, run_cli):
    (tmp_path / "spec.yaml").mkdir()
    assert error_lines(run_cli("validate", tmp_path / "spec.yaml")) == [
        f"{tmp_path / 'spec.yaml'}: is a directory, not a spec file"
    ]


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() == 0,
    reason="root reads files whatever their mode, so chmod 000 cannot make one unreadable",
)
def test_unreadable_spec(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "patches: []\n")
    spec.chmod(0)
    try:
        assert error_lines(run_cli("validate", spec)) == [f"{spec}: permission denied"]
    finally:
        spec.chmod(0o644)


def test_apply_with_missing_spec_is_exit_2_and_writes_nothing(tmp_path, run_cli):
    result = run_cli("apply", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "nope.yaml: No such file or directory" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_format_version_newer_says_upgrade(tmp_path, run_cli):
    spec = write_spec(tmp_path, "patchspec: 2\nmodel: m.onnx\noutput: o.onnx\npatches: []\n")
    assert error_lines(run_cli("validate", spec)) == [
        f"{spec}:1:12: patchspec: spec format 2 is newer than this patchspec supports (1); upgrade patchspec"
    ]


@pytest.mark.parametrize(
    ("value", "fragment"), [("'1'", "must be the integer 1, got '1'"), ("true", "got True"), ("1.0", "got 1.0")]
)
def test_format_version_must_be_integer_1(tmp_path, run_cli, value, fragment):
    spec = write_spec(tmp_path, f"patchspec: {value}\nmodel: m.onnx\noutput: o.onnx\npatches: []\n")
    lines = error_lines(run_cli("validate", spec))
    assert len(lines) == 1 and fragment in lines[0]


def test_missing_format_version(tmp_path, run_cli):
    spec = write_spec(tmp_path, "model: m.onnx\noutput: o.onnx\npatches: []\n")
    assert "missing 'patchspec: 1'" in error_lines(run_cli("validate", spec))[0]


def test_spec_that_is_not_a_mapping(tmp_path, run_cli):
    spec = write_spec(tmp_path, "- patchspec: 1\n")
    assert "a spec is a mapping" in error_lines(run_cli("validate", spec))[0]


# -- every problem, located, sorted, with suggestions -------------------------------------------
def test_every_unknown_key_and_type_is_listed_with_suggestions_sorted(tmp_path, run_cli, probe_plugin):
    text = (
        "patchspec: 1\n"  # 1
        "model: m.onnx\n"  # 2
        "outptu: o.onnx\n"  # 3 unknown key
        "patches:\n"  # 4
        "  - probe.tolerence: {atol: 1}\n"  # 5 unknown patch type
        "  - probe.tolerance:\n"  # 6
        "      atoll: 1\n"  # 7 unknown param key
        "verify:\n"  # 8
        "  - chek: {}\n"  # 9 unknown verifier
        "verfy: []\n"  # 10 unknown key
    )
    spec = write_spec(tmp_path, text)
    lines = error_lines(run_cli("validate", spec))
    assert lines == [
        f"{spec}:1:1: 'output' is required",
        f"{spec}:3:1: unknown key 'outptu' (did you mean 'output'?)",
        f"{spec}:5:5: patches[0]: unknown patch type 'probe.tolerence' (did you mean 'probe.tolerance'?)",
        f"{spec}:7:7: patches[1] (probe.tolerance): unknown key 'atoll' (did you mean 'atol'?)",
        f"{spec}:9:5: verify[0]: unknown verifier 'chek' (did you mean 'check'?)",
        f"{spec}:10:1: unknown key 'verfy' (did you mean 'verify'?)",
    ]


def test_wrong_type_of_param_names_key_path(tmp_path, run_cli, probe_plugin):
    spec = write_spec(tmp_path, HEADER + "patches:\n  - probe.tolerance:\n      label: [1]\n      mode: x\n")
    assert error_lines(run_cli("validate", spec)) == [
        f"{spec}:6:14: patches[0] (probe.tolerance) > label: [1] is not of type 'string'",
        f"{spec}:7:13: patches[0] (probe.tolerance) > mode: 'x' is not of type 'integer'",
    ]


def test_item_with_two_types_is_refused(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "patches: []\nverify:\n  - check: {}\n    other: {}\n")
    lines = error_lines(run_cli("validate", spec))
    assert len(lines) == 1 and "exactly one key" in lines[0] and lines[0].startswith(f"{spec}:6:")


def test_patches_not_a_list(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "patches: {set_batch: 1}\n")
    lines = error_lines(run_cli("validate", spec))
    assert lines == [f"{spec}:4:10: patches: {{'set_batch': 1}} is not of type 'array'"]


def test_unknown_type_without_close_match_lists_known_ones(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "patches: []\nverify:\n  - zzzzzz: {}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2
    assert "unknown verifier 'zzzzzz'" in result.stderr and "hint: known verifiers:" in result.stderr
    assert "check" in result.stderr.split("hint: known verifiers:")[1]


def test_validate_reports_every_spec_given(tmp_path, run_cli):
    good = write_spec(tmp_path, HEADER + "patches: []\n", name="good.yaml")
    bad1 = write_spec(tmp_path, HEADER + "patches: []\nextra: 1\n", name="bad1.yaml")
    bad2 = write_spec(tmp_path, "patchspec: 3\n", name="bad2.yaml")
    result = run_cli("validate", good, bad1, bad2)
    assert result.exit_code == 2
    assert f"{good}: ok" in result.stdout
    assert f"{bad1}:5:1: unknown key 'extra'" in result.stderr and f"{bad2}:1:12:" in result.stderr


def test_validate_needs_no_model(tmp_path, run_cli):
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: does/not/exist.onnx\noutput: out.onnx\npatches: []\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{spec}: ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_apply_validates_before_reading_the_model(tmp_path, run_cli):
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: missing.onnx\noutput: out.onnx\npatches: []\ntypo: 1\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 2 and "unknown key 'typo'" in result.stderr and "missing.onnx" not in result.stderr


# -- YAML 1.1 surprises, as a plugin's schema sees them -----------------------------------------
def test_yaml_1_1_surprises_read_as_meant(tmp_path, run_cli, probe_plugin):
    small_model(tmp_path)
    spec = write_spec(tmp_path, HEADER + "patches:\n  - probe.tolerance: {atol: 1e-5, label: no, mode: 0755}\n")
    assert run_cli("validate", "--no-model", spec).exit_code == 0  # the spec alone: apply runs the patch once
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert probe_plugin.seen == [{"atol": 1e-5, "label": "no", "mode": 755}]


def test_yaml_1_1_bool_is_still_a_typed_error_where_a_number_is_expected(tmp_path, run_cli, probe_plugin):
    spec = write_spec(tmp_path, HEADER + "patches:\n  - probe.tolerance: {atol: yes}\n")
    assert error_lines(run_cli("validate", spec)) == [
        f"{spec}:5:29: patches[0] (probe.tolerance) > atol: 'yes' is not of type 'number'"
    ]


# -- paths --------------------------------------------------------------------------------------
def test_relative_paths_resolve_against_the_spec_folder(tmp_path, run_cli):
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / ".git").mkdir()  # a repository: its top is the project root
    (project / "models").mkdir()
    small_model(project / "models")
    spec = write_spec(
        project / "specs", "patchspec: 1\nmodel: ../models/m.onnx\noutput: ../build/m2.onnx\npatches: []\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "models").mkdir()  # a decoy relative to the CWD
    result = run_cli("apply", os.path.relpath(spec, elsewhere), cwd=elsewhere)
    assert result.exit_code == 0, result.output
    assert (project / "build" / "m2.onnx").is_file()
    assert list(elsewhere.rglob("*.onnx")) == []


def test_command_line_overrides_are_relative_to_the_cwd(tmp_path, run_cli):
    (tmp_path / "specs").mkdir()
    small_model(tmp_path, "input.onnx")
    write_spec(tmp_path / "specs", "patchspec: 1\nmodel: nothere.onnx\noutput: nothere_out.onnx\npatches: []\n")
    result = run_cli("apply", "specs/spec.yaml", "--model", "input.onnx", "--output", "build/o.onnx", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "build" / "o.onnx").is_file()
    assert not (tmp_path / "specs" / "nothere_out.onnx").exists()


def test_a_step_written_as_a_bare_name_says_how_to_write_it(tmp_path, run_cli):
    small_model(tmp_path, "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\nverify:\n  - check\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert "spec.yaml:6:5: verify[0]: 'check' is not a step" in result.stderr and "'- check: {}'" in result.stderr


def test_a_step_without_its_colon_is_shown_with_it(tmp_path, run_cli):
    small_model(tmp_path, "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - set_batch 8\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "patches[0]: 'set_batch 8' is not a step: write '- set_batch: 8'" in result.stderr


def test_a_malformed_step_does_not_hide_the_other_steps_mistakes(tmp_path, run_cli):
    """Every mistake in one round: an item that is not a step is reported with the others' mistakes."""
    small_model(tmp_path, "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - set_batch 8\n  - rename_dimz: {}\n  - {}\n"
        "verify:\n  - run: {compare: {against: orignal}}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    lines = error_lines(result)
    assert len(lines) == 4, result.stderr
    assert "'set_batch 8' is not a step" in lines[0] and "'rename_dimz' (did you mean 'rename_dims'?)" in lines[1]
    assert lines[2].endswith("patches[2]: each item has exactly one key (the type), got 0 (write '- TYPE: {}')")
    assert "got 'orignal' (did you mean 'original'?)" in lines[3]


def test_a_model_given_as_the_spec_says_to_write_a_spec_for_it(tmp_path, run_cli):
    small_model(tmp_path, "m.onnx")
    for command in ("apply", "validate"):
        result = run_cli(command, tmp_path / "m.onnx")
        assert result.exit_code == 2, result.output
        assert "m.onnx: is an ONNX model, not a spec" in result.stderr and "patchspec init" in result.stderr


def test_envelope_errors_name_items_as_steps_are_named(tmp_path, run_cli):
    small_model(tmp_path, "m.onnx")
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: [{set_batch: 2, rename_dims: {}}]\n"
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2 and "spec.yaml:4:11: patches[0]: each item has exactly one key" in result.stderr
    assert "patches.0" not in result.stderr


def test_a_flow_list_missing_its_commas_gets_the_fix(tmp_path, run_cli):
    """YAML reads [4 3] as one string: say so, with the list as it was meant."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - set_batch: {size: 4, inputs: [x y]}\n"
        "verify:\n  - run:\n      cases: [{inputs: {x: [4 3]}}]\n"
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert (
        "cases.0.inputs.x.0: '4 3' is one item: YAML separates the items of [...] with commas: [4, 3]" in result.output
    )
    spec.write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - rename_dims: {tensor: x, axes: [0 4]}\n"
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2 and "hint: '0 4' is one item" in result.output and "[0, 4]" in result.output


def test_a_linked_spec_reads_its_files_where_the_link_is(tmp_path):
    """A Bazel sandbox links each input into the execroot: the spec's folder is the link's, never the
    source tree behind it, or undeclared files would be read and the digest would miss them."""
    import os

    from patchspec.errors import SpecError
    from patchspec.host.registry import PluginRegistry
    from patchspec.spec.load import load_spec

    (tmp_path / "source").mkdir()
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "source" / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\n"
        "verify:\n  - run: {cases: [{inputs: {x: {file: x.npy}}}]}\n"
    )
    (tmp_path / "source" / "x.npy").write_bytes(b"")  # there, but not declared to the sandbox
    os.symlink(tmp_path / "source" / "spec.yaml", tmp_path / "sandbox" / "spec.yaml")
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "sandbox" / "spec.yaml", PluginRegistry.load())
    assert str(tmp_path / "sandbox" / "x.npy") in str(caught.value)
    (tmp_path / "sandbox" / "x.npy").write_bytes(b"")
    spec = load_spec(tmp_path / "sandbox" / "spec.yaml", PluginRegistry.load())
    assert spec.folder == tmp_path / "sandbox" and spec.output == tmp_path / "sandbox" / "out" / "m.onnx"


@pytest.mark.parametrize(
    ("environment", "fragment"),
    [({"PRE_COMMIT": "1"}, "additional_dependencies"), ({}, "install the distribution that provides plugin 'stamp'")],
)
def test_a_missing_plugin_is_named_with_the_fix_for_where_patchspec_runs(tmp_path, monkeypatch, environment, fragment):
    """In pre-commit and pipx a plugin installed beside the project is not seen (issue 35): the
    error names the plugin, and the hint the fix for that environment, not a built-in look-alike."""
    monkeypatch.delenv("PRE_COMMIT", raising=False)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    result = run_spec(tmp_path, "patches:\n  - stamp.metadata: {}\n", make_model(), command="validate")
    result.assert_failed(2)
    assert "unknown patch type 'stamp.metadata': no installed plugin is named 'stamp'" in result.stderr
    assert fragment in result.stderr and "did you mean" not in result.stderr, result.stderr
