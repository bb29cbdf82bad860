"""The no-op from the stat cache alone (run/noop): up to date only while nothing it recorded changed."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from patchspec.host.installed import installed_plugins
from patchspec.run.freshness import by_record
from patchspec.run.noop import Request
from patchspec.run.request import BuildRequest
from patchspec.run.statcache import cache_path
from patchspec.spec.catalog import DISABLE_ENV
from patchspec.testing import make_model, registered, run_cli, run_spec

SPEC = "patches:\n  - set_batch: 2\nverify:\n  - check: {}\n"


@pytest.fixture
def built(tmp_path, monkeypatch):
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    run_spec(tmp_path, SPEC, make_model()).assert_success()
    return tmp_path


def request(folder, **options) -> Request:
    plugins = installed_plugins()
    assert plugins is not None
    return Request(folder / "spec.yaml", BuildRequest(**options), plugins)


def test_a_build_records_what_makes_the_next_apply_a_no_op(built):
    assert by_record(request(built)) == built / "out" / "model.onnx"
    code, stdout, _ = run_cli(["apply", "spec.yaml"], cwd=built)
    assert code == 0 and stdout.endswith("out/model.onnx: up to date\n"), stdout  # relative, as git prints it


def test_another_way_of_asking_is_not_the_recorded_build(built):
    assert by_record(request(built, no_verify=True)) is None
    assert by_record(request(built, strict_paths=True)) is None
    assert by_record(Request(built / "spec.yaml", plugins={})) is None  # other plugins installed


def test_a_changed_input_is_seen_by_its_identity_and_rebuilt(built):
    model = make_model()
    model.doc_string = "changed"
    onnx.save(model, str(built / "model.onnx"))
    assert by_record(request(built)) is None
    code, stdout, stderr = run_cli(["apply", "spec.yaml"], cwd=built)
    assert code == 0 and "wrote" in stdout, stdout + stderr
    assert by_record(request(built)) == built / "out" / "model.onnx"  # recorded again


def test_a_touched_spec_takes_the_full_check_which_finds_it_by_record(built):
    spec = built / "spec.yaml"
    os.utime(spec, ns=(spec.stat().st_atime_ns, spec.stat().st_mtime_ns + 10**9))
    assert by_record(request(built)) is None
    code, stdout, _ = run_cli(["apply", "--check", "spec.yaml"], cwd=built)
    assert code == 0 and "up to date" in stdout


def test_an_output_replaced_behind_the_cache_is_judged_by_its_own_stamp(built):
    output = built / "out" / "model.onnx"
    onnx.save(make_model(), str(output))  # not written by patchspec: no stamp
    assert by_record(request(built)) is None
    code, stdout, _ = run_cli(["apply", "--check", "spec.yaml"], cwd=built)
    assert code == 6 and "stale" in stdout, stdout


def test_disabling_a_plugin_is_another_request(built, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "lint")
    assert by_record(request(built)) is None


def test_a_run_with_plugins_registered_in_process_records_nothing(tmp_path):
    import types

    module = types.ModuleType("patchspec_probe")
    with registered(module, name="probe"):
        run_spec(tmp_path, SPEC, make_model()).assert_success()
    record = json.loads(cache_path(tmp_path / "out" / "model.onnx").read_text(encoding="utf-8"))
    assert record.get("build") == {}
