"""How ``split_batch`` joins the reference's per-sample outputs, and what it says when it cannot."""

from __future__ import annotations

from collections import Counter

import numpy as np

from patchspec.ort.run_failure import RunFailure


def split_hint(feeds: dict[str, np.ndarray], sizes: dict[str, int], bad_axes: list[str]) -> str:
    """The split_batch entry for the inputs off the commonest size: the axis where each has that size
    (a state's batch on axis 1), else null (given whole)."""
    counts = Counter(sizes.values())
    batch = max(counts, key=lambda size: (counts[size], size)) if counts else None
    odd = [*bad_axes, *(name for name, size in sizes.items() if size != batch)]
    axes = {name: next((a for a, n in enumerate(feeds[name].shape) if n == batch), None) for name in odd}
    entries = ", ".join(f"{name}: {'null' if axis is None else axis}" for name, axis in axes.items())
    return (
        "give each input's batch axis (a number), or null for one without the batch (given whole): "
        f"split_batch: {{inputs: {{{entries}}}}}"
    )


def first_copy(name: str, value: np.ndarray, axis: int, copies: int) -> np.ndarray:
    """The first of ``copies`` copies of one sample along ``axis`` of an output."""
    if not -value.ndim <= axis < value.ndim or value.shape[axis] != copies:
        msg = (
            f"split_batch runs the reference at its fixed batch of {copies} (each sample repeated), but its "
            f"output '{name}' has shape {list(value.shape)}, not {copies} on axis {axis}"
        )
        raise RunFailure(msg, f"give its batch axis: split_batch: {{outputs: {{{name}: AXIS}}}}")
    return np.take(value, [0], axis=axis)


def join(name: str, arrays: list[np.ndarray], axis: int, batched_rank: int | None) -> np.ndarray:
    rank = arrays[0].ndim
    stack = batched_rank == rank + 1  # the export squeezed the batch away: one sample has no batch axis
    joined_rank = rank + 1 if stack else rank
    if not -joined_rank <= axis < joined_rank:
        what = "a scalar" if rank == 0 else f"rank {rank}"
        msg = f"split_batch cannot join output '{name}' along axis {axis}: per sample it is {what}"
        raise RunFailure(msg, f"give its batch axis: split_batch: {{outputs: {{{name}: AXIS}}}}")
    try:
        return np.stack(arrays, axis=axis) if stack else np.concatenate(arrays, axis=axis)
    except ValueError as exc:
        msg = f"split_batch cannot join output '{name}' along axis {axis}: {exc}"
        raise RunFailure(msg, f"give its batch axis: split_batch: {{outputs: {{{name}: AXIS}}}}") from None


__all__ = ["first_copy", "join", "split_hint"]
