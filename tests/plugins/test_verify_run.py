"""The ``run`` verifier end to end: ``patchspec apply`` on a spec with ``patches: []`` and a run step."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import helper
from verify_run_kit import (
    CUDA,
    HAS_CUDA,
    RunCli,
    apply,
    assert_failed_without_output,
    run_data,
    scaled_model,
    unary_model,
)

from helpers import graph_model, tensor_info, write_spec

#: the run_cli fixture: patchspec ARGS in-process, giving exit_code and output


def test_compare_against_original_passes_and_reports_per_output(tmp_path: Path, run_cli: RunCli) -> None:
    verify = (
        "  - run:\n      cases:\n        - inputs: {x: [2, 4]}\n        - inputs: {x: {shape: [5, 4], fill: arange}}\n"
    )
    result, report = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m2.onnx").is_file()
    step = run_data(report)
    assert step["status"] == "passed"
    rows = step["data"]["results"]
    assert [(r["provider"], r["case"], r["optimization"], r["status"]) for r in rows] == [
        ("CPUExecutionProvider", case, level, "pass") for level in ("all", "disabled") for case in (0, 1)
    ]
    assert rows[0]["outputs"][0]["name"] == "y" and rows[0]["outputs"][0]["max_abs"] == 0.0
    assert step["data"]["rtol"] == 1e-4 and step["data"]["atol"] == 1e-5
    assert any(
        line.startswith("CPUExecutionProvider case 1 (optimizations disabled) y: pass") for line in step["details"]
    )


def test_tolerance_failure_names_output_index_and_errors(tmp_path: Path, run_cli: RunCli) -> None:
    verify = (
        "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n      compare: {against: ref.onnx, rtol: 1.0e-4, atol: 0}\n"
    )
    result, report = apply(tmp_path, run_cli, scaled_model(1.0), verify, {"ref.onnx": scaled_model(1.01)})
    assert_failed_without_output(tmp_path, result)
    assert "output 'y' differs beyond tolerance" in result.stderr
    assert "worst at index (" in result.stderr and "abs error" in result.stderr and "rel error" in result.stderr
    outputs = run_data(report)["data"]["results"][0]["outputs"]
    assert outputs[0]["status"] == "fail" and outputs[0]["max_rel"] == pytest.approx(0.01 / 1.01, rel=1e-3)


def test_looser_tolerance_lets_the_same_difference_pass(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n      compare: {against: ref.onnx, rtol: 2.0e-2}\n"
    result, _ = apply(tmp_path, run_cli, scaled_model(1.0), verify, {"ref.onnx": scaled_model(1.01)})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m2.onnx").is_file()


def test_nan_in_output_where_reference_has_none_fails(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [3, 4]}}]\n      compare: {against: ref.onnx}\n"
    result, _ = apply(tmp_path, run_cli, unary_model("Log"), verify, {"ref.onnx": unary_model("Abs")})
    assert_failed_without_output(tmp_path, result)
    assert "NaN/Inf" in result.stderr and "output 'y'" in result.stderr


def test_nan_fails_without_a_reference_too(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [3, 4]}}]\n      compare: {against: none}\n"
    result, _ = apply(tmp_path, run_cli, unary_model("Log"), verify)
    assert_failed_without_output(tmp_path, result)
    assert "NaN/Inf" in result.stderr


def test_declared_shape_that_the_model_does_not_produce_fails(tmp_path: Path, run_cli: RunCli) -> None:
    lying = unary_model(in_shape=("N", 4), out_shape=(1, 4))
    verify = "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n"
    result, _ = apply(tmp_path, run_cli, lying, verify)
    assert_failed_without_output(tmp_path, result)
    assert "declares a shape it does not produce" in result.stderr
    assert "output 'y'" in result.stderr and "axis 0 declared 1, actual 2" in result.stderr


def test_batch_one_reference_needs_split_batch(tmp_path: Path, run_cli: RunCli) -> None:
    extra = {"b1.onnx": unary_model(in_shape=(1, 4), out_shape=(1, 4))}
    verify = "  - run:\n      cases: [{inputs: {x: [4, 4]}}]\n      compare: {against: b1.onnx}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(), verify, extra)
    assert_failed_without_output(tmp_path, result)
    assert "refuses this case" in result.stderr and "split_batch: true" in result.stderr
    verify = verify.replace("against: b1.onnx", "against: b1.onnx, split_batch: true")
    result, report = apply(tmp_path, run_cli, unary_model(), verify, extra)
    assert result.exit_code == 0, result.output
    assert run_data(report)["data"]["split_batch"] is True


@pytest.mark.skipif(HAS_CUDA, reason="CUDAExecutionProvider is available here, so it is not skipped")
def test_unavailable_provider_is_skipped_with_the_reason(tmp_path: Path, run_cli: RunCli) -> None:
    verify = f"  - run:\n      providers: [CPUExecutionProvider, {CUDA}, DmlExecutionProvider]\n      cases: [{{inputs: {{x: [1, 4]}}}}]\n"
    result, report = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 0, result.output
    rows = {r["provider"]: r for r in run_data(report)["data"]["results"]}
    for provider in (CUDA, "DmlExecutionProvider"):
        assert rows[provider]["status"] == "skip"
        assert rows[provider]["messages"][0].startswith("not available in this onnxruntime build; available: ")
        assert "CPUExecutionProvider" in rows[provider]["messages"][0]
    assert rows["CPUExecutionProvider"]["status"] == "pass"
    assert f"skipped {CUDA}" in run_data(report)["summary"]


@pytest.mark.skipif(HAS_CUDA, reason="CUDAExecutionProvider is available here, so require passes")
def test_required_provider_that_is_unavailable_fails(tmp_path: Path, run_cli: RunCli) -> None:
    verify = (
        f"  - run:\n      providers: [CPUExecutionProvider, {CUDA}]\n      require: [{CUDA}]\n"
        "      cases: [{inputs: {x: [1, 4]}}]\n"
    )
    result, _ = apply(tmp_path, run_cli, unary_model(), verify)
    assert_failed_without_output(tmp_path, result)
    assert f"required provider {CUDA} cannot run: not available in this onnxruntime build" in result.stderr


@pytest.mark.skipif(not HAS_CUDA, reason="CUDAExecutionProvider is not available in this onnxruntime build (CPU only)")
def test_cuda_runs_and_compares_for_real(tmp_path: Path, run_cli: RunCli) -> None:
    verify = f"  - run:\n      providers: [{CUDA}]\n      require: [{CUDA}]\n      cases: [{{inputs: {{x: [8, 4]}}}}]\n"
    result, report = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 0, result.output
    assert run_data(report)["data"]["results"][0]["status"] == "pass"


def test_case_input_not_in_the_model_is_a_spec_error_before_anything_runs(tmp_path: Path, run_cli: RunCli) -> None:
    """Found after the patches, before staging or running (exit 2, located at the key); plan finds it too."""
    verify = "  - run:\n      cases: [{inputs: {xx: [1, 4]}}]\n"
    result, _ = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 2, result.output
    assert (
        "spec.yaml:7:29: verify[0] (run) > cases.0.inputs.xx: 'xx' is not an input of the patched model "
        "(did you mean 'x'?)" in result.stderr
    )
    assert "the case gives no shape for input 'x'" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    planned = run_cli("plan", tmp_path / "spec.yaml")
    assert planned.exit_code == 2 and "'xx' is not an input of the patched model" in planned.stderr


@pytest.mark.parametrize(
    "case, message",
    [
        ("{x: [3, 4, 1]}", "a shape of rank 3 ([3, 4, 1]) for an input of rank 2, declared [N, 4]"),
        ("{x: [3, 5]}", "axis 1 is fixed at 4, the case gives 5 (declared [N, 4])"),
        ("{x: {shape: [3, 4], dtype: int64}}", "the patched model's input is float32, the case gives int64"),
    ],
)
def test_a_case_that_does_not_fit_the_patched_model_is_a_spec_error(
    tmp_path: Path, run_cli: RunCli, case: Any, message: str
) -> None:
    result, _ = apply(tmp_path, run_cli, unary_model(), f"  - run:\n      cases: [{{inputs: {case}}}]\n")
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_file_inputs_are_read_relative_to_the_spec(tmp_path: Path, run_cli: RunCli) -> None:
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    verify = "  - run:\n      cases: [{inputs: {x: {file: data/x.npy}}}]\n"
    for folder, array in ((tmp_path / "good", x), (tmp_path / "bad", x.astype(np.float64))):
        (folder / "data").mkdir(parents=True)
        np.save(folder / "data" / "x.npy", array)
    result, _ = apply(tmp_path / "good", run_cli, unary_model(), verify)
    assert result.exit_code == 0, result.output
    result, _ = apply(tmp_path / "bad", run_cli, unary_model(), verify)
    assert_failed_without_output(tmp_path / "bad", result)
    assert "holds float64 [3, 4], expected float32 [3, 4]" in result.stderr


def test_against_npz_of_expected_outputs(tmp_path: Path, run_cli: RunCli) -> None:
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    verify = "  - run:\n      cases: [{inputs: {x: {file: x.npy}}}]\n      compare: {against: expected.npz}\n"
    good = {"x.npy": x, "expected.npz": {"y": np.maximum(x, 0)}}
    result, _ = apply(tmp_path / "good", run_cli, unary_model(), verify, good)
    assert result.exit_code == 0, result.output
    bad = {"x.npy": x, "expected.npz": {"y": np.maximum(x, 0) + 1}}
    result, _ = apply(tmp_path / "bad", run_cli, unary_model(), verify, bad)
    assert_failed_without_output(tmp_path / "bad", result)
    assert "output 'y' differs beyond tolerance" in result.stderr


def test_per_case_against_overrides_compare(tmp_path: Path, run_cli: RunCli) -> None:
    x1, x2 = (np.full((n, 4), -1.0 + n, np.float32) for n in (1, 3))
    verify = (
        "  - run:\n      cases:\n        - {inputs: {x: {file: x1.npy}}, against: y1.npz}\n"
        "        - {inputs: {x: {file: x2.npy}}, against: y2.npz}\n"
    )
    extra = {"x1.npy": x1, "x2.npy": x2, "y1.npz": {"y": np.maximum(x1, 0)}, "y2.npz": {"y": np.maximum(x2, 0)}}
    result, _ = apply(tmp_path, run_cli, unary_model(), verify, extra)
    assert result.exit_code == 0, result.output


def test_nothing_compared_fails(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n      compare: {against: expected.npz}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(), verify, {"expected.npz": {"other": np.zeros(3)}})
    assert_failed_without_output(tmp_path, result)
    assert "nothing compared" in result.stderr


def test_session_that_cannot_be_built_names_provider_and_path(tmp_path: Path, run_cli: RunCli) -> None:
    model = graph_model(
        [helper.make_node("NoSuchOp", ["x"], ["y"], domain="my.ops")], [tensor_info("x", [1])], [tensor_info("y", [1])]
    )
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    result, _ = apply(tmp_path, run_cli, model, "  - run: {}\n")
    assert_failed_without_output(tmp_path, result)
    assert "CPUExecutionProvider" in result.stderr and "cannot build a session for" in result.stderr
    assert "the original fails the same way" in result.stderr  # a custom op: the patch is not the cause
    assert "m2.onnx" in result.output and "NoSuchOp" in result.stderr


def test_static_model_needs_no_cases_and_symbolic_one_asks_for_them(tmp_path: Path, run_cli: RunCli) -> None:
    result, _ = apply(tmp_path / "static", run_cli, unary_model(in_shape=(2, 4), out_shape=(2, 4)), "  - run: {}\n")
    assert result.exit_code == 0, result.output
    result, _ = apply(tmp_path / "dynamic", run_cli, unary_model(), "  - run: {}\n")
    assert_failed_without_output(tmp_path / "dynamic", result)
    assert "no cases given and input 'x' is declared [N, 4]" in result.stderr


@pytest.mark.parametrize(
    "case, message",
    [
        ("{x: [N, 4]}", "symbolic dim 'N' must be given as a number"),
        ("{x: [-1, 4]}", "dim -1 is negative"),
        ("{x: {shape: [1, 4], fill: rand}}", "unknown fill 'rand' (did you mean 'random'"),
        ("{x: {shape: [1, 4], dtype: float}}", "unknown dtype 'float'"),
        ("{x: {shape: [1, 4], fil: zeros}}", "unknown key 'fil' (did you mean 'fill'"),
        ("{x: {fill: zeros}}", "give 'shape'"),
    ],
)
def test_bad_cases_are_spec_errors_found_by_validate(tmp_path: Path, run_cli: RunCli, case: Any, message: str) -> None:
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: absent.onnx\noutput: out.onnx\npatches: []\n"
        f"verify:\n  - run:\n      cases:\n        - inputs: {case}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert message in result.output and "spec.yaml:" in result.output and "verify[0] (run)" in result.output


def test_provider_typo_and_require_outside_providers_are_spec_errors(tmp_path: Path, run_cli: RunCli) -> None:
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: absent.onnx\noutput: out.onnx\npatches: []\n"
        "verify:\n  - run:\n      providers: [CUDAExecutionProvidr]\n"
        "      require: [CPUExecutionProvider]\n      compare: {against: ref.txt}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2
    assert "did you mean 'CUDAExecutionProvider'" in result.output
    assert "required provider 'CPUExecutionProvider' is not in providers" in result.output
    assert "against must be original, none, or a path ending in .onnx or .npz" in result.output


def test_a_misspelt_against_gets_a_did_you_mean(tmp_path: Path, run_cli: RunCli) -> None:
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: absent.onnx\noutput: out.onnx\npatches: []\n"
        "verify:\n  - run:\n      compare: {against: orignal}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "got 'orignal' (did you mean 'original'?)" in result.output


def test_real_ppocr_cls_runs_batched_and_split_against_original(
    tmp_path: Path, run_cli: RunCli, ppocr_models: Any
) -> None:
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {ppocr_models['cls']}\noutput: out/cls.onnx\npatches: []\n"
        "verify:\n  - run:\n      cases:\n        - inputs: {x: [3, 3, 48, 192]}\n"
        "        - inputs: {x: {shape: [2, 3, 48, 160], seed: 7}}\n"
        "      compare: {split_batch: true}\n",
    )
    result = run_cli("apply", spec, "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    (step,) = json.loads((tmp_path / "r.json").read_text())["verifiers"]
    assert [r["status"] for r in step["data"]["results"]] == ["pass"] * 4  # 2 cases x optimizations all, disabled
    assert all(o["max_abs"] < 1e-4 for r in step["data"]["results"] for o in r["outputs"])


def test_every_verify_example_in_the_docs_validates(tmp_path: Path, run_cli: RunCli) -> None:
    import re

    from helpers import REPO

    text = (REPO / "docs" / "verifiers.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("verify:")]
    found = re.search(r"cat > spec.yaml <<'EOF'\n(.*?)EOF", text, re.S)
    assert found is not None, "the docs show a spec written with cat > spec.yaml <<'EOF'"
    blocks.append(found.group(1))
    assert len(blocks) >= 5
    for index, block in enumerate(blocks):
        body = (
            block
            if block.startswith("patchspec:")
            else f"patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: []\n{block}"
        )
        result = run_cli("validate", write_spec(tmp_path, body, f"doc{index}.yaml"))
        assert result.exit_code == 0, f"docs/verifiers.md example {index}:\n{block}\n{result.output}"


@pytest.mark.parametrize("required, exit_code", [(False, 0), (True, 1)])
def test_provider_listed_but_not_loadable_is_skipped_or_fails_when_required(
    tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, required: bool, exit_code: Any
) -> None:
    real = onnxruntime.InferenceSession

    def falls_back_to_cpu(
        path: Any, sess_options: Any = None, providers: Any = None
    ) -> Any:  # what ORT does when CUDA libs are missing
        return real(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", falls_back_to_cpu)
    require = f"      require: [{CUDA}]\n" if required else ""
    verify = f"  - run:\n      providers: [CPUExecutionProvider, {CUDA}]\n{require}      cases: [{{inputs: {{x: [1, 4]}}}}]\n"
    result, report = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == exit_code, result.output
    row = [r for r in run_data(report)["data"]["results"] if r["provider"] == CUDA][0]
    assert row["status"] == ("fail" if required else "skip")
    assert f"{CUDA} could not be loaded (onnxruntime fell back to CPUExecutionProvider)" in row["messages"][0]
