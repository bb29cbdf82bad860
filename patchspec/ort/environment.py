"""What ``patchspec env`` reports: versions, ONNX Runtime distributions, execution providers."""

from __future__ import annotations

import platform
from importlib import metadata

from patchspec import __version__

#: distributions that all install the same ``onnxruntime`` module; the last installed wins
ORT_DISTRIBUTIONS = (
    "onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
    "onnxruntime-qnn", "onnxruntime-silicon", "onnxruntime-training", "ort-nightly", "ort-nightly-gpu",
)


def installed_ort_distributions() -> dict[str, str]:
    found = {}
    for name in ORT_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def environment_lines() -> list[str]:
    import onnx

    lines = [
        f"patchspec {__version__}",
        f"python {platform.python_version()} ({platform.system()} {platform.machine()})",
        f"onnx {onnx.__version__} (IR version {onnx.IR_VERSION}, opset {onnx.defs.onnx_opset_version()})",
    ]
    dists = installed_ort_distributions()
    for name, version in dists.items():
        lines.append(f"{name} {version} (distribution)")
    if len(dists) > 1:
        lines.append(f"warning: {len(dists)} ONNX Runtime distributions share the 'onnxruntime' module; the last "
                     f"installed silently wins. Keep one: pip uninstall {' '.join(n for n in dists if n != 'onnxruntime')}"
                     " or onnxruntime")
    try:
        import onnxruntime

        lines.append(f"onnxruntime module {onnxruntime.__version__} from {onnxruntime.__file__}")
        lines.append("execution providers: " + ", ".join(onnxruntime.get_available_providers()))
    except Exception as exc:
        lines.append(f"onnxruntime: not importable ({type(exc).__name__}: {exc})")
    return lines
