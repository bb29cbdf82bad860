"""What the run verifier's tests share: small models, a spec applied with its report, the checks on it."""

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
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
