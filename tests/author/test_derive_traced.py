"""`patchspec derive` on torch `dynamic_axes` exports (issue 24, item 6): inputs symbolic in A and B, the
sizes baked into constants. The fixtures are real torch 2.13 exports (fixtures/make_dynamic_axes.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info

FIXTURES = Path(__file__).parent / "fixtures"


def _copy(tmp_path: Path, stem: str) -> tuple[Path, Path]:
    for side in "ab":
        shutil.copy(FIXTURES / f"{stem}_{side}.onnx", tmp_path)
    return tmp_path / f"{stem}_a.onnx", tmp_path / f"{stem}_b.onnx"


def _derive_and_apply(run_cli, tmp_path: Path, a: Path, b: Path, *options: str):
    spec = tmp_path / "spec.yaml"
    made = run_cli("derive", a, b, "--output", spec, *options)
    assert made.exit_code == 0, made.output
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, spec.read_text() + applied.output
    return spec, made


def _cases(spec: Path) -> list[dict]:
    return yaml.safe_load(spec.read_text())["verify"][1]["run"]["cases"]


def test_the_traced_sizes_are_found_by_running_a_and_b(tmp_path, run_cli):
    a, b = _copy(tmp_path, "speech")
    assert [d.dim_param or d.dim_value for d in onnx.load(a).graph.input[0].type.tensor_type.shape.dim] == [1, "T", 40]
    spec, made = _derive_and_apply(run_cli, tmp_path, a, b)
    assert "traced at 'T': 12 in A, 20 in B" in made.stdout and "A fails at 13" in made.stdout
    cases = _cases(spec)
    assert cases[0]["inputs"]["feats"] == [1, 12, 40] and cases[1]["inputs"]["feats"] == [1, 20, 40]


def test_a_merger_whose_grid_shows_only_as_the_masks_symbolic_dims(tmp_path, run_cli):
    a, b = _copy(tmp_path, "merger")
    spec, made = _derive_and_apply(run_cli, tmp_path, a, b)
    assert "no input dim differs" not in made.output
    assert "dim(patch_mask, 0) // 2" in spec.read_text()
    assert "'grid_w': 6 in A, 8 in B" in made.stdout and "'L': 24 in A, 48 in B" in made.stdout
    assert _cases(spec)[1]["inputs"] == {"patches": [48, 8], "patch_mask": [6, 8]}


def test_the_patched_merger_runs_at_a_third_grid(tmp_path, run_cli):
    import onnxruntime as ort

    a, b = _copy(tmp_path, "merger")
    spec, _ = _derive_and_apply(run_cli, tmp_path, a, b)
    written = tmp_path / yaml.safe_load(spec.read_text())["output"]
    session = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"patches": np.ones((8 * 10, 8), np.float32), "patch_mask": np.ones((8, 10), np.float32)})
    assert y.shape == (4 * 5, 16)


def _hidden_size(t: int) -> onnx.ModelProto:
    """x [1, 'T', 3] reshaped to [1, T * 3 // 5, 5]: T itself is in no constant, so runs cannot find it."""
    shape = numpy_helper.from_array(np.array([1, t * 3 // 5, 5], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="fold")]
    return graph_model(nodes, [tensor_info("x", [1, "T", 3])], [tensor_info("y", [1, "S", 5])], [shape])


def test_sizes_no_run_can_tell_are_asked_for_then_taken_from_the_options(tmp_path, run_cli):
    onnx.save(_hidden_size(10), tmp_path / "a.onnx")
    onnx.save(_hidden_size(20), tmp_path / "b.onnx")
    spec = tmp_path / "spec.yaml"
    refused = run_cli("derive", tmp_path / "a.onnx", tmp_path / "b.onnx", "--output", spec)
    assert refused.exit_code == 4 and "cannot tell the sizes A and B were traced at for 'T'" in refused.stderr
    assert "--shape-a NAME=D0,D1,..." in refused.stderr and not spec.exists()
    options = ("--shape-a", "x=1,10,3", "--shape-b", "x=1,20,3")
    spec, made = _derive_and_apply(run_cli, tmp_path, tmp_path / "a.onnx", tmp_path / "b.onnx", *options)
    assert "'T': 10 in A, 20 in B (given)" in made.stdout
    assert [case["inputs"]["x"] for case in _cases(spec)] == [[1, 10, 3], [1, 20, 3]]
    bad = run_cli("derive", tmp_path / "a.onnx", tmp_path / "b.onnx", "--output", spec, "--force", "--shape-a", "x=1;2")
    assert bad.exit_code == 2 and "--shape-a 'x=1;2'" in bad.stderr
    missing = run_cli(
        "derive", tmp_path / "a.onnx", tmp_path / "b.onnx", "--force", "--output", spec, "--shape-b", "y=1"
    )
    assert missing.exit_code == 4 and "--shape-b y: the model has no input 'y'" in missing.stderr


def test_inspect_suggest_uses_the_given_sizes_for_symbolic_dims(tmp_path, run_cli):
    a, _ = _copy(tmp_path, "speech")
    plain = run_cli("inspect", a, "--suggest")
    assert plain.exit_code == 0 and "nothing to suggest" in plain.stdout and "--shape NAME=" in plain.stdout
    given = run_cli("inspect", a, "--suggest", "--shape", "feats=1,12,40")
    assert given.exit_code == 0, given.output
    assert '"dim(feats, 1)"' in given.stdout and '"dim(feats, 1) // 2"' in given.stdout
    assert "rename_dims" not in given.stdout  # T is symbolic already: nothing to free
    wrong = run_cli("inspect", a, "--suggest", "--shape", "feats=1,12")
    assert wrong.exit_code == 2 and "has 3 axes, got 2" in wrong.stderr


def test_a_crafted_input_name_stays_a_name_in_derive(tmp_path, run_cli):
    """issue 25: names from the models are quoted in the spec, comments included."""
    evil = "x\n  - strip_metadata: {}\n#"
    for side, width in (("a", 8), ("b", 12)):
        shape = numpy_helper.from_array(np.array([1, width // 4, 4], np.int64), "shape")
        nodes = [helper.make_node("Reshape", [evil, "shape"], ["y"])]
        model = graph_model(nodes, [tensor_info(evil, [1, width])], [tensor_info("y", [1, width // 4, 4])], [shape])
        onnx.save(model, tmp_path / f"{side}.onnx")
    spec = tmp_path / "spec.yaml"
    made = run_cli("derive", tmp_path / "a.onnx", tmp_path / "b.onnx", "--output", spec)
    if made.exit_code != 0:  # refusing the name is fine too, as long as nothing is written
        assert made.exit_code == 2 and not spec.exists(), made.output
        return
    loaded = yaml.safe_load(spec.read_text())
    assert [next(iter(step)) for step in loaded["patches"]] == ["replace_initializer", "rename_dims"]
    assert loaded["patches"][1]["rename_dims"]["tensor"] == evil


def test_a_free_symbolic_batch_is_run_at_1(tmp_path, run_cli):
    """x ['N', W]: N is in no constant, so A and B run at any N; the cases use 1, and no fit reads N."""
    for side, width in (("a", 8), ("b", 12)):
        shape = numpy_helper.from_array(np.array([-1, width // 4, 4], np.int64), "shape")
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
        model = graph_model(nodes, [tensor_info("x", ["N", width])], [tensor_info("y", ["N", width // 4, 4])], [shape])
        onnx.save(model, tmp_path / f"{side}.onnx")
    spec, made = _derive_and_apply(run_cli, tmp_path, tmp_path / "a.onnx", tmp_path / "b.onnx")
    assert "'N': 1 in A, 1 in B (free: A and B run at any size here" in made.stdout
    assert [case["inputs"]["x"] for case in _cases(spec)] == [[1, 8], [1, 12]]
    assert "dim(x, 1) // 4" in spec.read_text()
