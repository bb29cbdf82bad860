"""patchspec-acme, tested through patchspec's command line with the plugin test kit."""

import importlib.util
from importlib import metadata
from pathlib import Path

import onnx
import pytest

import patchspec_acme
from patchspec.testing import check_types, make_model, registered, run_cli, run_spec

STRIP = "patches:\n  - acme.strip_doc_strings: {}\n"


def doc_strings(model: onnx.ModelProto) -> list[str]:
    graph = model.graph
    items = [model, graph, *graph.node, *graph.input, *graph.output, *graph.initializer]
    return [item.doc_string for item in items if item.doc_string]


def test_plugin_is_installed_under_the_patchspec_entry_point_group():
    names = {ep.name: ep.value for ep in metadata.entry_points(group="patchspec")}
    assert names.get("acme") == "patchspec_acme", "run: pip install -e examples/plugin-acme"
    code, stdout, _ = run_cli(["plugins"])
    assert code == 0
    assert "acme (patchspec-acme 0.1.0)" in stdout
    assert "patch types: acme.strip_doc_strings" in stdout
    assert "verifiers:   acme.max_nodes" in stdout


def test_strip_doc_strings_removes_every_doc_string(patchspec_run):
    model = make_model(inputs={"x": ("N", 3, 8, 8)}, depth=3, doc_string="exported by acme-torch 2.1")
    assert len(doc_strings(model)) == 7  # model, graph, 3 nodes, input, output
    run = patchspec_run(STRIP, model).assert_success()
    assert "removed 7 doc strings" in run.stdout
    assert doc_strings(run.output_model) == []
    assert len(run.output_model.graph.node) == 3


def test_strip_doc_strings_can_keep_the_model_description(patchspec_run):
    model = make_model(doc_string="keep me")
    run = patchspec_run("patches:\n  - acme.strip_doc_strings: {keep_model_doc: true}\n", model).assert_success()
    assert run.output_model.doc_string == "keep me"
    assert run.output_model.graph.doc_string == ""


def test_strip_doc_strings_on_a_clean_model_reports_unchanged(patchspec_run):
    run = patchspec_run(STRIP, make_model()).assert_success()
    assert "unchanged" in run.stdout and "no doc strings" in run.stdout


def test_unknown_parameter_is_a_spec_error_with_a_suggestion(patchspec_run):
    run = patchspec_run("patches:\n  - acme.strip_doc_strings: {keep_model_docs: true}\n", make_model())
    run.assert_failed(2, match="unknown key 'keep_model_docs' (did you mean 'keep_model_doc'?)")


@pytest.mark.parametrize(("depth", "limit", "code"), [(3, 3, 0), (4, 3, 1), (1, 0, 1)])
def test_max_nodes_fails_only_above_the_limit(patchspec_run, depth, limit, code):
    spec = f"patches: []\nverify:\n  - acme.max_nodes: {limit}\n"
    run = patchspec_run(spec, make_model(depth=depth))
    if code == 0:
        run.assert_success()
        assert f"{depth} nodes (limit {limit})" in run.stdout
    else:
        run.assert_failed(1, match=f"{depth} nodes, over the limit of {limit}")
        assert not run.output_path.exists()  # a failed verifier means nothing is written


def test_max_nodes_needs_a_limit(patchspec_run):
    run = patchspec_run("patches: []\nverify:\n  - acme.max_nodes: {}\n", make_model(), command="validate")
    run.assert_failed(2, match="'limit' is required")


def test_an_uninstalled_copy_of_the_plugin_can_be_registered_in_process(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHSPEC_DISABLE_PLUGINS", "acme")  # as if the package were not installed
    model = make_model(doc_string="x")
    run_spec(tmp_path / "off", STRIP, model).assert_failed(2, match="unknown patch type 'acme.strip_doc_strings'")
    with registered(patchspec_acme, name="acme"):
        run_spec(tmp_path / "on", STRIP, model).assert_success()


# -- the contract, one line per type (patchspec runs the same checks on its built-ins) --------------------
def test_strip_doc_strings_keeps_the_patch_contract(tmp_path):
    from patchspec.testing import check_patch_type
    from patchspec_acme.strip_doc_strings import StripDocStringsPatch

    check_patch_type(
        StripDocStringsPatch, tmp_path, change=(make_model(doc_string="from acme-torch"), {}), noop=(make_model(), {})
    )


def test_max_nodes_keeps_the_verifier_contract(tmp_path):
    from patchspec.testing import check_verifier
    from patchspec_acme.max_nodes import MaxNodesVerifier

    check_verifier(MaxNodesVerifier, tmp_path / "small", make_model(depth=2), 10, expect="passed")
    check_verifier(MaxNodesVerifier, tmp_path / "big", make_model(depth=5), {"limit": 3}, expect="failed")


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install mypy)")
def test_the_plugin_type_checks_strictly():
    """``PatchType[Params]``/``Verifier[Params]`` as the docs teach: ``mypy --strict`` is clean."""
    check_types(Path(patchspec_acme.__file__).parent)
