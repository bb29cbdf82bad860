"""``patchspec inspect`` and the lint behind it, on a SCRFD-like FPN whose annotations all say ``?``."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers import graph_model, tensor_info
from patchspec.errors import UsageError
from patchspec.ort import sessions
from patchspec.ort.lint.probe import lint_model
from patchspec.ort.lint.probe_inputs import parse_shape_options, probe_shapes
from scrfd_like import fpn_model, if_model

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]


@pytest.fixture
def fpn_path(tmp_path: Path) -> Path:
    path = tmp_path / "fpn.onnx"
    onnx.save(fpn_model(), path)
    return path


def inspect_json(run_cli: RunCli, *args: Any, cwd: Path | None = None) -> Any:
    result = run_cli("inspect", *args, "--json", cwd=cwd)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sizes_of(conflict: dict[str, Any]) -> dict[int, set[str]]:
    return {int(size): {b["tensor"] for b in bindings} for size, bindings in conflict["sizes"].items()}


def test_inspect_names_conflicting_sizes_and_tensors(run_cli: RunCli, fpn_path: Path) -> None:
    result = run_cli("inspect", fpn_path, "--shape", "input.1=1,3,640,640")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert 'dim_param "?" is bound to 4 different sizes' in text
    assert "80 on c3 (axes 2, 3), /lat.0/Conv_output_0 (axes 2, 3)" in text
    assert "40 on c4 (axes 2, 3), /lat.1/Conv_output_0 (axes 2, 3)" in text
    assert "- rename_dims: {unique: true}" in text


def test_inspect_json_groups_tensors_by_size(run_cli: RunCli, fpn_path: Path) -> None:
    data = inspect_json(run_cli, fpn_path, "--shape", "input.1=1,3,640,640")
    lint = data["lint"]
    assert lint["shapes_given"] and lint["input_shapes"] == {"input.1": [1, 3, 640, 640]}
    (conflict,) = lint["conflicts"]
    assert conflict["dim_param"] == "?"
    sizes = sizes_of(conflict)
    assert set(sizes) == {640, 80, 40, 20}
    assert {"/lat.0/Conv_output_0", "/up.0/Resize_output_0", "out0"} <= sizes[80]
    assert {"/lat.1/Conv_output_0", "out1"} <= sizes[40] and "/lat.0/Conv_output_0" not in sizes[40]
    assert lint["suggested_patches"][0].startswith("- rename_dims: {unique: true}")
    assert not lint["clean"]


def test_inspect_lists_inputs_outputs_and_dim_param_users(run_cli: RunCli, fpn_path: Path) -> None:
    data = inspect_json(run_cli, fpn_path)
    assert data["inputs"] == [{"name": "input.1", "dtype": "float", "dims": [1, 3, "?", "?"]}]
    assert [o["name"] for o in data["outputs"]] == ["out0", "out1", "out2"]
    users = {(u["tensor"], u["axis"]) for u in data["dim_params"]["?"]}
    assert ("input.1", 2) in users and ("/lat.1/Conv_output_0", 3) in users and ("out2", 2) in users
    assert data["external_data"] == {"tensors": 0, "files": []}


def test_default_shapes_give_height_and_width_different_sizes(run_cli: RunCli, fpn_path: Path) -> None:
    lint = inspect_json(run_cli, fpn_path)["lint"]
    assert lint["input_shapes"] == {"input.1": [1, 3, 64, 96]}
    assert not lint["shapes_given"]
    assert set(sizes_of(lint["conflicts"][0])) == {64, 96, 8, 12, 4, 6, 2, 3}


def test_ort_fails_on_the_model_but_the_probe_runs(fpn_path: Path) -> None:
    session = ort.InferenceSession(str(fpn_path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="Shape mismatch attempting to re-use buffer"):
        session.run(None, {"input.1": np.zeros((1, 3, 64, 64), np.float32)})
    result = lint_model(onnx.load(fpn_path), fpn_path.parent, {"input.1": [1, 3, 64, 64]})
    assert result.error is None and result.conflicts


def test_a_uniquely_named_model_is_clean(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "clean.onnx"
    onnx.save(fpn_model(unique=True), path)
    result = run_cli("inspect", path, "--shape", "input.1=1,3,640,480")
    assert result.exit_code == 0, result.output
    assert "ok: 14 annotated tensors agree with their sizes at run time" in result.stdout
    assert "fix:" not in result.stdout


def test_inspect_never_writes_or_changes_anything(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fpn_model(), path, save_as_external_data=True, location="m.data", size_threshold=256)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    data = inspect_json(run_cli, path, "--shape", "input.1=1,3,320,320", cwd=tmp_path.parent)
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    assert before == after
    stored = onnx.load(path, load_external_data=False)
    external = [t.name for t in stored.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len(external) >= 1 and data["external_data"]["tensors"] == len(external)
    (entry,) = data["external_data"]["files"]
    assert entry["file"] == "m.data" and entry["size"] == (tmp_path / "m.data").stat().st_size
    assert data["lint"]["error"] is None and {40, 20, 10} <= set(sizes_of(data["lint"]["conflicts"][0]))


@pytest.mark.parametrize("since", [(1, 21), (99, 0)], ids=["folder option", "older onnxruntime: working directory"])
def test_external_weights_are_read_from_the_model_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, since: tuple[int, int]
) -> None:
    monkeypatch.setattr(sessions, "EXTERNAL_FOLDER_OPTION_SINCE", since)
    folder = tmp_path / "models"
    folder.mkdir()
    onnx.save(fpn_model(), folder / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=256)
    model = onnx.load(folder / "m.onnx", load_external_data=False)
    before = os.getcwd()
    result = lint_model(model, folder, {"input.1": [1, 3, 64, 64]})
    assert result.error is None and os.getcwd() == before
    assert sorted(p.name for p in folder.iterdir()) == ["m.data", "m.onnx"]


def test_inspect_summarises_subgraphs(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "if.onnx"
    onnx.save(if_model(), path)
    data = inspect_json(run_cli, path)
    graphs = {s["graph"]: s["nodes"] for s in data["subgraphs"]}
    assert graphs == {"main/If_0.then_branch": 2, "main/If_0.else_branch": 1}
    assert data["lint"]["clean"]


def test_fixed_sizes_that_lie_are_reported(tmp_path: Path) -> None:
    model = fpn_model()
    for value in model.graph.value_info:
        if value.name == "c4":
            value.type.tensor_type.shape.dim[2].dim_value = 5
    result = lint_model(model, tmp_path, {"input.1": [1, 3, 64, 64]})
    assert "c4: axis 2 declared 5, ran as 4" in result.wrong_sizes


def test_a_model_ort_cannot_run_is_reported_not_fatal(run_cli: RunCli, fpn_path: Path) -> None:
    result = run_cli("inspect", fpn_path, "--shape", "input.1=1,3,60,60")  # 60/32 does not round-trip
    assert result.exit_code == 0, result.output
    assert "not run: onnxruntime could not run the model at input.1=1,3,60,60" in result.stdout


@pytest.mark.parametrize("content, message", [(b"", "not an ONNX model (0 bytes)"), (b"garbage!", "not an ONNX model")])
def test_unusable_model_is_exit_3(run_cli: RunCli, tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    result = run_cli("inspect", path)
    assert result.exit_code == 3 and message in result.stderr
    assert run_cli("inspect", tmp_path / "missing.onnx").exit_code == 3


def test_broken_external_data_is_exit_3(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fpn_model(), path, save_as_external_data=True, location="m.data", size_threshold=256)
    (tmp_path / "m.data").write_bytes(b"short")
    result = run_cli("inspect", path)
    assert result.exit_code == 3, result.output
    assert "m.data" in result.stderr


@pytest.mark.parametrize(
    "shape, message",
    [
        ("input.1:1,3,64,64", "expected NAME=D0,D1,..."),
        ("input.1=1,3,x,64", "expected NAME=D0,D1,..."),
        ("input1=1,3,64,64", "no input 'input1' (did you mean 'input.1'?)"),
        ("input.1=1,3,64", "the input has 4 axes, got 3 sizes"),
    ],
)
def test_bad_shape_option_is_exit_2(run_cli: RunCli, fpn_path: Path, shape: Any, message: str) -> None:
    result = run_cli("inspect", fpn_path, "--shape", shape)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_parse_shape_options() -> None:
    assert parse_shape_options(["x=1,3,640,640", "scalar="]) == {"x": [1, 3, 640, 640], "scalar": []}
    with pytest.raises(UsageError):
        parse_shape_options(["x"])


def test_probe_shapes_share_a_dim_param_across_inputs_but_split_it_within_one() -> None:
    model = graph_model(
        [],
        [
            tensor_info("ids", ["batch", "seq"], onnx.TensorProto.INT64),
            tensor_info("mask", ["batch", "seq"], onnx.TensorProto.INT64),
            tensor_info("image", ["batch", 3, "?", "?"]),
        ],
        [tensor_info("ids", ["batch", "seq"])],
    )
    assert probe_shapes(model, None) == {"ids": [1, 64], "mask": [1, 64], "image": [1, 3, 96, 128]}
    assert probe_shapes(model, None, split=False)["image"] == [1, 3, 96, 96]
    assert probe_shapes(model, {"ids": [4, 7]})["mask"] == [4, 7]


def test_ppocr_models_lint_with_default_shapes(ppocr_models: Any, tmp_path: Path) -> None:
    for kind, path in ppocr_models.items():
        result = lint_model(onnx.load(path, load_external_data=False), path.parent)
        assert result.error is None, (kind, result.error)
        assert all(size >= 1 for shape in result.input_shapes.values() for size in shape)  # cls says -1


@pytest.mark.parametrize(
    "content, code, text",
    [
        (None, 3, "No such file"),
        (b"garbage!", 3, "not an ONNX model"),
        (b"version https://git-lfs.github.com/spec/v1\nsize 9\n", 3, "Git LFS"),
    ],
)
def test_inspect_json_prints_json_even_for_an_error(
    run_cli: RunCli, tmp_path: Path, content: Any, code: int, text: str
) -> None:
    path = tmp_path / "m.onnx"
    if content is not None:
        path.write_bytes(content)
    result = run_cli("inspect", "--json", path)
    data = json.loads(result.stdout)  # JSON on stdout, whatever happened
    assert result.exit_code == code and data["error"]["exit_code"] == code and text in data["error"]["message"]
