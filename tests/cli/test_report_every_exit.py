"""--report is written on every exit (issue 11): the exit code, version and digest, per-step outcomes."""

from __future__ import annotations

import json

import onnx
import pytest

import patchspec
import patchspec.run.engine
from patchspec.testing import make_model


def make_project(tmp_path, patches="[]", verify="  - check: {}\n"):
    onnx.save(make_model({"x": ("N", 3)}), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: {patches}\nverify:\n{verify}")
    return spec


def report_of(run_cli, tmp_path, spec, *args):
    path = tmp_path / "report.json"
    result = run_cli("apply", spec, "--report", path, *args)
    assert path.is_file(), f"no report after exit {result.exit_code}: {result.output}"
    report = json.loads(path.read_text())
    assert report["exit_code"] == result.exit_code and report["version"] == patchspec.__version__
    return result, report


def test_success_reports_exit_0_digest_steps_and_files(tmp_path, run_cli):
    spec = make_project(tmp_path, patches="[{set_batch: 4}]")
    result, report = report_of(run_cli, tmp_path, spec)
    assert result.exit_code == 0 and report["status"] == "written"
    assert len(report["digest"]) == 64 and report["files"] == [str(tmp_path / "out" / "m2.onnx")]
    assert report["patches"][0]["status"] == "modified" and report["patches"][0]["seconds"] >= 0
    assert report["verifiers"][0]["status"] == "passed"
    _, second = report_of(run_cli, tmp_path, spec)
    assert second["status"] == "up to date" and second["digest"] == report["digest"]


@pytest.mark.parametrize(
    "case, code", [("spec error", 2), ("patch cannot apply", 4), ("verification failed", 1), ("model unusable", 3)]
)
def test_every_failure_writes_the_report_with_its_exit_code(tmp_path, run_cli, case, code):
    if case == "spec error":
        spec = make_project(tmp_path, patches="[{set_batch: {sise: 4}}]")
    elif case == "patch cannot apply":
        spec = make_project(tmp_path, patches="[{set_batch: {size: 4, inputs: {x: 7}}}]")  # no axis 7
    elif case == "verification failed":
        spec = make_project(tmp_path, verify="  - static: {}\n")  # the batch stays symbolic: static fails
    else:
        spec = make_project(tmp_path)
        (tmp_path / "m.onnx").write_bytes(b"not a model")
    result, report = report_of(run_cli, tmp_path, spec)
    assert result.exit_code == code, result.output
    if case == "spec error":
        assert report["runs"] == [] and "sise" in report["error"]
        problems = report["problem"]["problems"]  # the error as data, not only as text
        assert {p["line"] for p in problems} == {4} and all(p["file"].endswith("spec.yaml") for p in problems)
        assert any("sise" in p["message"] for p in problems)
    else:
        assert report["status"] == "failed" and report["error"]
        assert report["problem"]["exit_code"] == code and report["problem"]["detail"] in report["error"]
    if case == "patch cannot apply":  # a step's error says where it is as fields
        where = report["problem"]["where"]
        assert where["line"] == 4 and where["step"] == "patches[0] (set_batch)" and where["file"].endswith("spec.yaml")


def test_an_interrupt_writes_the_report_with_130(tmp_path, run_cli, monkeypatch):
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(patchspec.run.engine.Engine, "patch", interrupted)
    spec = make_project(tmp_path, patches="[{set_batch: 4}]")
    result, report = report_of(run_cli, tmp_path, spec)
    assert result.exit_code == 130 and report["status"] == "failed" and report["error"] == "KeyboardInterrupt"
    assert not (tmp_path / "out" / "m2.onnx").exists()
