"""How far the original itself moves between onnxruntime's optimization levels, for ``init``'s tolerances.

The run verifier compares the patched model with the original at each optimization level, and calls a
reference that differs from itself between levels "unstable" (then the comparison proves nothing, and
the run fails). Random inputs make some models' outputs ill-conditioned: a Keras RNN read through a
tf2onnx Loop moves by 1.5e-4 between levels, above the default tolerance. ``init`` runs the original
on the case's inputs at both levels once, and writes, for each float output that moves more than the
defaults allow, the tolerance the verifier itself would suggest (twice the difference, one digit).
Only where that difference is small beside the output itself (at most ``MOST`` of its largest value): a
model that moves by as much as it outputs (dynamic quantization, whose scales the optimizer fuses
otherwise) would pass any patch under such a tolerance, so there the verifier says the reference is
unstable, and init does not write the samples' coupling away (a dynamically quantized T5 decoder: atol 200).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from patchspec.author.original_runs import OriginalRuns
from patchspec.ort.run.comparison import compare_output
from patchspec.ort.run.feeds import make_feeds
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Session
from patchspec.ort.settings import DEFAULT_ATOL, DEFAULT_RTOL, DTYPE_TOLERANCES

#: the largest difference, as a share of the output's largest magnitude, that is taken as the original's noise
MOST = 0.01


def own_noise(runs: OriginalRuns, items: dict[str, Any]) -> dict[str, float]:
    """Per float output of the original that differs between optimization levels beyond the default
    tolerance on the case ``items``: the atol to write (twice the difference, one digit). Empty when
    nothing moves, or when the original cannot run the case (the caller compares per sample then).
    ``runs``: init's session of the original (optimizations disabled); only the optimized one is built here."""
    if runs.session is None or any(isinstance(item, dict) and "file" in item for item in items.values()):
        return {}  # no session, or the user's own values: not known yet
    outcomes = []
    for session in (runs.session, None):
        try:
            session = session or Session(runs.path, "CPUExecutionProvider", optimization="all")
            outputs, _ = session.run(make_feeds(items, session.inputs, Path))
        except (RunFailure, MemoryError):
            return {}
        outcomes.append(outputs)
    noise = {}
    for name, plain in outcomes[0].items():
        optimized = outcomes[1].get(name)
        array = np.asarray(plain)
        if optimized is None or array.dtype.kind != "f":
            continue
        rtol, atol = DTYPE_TOLERANCES.get(str(array.dtype), (DEFAULT_RTOL, DEFAULT_ATOL))
        check = compare_output(name, np.asarray(optimized), array, rtol, atol)
        scale = float(np.max(np.abs(array[np.isfinite(array)]), initial=0.0))
        if not check.passed and np.isfinite(check.max_abs) and check.max_abs <= MOST * scale:
            noise[name] = float(f"{check.max_abs * 2:.1g}")
    return noise


__all__ = ["own_noise"]
