"""What ``patchspec env`` reports: versions, ONNX Runtime distributions, execution providers."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from patchspec import __version__
from patchspec.ort.providers import CPU, PROVIDERS

#: distributions that all install the same ``onnxruntime`` module; the last installed wins
ORT_DISTRIBUTIONS = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-directml",
    "onnxruntime-openvino",
    "onnxruntime-qnn",
    "onnxruntime-silicon",
    "onnxruntime-training",
    "ort-nightly",
    "ort-nightly-gpu",
)


def installed_ort_distributions() -> dict[str, str]:
    found = {}
    for name in ORT_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def environment() -> dict[str, Any]:
    """What ``patchspec env`` reports, as data (``env --json`` prints it)."""
    import onnx

    found: dict[str, Any] = {
        "patchspec": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "onnx": {"version": onnx.__version__, "ir_version": onnx.IR_VERSION, "opset": onnx.defs.onnx_opset_version()},
        "onnxruntime_distributions": installed_ort_distributions(),
    }
    try:
        import onnxruntime

        found["onnxruntime"] = {
            "version": onnxruntime.__version__,
            "module": onnxruntime.__file__,
            "providers": list(onnxruntime.get_available_providers()),
        }
        found["onnxruntime"]["devices"] = {p: device_name(p) for p in found["onnxruntime"]["providers"]}
    except Exception as exc:
        found["onnxruntime"] = {"error": f"{type(exc).__name__}: {exc}"}
    return found


def device_name(provider: str, options: Mapping[str, str] | None = None) -> str | None:
    """The device a session on ``provider`` runs on, as onnxruntime names it (its execution-provider
    devices, onnxruntime >= 1.22: the vendor and the device's own description where it gives one),
    the ``device_id``-th of that provider's devices; else ``onnxruntime.get_device()`` (``GPU``) for
    an accelerator of the providers table; None when onnxruntime says nothing."""
    try:
        from patchspec.ort.sessions import quiet_onnxruntime

        onnxruntime = quiet_onnxruntime()  # listing devices may start onnxruntime's logging environment
        devices = [d for d in getattr(onnxruntime, "get_ep_devices", list)() if d.ep_name == provider]
        index = int((options or {}).get("device_id", 0))
        if 0 <= index < len(devices):
            return _describe(devices[index].device)
        general = onnxruntime.get_device()  # "GPU" for an onnxruntime-gpu build, whatever the provider
        if provider == CPU or provider not in PROVIDERS or general == "CPU":
            return None
        nvidia = nvidia_gpu_name(index) if provider in NVIDIA_PROVIDERS else None
        return nvidia or f"{general} (onnxruntime.get_device())"
    except Exception:  # a name for the report only: never a reason to fail
        return None


#: the providers whose device_id counts the NVIDIA driver's GPUs
NVIDIA_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
#: where the NVIDIA driver describes each GPU on Linux, one folder per PCI address (what nvidia-smi reads)
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")


def nvidia_gpu_name(index: int) -> str | None:
    """``NVIDIA H100 80GB HBM3 (/proc/driver/nvidia, device_id 0)``: the ``index``-th GPU in PCI order, as
    CUDA counts them with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; None where the driver says nothing, or where
    ``CUDA_VISIBLE_DEVICES`` or another order makes the mapping a guess (onnxruntime's own devices come first)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID") != "PCI_BUS_ID":
        return None
    try:
        gpus = sorted(NVIDIA_PROC.iterdir())
        if len(gpus) > 1 and "CUDA_DEVICE_ORDER" not in os.environ:  # CUDA's default order is fastest first
            return None
        lines = (gpus[index] / "information").read_text(errors="replace").splitlines()
    except (OSError, IndexError):
        return None
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model:")), "")
    return f"{model} (/proc/driver/nvidia, device_id {index})" if model else None


def _describe(device: Any) -> str:
    metadata = dict(getattr(device, "metadata", {}) or {})
    described = next((metadata[k] for k in ("Description", "DeviceName", "Name", "name") if metadata.get(k)), "")
    kind = str(getattr(device, "type", "")).rsplit(".", 1)[-1].split(":")[0]
    ids = f"vendor 0x{int(device.vendor_id):04x}, device 0x{int(device.device_id):04x}"
    return " ".join(part for part in (str(getattr(device, "vendor", "")), described or kind) if part) + f" ({ids})"


def environment_lines() -> list[str]:
    found = environment()
    onnx_info = found["onnx"]
    lines = [
        f"patchspec {found['patchspec']}",
        f"python {found['python']} ({found['platform']})",
        f"onnx {onnx_info['version']} (IR version {onnx_info['ir_version']}, opset {onnx_info['opset']})",
    ]
    dists = found["onnxruntime_distributions"]
    for name, version in dists.items():
        lines.append(f"{name} {version} (distribution)")
    if len(dists) > 1:
        lines.append(
            f"warning: {len(dists)} ONNX Runtime distributions share the 'onnxruntime' module; the last "
            f"installed silently wins. Keep one: pip uninstall {' '.join(n for n in dists if n != 'onnxruntime')}"
            " or onnxruntime"
        )
    ort = found["onnxruntime"]
    if "error" in ort:
        lines.append(f"onnxruntime: not importable ({ort['error']})")
    else:
        lines.append(f"onnxruntime module {ort['version']} from {ort['module']}")
        lines.append("execution providers: " + ", ".join(ort["providers"]))
        lines += [f"  {provider} on {name}" for provider, name in ort["devices"].items() if name]
    return lines
