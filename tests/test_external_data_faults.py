"""Bad external data in the input: exit 3 naming tensor and file; inputs untouched; nothing written.

Every run starts from a folder that is not the model's, so nothing may resolve against the CWD.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec

DATA = "m.onnx_data"
W_BYTES = 64 * 64 * 4


def build(folder: Path, location: str = DATA) -> Path:
    """models/m.onnx: y = x @ W + B with W (16 KiB) in ``location`` and B (256 bytes) inline."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", ["N", 64])], [tensor_info("y", ["N", 64])], [weight, bias])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, location=location, size_threshold=1024)
    return folder / "m.onnx"


def set_entries(model_path: Path, **entries: str) -> None:
    """Rewrite W's external_data entries (None removes a key) without touching the data file."""
    model = onnx.load(str(model_path), load_external_data=False)
    weight = next(t for t in model.graph.initializer if t.name == "W")
    current = {e.key: e.value for e in weight.external_data}
    current.update(entries)
    del weight.external_data[:]
    for key, value in current.items():
        if value is not None:
            entry = weight.external_data.add()
            entry.key, entry.value = key, value
    model_path.write_bytes(model.SerializeToString())


def snapshot(folder: Path) -> dict:
    """Bytes digest and mtime of every file below ``folder``."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return found


@pytest.fixture
def project(tmp_path):
    (tmp_path / ".git").mkdir()  # a repository: its root holds specs/, models/ and out/
    model = build(tmp_path / "models")
    (tmp_path / "specs").mkdir()
    spec = write_spec(tmp_path / "specs", "patchspec: 1\nmodel: ../models/m.onnx\noutput: ../out/o.onnx\npatches: []\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return model, spec, elsewhere


def run_fails(run_cli, project, *expected: str, flags=()):
    model, spec, elsewhere = project
    before = snapshot(model.parent.parent)
    result = run_cli("apply", *flags, spec, cwd=elsewhere)
    assert result.exit_code == 3, result.output
    for text in expected:
        assert text in result.stderr, f"{text!r} not in: {result.stderr}"
    assert "Traceback" not in result.output
    assert snapshot(model.parent.parent) == before
    assert not (model.parent.parent / "out").exists()
    return result.stderr


def test_the_unbroken_project_applies_from_another_folder(run_cli, project):
    model, spec, elsewhere = project
    result = run_cli("apply", spec, cwd=elsewhere)
    assert result.exit_code == 0, result.output
    assert (model.parent.parent / "out" / "o.onnx.data").stat().st_size == W_BYTES


def test_missing_data_file(run_cli, project):
    model, _, _ = project
    (model.parent / DATA).unlink()
    run_fails(run_cli, project, "'W'", f"'{DATA}'", "not found", str(model.parent), "no similarly named file")


def test_moved_data_file_lists_similar_names(run_cli, project):
    model, _, _ = project
    (model.parent / DATA).rename(model.parent / "m.onnx.data")
    run_fails(run_cli, project, "'W'", f"'{DATA}'", "not found", "'m.onnx.data'")


def test_data_file_moved_to_another_folder(run_cli, project):
    model, _, _ = project
    (model.parent / "sub").mkdir()
    set_entries(model, location=f"sub/{DATA}")
    run_fails(run_cli, project, "'W'", f"'sub/{DATA}'", "not found", str(model.parent / "sub"))


def test_truncated_data_file(run_cli, project):
    model, _, _ = project
    os.truncate(model.parent / DATA, 10000)
    stderr = run_fails(run_cli, project, "'W'", f"'{DATA}'", "0..16384", "offset 0", "length 16384", "10000 bytes")
    assert "truncated" in stderr


@pytest.mark.parametrize(
    "location",
    [
        "../m.onnx_data",
        "sub/../../m.onnx_data",
        "/etc/passwd",
        "C:\\x.data",
        "C:x.data",
        "\\\\server\\share\\x.data",
        "//server/share/x.data",
        "sub\\..\\..\\x.data",
        "*/_ORT_MEM_ADDR_/*",
    ],
)
def test_escaping_locations_are_refused(run_cli, project, location):
    model, _, _ = project
    set_entries(model, location=location)
    run_fails(run_cli, project, "'W'", location)


def test_wrong_length(run_cli, project):
    model, _, _ = project
    set_entries(model, length="16000")
    run_fails(run_cli, project, "'W'", "16000", "16384", "[64, 64]", "float")


@pytest.mark.parametrize("offset", ["-1", "abc", "1e3", " "])
def test_garbage_offsets(run_cli, project, offset):
    model, _, _ = project
    set_entries(model, offset=offset)
    run_fails(run_cli, project, "'W'", "offset", "not a non-negative integer")


def test_offset_past_the_end(run_cli, project):
    model, _, _ = project
    set_entries(model, offset=str(10**15))
    run_fails(run_cli, project, "'W'", f"'{DATA}'", str(10**15), f"{W_BYTES} bytes")


def test_bad_checksum(run_cli, project):
    model, _, _ = project
    set_entries(model, checksum="0" * 40)
    run_fails(run_cli, project, "'W'", f"'{DATA}'", "checksum", "0" * 40)


def test_good_checksum_passes(run_cli, project):
    model, spec, elsewhere = project
    set_entries(model, checksum=hashlib.sha1((model.parent / DATA).read_bytes()[:W_BYTES]).hexdigest())
    assert run_cli("apply", spec, cwd=elsewhere).exit_code == 0


def test_unknown_and_duplicate_keys(run_cli, project):
    model, _, _ = project
    set_entries(model, evil="__class__")
    run_fails(run_cli, project, "'W'", "unknown external_data key 'evil'")


def test_location_is_a_directory(run_cli, project):
    model, _, _ = project
    (model.parent / "folder.data").mkdir()
    set_entries(model, location="folder.data")
    run_fails(run_cli, project, "'W'", "'folder.data'", "is a directory")


def test_symlinked_data_is_followed_unless_strict(run_cli, project, tmp_path):
    model, spec, elsewhere = project
    store = tmp_path / "store"
    store.mkdir()
    (model.parent / DATA).rename(store / "blob")
    (model.parent / DATA).symlink_to(store / "blob")
    run_fails(run_cli, project, "'W'", f"'{DATA}'", "symbolic link", "--strict-paths", flags=("--strict-paths",))
    result = run_cli("apply", spec, cwd=elsewhere)
    assert result.exit_code == 0, result.output
    written = model.parent.parent / "out" / "o.onnx.data"
    assert not written.is_symlink() and written.read_bytes()[:W_BYTES] == (store / "blob").read_bytes()[:W_BYTES]


def test_symlinked_folder_is_refused_when_strict(run_cli, project, tmp_path):
    model, _, _ = project
    (tmp_path / "real").mkdir()
    (model.parent / DATA).rename(tmp_path / "real" / DATA)
    (model.parent / "linked").symlink_to(tmp_path / "real")
    set_entries(model, location=f"linked/{DATA}")
    run_fails(run_cli, project, "'W'", "symbolic link", flags=("--strict-paths",))


def test_dangling_symlink(run_cli, project):
    model, _, _ = project
    (model.parent / DATA).unlink()
    (model.parent / DATA).symlink_to(model.parent / "gone.bin")
    run_fails(run_cli, project, "'W'", f"'{DATA}'", "gone.bin", "does not exist")


def test_hardlinked_data_is_accepted_unless_strict(run_cli, project, tmp_path):
    model, spec, elsewhere = project
    os.link(model.parent / DATA, tmp_path / "second-name")
    run_fails(run_cli, project, "'W'", "2 hard links", flags=("--strict-paths",))
    assert run_cli("apply", spec, cwd=elsewhere).exit_code == 0
    written = model.parent.parent / "out" / "o.onnx.data"
    assert written.stat().st_nlink == 1 and written.stat().st_ino != (model.parent / DATA).stat().st_ino


def test_a_file_named_with_two_dots_is_fine(run_cli, tmp_path):
    model = build(tmp_path / "models")  # onnx.save itself refuses to write 'w..data'
    (model.parent / DATA).rename(model.parent / "w..data")
    set_entries(model, location="w..data")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: models/m.onnx\noutput: out/o.onnx\npatches: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert (model.parent / "w..data").is_file()


def test_unknown_data_type_and_negative_dims(run_cli, project):
    model, _, _ = project
    proto = onnx.load(str(model), load_external_data=False)
    proto.graph.initializer[0].data_type = 999
    model.write_bytes(proto.SerializeToString())
    run_fails(run_cli, project, "'W'", "unknown data type 999")
    proto.graph.initializer[0].data_type = onnx.TensorProto.FLOAT
    proto.graph.initializer[0].dims[0] = -64
    model.write_bytes(proto.SerializeToString())
    run_fails(run_cli, project, "'W'", "negative dimension")


# -- models as users have them (issue 12) ----------------------------------------------------------
LFS_TEXT = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 16384\n"
)


def test_a_data_file_left_as_a_git_lfs_pointer_says_so(run_cli, project):
    model, _, _ = project
    (model.parent / DATA).write_text(LFS_TEXT)
    stderr = run_fails(run_cli, project, "'W'", f"'{DATA}'", "is a Git LFS pointer", f'git lfs pull --include="{DATA}"')
    assert "truncated" not in stderr


def test_a_model_left_as_a_git_lfs_pointer_says_so(run_cli, project):
    model, _, _ = project
    model.write_text(LFS_TEXT)
    run_fails(run_cli, project, "a Git LFS pointer", "not the model", 'git lfs pull --include="m.onnx"')


def test_several_missing_data_files_are_listed_at_once_with_where_they_are(run_cli, tmp_path):
    folder = tmp_path / "models"
    model = build(folder)
    loaded = onnx.load(str(model), load_external_data=False)
    bias = next(t for t in loaded.graph.initializer if t.name == "B")
    onnx.external_data_helper.set_external_data(bias, location="bias.bin")  # a second data file
    bias.data_location = onnx.TensorProto.EXTERNAL
    bias.ClearField("raw_data")
    bias.ClearField("float_data")
    model.write_bytes(loaded.SerializeToString())
    (tmp_path / "downloads").mkdir()
    (folder / DATA).rename(tmp_path / "downloads" / DATA)  # fetched into the wrong folder
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: models/m.onnx\noutput: out/o.onnx\npatches: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 3, result.output
    assert "2 external data files not found" in result.stderr
    assert f"'{DATA}' (1 tensor); a file of that name is at {tmp_path / 'downloads' / DATA}" in result.stderr
    assert "'bias.bin' (1 tensor)" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_hugging_face_cache_snapshot_works_end_to_end(run_cli, tmp_path):
    """snapshots/<rev>/model.onnx and its data are relative links into blobs/ (issue 12)."""
    repo = tmp_path / "hub" / "models--acme--det"
    built = build(tmp_path / "export")
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    os.replace(built, repo / "blobs" / "1f0c")
    os.replace(built.parent / DATA, repo / "blobs" / "9a7e")
    (repo / "snapshots" / "abc123" / "m.onnx").symlink_to("../../blobs/1f0c")
    (repo / "snapshots" / "abc123" / DATA).symlink_to("../../blobs/9a7e")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: hub/models--acme--det/snapshots/abc123/m.onnx\n"
        "output: out/det.onnx\npatches: [{set_batch: 4}]\nverify:\n"
        "  - run: {cases: [{inputs: {x: [4, 64]}}], compare: {split_batch: true}}\n",
    )
    before = snapshot(repo)
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "passed" in result.stdout and snapshot(repo) == before
    written = onnx.load(str(tmp_path / "out" / "det.onnx"), load_external_data=False)
    (weight,) = [t for t in written.graph.initializer if t.name == "W"]
    assert {e.key: e.value for e in weight.external_data}["location"] == "det.onnx.data"  # its own data
    strict = run_cli("apply", "--strict-paths", "--force", spec)
    assert strict.exit_code == 3 and "symbolic link" in strict.stderr  # the policy still sees the links
