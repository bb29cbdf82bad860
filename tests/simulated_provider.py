"""A simulated accelerator for the tests: CUDAExecutionProvider as onnxruntime-gpu runs it on an
Ampere-or-later GPU, on a machine without one.

The seam is onnxruntime's own ``InferenceSession``, where patchspec builds every session
(``patchspec.ort.sessions.build_session``): the ``simulated_cuda`` fixture (tests/conftest.py)
lists the provider as available and gives it sessions that run on the CPU provider, then carry
the provider's arithmetic on every floating output: a relative error of 0.5e-3 to 1e-3 per element
(TF32's 10-bit mantissa) whose pattern depends on the batch size (cuDNN picks another algorithm at
another batch), or 0.5e-7 to 1e-7 (float32 rounding) when the session got ``use_tf32: 0``. Product
code is not touched.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SIMULATED = "CUDAExecutionProvider"
#: the relative error of one output element, with TF32 matrix math and with float32 throughout
FAST, EXACT = 1e-3, 1e-7


@dataclass
class SimulatedGpu:
    """What the fixture gives a test: the options each simulated session was built with."""

    sessions: list[dict[str, str]] = field(default_factory=list)
    #: how many times the usual error a run at a batch above 1 carries (a test of drift at a batch)
    batched_scale: float = 1.0

    def fast(self, options: dict[str, str]) -> bool:
        """TF32 is on unless the session was told ``use_tf32: 0``, as onnxruntime-gpu does on Ampere+."""
        return options.get("use_tf32", "1") not in ("0", "false", "False")


class SimulatedSession:
    """One session on the simulated provider: a CPU session whose outputs carry the provider's error."""

    def __init__(self, real: Any, options: dict[str, str], gpu: SimulatedGpu) -> None:
        self._real = real
        self._relative = FAST if gpu.fast(options) else EXACT
        self._gpu = gpu
        gpu.sessions.append(dict(options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_providers(self) -> list[str]:
        return [SIMULATED, "CPUExecutionProvider"]

    def run(self, names: Any, feeds: dict[str, np.ndarray], run_options: Any = None) -> list[Any]:
        values = self._real.run(names, feeds, run_options)
        batch = next((int(array.shape[0]) for array in feeds.values() if np.ndim(array)), 1)
        return [self._perturb(index, batch, value) for index, value in enumerate(values)]

    def _perturb(self, index: int, batch: int, value: Any) -> Any:
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating) or not value.size:
            return value
        seed = zlib.crc32(f"{batch}:{index}:{value.shape}".encode())  # the same run, the same error
        rng = np.random.default_rng(seed)
        size = rng.uniform(0.5, 1.0, value.shape) * rng.choice([-1.0, 1.0], value.shape)
        relative = self._relative * (self._gpu.batched_scale if batch > 1 else 1.0)
        return (value * (1.0 + relative * size)).astype(value.dtype)


def install(monkeypatch: Any) -> SimulatedGpu:
    """Make onnxruntime offer the simulated provider for the rest of the test."""
    import onnxruntime

    from patchspec.ort import environment

    gpu = SimulatedGpu()
    real_session = onnxruntime.InferenceSession
    available = [SIMULATED, *(p for p in onnxruntime.get_available_providers() if p != SIMULATED)]

    def session(source: Any, sess_options: Any = None, providers: Any = None, **kwargs: Any) -> Any:
        chosen = list(providers or ["CPUExecutionProvider"])
        first = chosen[0]
        name, options = first if isinstance(first, tuple) else (first, {})
        if name != SIMULATED:
            return real_session(source, sess_options=sess_options, providers=chosen, **kwargs)
        real = real_session(source, sess_options=sess_options, providers=["CPUExecutionProvider"], **kwargs)
        return SimulatedSession(real, {str(k): str(v) for k, v in options.items()}, gpu)

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: list(available))
    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    monkeypatch.setattr(onnxruntime, "get_device", lambda: "GPU")  # what onnxruntime-gpu says
    monkeypatch.setattr(onnxruntime, "get_ep_devices", lambda: [], raising=False)  # as onnxruntime-gpu 1.31 lists
    # the simulated GPU is no GPU of the driver's, on a machine with an NVIDIA GPU too
    monkeypatch.setattr(environment, "NVIDIA_PROC", Path("/nonexistent/proc/driver/nvidia/gpus"))
    return gpu
