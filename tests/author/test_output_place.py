"""One place for outputs: init and derive put a spec's output in build/ at the project root, whichever
folder the spec is in, and nothing of patchspec's lands beside the committed models; init's header names
commands that work from the folder it ran in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import yaml
from onnx import helper

from helpers import graph_model, tensor_info

RunCli = Any


def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "models").mkdir()
    node = helper.make_node("Relu", ["x"], ["y"])
    onnx.save(
        graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), tmp_path / "models" / "m.onnx"
    )
    return tmp_path


def test_init_outputs_go_to_the_project_build_folder(tmp_path: Path, run_cli: RunCli) -> None:
    root = project(tmp_path)
    for spec_path, expected in (("specs/m.yaml", "../build/m.b4.onnx"), ("specs/deep/m.yaml", "../../build/m.b4.onnx")):
        result = run_cli("init", "models/m.onnx", "--batch", "4", "--output", spec_path, cwd=root)
        assert result.exit_code == 0, result.output
        text = (root / spec_path).read_text()
        assert yaml.safe_load(text)["output"] == expected
        assert (
            f"Written by 'patchspec init models/m.onnx': check the comments, then 'patchspec apply {spec_path}'" in text
        )
        applied = run_cli("apply", spec_path, cwd=root)
        assert applied.exit_code == 0, applied.output
    assert (root / "build" / "m.b4.onnx").is_file()
    assert sorted(p.name for p in (root / "models").iterdir()) == ["m.onnx"]  # no lock, cache or output there
    assert not (root / "specs" / "build").exists()


def test_without_a_repository_the_spec_folder_is_the_root(tmp_path: Path, run_cli: RunCli) -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    onnx.save(graph_model([node], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), tmp_path / "m.onnx")
    assert run_cli("init", "m.onnx", "--batch", "2", "--output", "m.yaml", cwd=tmp_path).exit_code == 0
    assert yaml.safe_load((tmp_path / "m.yaml").read_text())["output"] == "build/m.b2.onnx"
