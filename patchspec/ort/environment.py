"""What ``patchspec env`` reports: versions, ONNX Runtime distributions, execution providers."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from patchspec import __version__

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
    except Exception as exc:
        found["onnxruntime"] = {"error": f"{type(exc).__name__}: {exc}"}
    return found


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
    return lines
