"""``patchspec inspect --suggest``: constants a tracer baked from the input sizes, and the lines that free
them; the suggestions are applied and the result checked at a size the model was not exported at."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec


def traced_detector(height: int, width: int) -> onnx.ModelProto:
    """As a tracer writes it at one image size: pool by 8, flatten H*W/64 into a baked Reshape, and a
    Resize to baked sizes H/2, W/2."""
    flat = numpy_helper.from_array(np.array([1, 3, height * width // 64], np.int64), "flat_shape")
    sizes = numpy_helper.from_array(np.array([1, 3, height // 2, width // 2], np.int64), "half_sizes")
    nodes = [
        helper.make_node("AveragePool", ["image"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8], name="/pool"),
        helper.make_node("Reshape", ["pooled", "flat_shape"], ["tokens"], name="/head/Reshape"),
        helper.make_node(
            "Resize",
            ["image", "", "", "half_sizes"],
            ["half"],
            mode="nearest",
            name="/half/Resize",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
    ]
    return graph_model(
        nodes,
        [tensor_info("image", [1, 3, height, width])],
        [tensor_info("tokens", [1, 3, height * width // 64]), tensor_info("half", [1, 3, height // 2, width // 2])],
        [flat, sizes],
        opset=18,
    )


def reference(image: np.ndarray) -> dict:
    n, c, h, w = image.shape
    pooled = image.reshape(n, c, h // 8, 8, w // 8, 8).mean(axis=(3, 5))
    return {"tokens": pooled.reshape(n, c, -1), "half": image[:, :, ::2, ::2]}


def test_suggestions_free_the_model_and_it_runs_at_a_size_it_was_not_exported_at(tmp_path, run_cli):
    onnx.save(traced_detector(48, 80), tmp_path / "det.onnx")
    shown = run_cli("inspect", tmp_path / "det.onnx", "--suggest", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    by_node = {s["node"]: s["shape"] for s in data["suggestions"]}
    assert by_node["Reshape '/head/Reshape'"] == [1, 3, "dim(image, 2) * dim(image, 3) // 64"]
    assert by_node["Resize '/half/Resize'"] == [1, 3, "dim(image, 2) // 2", "dim(image, 3) // 2"]
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: det.onnx\noutput: out/det.onnx\npatches:\n"
        + "\n".join(data["spec_lines"])
        + "\nverify:\n  - check: {}\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, spec.read_text() + result.output
    image = np.random.default_rng(0).standard_normal((1, 3, 64, 112)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "out" / "det.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip(["tokens", "half"], session.run(None, {"image": image})))
    for name, want in reference(image).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_text_form_prints_the_spec_lines(tmp_path, run_cli):
    onnx.save(traced_detector(48, 80), tmp_path / "det.onnx")
    result = run_cli("inspect", tmp_path / "det.onnx", "--suggest")
    assert result.exit_code == 0, result.output
    assert "2 constant(s) bake an export-time size" in result.stdout
    assert '      shape: [1, 3, "dim(image, 2) * dim(image, 3) // 64"]' in result.stdout
    assert "axes: {2: height, 3: width}" in result.stdout
    # shapes as a spec writes them, never Python's reprs
    assert "  image  [1, 3, 48, 80]" in result.stdout and "'dim(" not in result.stdout
    assert 'input 1: [1, 3, 60] -> [1, 3, "dim(image, 2) * dim(image, 3) // 64"]' in result.stdout


def test_unknown_input_dims_print_as_a_question_mark(tmp_path, run_cli):
    onnx.save(
        graph_model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [tensor_info("x", [1, None, "?"])],
            [tensor_info("y", [1, None, "?"])],
        ),
        tmp_path / "m.onnx",
    )
    result = run_cli("inspect", tmp_path / "m.onnx", "--suggest")
    assert result.exit_code == 0, result.output
    assert "  x  [1, ?, ?]" in result.stdout, result.stdout


def test_a_coincidence_between_sizes_is_called_ambiguous(tmp_path, run_cli):
    """At 64x96, H*W/64 is 96, which is also W: one export cannot tell them apart; say so."""
    onnx.save(traced_detector(64, 96), tmp_path / "det.onnx")
    result = run_cli("inspect", tmp_path / "det.onnx", "--suggest")
    assert "entry 2: ambiguous, could also be dim(image, 2) * dim(image, 3) // 64" in result.stdout


def test_a_head_split_stays_numbers(tmp_path, run_cli):
    """Sequence-first attention q [64, 1, 128] split into 4 heads of 32: 4 * 32 is the 128 features, not
    64 // 16 and 64 // 2 (a coincidence that broke every sequence length but 64); the 64 follows q."""
    shape = numpy_helper.from_array(np.array([64, 1, 4, 32], np.int64), "heads")
    model = graph_model(
        [helper.make_node("Reshape", ["q", "heads"], ["split"], name="/Reshape")],
        [tensor_info("q", [64, 1, 128])],
        [tensor_info("split", [64, 1, 4, 32])],
        [shape],
    )
    onnx.save(model, tmp_path / "m.onnx")
    shown = run_cli("inspect", tmp_path / "m.onnx", "--suggest", "--json")
    assert shown.exit_code == 0, shown.output
    by_node = {s["node"]: s["shape"] for s in json.loads(shown.stdout)["suggestions"]}
    assert by_node["Reshape '/Reshape'"] == ["dim(q, 0)", 1, 4, 32], by_node


def test_nothing_to_suggest_and_symbolic_inputs_are_noted(tmp_path, run_cli):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", "T", 8])],
        [tensor_info("y", ["N", "T", 2, 4])],
        [numpy_helper.from_array(np.array([0, 0, 2, 4], np.int64), "shape")],
    )
    onnx.save(model, tmp_path / "m.onnx")
    result = run_cli("inspect", tmp_path / "m.onnx", "--suggest")
    assert result.exit_code == 0, result.output
    assert "nothing to suggest" in result.stdout and "x[1] is symbolic" in result.stdout
    assert "patchspec derive" in result.stdout


def test_a_missing_model_is_exit_3(tmp_path, run_cli):
    assert run_cli("inspect", tmp_path / "nope.onnx", "--suggest").exit_code == 3
