"""The wide corpus harness (benchmarks/corpus) stays runnable: its manifest is well formed, and ``run.py
--quick`` takes a generated model through every step and judges each output (no download, no results)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "benchmarks" / "corpus"
sys.path.insert(0, str(CORPUS))

import feeds  # noqa: E402
import judge  # noqa: E402
import manifest  # noqa: E402


def test_manifest_pins_every_wheel_and_describes_every_input():
    loaded = manifest.load()
    assert len(loaded.models) >= 120
    assert len({m.package for m in loaded.models}) >= 30
    for package in loaded.packages.values():
        assert package.license, package.name
        if package.generator:  # generate.py's family, or a probe's scripts kept beside the models
            assert not package.wheel and package.pins, package.name
            kept = CORPUS / "generated" / package.name / "make"
            assert "generate.py" in package.generator or any(kept.glob("*.py")), package.name
            continue
        assert re.fullmatch(r"[0-9a-f]{64}", package.sha256), package.name
        assert package.wheel.endswith((".whl", ".tar.gz")), package.name
    for model in loaded.models:
        for name, spec in model.inputs.items():
            shapes = feeds.shapes_at({name: spec}, 4)
            assert all(isinstance(d, int) and d > 0 for d in shapes[name]), (model.key, name)


def test_generated_models_are_committed_small_and_pinned():
    import hashlib

    loaded = manifest.load()
    generated = [m for m in loaded.models if loaded.packages[m.package].generator]
    assert generated
    for model in generated:
        path = manifest.GENERATED / model.package / model.path
        assert path.is_file(), f"{model.key}: {path} is missing (make corpus-generate)"
        assert path.stat().st_size < 200 * 1024, model.key
        assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256, f"{model.key}: pin its sha256 again"
    committed = {p.relative_to(manifest.GENERATED).as_posix() for p in manifest.GENERATED.rglob("*.onnx")}
    assert committed == {f"{m.package}/{m.path}" for m in generated}, "a generated file no [[model]] lists"


def test_string_inputs_are_drawn_from_their_choices():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])],
        "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [None, 1])],
    )
    model = helper.make_model(graph)
    fed = feeds.make_feeds(model, {"s": {"shape": "B,1", "choices": ["a", "b"]}}, 4)
    assert fed["s"].shape == (4, 1) and set(fed["s"].ravel()) <= {"a", "b"}
    assert judge.close(fed["s"], fed["s"].copy(), 1e-3, 1e-4) == (True, 0.0)
    assert not judge.close(fed["s"], np.full((4, 1), "z", dtype=object), 1e-3, 1e-4)[0]


@pytest.mark.parametrize(
    ("parts", "shape", "axis"),
    [([(1, 3)] * 4, (4, 3), 0), ([(20, 1, 37)] * 4, (20, 4, 37), 1), ([(2,)] * 4, (4, 2), 0)],
)
def test_judge_joins_per_sample_outputs_on_the_batch_axis(parts, shape, axis):
    arrays = [np.full(p, i, dtype=np.float32) for i, p in enumerate(parts)]
    joined = judge.join(arrays, shape)
    assert joined is not None and joined.shape == shape
    assert np.take(joined, [3], axis=axis).max() == 3  # sample 3 lands at index 3 of the batch axis


def test_judge_finds_no_join_for_a_folded_batch():
    assert judge.join([np.zeros((1, 7600, 10))] * 4, (1, 30400, 10)) is None


@pytest.mark.slow
def test_run_quick_judges_every_step():
    done = subprocess.run(
        [sys.executable, str(CORPUS / "run.py"), "--quick"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| generated_reshape |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:10] == ["right"] * 5, row  # set_batch 4 / N, with and without verify; init + apply
    assert cells[10] == "exit 0", row
    # Polygraphy keeps the baked Reshape: the judge must see that model fail (or Polygraphy is absent)
    assert cells[11] in ("**WRONG** (fails to run)", "not installed"), row
    assert cells[12] == "-", row  # no silent pass


def _old_add(path: Path, batch: int, then: str | None = None) -> Path:
    """``x + y`` at opset 6 (Add with the legacy ``broadcast`` attribute: ONNX Runtime has no kernel for it)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", ["x", "y"], ["s" if then else "z"], broadcast=1)]
    nodes += [helper.make_node(then, ["s"], ["z"])] if then else []
    graph = helper.make_graph(
        nodes,
        "old_add",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3), str(path))
    return path


@pytest.mark.parametrize(
    ("runs", "then", "verdict"),
    [(False, None, "right"), (False, "Neg", "wrong"), (True, None, "not runnable")],
)
def test_judge_runs_old_opsets_on_the_reference_evaluator(tmp_path, runs, then, verdict):
    model = manifest.Model(
        "old_add", "generated", "old_add.onnx", "onnx.helper", True, "rows", {"x": "B,3", "y": "3"}, runs=runs
    )
    original = _old_add(tmp_path / "original.onnx", 1)
    candidate = _old_add(tmp_path / "candidate.onnx", 4, then)
    result = judge.judge(model, original, candidate, 4)
    assert result["verdict"] == verdict, result
    assert (result.get("runtime") == "onnx.reference") == (not runs)


def test_report_names_the_runtime_that_judged():
    import report

    assert report.cell({"verdict": "right", "runtime": "onnx.reference"}, True) == "right (onnx.reference)"
    assert report.cell({"verdict": "wrong", "runtime": "onnx.reference"}, True) == "**WRONG** (wrong) (onnx.reference)"
    assert report.cell({"verdict": "right"}, True) == "right"


def test_report_calls_a_verified_wrong_model_a_silent_pass():
    import report

    wrong = {"verdict": "wrong", "run": {"exit": 0}}
    assert report.cell(wrong, True, "init_apply") == "**SILENT PASS** (wrong)"
    assert report.cell(wrong, True, "set_batch_4_verify") == "**SILENT PASS** (wrong)"
    assert report.cell(wrong, True, "set_batch_4_noverify") == "**WRONG** (wrong)"
    unchecked = {**wrong, "compare": "none"}  # the harness's spec only ran it: written wrong, not a silent pass
    assert report.cell(unchecked, True, "set_batch_4_verify") == "**WRONG** (wrong)"
    models = {
        "m": {"package": "p==1", "batchable": True, "init_apply": wrong, "set_batch_4_verify": {"verdict": "right"}}
    }
    assert any("silent passes (apply passed, wrong per sample) 1 (m)" in line for line in report.summarize(models))
