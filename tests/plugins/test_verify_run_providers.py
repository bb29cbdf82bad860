"""The run verifier on accelerators, like with like: exact math by default, provider_options, the
measured floor, and what the report says ran. CUDA is simulated (tests/simulated_provider.py): its
outputs carry TF32's batch-dependent error, so these run on any machine and mean the same on a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from scrfd_like import fpn_model
from simulated_provider import SimulatedGpu

RunCli = Callable[..., Any]
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
BATCH = 4


def dense_model(batch: Any = "N") -> onnx.ModelProto:
    """x [batch, 16] -> MatMul -> Relu -> MatMul -> y [batch, 8]: the matrix math TF32 rounds."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", [batch, 16])], [tensor_info("y", [batch, 8])], weights
    )
    return model


def rebatch(tmp_path: Path, run_cli: RunCli, model: onnx.ModelProto, size: int = BATCH) -> Path:
    """The correct patch: set_batch on ``model``, verified by nothing; returns the output's path."""
    folder = tmp_path / "correct"
    folder.mkdir(parents=True)
    onnx.save(model, folder / "m.onnx")
    spec = write_spec(folder, f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size}\n")
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 0, result.output
    return folder / "out.onnx"


def verify_against(
    tmp_path: Path, run_cli: RunCli, output: onnx.ModelProto, original: onnx.ModelProto, run_yaml: str
) -> tuple[Any, dict[str, Any]]:
    """``output`` (patches: []) verified per sample against ``original`` with ``run_yaml`` added to run."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    onnx.save(output, tmp_path / "patched.onnx")
    onnx.save(original, tmp_path / "original.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: patched.onnx\noutput: out/checked.onnx\npatches: []\nverify:\n  - run:\n"
        f"      providers: [{CPU}, {CUDA}]\n      require: [{CUDA}]\n      optimizations: [all]\n"
        "      compare: {against: original.onnx, split_batch: true}\n" + run_yaml,
    )
    report = tmp_path / "report.json"
    result = run_cli("-v", "apply", spec, "--report", report)
    return result, json.loads(report.read_text())


def run_step(report: dict[str, Any]) -> dict[str, Any]:
    (step,) = [v for v in report["verifiers"] if v["label"].endswith("(run)")]
    found: dict[str, Any] = step
    return found


def cuda_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in run_step(report)["data"]["results"] if row["provider"] == CUDA]


FAST_MATH = f"      provider_options: {{{CUDA}: {{use_tf32: 1}}}}\n"
DENSE_CASE = f"      cases: [{{inputs: {{x: [{BATCH}, 16]}}}}]\n"


# -- exact math by default, options on top ------------------------------------------------------------
def test_cuda_runs_with_exact_math_by_default_and_the_summary_says_so(
    tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu
) -> None:
    original = dense_model()
    patched = onnx.load(rebatch(tmp_path, run_cli, original))
    result, report = verify_against(tmp_path / "v", run_cli, patched, original, DENSE_CASE)
    assert result.exit_code == 0, result.output
    assert simulated_cuda.sessions and all(s == {"use_tf32": "0"} for s in simulated_cuda.sessions)
    summary = run_step(report)["summary"]
    assert f"{CUDA}: float32, exact math (use_tf32 0)" in summary, summary
    (provider,) = [p for p in run_step(report)["data"]["providers"] if p["provider"] == CUDA]
    assert provider["provider_options"] == {"use_tf32": "0"} and provider["exact_math"] is True
    assert provider["device"] == "GPU (onnxruntime.get_device())"
    assert f"{CUDA} on GPU (onnxruntime.get_device()): float32, exact math (use_tf32 0); options use_tf32=0" in (
        result.stdout
    )


def test_provider_options_go_on_top_and_fast_math_is_compared_against_its_floor(
    tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu
) -> None:
    original = dense_model()
    patched = onnx.load(rebatch(tmp_path, run_cli, original))
    options = f"      provider_options: {{{CUDA}: {{use_tf32: 1, device_id: 0}}}}\n"
    result, report = verify_against(tmp_path / "v", run_cli, patched, original, DENSE_CASE + options)
    assert result.exit_code == 0, result.output
    assert all(s == {"use_tf32": "1", "device_id": "0"} for s in simulated_cuda.sessions)
    (row,) = cuda_rows(report)
    assert row["exact_math"] is False and row["precision"].startswith("fast math kept on (use_tf32 1)")
    floor = row["floor"]
    assert (
        floor["factor"] == 4 and "original.onnx on CUDAExecutionProvider against original.onnx on CPU" in floor["how"]
    )
    (output,) = row["outputs"]
    assert output["floor"] == floor["outputs"]["y"] > 1e-4  # TF32's error, measured
    assert output["max_abs"] > 1e-4  # what rtol 1e-4 / atol 1e-5 alone would have failed
    assert "CUDAExecutionProvider case 0: floor y " in result.stdout


def test_the_simulated_provider_fails_plain_tolerances_so_the_floor_is_what_passes_it(
    tmp_path: Path, simulated_cuda: SimulatedGpu
) -> None:
    """Not a vacuous simulation: TF32's error is beyond rtol 1e-4 / atol 1e-5 on its own."""
    import onnxruntime

    from patchspec.ort.run.comparison import compare_output

    onnx.save(dense_model(), tmp_path / "m.onnx")
    feeds = {"x": np.random.default_rng(1).standard_normal((BATCH, 16)).astype(np.float32)}
    cpu = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=[CPU]).run(None, feeds)[0]
    fast = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=[(CUDA, {"use_tf32": "1"})])
    exact = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=[(CUDA, {"use_tf32": "0"})])
    assert not compare_output("y", fast.run(None, feeds)[0], cpu, 1e-4, 1e-5).passed
    assert compare_output("y", exact.run(None, feeds)[0], cpu, 1e-4, 1e-5).passed


# -- validation ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options, message",
    [
        (
            f"{{{CUDA}: {{use_tf23: 1}}}}",
            f"verify[0] (run) > provider_options.{CUDA}.use_tf23: unknown {CUDA} option 'use_tf23' "
            "(did you mean 'use_tf32'?)",
        ),
        (
            "{CUDAExecutionProvidr: {use_tf32: 1}}",
            "verify[0] (run) > provider_options.CUDAExecutionProvidr: provider_options names "
            f"'CUDAExecutionProvidr', which is not in providers ({CPU}, {CUDA}) (did you mean '{CUDA}'",
        ),
        (
            "{TensorrtExecutionProvider: {trt_fp16_enabled: 1}}",
            "provider_options names 'TensorrtExecutionProvider', which is not in providers",
        ),
    ],
)
def test_a_misspelt_provider_or_option_is_a_spec_error_with_did_you_mean(
    tmp_path: Path, run_cli: RunCli, options: str, message: str
) -> None:
    onnx.save(dense_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\nverify:\n  - run:\n"
        f"      providers: [{CPU}, {CUDA}]\n      provider_options: {options}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "spec.yaml:8:" in result.stderr and message in result.stderr, result.stderr


def test_an_option_patchspec_does_not_know_and_that_looks_like_none_is_left_to_onnxruntime(
    tmp_path: Path, run_cli: RunCli
) -> None:
    onnx.save(dense_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\nverify:\n  - run:\n"
        f"      providers: [{CPU}, {CUDA}, MyPluginExecutionProvider]\n"
        f"      provider_options: {{{CUDA}: {{sdpa_kernel: 2}}, MyPluginExecutionProvider: {{mode: x}}}}\n",
    )
    assert run_cli("validate", spec).exit_code == 0


# -- wrong patches still fail with fast math on ----------------------------------------------------------
def _rewire_output(model: onnx.ModelProto, index: int, nodes: Callable[[str, str], list[onnx.NodeProto]]) -> None:
    """Put ``nodes(old, new)`` between output ``index``'s producer (now writing ``old``) and the output."""
    name = model.graph.output[index].name
    old = f"{name}__before"
    for node in model.graph.node:
        node.output[:] = [old if out == name else out for out in node.output]
    model.graph.node.extend(nodes(old, name))


def swap_first_two_samples(model: onnx.ModelProto, index: int = 0) -> onnx.ModelProto:
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    perm = numpy_helper.from_array(np.array([1, 0, *range(2, BATCH)], np.int64), "perm")
    wrong.graph.initializer.append(perm)
    _rewire_output(wrong, index, lambda old, new: [helper.make_node("Gather", [old, "perm"], [new], axis=0)])
    return wrong


def replace_last_sample_with_its_neighbour(model: onnx.ModelProto, index: int = 0) -> onnx.ModelProto:
    """A Slice that drops a sample, the batch kept by repeating another: the shape still fits."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    for name, value in (("s0", [0]), ("s1", [BATCH - 1]), ("s2", [BATCH - 2]), ("ax", [0])):
        wrong.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    _rewire_output(
        wrong,
        index,
        lambda old, new: [
            helper.make_node("Slice", [old, "s0", "s1", "ax"], [f"{new}__kept"]),
            helper.make_node("Slice", [old, "s2", "s1", "ax"], [f"{new}__again"]),
            helper.make_node("Concat", [f"{new}__kept", f"{new}__again"], [new], axis=0),
        ],
    )
    return wrong


def drop_last_sample(model: onnx.ModelProto, index: int = 0) -> onnx.ModelProto:
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    for name, value in (("d0", [0]), ("d1", [BATCH - 1]), ("dax", [0])):
        wrong.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    _rewire_output(wrong, index, lambda old, new: [helper.make_node("Slice", [old, "d0", "d1", "dax"], [new])])
    for value in wrong.graph.output:
        value.type.tensor_type.shape.Clear()  # declared anew by the run: only the comparison judges it
    return wrong


def batch_constant_left_at_1(model: onnx.ModelProto, index: int = 0) -> onnx.ModelProto:
    """A Reshape whose baked target keeps the exported batch of 1: [1, B*rest] where [B, rest] was meant."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    wrong.graph.initializer.append(numpy_helper.from_array(np.array([1, -1], np.int64), "baked"))
    _rewire_output(wrong, index, lambda old, new: [helper.make_node("Reshape", [old, "baked"], [new])])
    wrong.graph.output[index].type.tensor_type.shape.Clear()
    return wrong


WRONG = {
    "swapped sample": swap_first_two_samples,
    "a sample replaced by its neighbour": replace_last_sample_with_its_neighbour,
    "a Slice that drops a sample": drop_last_sample,
    "a batch constant left at 1": batch_constant_left_at_1,
}


@pytest.mark.parametrize("breaks", list(WRONG.values()), ids=list(WRONG))
def test_a_wrong_patch_still_fails_with_fast_math_on(
    tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu, breaks: Callable[..., onnx.ModelProto]
) -> None:
    original = dense_model()
    correct = onnx.load(rebatch(tmp_path, run_cli, original))
    result, report = verify_against(tmp_path / "v", run_cli, breaks(correct), original, DENSE_CASE + FAST_MATH)
    assert result.exit_code == 1, result.output
    assert all(row["status"] == "fail" for row in cuda_rows(report)), cuda_rows(report)


def fpn_original() -> onnx.ModelProto:
    """The SCRFD-like FPN (convolutions, Resize, Add): three outputs at three strides."""
    model: onnx.ModelProto = fpn_model(spatial=None, batch=1, annotate=False)
    return model


FPN_CASE = f"      cases: [{{inputs: {{input.1: [{BATCH}, 3, 64, 96]}}}}]\n"


@pytest.mark.parametrize("breaks", [None, *WRONG.values()], ids=["correct", *WRONG])
def test_on_a_convolutional_fpn_correct_passes_and_wrong_fails_with_fast_math(
    tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu, breaks: Callable[..., onnx.ModelProto] | None
) -> None:
    original = fpn_original()
    correct = onnx.load(rebatch(tmp_path, run_cli, original))
    patched = correct if breaks is None else breaks(correct, 1)  # the stride-16 output
    result, report = verify_against(tmp_path / "v", run_cli, patched, original, FPN_CASE + FAST_MATH)
    assert result.exit_code == (0 if breaks is None else 1), result.output
    assert simulated_cuda.sessions and all(s == {"use_tf32": "1"} for s in simulated_cuda.sessions)
    if breaks is None:
        (row,) = cuda_rows(report)
        assert all(output["floor"] for output in row["outputs"]), row


def test_the_unstable_reference_note_names_the_providers_arithmetic(
    tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu
) -> None:
    """Where batched runs on the accelerator drift beyond its floor (another algorithm at another batch)
    and the CPU's do not, the note says so, instead of asking for a hand-set atol."""
    simulated_cuda.batched_scale = 20.0  # batch 4 carries 20 times TF32's error, batch 1 the usual
    original = dense_model()
    patched = onnx.load(rebatch(tmp_path, run_cli, original))
    result, _ = verify_against(tmp_path / "v", run_cli, patched, original, DENSE_CASE + FAST_MATH)
    assert result.exit_code == 1, result.output
    assert (
        f"the reference is unstable on 'y' on {CUDA}: the original itself differs by" in result.stderr
        and f"run batched and per sample there and not on {CPU}" in result.stderr
        and f"is {CUDA}'s arithmetic (fast math kept on (use_tf32 1)" in result.stderr
    ), result.stderr
    assert f"drop use_tf32: 1 from {CUDA}'s provider_options: its exact math is the default" in result.stderr
    assert "atol:" not in result.stderr.split("the reference is unstable")[1]


def test_an_integer_output_gets_no_floor(tmp_path: Path, run_cli: RunCli, simulated_cuda: SimulatedGpu) -> None:
    """An index that moves between providers (a near-tied ArgMax) must not widen its own tolerance."""
    original = dense_model()
    original.graph.node.append(helper.make_node("ArgMax", ["y"], ["best"], axis=1, keepdims=0))
    original.graph.output.append(helper.make_tensor_value_info("best", onnx.TensorProto.INT64, ["N"]))
    patched = onnx.load(rebatch(tmp_path, run_cli, original))
    result, report = verify_against(tmp_path / "v", run_cli, patched, original, DENSE_CASE + FAST_MATH)
    assert result.exit_code == 0, result.output
    (row,) = cuda_rows(report)
    assert set(row["floor"]["outputs"]) == {"y"}
    assert {o["name"]: o["floor"] for o in row["outputs"]}["best"] is None
