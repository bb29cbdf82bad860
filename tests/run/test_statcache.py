"""The stat cache (issue 11): an up-to-date check reads no input whose identity is unchanged."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

import patchspec.run.statcache as statcache
from patchspec.run.statcache import cache_path
from patchspec.testing import make_model

SPEC = "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: [{set_batch: 4}]\n"


def make_project(tmp_path):
    weight = numpy_helper.from_array(np.ones(64, np.float32), "w")
    node = helper.make_node("Add", ["x", "w"], ["y"])
    model = make_model({"x": ("N", 64)}, {"y": ("N", 64)}, nodes=[node], initializers=[weight])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "spec.yaml").write_text(SPEC)
    return tmp_path / "spec.yaml"


def count_reads(monkeypatch):
    reads = []
    real, real_pieces = statcache.file_sha256, statcache.file_pieces
    monkeypatch.setattr(statcache, "file_sha256", lambda path: reads.append(path.name) or real(path))
    monkeypatch.setattr(statcache, "file_pieces", lambda path, cut: reads.append(path.name) or real_pieces(path, cut))
    return reads


def test_a_no_op_reads_no_input_and_a_touch_costs_one_rehash(tmp_path, run_cli, monkeypatch):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    assert cache_path(tmp_path / "out" / "m2.onnx").is_file()
    reads = count_reads(monkeypatch)
    again = run_cli("apply", spec)
    assert "up to date" in again.stdout and reads == []
    os.utime(tmp_path / "m.data", ns=(10**18, 10**18))  # touched, same content
    touched = run_cli("apply", spec)
    assert "up to date" in touched.stdout and reads == ["m.data"]
    reads.clear()
    assert "up to date" in run_cli("apply", spec).stdout and reads == []  # remembered again


def test_changed_content_rebuilds_and_a_damaged_cache_only_costs_a_rebuild_of_the_same_bytes(tmp_path, run_cli):
    """Without this machine's record, an output's stamp proves nothing (issue 32: it can be committed),
    so the output is built again; its bytes are the same, so nothing is replaced, and it is
    remembered: the next run is a no-op."""
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    cache_path(tmp_path / "out" / "m2.onnx").write_text("{not json")
    again = run_cli("apply", spec)
    assert again.exit_code == 0 and "unchanged (identical bytes)" in again.stdout, again.output
    assert "up to date" in run_cli("apply", spec).stdout
    data = bytearray((tmp_path / "m.data").read_bytes())
    data[0] ^= 0xFF
    (tmp_path / "m.data").write_bytes(bytes(data))
    rebuilt = run_cli("apply", spec)
    assert rebuilt.exit_code == 0 and "up to date" not in rebuilt.stdout


def test_a_deleted_output_data_file_means_rebuild(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    written = [p for p in (tmp_path / "out").iterdir() if p.suffix != ".onnx" and not p.name.startswith(".")]
    assert written, "the output has a data file"
    written[0].unlink()
    result = run_cli("apply", spec)
    assert result.exit_code == 0 and "up to date" not in result.stdout and written[0].is_file()


def flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_without_a_cache_the_output_data_is_checked_against_the_build_record(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    output_data = tmp_path / "out" / "m2.onnx.data"
    built = output_data.read_bytes()
    cache_path(tmp_path / "out" / "m2.onnx").unlink()
    flip_last_byte(output_data)  # same size; no cached identity to compare with
    check = run_cli("apply", "--check", spec)
    assert check.exit_code == 6 and f"stale: {output_data} changed (same size, different content)" in check.stdout
    rebuilt = run_cli("apply", spec)
    assert rebuilt.exit_code == 0 and "up to date" not in rebuilt.stdout and "wrote" in rebuilt.stdout
    assert output_data.read_bytes() == built
    cache_path(tmp_path / "out" / "m2.onnx").unlink()
    with open(output_data, "ab") as handle:  # grown: the parse alone (sizes suffice) would accept it
        handle.write(b"\0")
    rebuilt = run_cli("apply", spec)
    assert rebuilt.exit_code == 0 and "up to date" not in rebuilt.stdout and output_data.read_bytes() == built


def test_a_build_remembers_its_output_data_so_the_next_no_op_reads_nothing(tmp_path, run_cli, monkeypatch):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    reads = count_reads(monkeypatch)
    os.utime(tmp_path / "out" / "m2.onnx", ns=(10**18, 10**18))  # the model touched, its data file not
    # the touched model is read once, to prove it is still the file this machine wrote; its data is not
    assert "up to date" in run_cli("apply", spec).stdout and reads == ["m2.onnx"]
    reads.clear()
    assert "up to date" in run_cli("apply", spec).stdout and reads == []
    cache_path(tmp_path / "out" / "m2.onnx").unlink()  # no record: the output is built again, the same bytes
    assert "unchanged (identical bytes)" in run_cli("apply", spec).stdout
