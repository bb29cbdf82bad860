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


def batch_axis_of(arrays: list[np.ndarray], batched_shape: tuple[int, ...] | None) -> int:
    """The axis an output carries the batch on, read off the batched model's output (its shape
    ``batched_shape``) against one sample's: the one axis where each sample holds one row, the batch
    holds all the samples' and every other dim is the sample's. Axis 0 where the batched output does not say (its run
    failed) or says nothing unique; the spec's ``split_batch: {outputs: {NAME: AXIS}}`` overrides."""
    if batched_shape is None or not arrays:
        return 0
    sample, count = arrays[0].shape, len(arrays)
    if len(batched_shape) == len(sample) + 1:  # the export squeezed the batch away: stacked
        fits = [
            a
            for a in range(len(batched_shape))
            if batched_shape[a] == count and tuple(batched_shape[:a] + batched_shape[a + 1 :]) == sample
        ]
    elif len(batched_shape) == len(sample):
        fits = [a for a in range(len(sample)) if _joins_on(arrays, batched_shape, a)]
    else:
        return 0
    return 0 if 0 in fits or len(fits) != 1 else fits[0]


def _joins_on(arrays: list[np.ndarray], batched_shape: tuple[int, ...], axis: int) -> bool:
    """Whether ``axis`` is a batch axis the samples' outputs join on: each sample holds one row there
    (a sample's 192 rows are no batch axis: a model that left its batch constant at 1 and put every
    sample's rows in one has the same shape there), and concatenated they have the batched shape."""
    if any(array.ndim != len(batched_shape) or array.shape[axis] != 1 for array in arrays):
        return False
    others = [tuple(d for i, d in enumerate(array.shape) if i != axis) for array in arrays]
    wanted = tuple(d for i, d in enumerate(batched_shape) if i != axis)
    return all(o == wanted for o in others) and sum(a.shape[axis] for a in arrays) == batched_shape[axis]


def join(name: str, arrays: list[np.ndarray], axis: int | None, batched_shape: tuple[int, ...] | None) -> np.ndarray:
    """The samples' outputs joined along ``axis`` (None: the axis the batched output says, see
    ``batch_axis_of``), stacked where one sample's output has lost the batch axis."""
    if axis is None:
        axis = batch_axis_of(arrays, batched_shape)
    rank = arrays[0].ndim
    stack = batched_shape is not None and len(batched_shape) == rank + 1
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


__all__ = ["batch_axis_of", "first_copy", "join", "split_hint"]
