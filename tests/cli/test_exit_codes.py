"""Exit codes of the contract through the CLI: 2 spec/command line, 3 unusable file, 5 a bug.

Every failure here must leave the input byte-identical with its mtime, create nothing at the
output path, and print no Python traceback unless -v.
"""

import os
import types

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import patchspec
import patchspec.cli
import patchspec.run.engine
import patchspec.run.freshness
from helpers import graph_model, tensor_info, write_spec
from patchspec import PatchType, Verifier, hookimpl
from patchspec.host.registry import PluginRegistry


def add_model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(1, 3), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", [1, 3])], [tensor_info("y", [1, 3])], [weight]
    )


def snapshot(*paths):
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in paths if p.is_file()}


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def project(tmp_path):
    """m.onnx and spec.yaml (output out/m.onnx) in tmp_path."""
    onnx.save(add_model(), tmp_path / "m.onnx")
    write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\n")
    return tmp_path


def assert_failed_cleanly(result, code, folder, before_tree, before_files, *fragments):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert tree(folder) == before_tree  # no output, no staging folder, no report left behind
    assert snapshot(*[type(folder)(p) for p in before_files]) == before_files


# -- model side: exit 3 -------------------------------------------------------------------------
def write_bad_model(path, kind):
    if kind == "missing":
        return
    if kind == "directory":
        path.mkdir()
    elif kind == "zero bytes":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "text":
        path.write_text("this is not a model\n")
    elif kind == "lfs pointer":
        path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "spec.yaml:2:8: model: bad.onnx does not exist (resolved to "),
        ("directory", "bad.onnx: is a directory, not an ONNX model"),
        ("zero bytes", "bad.onnx: not an ONNX model (0 bytes)"),
        ("garbage", "bad.onnx: not an ONNX model"),
        ("text", "bad.onnx: not an ONNX model"),
        ("lfs pointer", "git lfs pull"),
    ],
)
def test_unusable_model_is_exit_3(tmp_path, run_cli, kind, message):
    write_bad_model(tmp_path / "bad.onnx", kind)
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: bad.onnx\noutput: out/m.onnx\npatches: []\n")
    before_tree, before = tree(tmp_path), snapshot(spec, tmp_path / "bad.onnx")
    result = run_cli("apply", spec)
    assert_failed_cleanly(result, 3, tmp_path, before_tree, before, message)
    assert len([line for line in result.stderr.splitlines() if not line.startswith("  hint:")]) == 1


def top_level_field_ends(raw: bytes) -> list[int]:
    """Byte offsets where a top-level protobuf field of ``raw`` ends (prefixes that still parse)."""

    def varint(pos):
        value = shift = 0
        while True:
            byte = raw[pos]
            value |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not byte & 0x80:
                return value, pos

    ends, pos = [], 0
    while pos < len(raw):
        tag, pos = varint(pos)
        if tag & 7 == 0:
            _, pos = varint(pos)
        else:
            assert tag & 7 == 2, "only varint and length-delimited fields expected at the top of a ModelProto"
            length, pos = varint(pos)
            pos += length
        ends.append(pos)
    return ends


def test_truncated_real_model_is_exit_3_at_every_parseable_and_sampled_prefix(tmp_path, run_cli, ppocr_models):
    raw = ppocr_models["cls"].read_bytes()
    parseable = [end for end in top_level_field_ends(raw) if end < len(raw)]
    assert parseable, "the cls model should have prefixes that still parse"
    sampled = [1, 7, len(raw) // 3, len(raw) // 2, len(raw) - 7, len(raw) - 1]
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: cut.onnx\noutput: out/cut.onnx\npatches: []\n")
    for size in parseable + sampled:
        (tmp_path / "cut.onnx").write_bytes(raw[:size])
        result = run_cli("apply", spec)
        assert result.exit_code == 3, (size, result.output)
        assert "cut.onnx: not an ONNX model" in result.stderr, (size, result.stderr)
        assert not (tmp_path / "out" / "cut.onnx").exists()


def test_every_prefix_of_a_small_model_is_refused(tmp_path, run_cli):
    raw = add_model().SerializeToString()
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: cut.onnx\noutput: out/cut.onnx\npatches: []\n")
    for size in range(len(raw)):
        (tmp_path / "cut.onnx").write_bytes(raw[:size])
        result = run_cli("-q", "apply", spec)
        assert result.exit_code == 3, (size, result.output)
    assert not (tmp_path / "out" / "cut.onnx").exists()


@pytest.mark.parametrize("what", ["ir_version", "opset"])
def test_model_newer_than_installed_onnx_names_both_versions(tmp_path, run_cli, what):
    model = add_model()
    if what == "ir_version":
        model.ir_version = onnx.IR_VERSION + 5
        newer, supported = model.ir_version, onnx.IR_VERSION
    else:
        model.opset_import[0].version = onnx.defs.onnx_opset_version() + 3
        newer, supported = model.opset_import[0].version, onnx.defs.onnx_opset_version()
    (tmp_path / "new.onnx").write_bytes(model.SerializeToString())
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: new.onnx\noutput: out/new.onnx\npatches: []\n")
    before_tree, before = tree(tmp_path), snapshot(spec, tmp_path / "new.onnx")
    result = run_cli("apply", spec)
    assert_failed_cleanly(
        result, 3, tmp_path, before_tree, before, f" {newer} is newer", f"onnx {onnx.__version__}", f"({supported})"
    )


# -- output is the input: exit 2 ----------------------------------------------------------------
@pytest.mark.parametrize("output", ["m.onnx", "./m.onnx", "sub/../m.onnx", "link.onnx", "hard.onnx"])
def test_output_that_is_the_input_is_refused(project, run_cli, output):
    (project / "sub").mkdir()
    (project / "link.onnx").symlink_to("m.onnx")
    os.link(project / "m.onnx", project / "hard.onnx")
    spec = write_spec(project, f"patchspec: 1\nmodel: m.onnx\noutput: {output}\npatches: []\n", name="same.yaml")
    before_tree, before = tree(project), snapshot(spec, project / "m.onnx")
    result = run_cli("apply", spec)
    assert_failed_cleanly(result, 2, project, before_tree, before, "the output is the input model")
    assert (project / "link.onnx").is_symlink()


def test_output_override_that_is_the_input_is_refused(project, run_cli):
    before_tree, before = tree(project), snapshot(project / "spec.yaml", project / "m.onnx")
    result = run_cli("apply", project / "spec.yaml", "--output", project / "m.onnx")
    assert_failed_cleanly(result, 2, project, before_tree, before, "the output is the input model")


# -- command line: exit 2 -----------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--model", "--output"])
def test_overrides_need_exactly_one_spec(project, run_cli, option):
    other = write_spec(project, "patchspec: 1\nmodel: m.onnx\noutput: out/b.onnx\npatches: []\n", name="b.yaml")
    before_tree, before = tree(project), snapshot(project / "m.onnx")
    result = run_cli("apply", project / "spec.yaml", other, option, project / "x.onnx")
    assert_failed_cleanly(result, 2, project, before_tree, before, "--model and --output need exactly one spec")


@pytest.mark.parametrize(
    "args",
    [
        ("apply",),
        ("apply", "spec.yaml", "--bogus"),
        ("frobnicate",),
        ("inspect",),
        ("-q", "apply", "spec.yaml", "--depfile"),
    ],
)
def test_usage_errors_are_exit_2(project, run_cli, args):
    result = run_cli(*args, cwd=project)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stderr.strip()
    assert not (project / "out").exists()


def test_help_and_version_are_exit_0(run_cli):
    assert run_cli("--help").exit_code == 0
    version = run_cli("--version")
    assert version.exit_code == 0 and patchspec.__version__ in version.stdout


# -- quiet and verbose ----------------------------------------------------------------------------
def test_quiet_prints_nothing_on_success(project, run_cli):
    first = run_cli("-q", "apply", project / "spec.yaml")
    assert first.exit_code == 0 and first.stdout == "" and first.stderr == ""
    second = run_cli("-q", "apply", project / "spec.yaml")  # up to date
    assert second.exit_code == 0 and second.stdout == "" and second.stderr == ""
    assert run_cli("-q", "validate", project / "spec.yaml").output == ""


def test_quiet_still_prints_errors(project, run_cli):
    (project / "m.onnx").write_bytes(b"")
    result = run_cli("-q", "apply", project / "spec.yaml")
    assert result.exit_code == 3 and "0 bytes" in result.stderr


def test_verbose_prints_no_traceback_for_an_expected_failure(project, run_cli):
    """Issue 18: a traceback is for a bug (exit 5); an unusable file's message says all there is."""
    (project / "m.onnx").write_bytes(b"")
    result = run_cli("-v", "apply", project / "spec.yaml")
    assert result.exit_code == 3 and "Traceback" not in result.output and "0 bytes" in result.stderr
    assert result.stderr.count("0 bytes") == 1


# -- unexpected exceptions: exit 5 ----------------------------------------------------------------
class ExplodingPatch(PatchType):
    name = "broken.explode"
    description = "changes the model, then raises: a bug in a plugin"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        model.graph.node[0].op_type = "Sub"  # a partial change that must never reach a file
        raise ZeroDivisionError("boom in plugin")


class WrongResultPatch(PatchType):
    name = "broken.wrong_result"
    description = "returns something that is not a PatchResult"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        return True


class ExplodingVerifier(Verifier):
    name = "broken.verify"
    description = "raises while verifying"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def verify(self, params, context):
        raise KeyError("boom in verifier")


@pytest.fixture
def broken_plugin(monkeypatch):
    module = types.ModuleType("broken_plugin")

    @hookimpl
    def register_patch_types(register):
        register(ExplodingPatch)
        register(WrongResultPatch)

    @hookimpl
    def register_verifiers(register):
        register(ExplodingVerifier)

    module.register_patch_types = register_patch_types
    module.register_verifiers = register_verifiers
    monkeypatch.setattr(patchspec.cli, "_registry", lambda: PluginRegistry.load(extra=[("broken", module)]))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("patches:\n  - broken.explode: {}\n", "raised ZeroDivisionError: boom in plugin"),
        ("patches:\n  - broken.wrong_result: {}\n", "returned bool, not a PatchResult"),
        ("patches: []\nverify:\n  - broken.verify: {}\n", "raised KeyError"),
    ],
)
def test_exception_in_a_plugin_is_exit_5_naming_plugin_and_versions(project, run_cli, broken_plugin, section, message):
    spec = write_spec(project, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n" + section, name="broken.yaml")
    before_tree, before = tree(project), snapshot(spec, project / "m.onnx")
    result = run_cli("apply", spec, "--report", project / "report.json")
    assert result.exit_code == 5, result.output
    assert "Traceback" not in result.output
    assert message in result.stderr
    assert "this is a bug in plugin 'broken'" in result.stderr
    assert f"onnx {onnx.__version__}" in result.stderr and "nothing was written" in result.stderr
    assert (project / "report.json").is_file()  # the report says what failed
    (project / "report.json").unlink()
    assert tree(project) == before_tree and snapshot(spec, project / "m.onnx") == before


def test_unexpected_exception_in_patchspec_is_one_line_exit_5(project, run_cli, monkeypatch):
    def broken_digest(self, loaded, *args):
        raise AttributeError("boom in core")

    monkeypatch.setattr(patchspec.run.freshness.Freshness, "parts", broken_digest)
    before_tree, before = tree(project), snapshot(project / "spec.yaml", project / "m.onnx")
    result = run_cli("apply", project / "spec.yaml")
    assert_failed_cleanly(
        result,
        5,
        project,
        before_tree,
        before,
        "internal error: AttributeError: boom in core",
        f"this is a bug in patchspec {patchspec.__version__}",
        f"onnx {onnx.__version__}",
        "onnxruntime ",
    )
    verbose = run_cli("-v", "apply", project / "spec.yaml")
    assert verbose.exit_code == 5 and "Traceback" in verbose.stderr


# -- inputs are never modified, whatever the path -------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("apply", "spec.yaml"),
        ("apply", "spec.yaml", "--force"),
        ("apply", "spec.yaml", "--no-verify", "--force", "--depfile", "out/m.d", "--report", "out/r.json"),
        ("validate", "spec.yaml"),
        ("plan", "spec.yaml"),
        ("verify", "spec.yaml"),
    ],
)
def test_commands_never_modify_inputs(project, run_cli, args):
    assert run_cli("-q", "apply", "spec.yaml", cwd=project).exit_code == 0
    before = snapshot(project / "spec.yaml", project / "m.onnx")
    result = run_cli(*args, cwd=project)
    assert result.exit_code == 0, result.output
    assert snapshot(project / "spec.yaml", project / "m.onnx") == before


def test_quiet_and_verbose_also_work_after_apply(project, run_cli):
    quiet = run_cli("apply", project / "spec.yaml", "-q")
    assert quiet.exit_code == 0 and quiet.output == ""
    (project / "m.onnx").write_bytes(b"")
    verbose = run_cli("apply", project / "spec.yaml", "--force", "-v")
    assert verbose.exit_code == 3 and "0 bytes" in verbose.stderr and "Traceback" not in verbose.stderr


def test_a_missing_model_says_paths_are_relative_to_the_spec(tmp_path, run_cli):
    """The path as written, as resolved, the spec's line, and the rule that trips people up."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "models").mkdir()
    onnx.save(add_model(), tmp_path / "models" / "m.onnx")
    spec = write_spec(tmp_path / "specs", "patchspec: 1\nmodel: models/m.onnx\noutput: out.onnx\npatches: []\n")
    result = run_cli("apply", spec, cwd=tmp_path)  # models/m.onnx exists from here, not from the spec's folder
    assert result.exit_code == 3, result.output
    assert "spec.yaml:2:8: model: models/m.onnx does not exist (resolved to " in result.stderr
    assert str(tmp_path / "specs" / "models" / "m.onnx") in result.stderr
    assert "paths in a spec are relative to the spec's folder" in result.stderr
