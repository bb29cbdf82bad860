"""`patchspec apply --check` (issue 11): writes nothing; 0 when up to date, 6 naming what changed."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import patchspec.run.statcache as statcache
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
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


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
    result = run_cli("apply", "--check", spec, cwd=tmp_path)
    assert result.exit_code == 6 and "out/m2.onnx: stale: x.npy changed" in result.stdout
    model = onnx.load(tmp_path / "m.onnx")
    model.producer_name = "re-exported"
    onnx.save(model, tmp_path / "m.onnx")
    result = run_cli("apply", "--check", spec, cwd=tmp_path)
    assert "stale: m.onnx changed; x.npy changed" in result.stdout


def test_a_touch_without_a_content_change_stays_up_to_date(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    os.utime(tmp_path / "m.onnx", ns=(1, 1))
    assert run_cli("apply", "--check", spec).exit_code == 0


def test_check_refuses_options_that_write(tmp_path, run_cli):
    spec = make_project(tmp_path)
    result = run_cli("apply", "--check", "--report", tmp_path / "r.json", spec)
    assert result.exit_code == 2 and "--check writes nothing" in result.stderr


# -- the output's data file is an output too (issue 16) -------------------------------------------
EXTERNAL_SPEC = "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: [{set_batch: 4}]\n"


def make_external_project(tmp_path):
    """A model whose weights live in m.data, so the output has a data file: out/m2.onnx.data."""
    weight = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "w")
    node = helper.make_node("Add", ["x", "w"], ["y"])
    model = make_model({"x": ("N", 1024)}, {"y": ("N", 1024)}, nodes=[node], initializers=[weight])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "spec.yaml").write_text(EXTERNAL_SPEC)
    return tmp_path / "spec.yaml"


def append_a_byte(path):
    with open(path, "ab") as handle:
        handle.write(b"\0")
    return f"changed (size {path.stat().st_size - 1} -> {path.stat().st_size})"


def truncate(path):
    size = path.stat().st_size
    os.truncate(path, size - 8)
    return f"changed (size {size} -> {size - 8})"


def rewrite_keeping_size_and_mtime(path):
    before = path.stat()
    time.sleep(0.02)  # past a coarse clock's tick: the rewrite gets a new ctime even there
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    return "changed (same size, different content)"


def delete(path):
    path.unlink()
    return "is missing"


@pytest.mark.parametrize("damage", [append_a_byte, truncate, rewrite_keeping_size_and_mtime, delete])
def test_a_changed_output_data_file_is_rebuilt_and_stale(tmp_path, run_cli, damage):
    spec = make_external_project(tmp_path)
    assert run_cli("apply", spec, cwd=tmp_path).exit_code == 0
    data = tmp_path / "out" / "m2.onnx.data"
    built = data.read_bytes()
    damage(data)
    rebuilt = run_cli("apply", spec, cwd=tmp_path)
    assert rebuilt.exit_code == 0 and "up to date" not in rebuilt.stdout and "wrote" in rebuilt.stdout, rebuilt.output
    assert data.read_bytes() == built
    what = damage(data)
    check = run_cli("apply", "--check", spec, cwd=tmp_path)
    assert check.exit_code == 6, check.output
    assert f"out/m2.onnx: stale: {Path('out', 'm2.onnx.data')} {what}" in check.stdout
    assert run_cli("apply", spec, cwd=tmp_path).exit_code == 0 and data.read_bytes() == built
    assert run_cli("apply", "--check", spec, cwd=tmp_path).exit_code == 0
    assert "up to date" in run_cli("apply", spec, cwd=tmp_path).stdout


def test_a_touched_output_data_file_is_verified_by_content_and_stays_up_to_date(tmp_path, run_cli, monkeypatch):
    spec = make_external_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    data = tmp_path / "out" / "m2.onnx.data"
    reads = []
    real = statcache.file_pieces  # a data file is hashed range by range, cut by its model's tensors
    monkeypatch.setattr(statcache, "file_pieces", lambda path, cut: reads.append(path.name) or real(path, cut))
    os.utime(data, ns=(10**18, 10**18))
    assert run_cli("apply", "--check", spec).exit_code == 0
    assert reads == ["m2.onnx.data"]  # its identity changed: read once, compared with the build's record
    reads.clear()
    assert "up to date" in run_cli("apply", spec).stdout and reads == ["m2.onnx.data"]
    reads.clear()
    assert "up to date" in run_cli("apply", spec).stdout and reads == []  # remembered again: a stat


def test_a_spec_edit_is_named_by_the_spec_path(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    spec.write_text(SPEC + "# a comment counts\n")
    here = run_cli("apply", "--check", "spec.yaml", cwd=tmp_path)
    assert here.exit_code == 6 and "out/m2.onnx: stale: spec.yaml changed" in here.stdout
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    away = run_cli("apply", "--check", spec, cwd=elsewhere)  # not below the current directory: absolute
    assert away.exit_code == 6 and f"stale: {spec} changed" in away.stdout
