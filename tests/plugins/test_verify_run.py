"""The ``run`` verifier end to end: ``patchspec apply`` on a spec with ``patches: []`` and a run step."""

import json
from collections.abc import Callable, Sequence
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

CUDA = "CUDAExecutionProvider"
HAS_CUDA = CUDA in onnxruntime.get_available_providers()


def unary_model(
    op: str = "Relu", in_shape: Sequence[Any] = ("N", 4), out_shape: Sequence[Any] = ("N", 4), **attrs: Any
) -> onnx.ModelProto:
    model: onnx.ModelProto = graph_model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        [tensor_info("x", list(in_shape))],
        [tensor_info("y", list(out_shape))],
    )
    return model


def scaled_model(factor: float, in_shape: Sequence[Any] = ("N", 4)) -> onnx.ModelProto:
    """y = x * factor: a reference that differs from the identity by a known amount."""
    scale = numpy_helper.from_array(np.array(factor, np.float32), "scale")
    model: onnx.ModelProto = graph_model(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        [tensor_info("x", list(in_shape))],
        [tensor_info("y", list(in_shape))],
        initializers=[scale],
    )
    return model


def apply(
    tmp_path: Path, run_cli: RunCli, model: onnx.ModelProto, verify_yaml: str, extra: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """Write model (+ extra files), a spec verifying it with ``verify_yaml``, run apply; return (result, report).

    Each call uses a fresh folder: the output's digest covers the spec and the model, not the files
    a verifier reads, so a second apply in the same folder would say "up to date".
    """
    tmp_path.mkdir(parents=True, exist_ok=True)
    onnx.save(model, tmp_path / "m.onnx")
    for name, value in (extra or {}).items():
        if isinstance(value, onnx.ModelProto):
            onnx.save(value, tmp_path / name)
        elif isinstance(value, dict):
            np.savez(tmp_path / name, **value)
        else:
            np.save(tmp_path / name, value)
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n" + verify_yaml
    )
    report_path = tmp_path / "report.json"
    result = run_cli("apply", spec, "--report", report_path, cwd=tmp_path.parent)  # not the spec's folder
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return result, report


def run_data(report: dict[str, Any]) -> dict[str, Any]:
    (step,) = [v for v in report["verifiers"] if v["label"].endswith("(run)")]
    found: dict[str, Any] = step
    return found


def assert_failed_without_output(tmp_path: Path, result: Any) -> None:
    assert result.exit_code == 1, result.output
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir()), f"left behind: {list(out.iterdir())}"


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


# -- declarations, batch axes, optimization levels ---------------------------------------------------------
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


# -- a patch that changes the I/O element type (fp32 -> fp16) ------------------------------------------------
def tanh_model(dtype: int) -> onnx.ModelProto:
    """y = tanh(x) * 3 in ``dtype``: fp16 loses precision against fp32 by a known order."""
    scale = numpy_helper.from_array(np.array(3.0, helper.tensor_dtype_to_np_dtype(dtype)), "scale")
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "scale"], ["y"])]
    model: onnx.ModelProto = graph_model(
        nodes, [tensor_info("x", ["N", 64], dtype)], [tensor_info("y", ["N", 64], dtype)], initializers=[scale]
    )
    return model


def test_fp16_output_is_compared_with_the_fp32_original_cast_per_side(tmp_path: Path, run_cli: RunCli) -> None:
    fp16, fp32 = tanh_model(onnx.TensorProto.FLOAT16), tanh_model(onnx.TensorProto.FLOAT)
    verify = "  - run:\n      cases: [{inputs: {x: [8, 64]}}]\n      compare: {against: fp32.onnx}\n"
    result, report = apply(tmp_path / "default", run_cli, fp16, verify, {"fp32.onnx": fp32})
    assert result.exit_code == 0, result.output  # the fp16 tolerance applies, not fp32's 1e-4
    data = run_data(report)["data"]
    assert data["tolerances"]["float16"] == [1e-2, 1e-3] and data["applied_tolerances"] == {"float16": [1e-2, 1e-3]}
    assert "float16 outputs rtol 0.01, atol 0.001" in result.stdout
    worst = max(o["max_abs"] for row in data["results"] for o in row["outputs"])
    assert 0 < worst < 1e-2  # it did compare values, and fp16 rounding shows


def test_per_dtype_tolerance_can_be_tightened_and_then_fails(tmp_path: Path, run_cli: RunCli) -> None:
    fp16, fp32 = tanh_model(onnx.TensorProto.FLOAT16), tanh_model(onnx.TensorProto.FLOAT)
    verify = (
        "  - run:\n      cases: [{inputs: {x: [8, 64]}}]\n"
        "      compare: {against: fp32.onnx, tolerances: {float16: {rtol: 0, atol: 1.0e-7}}}\n"
    )
    result, _ = apply(tmp_path / "tight", run_cli, fp16, verify, {"fp32.onnx": fp32})
    assert_failed_without_output(tmp_path / "tight", result)
    assert "differs beyond tolerance (rtol 0, atol 1e-07)" in result.output


def test_unknown_dtype_in_tolerances_is_a_spec_error(tmp_path: Path, run_cli: RunCli) -> None:
    verify = "  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n      compare: {tolerances: {flot16: {rtol: 0.1}}}\n"
    result, _ = apply(tmp_path, run_cli, unary_model(), verify)
    assert result.exit_code == 2, result.output
    assert "flot16" in result.output


def test_an_input_can_be_given_its_exact_value(tmp_path: Path, run_cli: RunCli) -> None:
    """sr: {value: 16000}: a model that only runs for certain values of an input (silero's sample rate)."""
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["ok"]),
        helper.make_node("Cast", ["ok"], ["okf"], to=1),
        helper.make_node("Mul", ["x", "okf"], ["y"]),
    ]
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", 4]), tensor_info("sr", [], onnx.TensorProto.INT64)],
        [tensor_info("y", ["N", 4])],
        initializers=[rate],
    )
    scaled = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]
    )
    result, _ = apply(
        tmp_path,
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 16000}}}]\n      compare: {against: ref.onnx}\n",
        {"ref.onnx": scaled},
    )
    assert result.exit_code == 0, result.output  # y == x only when sr is exactly 16000
    result, _ = apply(
        tmp_path / "again",
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 8000}}}]\n      compare: {against: ref.onnx}\n",
        {"ref.onnx": scaled},
    )
    assert result.exit_code == 1, result.output


@pytest.mark.parametrize(
    "item, message",
    [
        ("{value: 1, low: 0}", "'value' gives the values"),
        ("{value: 1, file: a.npy}", "give the values once"),
        ("{value: [1, 2], shape: [2]}", "a list 'value' has its own shape"),
    ],
)
def test_value_cannot_be_combined_with_other_sources(tmp_path: Path, run_cli: RunCli, item: Any, message: str) -> None:
    result, _ = apply(tmp_path, run_cli, unary_model(), f"  - run:\n      cases: [{{inputs: {{x: {item}}}}}]\n")
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_validate_finds_a_missing_file_without_the_model(tmp_path: Path, run_cli: RunCli) -> None:
    """`file:` inputs and reference models are checked by validate: no model is needed to see they are absent."""
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: not-there.onnx\noutput: out/m2.onnx\npatches: []\nverify:\n"
        "  - run:\n      cases: [{inputs: {x: {file: data/x.npy}}}]\n      compare: {against: ref.onnx}\n",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert (
        "spec.yaml:7:35: verify[0] (run) > cases.0.inputs.x.file: data/x.npy does not exist (resolved to "
        in result.output
    )
    assert "compare.against: ref.onnx does not exist" in result.output
    assert "relative to the spec's folder" in result.output


def test_a_failed_run_says_what_value_an_input_needs(tmp_path: Path, run_cli: RunCli) -> None:
    """silero-like: sr compared with 16000 chooses the branch; the other branch cannot run. A case with
    sr 8000 fails, and the failure says what the graph expects of sr."""
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    shape = numpy_helper.from_array(np.array([-1, 7], np.int64), "bad_shape")  # x [N, 4] cannot be [-1, 7]
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])], "then", [], [tensor_info("t", ["N", 4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Reshape", ["x", "bad_shape"], ["e"])], "else", [], [tensor_info("e", ["N", 7])], [shape]
    )
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", 4]), tensor_info("sr", [], onnx.TensorProto.INT64)],
        [tensor_info("y", ["N", 4])],
        initializers=[rate],
    )
    result, _ = apply(
        tmp_path,
        run_cli,
        model,
        "  - run:\n      cases: [{inputs: {x: [2, 4], sr: {value: 8000}}}]\n      compare: {against: none}\n",
    )
    assert result.exit_code == 1, result.output
    assert "input 'sr' is [8000], but Equal" in result.output and "give it {value: 16000}" in result.output
