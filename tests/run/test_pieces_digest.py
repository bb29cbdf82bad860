"""A first build hashes each input byte once: the pieces digest (issue 36, item 2).

The input's data file is hashed range by range (each tensor, the gaps between); the data file the
build writes is those ranges at new offsets with zero padding, so its record is composed from the
same range hashes and never read. An output recorded the way patchspec did before (a plain sha256)
proves nothing and is rebuilt.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_statcache import SPEC

import patchspec.model.data_digest as data_digest
import patchspec.model.data_pieces as data_pieces
import patchspec.run.statcache as statcache
from patchspec.model.data_pieces import compose, cover, file_pieces
from patchspec.run.stamp import FILES_KEY, OutputStamp, data_ranges
from patchspec.testing import make_model

OUTPUT = Path("out") / "m2.onnx"


@pytest.fixture(autouse=True)
def own_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(statcache.KEY_ENV, str(tmp_path_factory.mktemp("key") / "cache.key"))


def three_weights(tmp_path: Path) -> Path:
    weights = [numpy_helper.from_array(np.full(300, index, np.float32), f"w{index}") for index in (1, 2, 3)]
    nodes = [
        helper.make_node("Add", ["x", "w1"], ["a"]),
        helper.make_node("Add", ["a", "w2"], ["b"]),
        helper.make_node("Add", ["b", "w3"], ["y"]),
    ]
    model = make_model({"x": ("N", 300)}, {"y": ("N", 300)}, nodes=nodes, initializers=weights)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "spec.yaml").write_text(
        SPEC.replace("[{set_batch: 4}]", "[{set_batch: 4}, {external_data: {align: 4096}}]")
    )
    return tmp_path / "spec.yaml"


def test_a_first_build_hashes_each_input_byte_once(tmp_path, run_cli, monkeypatch):
    spec = three_weights(tmp_path)
    hashed: list[tuple[int, int]] = []
    real = data_pieces.hash_range

    def counted(fd, offset, length, progress=None):
        hashed.append((offset, length))
        return real(fd, offset, length, progress)

    monkeypatch.setattr(data_pieces, "hash_range", counted)
    monkeypatch.setattr(data_digest, "hash_range", counted)
    assert run_cli("apply", spec).exit_code == 0
    assert sum(length for _, length in hashed) == (tmp_path / "m.data").stat().st_size  # the input, once
    stamp = OutputStamp.read(tmp_path / OUTPUT)
    assert stamp is not None and stamp.recorded and stamp.ranges
    (name,) = stamp.recorded
    assert name == "m2.onnx.data" and len(stamp.ranges[name]) == 3
    assert stamp.recorded[name]["pieces"] == file_pieces(tmp_path / OUTPUT.parent / name, stamp.ranges[name])[0]


def test_an_output_recorded_by_a_plain_sha256_is_stale_and_rebuilt(tmp_path, run_cli):
    spec = three_weights(tmp_path)
    assert run_cli("apply", spec).exit_code == 0
    output = tmp_path / OUTPUT
    model = onnx.load(str(output), load_external_data=False)
    for prop in model.metadata_props:
        if prop.key == FILES_KEY:
            old = {name: {"size": entry["size"], "sha256": "0" * 64} for name, entry in json.loads(prop.value).items()}
            prop.value = json.dumps(old)
    onnx.save(model, str(output))
    check = run_cli("apply", "--check", spec)
    assert check.exit_code == 6 and "not recorded by the patchspec that built it" in check.stdout, check.output
    again = run_cli("apply", spec)
    assert again.exit_code == 0 and "up to date" not in again.stdout, again.output
    stamp = OutputStamp.read(output)
    assert stamp is not None and stamp.recorded and all("pieces" in entry for entry in stamp.recorded.values())


def test_the_cut_of_a_file_covers_it_and_its_digest_names_both_bytes_and_places():
    assert cover([(0, 4), (8, 4)], 16) == [(0, 4), (4, 4), (8, 4), (12, 4)]  # gaps and the tail too
    assert cover([(0, 8), (4, 8)], 12) == [(0, 4), (4, 4), (8, 4)]  # overlapping tensors: their parts
    assert cover([(0, 0), (4, 100)], 8) == [(0, 4), (4, 4)]  # clipped to the file; empty ranges: no piece
    digest = compose([(0, 4, "a" * 64), (4, 4, "b" * 64)])
    assert digest.startswith("pieces1-") and digest != compose([(0, 4, "b" * 64), (4, 4, "a" * 64)])
    assert digest != compose([(0, 4, "a" * 64), (4, 5, "b" * 64)])


def test_the_written_models_ranges_are_its_tensors(tmp_path):
    spec = three_weights(tmp_path)
    model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert [length for _, length in data_ranges(model)["m.data"]] == [1200, 1200, 1200]
    assert spec.is_file()


def test_ranges_hashed_on_several_threads_give_the_same_digest(tmp_path, monkeypatch):
    data = tmp_path / "d.bin"
    data.write_bytes(bytes(range(256)) * 64)
    cut = [(0, 4096), (5000, 3000), (12000, 4000)]
    alone = file_pieces(data, cut)
    monkeypatch.setattr(data_pieces, "PARALLEL_FROM", 0)
    monkeypatch.setattr(data_pieces.os, "cpu_count", lambda: 4)
    seen: list[tuple[int, int]] = []
    assert file_pieces(data, cut, lambda done, total: seen.append((done, total))) == alone
    assert seen[-1] == (data.stat().st_size, data.stat().st_size)
    assert [start for start, _, _ in alone[1]] == [0, 4096, 5000, 8000, 12000, 16000]  # and the tail
