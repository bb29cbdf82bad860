"""`patchspec apply --check` (issue 11): writes nothing; 0 when up to date, 6 naming what changed."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx

from patchspec.testing import make_model

SPEC = """\
patchspec: 1
model: m.onnx
output: out/m2.onnx
patches: [{set_batch: 4}]
verify:
  - run:
      cases: [{inputs: {x: {file: x.npy}}}]
"""


def make_project(tmp_path):
    onnx.save(make_model({"x": ("N", 3)}), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    (tmp_path / "spec.yaml").write_text(SPEC)
    return tmp_path / "spec.yaml"


def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_missing_then_up_to_date_and_nothing_written(tmp_path, run_cli):
    spec = make_project(tmp_path)
    before = snapshot(tmp_path)
    missing = run_cli("apply", "--check", spec)
    assert missing.exit_code == 6 and "out/m2.onnx: missing" in missing.stdout
    assert snapshot(tmp_path) == before  # --check wrote nothing, not even a folder
    assert not (tmp_path / "out").exists()
    assert run_cli("apply", spec).exit_code == 0
    fresh = run_cli("apply", "--check", spec)
    assert fresh.exit_code == 0 and "up to date" in fresh.stdout


def test_stale_output_names_the_input_whose_content_changed(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    np.save(tmp_path / "x.npy", np.zeros((4, 3), np.float32))  # a verifier's file
    result = run_cli("apply", "--check", spec)
    assert result.exit_code == 6 and "stale (file x.npy changed)" in result.stdout
    model = onnx.load(tmp_path / "m.onnx")
    model.producer_name = "re-exported"
    onnx.save(model, tmp_path / "m.onnx")
    result = run_cli("apply", "--check", spec)
    assert "model m.onnx changed" in result.stdout and "file x.npy changed" in result.stdout


def test_a_touch_without_a_content_change_stays_up_to_date(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    os.utime(tmp_path / "m.onnx", ns=(1, 1))
    assert run_cli("apply", "--check", spec).exit_code == 0


def test_check_refuses_options_that_write(tmp_path, run_cli):
    spec = make_project(tmp_path)
    result = run_cli("apply", "--check", "--report", tmp_path / "r.json", spec)
    assert result.exit_code == 2 and "--check writes nothing" in result.stderr
