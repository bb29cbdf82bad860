"""Each provider's exact-math settings, the spec's options on top, and the floor's arithmetic."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from patchspec.ort import environment
from patchspec.ort.environment import device_name
from patchspec.ort.providers import PROVIDERS, option_value, provider_option_problems, provider_setup
from patchspec.ort.run.comparison import compare_output
from patchspec.ort.settings import FLOOR_FACTOR

REPO = Path(__file__).resolve().parents[2]


def test_cuda_gets_exact_math_by_default_and_the_spec_can_keep_tf32_on() -> None:
    default = provider_setup("CUDAExecutionProvider")
    assert default.options == {"use_tf32": "0"} and default.exact and default.measures_floor
    assert default.math == "float32, exact math (use_tf32 0)"
    fast = provider_setup("CUDAExecutionProvider", {"use_tf32": True, "device_id": 1})
    assert fast.options == {"use_tf32": "1", "device_id": "1"} and not fast.exact
    assert fast.fast_options == {"use_tf32": "1"} and fast.math.startswith("fast math kept on (use_tf32 1): TF32")
    same = provider_setup("CUDAExecutionProvider", {"use_tf32": 0})
    assert same.exact and same.fast_options == {}


@pytest.mark.parametrize(
    "provider, exact",
    [
        ("CPUExecutionProvider", True),
        ("OpenVINOExecutionProvider", True),
        ("TensorrtExecutionProvider", False),
        ("DmlExecutionProvider", False),
        ("CoreMLExecutionProvider", False),
        ("MyNpuExecutionProvider", False),
    ],
)
def test_a_provider_without_an_exact_mode_says_so_and_gets_the_floor(provider: str, exact: bool) -> None:
    setup = provider_setup(provider)
    assert setup.exact is exact
    assert setup.measures_floor is (provider != "CPUExecutionProvider")
    if not exact:
        assert setup.math.startswith("no exact mode: ")


def test_null_leaves_an_exact_math_setting_out_for_an_onnxruntime_that_does_not_take_it() -> None:
    setup = provider_setup("OpenVINOExecutionProvider", {"precision": None, "device_type": "GPU"})
    assert setup.options == {"device_type": "GPU"} and not setup.exact
    assert setup.math.startswith("fast math kept on (precision null): FP16")


def test_trt_gets_fp16_and_int8_off() -> None:
    assert provider_setup("TensorrtExecutionProvider").options == {"trt_fp16_enable": "0", "trt_int8_enable": "0"}


@pytest.mark.parametrize("value, text", [(True, "1"), (False, "0"), (2, "2"), (0.5, "0.5"), ("HEURISTIC", "HEURISTIC")])
def test_yaml_values_become_onnxruntime_strings(value: Any, text: str) -> None:
    assert option_value(value) == text


def test_option_problems_name_the_key_path_with_did_you_mean() -> None:
    providers = ["CPUExecutionProvider", "CUDAExecutionProvider"]
    found = list(
        provider_option_problems(
            {
                "CUDAExecutionProvider": {"use_tf23": 1, "device_id": 0, "sdpa_kernel": 1},
                "DmlExecutionProvider": {"device_id": 0},
            },
            providers,
        )
    )
    assert found == [
        (
            ("provider_options", "CUDAExecutionProvider", "use_tf23"),
            "unknown CUDAExecutionProvider option 'use_tf23' (did you mean 'use_tf32'?)",
        ),
        (
            ("provider_options", "DmlExecutionProvider"),
            "provider_options names 'DmlExecutionProvider', which is not in providers "
            "(CPUExecutionProvider, CUDAExecutionProvider)",
        ),
    ]


def test_docs_table_is_the_code_table() -> None:
    """docs/providers.md shows every provider of PROVIDERS with its exact-math settings and a source."""
    text = (REPO / "docs" / "providers.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+ExecutionProvider)`.*$", text, re.M)}
    assert set(PROVIDERS) <= set(rows), sorted(set(PROVIDERS) - set(rows))
    for name, table in PROVIDERS.items():
        row = rows[name]
        for option, value in table.exact.items():
            assert f"`{option}: {value}`" in row, (name, option)
        assert ("| yes" in row) is table.has_exact_mode, name
        assert "http" in row, f"{name}: no source"


def test_device_name_is_none_or_what_onnxruntime_says(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    assert device_name("CPUExecutionProvider") is None or "CPU" in str(device_name("CPUExecutionProvider"))
    monkeypatch.setattr(onnxruntime, "get_ep_devices", lambda: [], raising=False)
    monkeypatch.setattr(onnxruntime, "get_device", lambda: "GPU")
    monkeypatch.setattr(environment, "NVIDIA_PROC", Path("/nonexistent/nvidia/gpus"))  # an NVIDIA machine too
    assert device_name("CUDAExecutionProvider") == "GPU (onnxruntime.get_device())"
    assert device_name("CPUExecutionProvider") is None


def test_an_nvidia_gpu_is_named_as_its_driver_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """onnxruntime-gpu 1.31 lists no device for CUDA (measured on an H100): the driver's name stands in."""
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_ep_devices", lambda: [], raising=False)
    monkeypatch.setattr(onnxruntime, "get_device", lambda: "GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(environment, "NVIDIA_PROC", tmp_path)
    gpu = tmp_path / "0000:19:00.0"
    gpu.mkdir()
    (gpu / "information").write_text("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:\t\t 42\n")
    assert device_name("CUDAExecutionProvider") == "NVIDIA H100 80GB HBM3 (/proc/driver/nvidia, device_id 0)"
    assert device_name("CUDAExecutionProvider", {"device_id": "1"}) == "GPU (onnxruntime.get_device())"
    (tmp_path / "0000:2a:00.0").mkdir()  # two GPUs: CUDA counts fastest first unless told the PCI order
    assert device_name("CUDAExecutionProvider") == "GPU (onnxruntime.get_device())"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert device_name("CUDAExecutionProvider").startswith("NVIDIA H100")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a renumbering: no guess
    assert device_name("CUDAExecutionProvider") == "GPU (onnxruntime.get_device())"


def test_the_floor_widens_the_tolerance_by_its_factor_and_no_more() -> None:
    expected = np.array([[1.0, -2.0, 100.0]], np.float32)
    near = expected + np.float32(3.9e-3)
    assert not compare_output("y", near, expected, 1e-4, 1e-5).passed
    assert compare_output("y", near, expected, 1e-4, 1e-5, floor=1e-3).passed
    assert FLOOR_FACTOR == 4
    beyond = compare_output("y", expected + np.float32(4.2e-3), expected, 1e-4, 1e-5, floor=1e-3)
    assert not beyond.passed and "floor 4 x 0.001" in beyond.message and beyond.floor == 1e-3
    swapped = compare_output("y", expected[:, ::-1].copy(), expected, 1e-4, 1e-5, floor=1e-3)
    assert not swapped.passed
