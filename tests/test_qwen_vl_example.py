"""The Qwen-VL merger example: the traced model fails off its grid; the spec fixes every grid."""

import importlib.util
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from helpers import REPO

EXAMPLE = REPO / "examples" / "qwen_vl_merger" / "make_model.py"
SPEC = REPO / "specs" / "qwen_vl_merger.yaml"


def load_example():
    spec = importlib.util.spec_from_file_location("qwen_vl_make_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def workspace(tmp_path):
    """A copy of the repo layout the spec expects: specs/ next to models/ and build/."""
    (tmp_path / ".git").mkdir()  # a repository: its root holds the three
    (tmp_path / "specs").mkdir()
    shutil.copy(SPEC, tmp_path / "specs" / SPEC.name)
    maker = load_example()
    assert maker.main([str(tmp_path / "models" / "qwen_vl_merger")]) == 0
    return tmp_path, maker


def run(path, **feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})[0]


def case(folder, grid, maker):
    name = maker.case_name(grid)
    hidden = np.load(folder / "cases" / f"{name}_hidden_states.npy")
    grid_thw = np.load(folder / "cases" / f"{name}_grid_thw.npy")
    expected = np.load(folder / "cases" / f"{name}_expected.npz")["merged"]
    return hidden, grid_thw, expected


def test_reference_cases_cover_square_and_non_square_grids():
    maker = load_example()
    assert len(maker.GRIDS) >= 4
    assert any(h == w for _, h, w in maker.GRIDS) and any(h != w for _, h, w in maker.GRIDS)


def test_traced_model_works_only_at_its_grid(workspace):
    root, maker = workspace
    folder = root / "models" / "qwen_vl_merger"
    hidden, _, expected = case(folder, maker.TRACED_GRID, maker)
    np.testing.assert_allclose(run(folder / "merger.onnx", hidden_states=hidden), expected, rtol=1e-4, atol=1e-5)
    hidden, _, _ = case(folder, (1, 16, 16), maker)
    with pytest.raises(Exception, match=r"[Rr]eshape|[Ss]hape"):  # the traced [1, 11, 2, 15, 2, -1] does not fit
        run(folder / "merger.onnx", hidden_states=hidden)


def test_spec_makes_every_grid_work(workspace, run_cli):
    root, maker = workspace
    result = run_cli("apply", root / "specs" / SPEC.name)
    assert result.exit_code == 0, result.output
    assert f"{len(maker.GRIDS)} case(s)" in result.stdout
    patched = root / "build" / "qwen_vl_merger" / "merger_any_grid.onnx"
    folder = root / "models" / "qwen_vl_merger"
    for grid in [*maker.GRIDS, (3, 4, 6)]:
        if grid in maker.GRIDS:
            hidden, grid_thw, expected = case(folder, grid, maker)
        else:
            hidden = np.random.default_rng(9).standard_normal((int(np.prod(grid)), maker.CHANNELS)).astype(np.float32)
            grid_thw, expected = np.array([grid], np.int64), maker.reference(hidden, grid)
        got = run(patched, hidden_states=hidden, grid_thw=grid_thw)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_run_verifier_catches_a_wrong_expression(workspace, run_cli):
    root, _ = workspace
    spec = root / "specs" / SPEC.name
    spec.write_text(spec.read_text().replace("- value(grid_thw, 0, 2) // 2", "- value(grid_thw, 0, 1) // 2"))
    result = run_cli("apply", spec)
    assert result.exit_code == 1, result.output
    assert not (root / "build" / "qwen_vl_merger" / "merger_any_grid.onnx").exists()
