"""A spec's ``plugins:`` names the distributions its types come from; each is checked when the spec is
read, against what is installed where patchspec runs, and an unknown type names the ones missing."""

from __future__ import annotations

import pytest

from helpers import PluginSite, write_spec
from patchspec.testing import make_model, run_cli

PLUGIN = """
from typing import Annotated, TypedDict

from patchspec import Param, PatchResult, PatchType, hookimpl


class StampParams(TypedDict):
    key: Annotated[str, Param("a metadata key", default="stamped")]


class StampPatch(PatchType[StampParams]):
    name = "stamp.metadata"
    description = "Add a metadata entry."

    def apply(self, model, params, context):
        entry = model.metadata_props.add()
        entry.key, entry.value = params["key"], "yes"
        return PatchResult(True, f"stamped {params['key']}")


@hookimpl
def register_patch_types(register):
    register(StampPatch)
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "work" / ".git").mkdir(parents=True)
    (tmp_path / "work" / "m.onnx").write_bytes(make_model({"x": (1, 3)}).SerializeToString())
    return tmp_path / "work"


@pytest.fixture
def site(tmp_path, monkeypatch):
    site = PluginSite(tmp_path / "site", monkeypatch, "stamp-tools", "1.4.0")
    site.install(PLUGIN, module="stamp_tools_plugin", name="stamp")
    return site


def spec(folder, plugins: str) -> str:
    text = (
        f"patchspec: 1\nplugins: {plugins}\nmodel: m.onnx\noutput: build/m.onnx\npatches:\n  - stamp.metadata: {{}}\n"
    )
    write_spec(folder, text)
    return "spec.yaml"


def test_a_met_requirement_is_silent_and_the_spec_applies(site, folder):
    code, stdout, stderr = run_cli(["apply", spec(folder, "[stamp-tools>=1.2, stamp_tools]")], cwd=folder)
    assert code == 0, stderr
    assert "stamp.metadata .......... modified  stamped stamped" in stdout


def test_a_missing_distribution_is_named_with_its_install_command_and_the_types_say_so(folder):
    code, _, stderr = run_cli(["validate", spec(folder, "[stamp-tools>=1.2]")], cwd=folder)
    assert code == 2
    lines = stderr.splitlines()
    assert lines[0] == "spec.yaml:2:11: plugins[0]: stamp-tools>=1.2 is not installed where patchspec runs", stderr
    assert (
        lines[1].startswith("  hint: install stamp-tools>=1.2 in ") and "-m pip install 'stamp-tools>=1.2'" in lines[1]
    )
    assert lines[2] == (
        "spec.yaml:6:5: patches[0]: unknown patch type 'stamp.metadata': no installed plugin is named 'stamp' "
        "(this spec's plugins: lists stamp-tools>=1.2, which this environment lacks)"
    )
    assert "patchspec-stamp" not in stderr  # the distribution the spec names, not the convention's guess


def test_an_installed_version_outside_the_range_names_both(site, folder):
    code, _, stderr = run_cli(["apply", spec(folder, '["stamp-tools>=2,<3"]')], cwd=folder)
    assert code == 2 and not (folder / "build").exists()
    assert "plugins[0]: stamp-tools 1.4.0 is installed; this spec needs stamp-tools>=2,<3" in stderr, stderr
    assert "-m pip install 'stamp-tools>=2,<3'" in stderr


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("'stamp-tools[fast]'", "'stamp-tools[fast]' has extras: a spec names a distribution"),
        ("'stamp-tools @ https://example.com/s.whl'", "has a URL: a spec names a distribution"),
        ("'stamp tools'", "'stamp tools' is not a distribution name with an optional version range"),
        ("onnx", "plugins[0]: onnx "),
    ],
)
def test_what_is_not_a_plugin_requirement_is_refused(site, folder, item, said):
    code, _, stderr = run_cli(["validate", spec(folder, f"[{item}]")], cwd=folder)
    assert code == 2 and said in stderr, stderr
    if item == "onnx":
        assert "is installed but registers no patchspec plugin" in stderr


def test_the_key_is_in_the_schema_and_a_wrong_type_is_an_error(folder):
    code, schema, _ = run_cli(["schema"])
    assert code == 0 and '"plugins": {' in schema
    code, _, stderr = run_cli(["validate", spec(folder, "stamp-tools")], cwd=folder)
    assert code == 2 and "spec.yaml:2:10: plugins: 'stamp-tools' is not of type 'array'" in stderr, stderr
