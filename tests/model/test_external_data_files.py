"""patchspec.model.external_data: the path policy, the validated reader and the streaming writer, directly."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.errors import ModelFileError, UsageError
from patchspec.model import data_writer
from patchspec.model import external_data as extdata
from patchspec.model.data_writer import Layout, default_layout, write_model
from patchspec.model.external_data import iter_tensors, read_tensor, validate_external_data


def matmul_model(size: int = 64, inline_const: bool = True) -> onnx.ModelProto:
    """y = (x @ W) @ C + B: W and C are size x size float32 (C in a Constant node), B is small."""
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(size).astype(np.float32), "B")
    const = numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), "C")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Constant", [], ["c"], value=const),
        helper.make_node("MatMul", ["h", "c"], ["h2"]),
        helper.make_node("Add", ["h2", "B"], ["y"]),
    ]
    return graph_model(nodes, [tensor_info("x", ["N", size])], [tensor_info("y", ["N", size])], [weight, bias])


def saved_external(folder: Path, size: int = 64) -> Path:
    """models/m.onnx with W external in m.onnx_data; C (Constant) and B inline."""
    folder.mkdir(parents=True, exist_ok=True)
    model = matmul_model(size)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, location="m.onnx_data", size_threshold=1024)
    return folder / "m.onnx"


def graph_only(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def entries(model: onnx.ModelProto) -> dict[str, dict[str, str]]:
    return {t.name: {e.key: e.value for e in t.external_data} for t in iter_tensors(model.graph)}


def run(path: Path) -> np.ndarray:
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64) / 100
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("location", ["w.data", "w..data", "sub/w.data", "a b.bin", "..data"])
def test_relative_locations_pass_the_policy(location):
    extdata.check_location(location, "W", Path("m.onnx"))


@pytest.mark.parametrize(
    "location",
    [
        "",
        "../w",
        "a/../../w",
        "..",
        "/abs",
        "C:\\w",
        "C:w",
        "\\w",
        "\\\\srv\\share\\w",
        "//srv/share/w",
        "a\\..\\..\\w",
        "*/_ORT_MEM_ADDR_/*",
        "w\x00.data",
    ],
)
def test_other_locations_are_refused_before_reading(location):
    with pytest.raises(ModelFileError, match="'W'"):
        extdata.check_location(location, "W", Path("m.onnx"))


def test_validation_and_reading_ignore_the_current_directory(tmp_path, monkeypatch):
    model_path = saved_external(tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    refs = validate_external_data(graph_only(model_path), Path("models/m.onnx"))
    assert [(r.tensor, r.offset, r.length) for r in refs] == [("W", 0, 64 * 64 * 4)]
    assert refs[0].path == tmp_path / "models" / "m.onnx_data"
    weight = next(t for t in graph_only(model_path).graph.initializer if t.name == "W")
    expected = numpy_helper.to_array(next(t for t in matmul_model().graph.initializer if t.name == "W"))
    np.testing.assert_array_equal(read_tensor(weight, Path("models")), expected)


def test_read_tensor_applies_the_policy(tmp_path):
    model = graph_only(saved_external(tmp_path / "m"))
    weight = next(t for t in model.graph.initializer if t.name == "W")
    weight.external_data[0].value = "../m/m.onnx_data"
    with pytest.raises(ModelFileError, match="leaves the model's folder"):
        read_tensor(weight, tmp_path / "m")


def test_symlinked_model_keeps_its_data_next_to_the_link(tmp_path):
    """A model cache: snapshot/m.onnx -> blobs/abc, snapshot/m.onnx_data -> blobs/def."""
    real = saved_external(tmp_path / "real")
    (tmp_path / "blobs").mkdir()
    (tmp_path / "snap").mkdir()
    for name, blob in (("m.onnx", "abc"), ("m.onnx_data", "def")):
        (real.parent / name).rename(tmp_path / "blobs" / blob)
        (tmp_path / "snap" / name).symlink_to(tmp_path / "blobs" / blob)
    refs = validate_external_data(graph_only(tmp_path / "snap" / "m.onnx"), tmp_path / "snap" / "m.onnx")
    assert refs[0].path == tmp_path / "snap" / "m.onnx_data"
    with pytest.raises(ModelFileError, match="symbolic link"):
        validate_external_data(
            graph_only(tmp_path / "snap" / "m.onnx"), tmp_path / "snap" / "m.onnx", strict_paths=True
        )


def test_checksum_of_the_whole_file_is_also_accepted(tmp_path):
    model_path = saved_external(tmp_path)
    model = graph_only(model_path)
    weight = next(t for t in model.graph.initializer if t.name == "W")
    entry = weight.external_data.add()
    entry.key, entry.value = "checksum", hashlib.sha1((tmp_path / "m.onnx_data").read_bytes()).hexdigest()
    assert validate_external_data(model, model_path)[0].checksum == entry.value
    entry.value = "f" * 40
    with pytest.raises(ModelFileError, match="checksum"):
        validate_external_data(model, model_path)
    assert validate_external_data(model, model_path, verify_checksums=False)


@pytest.mark.parametrize("align", [1, 4096, 65536])
def test_offsets_are_aligned_and_the_output_runs_the_same(tmp_path, align):
    source = saved_external(tmp_path / "in")
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    files = write_model(graph_only(source), out, source.parent, Layout("w.bin", size_threshold=1024, align=align))
    assert files == [out, out.parent / "w.bin"]
    placed = {name: e for name, e in entries(graph_only(out)).items() if e}
    assert set(placed) == {"W", "C"}  # B (256 bytes) stays inline; the Constant's tensor moves too
    assert all(int(e["offset"]) % align == 0 for e in placed.values())
    assert sorted(int(e["offset"]) for e in placed.values())[1] >= 64 * 64 * 4
    np.testing.assert_array_equal(run(out), run(source))


def test_writing_is_deterministic_and_leaves_the_model_alone(tmp_path):
    source = saved_external(tmp_path / "in")
    model = graph_only(source)
    before = model.SerializeToString()
    outputs = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        outputs.append(
            write_model(model, tmp_path / folder / "o.onnx", source.parent, Layout("", align=4096, checksum=True))
        )
    assert model.SerializeToString() == before
    assert [p.name for p in outputs[0]] == ["o.onnx", "o.onnx.data"]
    for first, second in zip(*outputs):
        assert first.read_bytes() == second.read_bytes()


def test_checksums_written_are_sha1_of_each_tensor(tmp_path):
    source = saved_external(tmp_path / "in")
    out = tmp_path / "o.onnx"
    write_model(graph_only(source), out, source.parent, Layout("d.bin", checksum=True))
    data = (tmp_path / "d.bin").read_bytes()
    written = entries(graph_only(out))
    for name in ("W", "C"):
        start, length = int(written[name]["offset"]), int(written[name]["length"])
        assert written[name]["checksum"] == hashlib.sha1(data[start : start + length]).hexdigest()
    assert validate_external_data(graph_only(out), out)  # and they verify on the next load


def test_stale_files_and_symlinks_at_the_target_are_replaced(tmp_path):
    source = saved_external(tmp_path / "in")
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"keep me")
    (tmp_path / "o.onnx.data").symlink_to(victim)
    (tmp_path / "o.onnx").write_bytes(b"x" * 100_000)
    write_model(graph_only(source), tmp_path / "o.onnx", source.parent, Layout("", align=1))
    assert victim.read_bytes() == b"keep me"
    assert not (tmp_path / "o.onnx.data").is_symlink()
    assert (tmp_path / "o.onnx.data").stat().st_size == 2 * 64 * 64 * 4


def test_default_layout_keeps_inline_inline_and_external_external(tmp_path):
    source = saved_external(tmp_path / "in")
    model = graph_only(source)
    layout = default_layout(model, tmp_path / "o.onnx", original=model)
    assert layout.data_name(tmp_path / "o.onnx") == "o.onnx.data"
    write_model(model, tmp_path / "o.onnx", source.parent, layout)
    placed = entries(graph_only(tmp_path / "o.onnx"))
    assert placed["W"]["location"] == "o.onnx.data" and placed["C"] == {} and placed["B"] == {}
    inline_only = matmul_model()
    assert default_layout(inline_only, tmp_path / "p.onnx", original=inline_only).location is None
    assert write_model(inline_only, tmp_path / "p.onnx", tmp_path, Layout(None)) == [tmp_path / "p.onnx"]


def test_tensors_a_patch_creates_or_changes_follow_the_size_rule(tmp_path):
    source = saved_external(tmp_path / "in")
    original = graph_only(source)
    patched = graph_only(source)
    weight = next(t for t in patched.graph.initializer if t.name == "W")
    weight.CopyFrom(numpy_helper.from_array(np.zeros((64, 64), np.float32), "W"))  # a patch replaced it inline
    patched.graph.initializer.append(numpy_helper.from_array(np.ones(1000, np.float32), "new_big"))
    patched.graph.initializer.append(numpy_helper.from_array(np.ones(4, np.int64), "new_small"))
    write_model(patched, tmp_path / "o.onnx", source.parent, default_layout(patched, tmp_path / "o.onnx", original))
    placed = entries(graph_only(tmp_path / "o.onnx"))
    assert placed["W"] and placed["new_big"] and not placed["new_small"] and not placed["C"]


def test_inline_layout_refuses_to_pass_the_protobuf_limit_before_reading(tmp_path, monkeypatch):
    source = saved_external(tmp_path / "in")
    monkeypatch.setattr(data_writer, "PROTOBUF_LIMIT", 10_000)
    os.truncate(source.parent / "m.onnx_data", 0)  # a read would fail differently
    with pytest.raises(ModelFileError, match=r"would be \d+ bytes .* past protobuf's 2 GiB limit"):
        write_model(graph_only(source), tmp_path / "o.onnx", source.parent, Layout(None))
    assert not (tmp_path / "o.onnx").exists()


def test_inline_layout_reads_external_tensors_in(tmp_path):
    source = saved_external(tmp_path / "in")
    write_model(graph_only(source), tmp_path / "o.onnx", source.parent, Layout(None))
    assert not any(entries(graph_only(tmp_path / "o.onnx")).values())
    np.testing.assert_array_equal(run(tmp_path / "o.onnx"), run(source))


def test_the_copy_is_bounded_in_memory_with_and_without_kernel_copy(tmp_path, monkeypatch):
    weight = numpy_helper.from_array(np.ones((2048, 2048), np.float32), "W")  # 16 MiB
    big = graph_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [tensor_info("x", [1, 2048])],
        [tensor_info("y", [1, 2048])],
        [weight],
    )
    (tmp_path / "in").mkdir()
    onnx.save(big, tmp_path / "in" / "m.onnx", save_as_external_data=True, location="m.onnx_data")
    source, model = tmp_path / "in" / "m.onnx", graph_only(tmp_path / "in" / "m.onnx")
    for name, kernel in (("a", True), ("b", False)):
        if not kernel:
            monkeypatch.setattr(extdata.os, "copy_file_range", _refuse, raising=False)
        (tmp_path / name).mkdir()
        tracemalloc.start()
        write_model(model, tmp_path / name / "o.onnx", source.parent, Layout("", checksum=not kernel))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 10 * 2**20, f"{name}: {peak} bytes"
    assert (tmp_path / "a" / "o.onnx.data").read_bytes() == (tmp_path / "b" / "o.onnx.data").read_bytes()


def _refuse(*args, **kwargs):
    raise OSError(18, "Invalid cross-device link")


def test_progress_reports_every_byte(tmp_path):
    """The bar itself is the CLI's reporter's (tests/cli/test_terminal_output.py)."""
    source = saved_external(tmp_path / "in")
    seen = []
    write_model(
        graph_only(source), tmp_path / "o.onnx", source.parent, Layout(""), progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1] == (2 * 64 * 64 * 4, 2 * 64 * 64 * 4)


def test_output_data_may_not_replace_an_input(tmp_path):
    source = saved_external(tmp_path)
    protected = [("the input model", source), ("the input's", tmp_path / "m.onnx_data")]
    with pytest.raises(UsageError, match=r"would replace the input's 'm\.onnx_data'"):
        data_writer.refuse_input_overwrite(Layout("m.onnx_data"), tmp_path / "o.onnx", protected)
    data_writer.refuse_input_overwrite(Layout("other.data"), tmp_path / "o.onnx", protected)


def test_finalize_runs_after_the_data_file_and_before_the_model(tmp_path):
    source = saved_external(tmp_path / "in")
    seen = []

    def stamp(model, digests):
        seen.append(((tmp_path / "o.onnx.data").is_file(), (tmp_path / "o.onnx").exists()))
        model.doc_string = "stamped"

    write_model(graph_only(source), tmp_path / "o.onnx", source.parent, Layout(""), finalize=stamp)
    assert seen == [(True, False)]
    assert graph_only(tmp_path / "o.onnx").doc_string == "stamped"


def test_benchmark_smoke(tmp_path, run_cli):
    """benchmarks/bench_external_data.py at a toy size: generate, patch, relocate, run in ORT."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_external_data.py"
    spec = importlib.util.spec_from_file_location("bench_external_data", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = bench.generate(tmp_path / "in", 3 * 64 * 64 * 4 / 2**30, side=64)
    spec_path = bench.write_spec(tmp_path, model, set_batch=False)
    result = run_cli("apply", "--no-verify", spec_path)
    assert result.exit_code == 0, result.output
    line = bench.check_output(model, tmp_path / "out" / "model.onnx", 2, side=64)
    assert "max abs diff 0 " in line and "3 offsets all 64 KiB aligned: True" in line


@pytest.mark.parametrize(
    "layout", [Layout("w.bin", align=1), Layout("w.bin", align=4096), Layout("w.bin", checksum=True)]
)
def test_the_data_files_digest_taken_while_writing_is_its_pieces_digest(tmp_path, layout, monkeypatch):
    """The stamp's record of a data file is hashed as it is written (kernel copy or not), never read
    back, and is what reading the file, cut by the written model's tensor ranges, gives."""
    from patchspec.model.data_pieces import file_pieces
    from patchspec.run.stamp import data_ranges

    def read_back(out: Path) -> str:
        return file_pieces(out.parent / "w.bin", data_ranges(graph_only(out))["w.bin"])[0]

    source = saved_external(tmp_path / "in")
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    seen: dict[str, str] = {}
    write_model(graph_only(source), out, source.parent, layout, finalize=lambda model, digests: seen.update(digests))
    assert seen == {"w.bin": read_back(out)}
    assert hashlib.sha256((out.parent / "w.bin").read_bytes()).hexdigest() not in seen.values()  # never confused
    monkeypatch.delattr(os, "copy_file_range", raising=False)  # the user-space copy gives the same digest
    again = tmp_path / "again" / "o.onnx"
    again.parent.mkdir()
    write_model(graph_only(source), again, source.parent, layout, finalize=lambda model, digests: seen.update(digests))
    assert seen["w.bin"] == read_back(again) == read_back(out)
