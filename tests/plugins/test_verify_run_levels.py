"""The ``run`` verifier compares like with like, and never blames a patch for the original's own noise.

A QDQ-quantized model is the realistic case: at optimizations ``all`` onnxruntime fuses each
QuantizeLinear/DequantizeLinear pair into integer kernels, at ``disabled`` it does not, so the
original's own outputs differ between the two levels by whole quantization steps.

The test model makes that difference certain on every CPU, not only where an int8 kernel saturates
(AVX2's u8s8 path does; AVX512-VNNI's does not). Its scales put half the outputs exactly on a tie:
the fused kernel sums integers exactly and rounds ``acc * 0.1 / 0.2 = acc / 2`` half to even, while
the unfused path multiplies by ``0.1f`` (not a binary fraction) in float and lands a rounding error
above or below the tie, so some outputs move by one step of 0.2.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output
RunCli = Callable[..., Any]


def qdq_matmul(activations_quantized: bool = True) -> onnx.ModelProto:
    """y = dq(q(dq(q(x)) @ dq(w))): int8 weights, and int8 activations unless told otherwise.

    x steps of 0.1, integer weights in [-2, 2], y steps of 0.2: every output is in range (|y| < 25.4)
    and an odd integer sum is an exact tie for the fused kernel (see the module docstring).
    """
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.integers(-2, 3, size=(64, 64)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.array(1.0, np.float32), "w_s"),
        numpy_helper.from_array(np.array(0, np.int8), "w_z"),
    ]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"])]
    if activations_quantized:
        initializers += [
            numpy_helper.from_array(np.array(0.1, np.float32), "x_s"),
            numpy_helper.from_array(np.array(0, np.int8), "x_z"),
            numpy_helper.from_array(np.array(0.2, np.float32), "y_s"),
            numpy_helper.from_array(np.array(0, np.int8), "y_z"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"]),
            helper.make_node("MatMul", ["xd", "wd"], ["m"]),
            helper.make_node("QuantizeLinear", ["m", "y_s", "y_z"], ["mq"]),
            helper.make_node("DequantizeLinear", ["mq", "y_s", "y_z"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["x", "wd"], ["y"]))
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", ["N", 64])], [tensor_info("y", ["N", 64])], initializers
    )
    return model


def level_difference(path: Path) -> float:
    x = np.random.default_rng(1).uniform(-1, 1, (4, 64)).astype(np.float32)
    outputs = []
    for level in (
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
        onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = level
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, {"x": x})[0])
    return float(np.abs(outputs[0] - outputs[1]).max())


def spec(
    tmp_path: Path, patches: str = "  - set_batch: 4\n", run: str = "", model: onnx.ModelProto | None = None
) -> Path:
    onnx.save(model or qdq_matmul(), tmp_path / "m.onnx")
    path: Path = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n"
        + patches
        + "verify:\n  - run:\n      cases: [{inputs: {x: [4, 64]}}]\n"
        + run,
    )
    return path


def test_the_original_of_the_family_differs_between_levels(tmp_path: Path) -> None:
    """The premise of the tests below: without it they would prove nothing. One step is 0.2."""
    onnx.save(qdq_matmul(), tmp_path / "m.onnx")
    assert level_difference(tmp_path / "m.onnx") > 0.1


def test_a_correct_patch_of_a_qdq_model_passes_at_every_level(tmp_path: Path, run_cli: RunCli) -> None:
    """Batched, not per sample: at ``disabled`` the float MatMul's summation order depends on the
    batch, and on a tie that moves an output by a step (the next tests' other kind of instability)."""
    path = spec(tmp_path, run="      compare: {against: original}\n")
    result = run_cli("apply", path, "-v")
    assert result.exit_code == 0, result.output
    assert "(optimizations all, disabled)" in result.stdout
    assert "case 0 (optimizations disabled) y: pass max abs 0 " in result.stdout


def test_a_single_level_runs_the_reference_at_that_level(tmp_path: Path, run_cli: RunCli) -> None:
    path = spec(tmp_path, run="      optimizations: [disabled]\n      compare: {against: original}\n")
    result = run_cli("apply", path, "-v")
    assert result.exit_code == 0, result.output
    assert "max abs error 0 " in result.stdout


def unstable_setup(tmp_path: Path, run: str = "") -> Path:
    """The output drops the activation quantization (a float model); the reference is the QDQ original.

    At every level the two differ, and so does the reference from itself across levels: the failure
    must say the reference is unstable, with the figure, and how to get out of it.
    """
    onnx.save(qdq_matmul(), tmp_path / "qdq.onnx")
    return spec(
        tmp_path,
        patches="  []\n",
        model=qdq_matmul(activations_quantized=False),
        run="      compare: {against: qdq.onnx}\n" + run,
    )


def test_an_unstable_reference_is_named_with_its_figure_and_the_way_out(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli("apply", unstable_setup(tmp_path))
    assert result.exit_code == 1, result.output
    message = result.output
    assert "the reference is unstable on 'y': the original itself differs by" in message
    assert "at optimizations all and disabled" in message
    assert "compare: {outputs: {y: {atol:" in message
    assert "skip" not in message  # no advice turns the check off
    assert "file: x.npy" in message
    assert not (tmp_path / "out" / "m2.onnx").exists()


def test_per_output_tolerance_is_the_way_out(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli(
        "apply", unstable_setup(tmp_path, "      compare: {against: qdq.onnx, outputs: {y: {atol: 2.0}}}\n")
    )
    # the second compare key replaces the first: write the whole mapping once
    assert result.exit_code == 2, result.output  # duplicate key 'compare'
    path = spec(
        tmp_path,
        patches="  []\n",
        model=qdq_matmul(activations_quantized=False),
        run="      compare: {against: qdq.onnx, outputs: {y: {atol: 2.0}}}\n",
    )
    result = run_cli("apply", path)
    assert result.exit_code == 0, result.output
    assert "'y' rtol 0.0001, atol 2" in result.stdout


def test_a_skipped_output_is_run_but_not_compared(tmp_path: Path, run_cli: RunCli) -> None:
    onnx.save(qdq_matmul(), tmp_path / "qdq.onnx")
    path = spec(
        tmp_path,
        patches="  []\n",
        model=qdq_matmul(activations_quantized=False),
        run="      compare: {against: qdq.onnx, outputs: {y: skip}}\n",
    )
    result = run_cli("apply", path, "-v")
    assert result.exit_code == 0, result.output
    assert "not compared: y" in result.stdout


def test_per_output_settings_name_an_output_of_the_model(tmp_path: Path, run_cli: RunCli) -> None:
    path = spec(tmp_path, run="      compare: {outputs: {why: skip}}\n")
    result = run_cli("apply", path)
    assert result.exit_code == 2, result.output  # found before anything runs
    assert "compare.outputs.why: 'why' is not an output of the patched model (did you mean 'y'?)" in result.output
    spec(tmp_path, run="      compare: {against: original}\n")
    assert run_cli("apply", tmp_path / "spec.yaml").exit_code == 0
    spec(tmp_path, run="      compare: {outputs: {why: skip}}\n")
    verified = run_cli("verify", tmp_path / "spec.yaml")  # the existing output: checked the same way
    assert verified.exit_code == 2 and "'why' is not an output of the patched model" in verified.output


def test_a_wrong_patch_is_not_excused_when_the_reference_is_stable(tmp_path: Path, run_cli: RunCli) -> None:
    """A float model whose reference scales its output: the original is stable, so no excuse is offered."""
    scale = numpy_helper.from_array(np.array(1.5, np.float32), "scale")
    reference = graph_model(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        [tensor_info("x", ["N", 64])],
        [tensor_info("y", ["N", 64])],
        initializers=[scale],
    )
    onnx.save(reference, tmp_path / "ref.onnx")
    identity = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", ["N", 64])], [tensor_info("y", ["N", 64])]
    )
    path = spec(tmp_path, patches="  []\n", model=identity, run="      compare: {against: ref.onnx}\n")
    result = run_cli("apply", path)
    assert result.exit_code == 1, result.output
    assert "differs beyond tolerance" in result.output
    assert "unstable" not in result.output


def test_an_original_that_mixes_samples_is_named_by_its_batched_run(tmp_path: Path, run_cli: RunCli) -> None:
    """y = x - mean over the batch: per-sample runs of the original cannot be the reference, and the
    failure says so (the original batched differs from the original per sample), not "the patch", and
    offers the coupled compare before any tolerance."""
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    model = graph_model(
        [
            helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
            helper.make_node("Sub", ["x", "mean"], ["y"]),
        ],
        [tensor_info("x", ["N", 64])],
        [tensor_info("y", ["N", 64])],
        initializers=[axes],
        opset=18,
    )
    path = spec(tmp_path, model=model, run="      compare: {against: original, split_batch: true}\n")
    result = run_cli("apply", path)
    assert result.exit_code == 1, result.output
    assert "the original itself is not per sample on 'y': run batched it differs by" in result.output
    advice = result.output[result.output.index("the original itself is not per sample") :]
    assert advice.index("compare: {coupled: REASON}") < advice.index("atol"), advice  # never a looser check first


def test_a_model_onnxruntime_cannot_run_at_all_is_not_blamed_on_the_patch(tmp_path: Path, run_cli: RunCli) -> None:
    """A bfloat16 MatMul (Polygraphy's matmul.bf16.onnx): the CPU provider has no kernel for it. The
    run fails, but leads with the original failing the same way, not with the patched file."""
    from onnx import TensorProto

    model = graph_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [tensor_info("a", ["N", 4], TensorProto.BFLOAT16), tensor_info("b", [4, 4], TensorProto.BFLOAT16)],
        [tensor_info("y", ["N", 4], TensorProto.BFLOAT16)],
    )
    onnx.save(model, tmp_path / "m.onnx")
    path = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n  - set_batch: 4\nverify:\n  - run: {}\n"
    )
    result = run_cli("apply", path)
    assert result.exit_code == 1, result.output
    assert "first: CPUExecutionProvider (optimizations all, disabled): the original fails the same way" in result.output


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "torch"


def test_a_qdq_speech_encoder_rebatched_passes_at_both_levels(tmp_path: Path, run_cli: RunCli) -> None:
    """torch dynamo export, then onnxruntime's static QDQ quantization: at `all` the original's logits
    differ from its own at `disabled` by whole quantization steps (0.3 measured); the patch does not."""
    import shutil

    shutil.copy(FIXTURES / "qdq_speech_encoder_dynamo.onnx", tmp_path / "m.onnx")
    assert (
        level_difference_of(tmp_path / "m.onnx", {"mels": np.random.default_rng(0).uniform(-1, 1, (2, 80, 40))}) > 1e-2
    )
    path = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n  - set_batch: 4\n"
        "verify:\n  - run:\n      cases: [{inputs: {mels: [4, 80, 40]}}]\n"
        "      compare: {against: original, split_batch: true}\n",
    )
    result = run_cli("apply", path, "-v")
    assert result.exit_code == 0, result.output
    assert "case 0 (optimizations disabled) logits: pass" in result.stdout


@pytest.mark.parametrize("name", ["yolo_topk_dynamo.onnx", "yolo_topk_ts.onnx"])
def test_an_nms_free_topk_head_rebatched_passes(name: str, tmp_path: Path, run_cli: RunCli) -> None:
    import shutil

    shutil.copy(FIXTURES / name, tmp_path / "m.onnx")
    path = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n  - set_batch: N\n"
        "verify:\n  - run:\n      cases: [{inputs: {images: [4, 3, 32, 32]}}]\n"
        "      compare: {against: original, split_batch: true}\n",
    )
    result = run_cli("apply", path)
    assert result.exit_code == 0, result.output


def level_difference_of(path: Path, feeds: dict[str, Any]) -> float:
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    outputs = []
    for level in (
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
        onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = level
        outputs.append(
            onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        )
    return float(np.abs(outputs[0] - outputs[1]).max())
