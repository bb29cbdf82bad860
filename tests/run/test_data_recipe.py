"""A data file's sha256 is read once: a rebuild of the same bytes takes it from the signed stat cache.

A first build hashes the data file while it writes it and keeps the sha256 under the file's recipe
(the ranges it copies, named by their sources' hashes); a rebuild from the same inputs to the same
layout copies in the kernel and reads nothing. The record decides only where this machine signed it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_statcache import SPEC, count_reads, make_project

import patchspec.model.data_writer as data_writer
import patchspec.run.commit as commit
import patchspec.run.statcache as statcache
from patchspec.model.data_pieces import file_pieces
from patchspec.model.data_recipe import Piece, Recipe
from patchspec.run.stamp import OutputStamp, data_ranges
from patchspec.run.statcache import cache_path
from patchspec.testing import make_model

OUTPUT = Path("out") / "m2.onnx"


@pytest.fixture(autouse=True)
def own_store(tmp_path_factory, monkeypatch):
    """A key, and so a shared store, of this test's own: what another test built is not known here."""
    monkeypatch.setenv(statcache.KEY_ENV, str(tmp_path_factory.mktemp("key") / "cache.key"))


def recorded_sha256(project: Path) -> dict[str, str]:
    """Each data file's digest as the output's stamp records it, and as its bytes are (cut by the
    output model's tensor ranges, as a check on another machine cuts it)."""
    stamp = OutputStamp.read(project / OUTPUT)
    assert stamp is not None and stamp.recorded and stamp.ranges
    for name, entry in stamp.recorded.items():
        assert entry["pieces"] == file_pieces(project / OUTPUT.parent / name, stamp.ranges[name])[0], name
    return {name: entry["pieces"] for name, entry in stamp.recorded.items()}


def refuse_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> None:
        raise AssertionError("the data file was hashed again")

    monkeypatch.setattr(data_writer, "_Digest", refused)


def test_a_forced_rebuild_reads_no_data_file_and_records_the_same_sha256(tmp_path, run_cli, monkeypatch):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    first = recorded_sha256(tmp_path)
    refuse_hashing(monkeypatch)
    compared = []
    real_cmp = commit.filecmp.cmp
    monkeypatch.setattr(commit.filecmp, "cmp", lambda a, b, shallow: compared.append(Path(b).name) or real_cmp(a, b))
    again = run_cli("apply", "--force", spec)
    assert again.exit_code == 0 and "unchanged (identical bytes)" in again.stdout, again.output
    assert recorded_sha256(tmp_path) == first
    assert compared == ["m2.onnx"]  # the data file is known identical by its sha256, read by neither side


def test_a_forced_rebuild_replaces_a_data_file_changed_since(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    first = recorded_sha256(tmp_path)
    data = tmp_path / OUTPUT.parent / "m2.onnx.data"
    damaged = bytearray(data.read_bytes())
    damaged[0] ^= 0xFF
    data.write_bytes(bytes(damaged))
    again = run_cli("apply", "--force", spec)
    assert again.exit_code == 0 and "wrote" in again.stdout, again.output
    assert recorded_sha256(tmp_path) == first  # and the bytes are the build's again


def test_a_changed_input_is_hashed_again(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    first = recorded_sha256(tmp_path)
    data = bytearray((tmp_path / "m.data").read_bytes())
    data[0] ^= 0xFF
    stat = os.stat(tmp_path / "m.data")
    (tmp_path / "m.data").write_bytes(bytes(data))
    os.utime(tmp_path / "m.data", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: the ctime moves
    again = run_cli("apply", spec)
    assert again.exit_code == 0 and "wrote" in again.stdout, again.output
    assert recorded_sha256(tmp_path) != first


def test_a_forged_recipe_record_decides_nothing(tmp_path, run_cli, monkeypatch):
    """A committed cache naming a false sha256 for the data file's recipe is not signed here: the
    data file is hashed, and its true sha256 recorded."""
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    path = cache_path(tmp_path / OUTPUT)
    payload = json.loads(path.read_text())
    payload["derived"] = [[key, "0" * 64] for key, _ in payload["derived"]]
    assert payload["derived"], "the first build kept its recipe"
    path.write_text(json.dumps(payload))  # its signature no longer checks
    again = run_cli("apply", "--force", spec)
    assert again.exit_code == 0, again.output
    assert "0" * 64 not in recorded_sha256(tmp_path).values()


def two_weights(tmp_path: Path) -> Path:
    weights = [numpy_helper.from_array(np.full(64, index, np.float32), f"w{index}") for index in (1, 2)]
    nodes = [helper.make_node("Add", ["x", "w1"], ["t"]), helper.make_node("Add", ["t", "w2"], ["y"])]
    model = make_model({"x": ("N", 64)}, {"y": ("N", 64)}, nodes=nodes, initializers=weights)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "spec.yaml").write_text(SPEC)
    return tmp_path / "spec.yaml"


def test_another_layout_is_a_new_recipe(tmp_path, run_cli):
    spec = two_weights(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    first = recorded_sha256(tmp_path)
    spec.write_text(
        spec.read_text().replace(
            "[{set_batch: 4}]", "[{set_batch: 4}, {external_data: {align: 64, size_threshold: 0}}]"
        )
    )
    again = run_cli("apply", spec)
    assert again.exit_code == 0, again.output
    assert recorded_sha256(tmp_path) != first
    derived = json.loads(cache_path(tmp_path / OUTPUT).read_text())["derived"]
    assert len(derived) == 2  # both layouts remembered, the newest last


def test_a_recipe_key_names_each_source_by_content_and_each_piece_by_place():
    source = Path("/data/m.data")
    recipe = Recipe("o.data", (Piece(0, 16, source, 0), Piece(64, 4, sha256="ab")))
    assert recipe.key(lambda path: None) is None  # a source not known: no key, the file is hashed
    key = recipe.key(lambda path: "1" * 64)
    assert key is not None and key != recipe.key(lambda path: "2" * 64)
    moved = Recipe("o.data", (Piece(0, 16, source, 0), Piece(128, 4, sha256="ab")))
    assert moved.key(lambda path: "1" * 64) != key
    from_elsewhere = Recipe("o.data", (Piece(0, 16, source, 8), Piece(64, 4, sha256="ab")))
    assert from_elsewhere.key(lambda path: "1" * 64) != key


def test_a_clean_build_reads_neither_the_input_nor_the_data_file_again(tmp_path, run_cli, monkeypatch):
    """``rm -rf out``: this user's shared store still knows the input's hash and the data file's."""
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    first = recorded_sha256(tmp_path)
    shutil.rmtree(tmp_path / "out")
    reads = count_reads(monkeypatch)
    refuse_hashing(monkeypatch)
    again = run_cli("apply", spec)
    assert again.exit_code == 0 and "wrote" in again.stdout, again.output
    assert reads == [] and recorded_sha256(tmp_path) == first


def test_a_tampered_shared_store_decides_nothing(tmp_path, run_cli):
    spec = make_project(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    store = json.loads(statcache.SharedDigests.path().read_text())
    for entry in store["files"].values():
        entry["sha256"] = "0" * 64  # the signature no longer checks
    store["derived"] = [[key, "0" * 64] for key, _ in store["derived"]]
    statcache.SharedDigests.path().write_text(json.dumps(store))
    shutil.rmtree(tmp_path / "out")
    assert run_cli("apply", spec).exit_code == 0
    stamp = OutputStamp.read(tmp_path / OUTPUT)
    assert stamp is not None and stamp.parts is not None
    cut = data_ranges(onnx.load(str(tmp_path / "m.onnx"), load_external_data=False))["m.data"]
    assert stamp.parts["data m.data"] == file_pieces(tmp_path / "m.data", cut)[0]
    assert "0" * 64 not in recorded_sha256(tmp_path).values()


def test_without_verifiers_a_forced_rebuild_links_the_same_data_file_instead_of_copying(tmp_path, run_cli, monkeypatch):
    """Nothing reads the staged copy (onnx's checker would refuse a data file with two links), so the
    previous build's file is hard-linked into staging and kept; the next check is still a stat."""
    spec = make_project(tmp_path)
    assert run_cli("apply", "--no-verify", spec).exit_code == 0
    data = tmp_path / OUTPUT.parent / "m2.onnx.data"
    inode, first = os.stat(data).st_ino, recorded_sha256(tmp_path)

    def no_copy(*args, **kwargs):
        raise AssertionError("the data file was copied")

    real_sink = data_writer._Sink
    monkeypatch.setattr(data_writer, "_Sink", no_copy)
    again = run_cli("apply", "--no-verify", "--force", spec)
    assert again.exit_code == 0 and "unchanged (identical bytes)" in again.stdout, again.output
    assert os.stat(data).st_ino == inode and os.stat(data).st_nlink == 1
    assert recorded_sha256(tmp_path) == first
    monkeypatch.setattr(data_writer, "_Sink", real_sink)
    reads = count_reads(monkeypatch)
    assert "up to date" in run_cli("apply", "--no-verify", spec).stdout and reads == []


def test_with_verifiers_the_data_file_is_copied(tmp_path, run_cli):
    spec = make_project(tmp_path)
    spec.write_text(spec.read_text() + "verify: [{check: {}}]\n")
    assert run_cli("apply", spec).exit_code == 0
    data = tmp_path / OUTPUT.parent / "m2.onnx.data"
    again = run_cli("apply", "--force", spec)
    assert again.exit_code == 0 and "unchanged (identical bytes)" in again.stdout, again.output
    assert os.stat(data).st_nlink == 1
