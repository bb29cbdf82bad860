"""The ``run`` verifier's settings a spec may give, with their defaults: plain values, so that
``validate`` and the verifier's schema need neither onnxruntime nor numpy."""

from __future__ import annotations

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
#: graph optimization levels a session can run at, by the name a spec gives them
OPTIMIZATION_LEVELS = ("all", "extended", "basic", "disabled")
#: seconds one run of a session may take before it is stopped (the ``run`` verifier's ``timeout``)
DEFAULT_TIMEOUT = 600.0
#: the most elements one case input (or the lint's probe input) may have (the ``run`` verifier's ``max_elements``): 2**27
#: float32 values are 512 MiB, more than any test input needs and less than a CI machine holds
DEFAULT_MAX_ELEMENTS = 2**27
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
#: (rtol, atol) for outputs whose coarser side has this element type (a patch that casts to fp16);
#: compare.tolerances overrides them, compare.rtol/atol apply to every other output
DTYPE_TOLERANCES = {"float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2)}
#: on a provider other than the CPU, an output may differ from its reference by this many times its
#: measured floor (the original there against the original on the CPU): the output's run and the
#: reference's each carry the provider's error (x2), and the largest of many elements varies from
#: run to run (x2). docs/providers.md shows the figures it was chosen from
FLOOR_FACTOR = 4.0
#: element types from coarse to fine, to pick the coarser side of a comparison
PRECISION = ("bfloat16", "float16", "float32", "float64")

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_PROVIDERS",
    "DEFAULT_RTOL",
    "DEFAULT_TIMEOUT",
    "DTYPE_TOLERANCES",
    "FLOOR_FACTOR",
    "OPTIMIZATION_LEVELS",
    "PRECISION",
]
