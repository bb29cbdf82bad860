"""`patchspec derive` never guesses (issue 34, item 3): where A and B run at several sets of sizes that
give different specs, it lists them ready to paste and writes nothing until the sizes are given."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info


def _merger(h: int, w: int) -> onnx.ModelProto:
    """A merger traced at grid h x w whose mask ['grid_h', 'grid_w'] is read only flattened: any grid
    with the same h * w runs, and the constants [h // 2, 2, w // 2, 2, 8] fit 11x60, 22x30 and 33x20."""
    weight = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array([h * w, 1], np.int64), "flat"),
        numpy_helper.from_array(np.array([h // 2, 2, w // 2, 2, 8], np.int64), "grid"),
        numpy_helper.from_array(np.array([(h // 2) * (w // 2), 32], np.int64), "merged"),
        numpy_helper.from_array(weight, "weight"),
    ]
    nodes = [
        helper.make_node("Reshape", ["mask", "flat"], ["m"], name="flatten_mask"),
        helper.make_node("Mul", ["patches", "m"], ["x"], name="mask"),
        helper.make_node("Reshape", ["x", "grid"], ["g"], name="to_grid"),
        helper.make_node("Transpose", ["g"], ["t"], name="merge_2x2", perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "merged"], ["r"], name="flatten"),
        helper.make_node("MatMul", ["r", "weight"], ["y"], name="proj"),
    ]
    inputs = [tensor_info("patches", ["L", 8]), tensor_info("mask", ["grid_h", "grid_w"])]
    return graph_model(nodes, inputs, [tensor_info("y", ["M", 16])], inits)


def _exports(tmp_path: Path, a=(22, 30), b=(16, 16)) -> tuple[Path, Path]:
    onnx.save(_merger(*a), tmp_path / "a.onnx")
    onnx.save(_merger(*b), tmp_path / "b.onnx")
    return tmp_path / "a.onnx", tmp_path / "b.onnx"


def _asked(stderr: str) -> list[str]:
    return [line.split("#")[0].strip() for line in stderr.splitlines() if line.startswith("  --shape-a ")]


def test_sizes_that_give_different_specs_are_asked_for_not_guessed(tmp_path, run_cli):
    a, b = _exports(tmp_path)
    spec = tmp_path / "spec.yaml"
    asked = run_cli("derive", a, b, "--output", spec)
    assert asked.exit_code == 4, asked.output
    assert "cannot tell the sizes A and B were traced at" in asked.stderr and "different specs" in asked.stderr
    lines = _asked(asked.stderr)
    assert "--shape-a patches=660,8 --shape-a mask=22,30 --shape-b patches=256,8 --shape-b mask=16,16" in lines
    assert "--shape-a patches=660,8 --shape-a mask=11,60 --shape-b patches=256,8 --shape-b mask=8,32" in lines
    assert "nothing was written" in asked.stderr and not spec.exists()
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob("*.dynamic.onnx"))


def test_a_pasted_line_gives_the_spec_and_its_cases_run_at_both_export_sizes(tmp_path, run_cli):
    a, b = _exports(tmp_path)
    spec = tmp_path / "spec.yaml"
    line = next(x for x in _asked(run_cli("derive", a, b, "--output", spec).stderr) if "mask=22,30" in x)
    made = run_cli("derive", a, b, "--output", spec, *shlex.split(line))
    assert made.exit_code == 0, made.output
    assert "'grid_h': 22 in A, 16 in B (given)" in made.stdout
    text = spec.read_text()
    assert "dim(mask, 0) // 2" in text or "dim(mask, 1) // 2" in text
    cases = yaml.safe_load(text)["verify"][1]["run"]["cases"]
    assert cases[0]["inputs"] == {"patches": [660, 8], "mask": [22, 30]}
    assert cases[1]["inputs"] == {"patches": [256, 8], "mask": [16, 16]}
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
    assert "2 case(s)" in applied.stdout


def test_the_derived_model_is_right_at_a_third_grid(tmp_path, run_cli):
    import onnxruntime as ort

    a, b = _exports(tmp_path)
    spec = tmp_path / "spec.yaml"
    options = ("--shape-a", "mask=22,30", "--shape-b", "mask=16,16")
    assert run_cli("derive", a, b, "--output", spec, *options).exit_code == 0
    assert run_cli("apply", spec).exit_code == 0
    onnx.save(_merger(12, 20), tmp_path / "c.onnx")  # the network traced at a third grid: the truth there
    rng = np.random.default_rng(3)
    feeds = {"patches": rng.standard_normal((240, 8)).astype(np.float32), "mask": np.ones((12, 20), np.float32)}
    got = ort.InferenceSession(str(tmp_path / "build" / "a.dynamic.onnx")).run(None, feeds)[0]
    want = ort.InferenceSession(str(tmp_path / "c.onnx")).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_sizes_found_but_not_settled_within_the_budget_are_asked_to_be_confirmed(tmp_path, run_cli, monkeypatch):
    from patchspec.author import traced_sizes

    monkeypatch.setattr(traced_sizes, "MAX_TRIES", 1)  # the first run that passes spends the budget
    fixtures = Path(__file__).parent / "fixtures"
    spec = tmp_path / "spec.yaml"
    asked = run_cli("derive", fixtures / "speech_a.onnx", fixtures / "speech_b.onnx", "--output", spec)
    assert asked.exit_code == 4, asked.output
    assert "could not try every other set of sizes" in asked.stderr and not spec.exists()
    assert _asked(asked.stderr) == ["--shape-a feats=1,12,40 --shape-b feats=1,20,40"]


def test_a_given_size_that_does_not_fit_the_input_is_refused(tmp_path, run_cli):
    a, b = _exports(tmp_path)
    spec = tmp_path / "spec.yaml"
    bad = run_cli("derive", a, b, "--output", spec, "--shape-a", "mask=22")
    assert bad.exit_code == 4 and not spec.exists(), bad.output
    assert "--shape-a mask=22: mask is" in bad.stderr and "it has 2 axes, got 1" in bad.stderr
    fixed = run_cli("derive", a, b, "--output", spec, "--shape-a", "patches=660,9")
    assert fixed.exit_code == 4 and "axis 1 is 8" in fixed.stderr and not spec.exists(), fixed.output
