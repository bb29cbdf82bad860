"""The run verifier against declarations, batch axes and optimization levels: a declared size the run
contradicts, a state's batch on axis 1, an output squeezed and stacked."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from verify_run_kit import RunCli, apply, assert_failed_without_output, run_data, unary_model

from helpers import graph_model, tensor_info, write_spec

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output


def test_declared_fixed_size_that_differs_at_run_time_fails_naming_both_shapes(tmp_path: Path, run_cli: RunCli) -> None:
    """onnxruntime reports [N, None] for this output; the file says [N, 3], the run gives [N, 2]."""
    verify = "  - run:\n      cases: [{inputs: {x: [2, 2]}}]\n      compare: {against: none}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(in_shape=("N", 2), out_shape=("N", 3)), verify)
    assert_failed_without_output(tmp_path, result)
    assert "output 'y' (declared [N, 3], actual [2, 2]): axis 1 declared 3, actual 2" in result.stderr


def test_declared_rank_that_differs_at_run_time_fails(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [2, 2]}}]\n      compare: {against: none}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(in_shape=("N", 2), out_shape=("N",)), verify)
    assert_failed_without_output(tmp_path, result)
    assert "declared rank 1, actual rank 2" in result.stderr


def state_model(squeeze_batch: bool = False) -> onnx.ModelProto:
    """x [batch, 4] and an LSTM-like state h [2, batch, 4]; outputs y [batch, 4] and h_out [2, batch, 4].

    ``squeeze_batch``: the export squeezed y's batch axis away (Squeeze without axes), so one sample
    gives y [4] while a batch gives [batch, 4].
    """
    nodes = [
        helper.make_node("ReduceSum", ["h", "axes0"], ["hs"], keepdims=0),
        helper.make_node("Add", ["x", "hs"], ["sum"]),
        helper.make_node("Neg", ["h"], ["h_out"]),
    ]
    if squeeze_batch:
        nodes += [helper.make_node("Squeeze", ["sum"], ["y"])]
    else:
        nodes += [helper.make_node("Identity", ["sum"], ["y"])]
    axes = numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0")
    y_shape = [None] if squeeze_batch else ["batch", 4]
    model: onnx.ModelProto = graph_model(
        nodes,
        [tensor_info("x", ["batch", 4]), tensor_info("h", [2, "batch", 4])],
        [tensor_info("y", y_shape), tensor_info("h_out", [2, "batch", 4])],
        [axes],
    )
    return model


def test_split_batch_takes_a_state_on_axis_1(tmp_path: Path, run_cli: RunCli) -> None:
    cases = "      cases: [{inputs: {x: [3, 4], h: [2, 3, 4]}}]\n"
    result, _ = apply(
        tmp_path / "plain", run_cli, state_model(), "  - run:\n" + cases + "      compare: {split_batch: true}\n"
    )
    assert result.exit_code == 1 and "found x: 3 on axis 0, h: 2 on axis 0" in result.stderr
    assert "split_batch: {inputs: {h: 1}}" in result.stderr  # the hint finds h's batch on axis 1
    verify = "  - run:\n" + cases + "      compare: {split_batch: {inputs: {h: 1}, outputs: {h_out: 1}}}\n"
    result, report = apply(tmp_path / "axes", run_cli, state_model(), verify)
    assert result.exit_code == 0, result.output
    assert {o["name"] for o in run_data(report)["data"]["results"][0]["outputs"]} == {"y", "h_out"}


@pytest.mark.parametrize("size", [3, "N"])
def test_squeezed_output_redeclared_by_set_batch_and_stacked_by_run(tmp_path: Path, run_cli: RunCli, size: int) -> None:
    """Exported at batch 1 with y squeezed to [4]: at batch 3 it is [3, 4]; set_batch says so, run stacks."""
    model = state_model(squeeze_batch=True)
    for info in model.graph.input:  # a static batch-1 export
        for dim in info.type.tensor_type.shape.dim:
            if dim.dim_param == "batch":
                dim.dim_value = 1
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\n"
        f"patches:\n  - set_batch: {{size: {size}, inputs: {{x: 0, h: 1}}}}\n"
        "verify:\n  - check: {}\n  - run:\n      cases: [{inputs: {x: [3, 4], h: [2, 3, 4]}}]\n"
        "      compare: {split_batch: {inputs: {h: 1}, outputs: {h_out: 1}}}\n",
    )
    result = run_cli("-v", "apply", spec)
    assert result.exit_code == 0, result.output
    assert "1 output declaration corrected" in result.stdout
    assert "output 'y' was declared [4], is [" in result.stdout
    patched = onnx.load(str(tmp_path / "out" / "m2.onnx"))
    assert [d.dim_value or d.dim_param for d in patched.graph.output[0].type.tensor_type.shape.dim] == [size, 4]


def test_split_batch_input_left_whole_with_null(tmp_path: Path, run_cli: RunCli) -> None:
    """A scale input with no batch (null) goes whole to every sample run."""
    model = graph_model(
        [helper.make_node("Mul", ["x", "s"], ["y"])],
        [tensor_info("x", ["batch", 4]), tensor_info("s", [4])],
        [tensor_info("y", ["batch", 4])],
    )
    verify = (
        "  - run:\n      cases: [{inputs: {x: [3, 4], s: [4]}}]\n      compare: {split_batch: {inputs: {s: null}}}\n"
    )
    result, _ = apply(tmp_path, run_cli, model, verify)
    assert result.exit_code == 0, result.output


def test_optimizations_can_be_limited_to_one_level(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      optimizations: [disabled]\n      cases: [{inputs: {x: [2, 4]}}]\n"
    result, report = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 0, result.output
    assert [r["optimization"] for r in run_data(report)["data"]["results"]] == [""]
    bad = "  - run:\n      optimizations: [none]\n      cases: [{inputs: {x: [2, 4]}}]\n"
    result, _ = apply(tmp_path / "bad", run_cli, unary_model(), bad)
    assert result.exit_code == 2 and "optimizations" in result.stderr
