"""Issue 3's acceptance case: name one FPN level's dims by selecting the nodes between two tensors."""

import shutil
import subprocess
import sys

import onnx

from helpers import REPO


def _setup(tmp_path):
    (tmp_path / ".git").mkdir()  # laid out as the repository, whose root holds specs/ and models/
    (tmp_path / "specs").mkdir()
    (tmp_path / "models").mkdir()
    subprocess.run(
        [sys.executable, str(REPO / "examples/scrfd/make_scrfd.py"), str(tmp_path / "models/scrfd_like.onnx")],
        check=True,
        capture_output=True,
    )
    spec = tmp_path / "specs" / "scrfd_levels.yaml"
    shutil.copy(REPO / "specs" / "scrfd_levels.yaml", spec)
    return spec


def _dims(model, name):
    for info in [*model.graph.value_info, *model.graph.output, *model.graph.input]:
        if info.name == name:
            return [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
    raise AssertionError(f"no annotation for {name}")


def test_one_fpn_level_named_by_selection_runs_and_matches_original(tmp_path, run_cli):
    spec = _setup(tmp_path)
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert "lint" in result.stdout and "run" in result.stdout
    model = onnx.load(tmp_path / "build" / "scrfd_like_levels_b4.onnx", load_external_data=False)
    assert _dims(model, "input.1") == [4, 3, "height", "width"]
    named = [
        info.name
        for info in model.graph.value_info
        if [d.dim_param for d in info.type.tensor_type.shape.dim][2:] == ["h16", "w16"]
    ]
    assert len(named) == 4, named  # exactly the selected nodes' outputs, and the batch survived on them
    assert all(_dims(model, n)[0] == 4 for n in named)


def test_selector_count_mismatch_is_exit_4_and_writes_nothing(tmp_path, run_cli):
    spec = _setup(tmp_path)
    spec.write_text(spec.read_text().replace("expect: 4", "expect: 3"))
    result = run_cli("apply", spec)
    assert result.exit_code == 4, result.output
    assert "matched 4 nodes, expected exactly 3" in result.stderr
    assert "Relu_relu_60 (Relu)" in result.stderr and "scrfd_levels.yaml:12:" in result.stderr
    assert not (tmp_path / "build" / "scrfd_like_levels_b4.onnx").exists()
