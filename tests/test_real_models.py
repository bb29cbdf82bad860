"""set_batch on real third-party models (the corpus of tests/real_models.py), end to end from the CLI.

Each model is re-batched to a static 4 and to a symbolic batch; the test itself (not only the
`run` verifier) runs the result on ONNX Runtime, compares it with per-sample runs of the original,
and checks every declared output shape against the runtime one.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers import write_spec
from patchspec.shapes.annotations import read_dims
from real_models import MODELS, NOT_BATCHABLE, per_sample_reference


def _session(path):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


#: the models lie outside each test's folder (site-packages, the corpus): the runs name the root
pytestmark = pytest.mark.usefixtures("models_outside_the_project")


def _spec(tmp_path, model, size, verify=""):
    inputs = f", inputs: {json.dumps(model.batch_inputs)}" if model.batch_inputs else ""
    return write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {model.file}\noutput: out/{model.key}.onnx\n"
        f"patches:\n  - set_batch: {{size: {size}{inputs}}}\nverify:\n  - check: {{}}\n" + verify,
    )


def _require(model):
    if not model.available():
        pytest.skip(f"{model.key} not installed: make venv installs {model.wheel} into {model.file.parents[1]}")
    try:
        _session(model.file)
    except Exception as error:
        pytest.skip(f"onnxruntime {ort.__version__} cannot load the original {model.key}: {str(error)[:200]}")


@pytest.mark.parametrize("size, batch", [(4, 4), ("N", 3)])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.key)
def test_rebatched_model_matches_the_original_per_sample(model, size, batch, tmp_path, run_cli):
    _require(model)
    result = run_cli("apply", _spec(tmp_path, model, size), "-v")
    assert result.exit_code == 0, result.output
    undecided = [line.strip() for line in result.output.splitlines() if line.strip().startswith("undecided:")]
    if model.batch_wide:  # what a verifier must judge: scales over the whole batch, an output's rank
        assert len(undecided) == 1, result.output
        assert "output 'output' was declared [1, 19]; nothing derives its shape" in undecided[0], result.output
        assert "the samples are not independent: DynamicQuantizeLinear" in result.output, result.output
    else:
        assert not undecided and "undecided" not in result.output, result.output
    path = tmp_path / "out" / f"{model.key}.onnx"
    patched = onnx.load(str(path))
    feeds = model.feeds(batch)
    names = [o.name for o in patched.graph.output]
    got = dict(zip(names, _session(path).run(None, feeds)))
    want = per_sample_reference(model, _session(model.file), feeds, batch)
    for info in patched.graph.output:
        np.testing.assert_allclose(
            got[info.name], want[info.name], rtol=model.rtol, atol=model.atol, err_msg=f"{model.key} output {info.name}"
        )
        declared = read_dims(info)
        actual = got[info.name].shape
        assert declared is not None and len(declared) == len(actual), (info.name, declared, actual)
        for axis, dim in enumerate(declared):
            assert not isinstance(dim, int) or dim == actual[axis], (info.name, declared, actual)
            if dim == size:
                assert actual[axis] == batch, (info.name, declared, actual)


def test_baked_detector_heads_are_rewritten_and_the_run_verifier_passes(tmp_path, run_cli):
    """The issue's family: static-batch detectors whose heads bake batch 1 behind a Resize neck."""
    model = next(m for m in MODELS if m.key == "yolov8_nudenet")
    _require(model)
    verify = (
        "  - run:\n      cases: [{inputs: {images: [8, 3, 320, 320]}}]\n"
        "      compare: {split_batch: true, atol: 1.0e-4}\n"
    )
    result = run_cli("-v", "apply", _spec(tmp_path, model, 8, verify))
    assert result.exit_code == 0, result.output
    assert "5 shape constants rewritten" in result.stdout and "undecided" not in result.stdout
    assert "[1, 4, 16, 2100] -> [8, 4, 16, 2100]" in result.stdout


def test_state_on_axis_1_verified_per_sample_by_the_run_verifier(tmp_path, run_cli):
    model = next(m for m in MODELS if m.key == "silero_vad_static")
    _require(model)
    verify = (
        "  - run:\n      cases: [{inputs: {input: [3, 576], state: {shape: [2, 3, 128], low: -0.1, high: 0.1}}}]\n"
        "      compare: {split_batch: {inputs: {state: 1}, outputs: {stateN: 1}}}\n"
    )
    result = run_cli("apply", _spec(tmp_path, model, "N", verify))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("no_verify", [False, True], ids=["verified", "no-verify"])
@pytest.mark.parametrize("model", NOT_BATCHABLE, ids=lambda m: m.key)
def test_a_model_that_cannot_run_batched_is_refused_and_not_written(model, no_verify, tmp_path, run_cli):
    _require(model)
    axes = {"inputs": model.input_axes, "outputs": model.output_axes}
    verify = (
        f"  - run:\n      cases: [{{inputs: {model.run_case}}}]\n      compare: {{split_batch: {json.dumps(axes)}}}\n"
    )
    result = run_cli("apply", _spec(tmp_path, model, 2, verify), *(["--no-verify"] if no_verify else []))
    assert result.exit_code == 4, result.output
    first = result.stderr.splitlines()[0]
    assert model.refusal in first, first  # the cause leads, not the declaration mismatch it leads to
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
