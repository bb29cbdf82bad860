"""``init`` compares one sample at a time wherever the original runs so, dynamic batch included, and
says in the spec where the model couples the samples (issue 34, item 1): a batch-against-batch
compare of a dynamically quantized model passed with max abs error 0 while batch 4 was 1.01 away
from its samples run alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info


def _init(run_cli, model: onnx.ModelProto, folder: Path, *options: str) -> tuple[Path, dict]:
    onnx.save(model, folder / "m.onnx")
    spec = folder / "spec.yaml"
    made = run_cli("init", folder / "m.onnx", "--output", spec, *options)
    assert made.exit_code == 0, made.output
    return spec, yaml.safe_load(spec.read_text())


def _relu(batch="N"):
    return graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [batch, 4])], [tensor_info("y", [batch, 4])]
    )


def _quantized():
    """x [N, 8] through one DynamicQuantizeLinear: one scale for the whole batch."""
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
    ]
    return graph_model(nodes, [tensor_info("x", ["N", 8])], [tensor_info("y", ["N", 8])])


def test_a_dynamic_batch_is_compared_per_sample(tmp_path, run_cli):
    spec, loaded = _init(run_cli, _relu(), tmp_path, "--batch", "4")
    run = loaded["verify"][1]["run"]
    assert run["compare"]["split_batch"] is True, spec.read_text()
    assert "a batch must give what its samples give one at a time" in spec.read_text()
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
    assert "run ..................... passed" in applied.stdout


def test_a_symbolic_batch_is_compared_per_sample_too(tmp_path, run_cli):
    spec, loaded = _init(run_cli, _relu(), tmp_path, "--dynamic", "batch")
    assert loaded["verify"][1]["run"]["compare"]["split_batch"] is True
    assert run_cli("apply", spec).exit_code == 0


def test_an_output_without_the_batch_is_compared_batch_against_batch(tmp_path, run_cli):
    """y_sum = ReduceSum over everything keeps no batch axis: per-sample runs cannot be joined into it."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)]
    model = graph_model(
        nodes, [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4]), tensor_info("total", [])], opset=13
    )
    spec, loaded = _init(run_cli, model, tmp_path, "--batch", "4")
    assert "split_batch" not in loaded["verify"][1]["run"]["compare"], spec.read_text()
    assert "THE SAMPLES ARE NOT INDEPENDENT: ReduceSum" in spec.read_text()


def test_a_coupled_model_is_said_in_the_spec_and_the_per_sample_compare_fails(tmp_path, run_cli):
    spec, loaded = _init(run_cli, _quantized(), tmp_path, "--batch", "4")
    text = spec.read_text()
    assert loaded["verify"][1]["run"]["compare"]["split_batch"] is True, text
    assert "THE SAMPLES ARE NOT INDEPENDENT: DynamicQuantizeLinear 'quantize_x' computes one scale" in text
    assert 'replace split_batch with: coupled: "<why it is acceptable>"' in text
    applied = run_cli("apply", spec)
    assert applied.exit_code == 1, applied.output  # not a silent pass
    assert "the samples are not independent: DynamicQuantizeLinear 'quantize_x'" in applied.stdout


def test_the_coupled_key_accepts_it_with_the_reason_in_the_report(tmp_path, run_cli):
    spec, _ = _init(run_cli, _quantized(), tmp_path, "--batch", "4")
    text = spec.read_text().replace("split_batch: true", 'coupled: "served batched; int8 scales per batch"')
    spec.write_text(text)
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
    assert "as the samples are coupled (accepted: served batched; int8 scales per batch)" in applied.stdout


def test_coupled_with_split_batch_or_empty_is_a_spec_error(tmp_path, run_cli):
    spec, _ = _init(run_cli, _quantized(), tmp_path, "--batch", "4")
    text = spec.read_text()
    spec.write_text(text.replace("split_batch: true", 'split_batch: true, coupled: "why"'))
    both = run_cli("apply", spec)
    assert both.exit_code == 2 and "coupled accepts that a batch differs" in both.stderr, both.output
    spec.write_text(text.replace("split_batch: true", 'coupled: ""'))
    empty = run_cli("apply", spec)
    assert empty.exit_code == 2 and "coupled" in empty.stderr, empty.output


def test_an_original_that_fails_at_batch_1_is_not_split(tmp_path, run_cli):
    """x [N, 4] reshaped to a constant [2, 8]: the original runs only at N = 4 (the case's batch)."""
    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", ["N", 4])], [tensor_info("y", [2, 8])], [shape])
    onnx.save(model, tmp_path / "m.onnx")
    made = run_cli("init", tmp_path / "m.onnx", "--output", tmp_path / "spec.yaml", "--batch", "4")
    if made.exit_code == 0:  # set_batch may refuse it (the constant holds the batch folded): either way no split
        assert "split_batch" not in yaml.safe_load((tmp_path / "spec.yaml").read_text())["verify"][1]["run"]["compare"]
