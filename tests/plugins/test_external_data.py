"""The external_data patch type through the command line: parameters, layouts, results in ORT."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.model import data_writer as extdata
from patchspec.model.external_data import iter_tensors

HEADER = "patchspec: 1\nmodel: models/m.onnx\noutput: out/o.onnx\n"


def build(folder: Path) -> Path:
    """y = (x @ W1) @ W2 + B with W1, W2 (16 KiB each) in m.onnx_data and B (256 bytes) inline."""
    rng = np.random.default_rng(2)
    tensors = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in (("W1", (64, 64)), ("W2", (64, 64)), ("B", (64,)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["h2"]),
        helper.make_node("Add", ["h2", "B"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", ["N", 64])], [tensor_info("y", ["N", 64])], tensors)
    folder.mkdir(parents=True)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, location="m.onnx_data", size_threshold=1024)
    return folder / "m.onnx"


@pytest.fixture
def model(tmp_path) -> Path:
    return build(tmp_path / "models")


def spec_with(tmp_path: Path, patches: str, name: str = "spec.yaml") -> Path:
    return write_spec(tmp_path, HEADER + "patches:\n" + patches, name)


def placements(path: Path) -> dict[str, dict[str, str]]:
    model = onnx.load(str(path), load_external_data=False)
    return {t.name: {e.key: e.value for e in t.external_data} for t in iter_tensors(model.graph)}


def outputs(path: Path) -> np.ndarray:
    x = np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_relocation_with_64k_alignment_and_checksums(tmp_path, model, run_cli):
    spec = spec_with(tmp_path, "  - external_data: {location: new.data, align: 65536, checksum: true}\n")
    result = run_cli("apply", spec, cwd=model.parent)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "o.onnx"
    placed = placements(out)
    data = (out.parent / "new.data").read_bytes()
    assert placed["B"] == {} and {placed[w]["location"] for w in ("W1", "W2")} == {"new.data"}
    for name in ("W1", "W2"):
        start, length = int(placed[name]["offset"]), int(placed[name]["length"])
        assert start % 65536 == 0 and length == 64 * 64 * 4
        assert placed[name]["checksum"] == hashlib.sha1(data[start : start + length]).hexdigest()
    assert not (out.parent / "o.onnx.data").exists()
    np.testing.assert_array_equal(outputs(out), outputs(model))


def test_default_location_threshold_and_alignment(tmp_path, model, run_cli):
    spec = spec_with(tmp_path, "  - external_data: {size_threshold: 0}\n")
    assert run_cli("apply", spec).exit_code == 0
    placed = placements(tmp_path / "out" / "o.onnx")
    assert {p["location"] for p in placed.values()} == {"o.onnx.data"}
    assert all(int(p["offset"]) % 4096 == 0 for p in placed.values())
    assert "checksum" not in placed["W1"]


def test_inline_puts_everything_in_the_model(tmp_path, model, run_cli):
    spec = spec_with(tmp_path, "  - external_data: {inline: true}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "o.onnx"
    assert not any(placements(out).values())
    assert sorted(p.name for p in out.parent.iterdir() if not p.name.startswith(".")) == ["o.onnx"]  # no data file
    np.testing.assert_array_equal(outputs(out), outputs(model))


def test_inline_past_the_protobuf_limit_is_refused_naming_the_size(tmp_path, model, run_cli, monkeypatch):
    monkeypatch.setattr(extdata, "PROTOBUF_LIMIT", 20_000)
    spec = spec_with(tmp_path, "  - external_data: {inline: true}\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 3, result.output
    assert "inline, past protobuf's 2 GiB limit" in result.stderr and "bytes" in result.stderr
    assert "without 'inline: true'" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "params, message",
    [
        ("{align: 3000}", "power of two"),
        ("{align: 0}", "align"),
        ("{location: sub/w.data}", "plain file name"),
        ("{location: ../w.data}", "plain file name"),
        ("{location: w.onnx}", "ends in .onnx"),
        ("{inline: true, align: 4096}", "remove align"),
        ("{size_threshold: -1}", "size_threshold"),
        ("{locaton: w.data}", "location"),
    ],
)
def test_bad_parameters_are_spec_errors(tmp_path, run_cli, params, message):
    spec = spec_with(tmp_path, f"  - external_data: {params}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "patches[0]" in result.stderr


def test_same_bytes_twice_and_stale_data_replaced(tmp_path, model, run_cli):
    spec = spec_with(tmp_path, "  - external_data: {location: w.bin, align: 4096}\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "w.bin").write_bytes(b"\x01" * 1_000_000)  # a stale, larger data file from an earlier run
    assert run_cli("apply", spec).exit_code == 2  # no record says patchspec wrote it: not replaced
    assert run_cli("apply", spec, "--output-dir", out).exit_code == 0  # the caller's output folder
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(first["w.bin"]) == 2 * 64 * 64 * 4
    assert run_cli("apply", "--force", spec).exit_code == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert run_cli("apply", "--output", tmp_path / "other" / "o.onnx", spec).exit_code == 0
    assert (tmp_path / "other" / "w.bin").read_bytes() == first["w.bin"]


def test_data_file_named_like_the_input_data_is_refused_in_the_same_folder(tmp_path, model, run_cli):
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: models/m.onnx\noutput: models/o.onnx\npatches:\n"
        "  - external_data: {location: m.onnx_data}\n",
    )
    before = (model.parent / "m.onnx_data").stat()
    result = run_cli("apply", spec)
    assert result.exit_code == 2, result.output
    assert "would replace the input's 'm.onnx_data'" in result.stderr
    assert (model.parent / "m.onnx_data").stat().st_mtime_ns == before.st_mtime_ns
    assert not (model.parent / "o.onnx").exists()


def test_without_the_patch_the_input_layout_is_kept(tmp_path, model, run_cli):
    spec = write_spec(tmp_path, HEADER + "patches: []\n")
    assert run_cli("apply", spec).exit_code == 0
    placed = placements(tmp_path / "out" / "o.onnx")
    assert placed["B"] == {} and placed["W1"]["location"] == "o.onnx.data"
    assert os.path.getsize(tmp_path / "out" / "o.onnx.data") == 2 * 64 * 64 * 4  # 16 KiB: already aligned


def test_a_content_addressed_data_name_changes_with_the_build_and_the_old_file_goes(tmp_path, model, run_cli):
    """location: '{digest}.weights': each build's data file is named by its digest, so a reader can never
    pair a new data file with an old model; the previous build's file is removed once the new one is in."""
    spec = spec_with(tmp_path, "  - external_data: {location: '{digest}.weights'}\n")
    assert run_cli("apply", spec).exit_code == 0
    out = tmp_path / "out"
    first = {p.name for p in out.glob("*.weights")}
    assert len(first) == 1 and len(next(iter(first))) == len("0123456789abcdef.weights")
    assert {e["location"] for e in placements(out / "o.onnx").values() if e} == first
    spec.write_text(spec.read_text() + "  - rename_dims: {tensor: x, axes: {0: B}}\n")  # another build
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    second = {p.name for p in out.glob("*.weights")}
    assert len(second) == 1 and second != first
    np.testing.assert_allclose(outputs(out / "o.onnx"), outputs(model), rtol=1e-5, atol=1e-6)


def test_a_data_name_takes_no_other_field(tmp_path, model, run_cli):
    result = run_cli("validate", spec_with(tmp_path, "  - external_data: {location: '{hash}.weights'}\n"))
    assert result.exit_code == 2 and "the only field a data file name takes is {digest}" in result.output
