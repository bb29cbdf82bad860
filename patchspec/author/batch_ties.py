"""Which other inputs carry the batch, proved by running the original.

tf2onnx and paddle2onnx name each input's batch differently (``unk__6134``, ``unk__6135``), and a
``length`` input may name it yet again, so the graph alone cannot tie them to the batch. The original
can: fed with every input at one batch, it runs at two batch sizes above 1 (never 1, where
broadcasting hides a mismatch); fed with one of them at the other size, it fails. That failure is the
evidence, and it is kept for the spec's comments.

Only axis 0 of an input whose axis 0 is unknown or symbolic is a candidate; states that keep the batch
elsewhere are ``init``'s business (a recurrent op's operand, an output of the same shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from patchspec.author.original_runs import Items, OriginalRuns, Ran

Pair = tuple[str, int]
#: batch sizes tried, the first two that no other axis of the case uses
BATCHES = (2, 3, 5, 7, 11, 13, 17, 19, 23)


@dataclass(frozen=True)
class Tie:
    """An input axis proved to carry the batch, and the run that proved it."""

    name: str
    axis: int
    evidence: str


@dataclass
class BatchEvidence:
    """What the runs showed: the inputs tied to the batch, the sizes of the other axes the original
    ran with, and whether it runs at a batch above 1 at all (None: it could not be run here)."""

    ties: list[Tie] = field(default_factory=list)
    untied: dict[str, str] = field(default_factory=dict)  # candidate input -> why it is not the batch
    shapes: dict[str, list[int]] = field(default_factory=dict)
    batched: bool | None = None
    sizes: tuple[int, int] = (2, 3)


class CaseLayout:
    """Case items for the original: the batch on the given axes, the other sizes fixed."""

    def __init__(self, shapes: dict[str, list[int]], values: dict[str, dict[str, Any]]) -> None:
        self.shapes, self.values = shapes, values

    def items(self, batch: int, axes: Sequence[Pair], off: Pair | None = None, off_size: int = 0) -> Items:
        items: Items = {}
        for name, shape in self.shapes.items():
            sized = list(shape)
            for tensor, axis in axes:
                if tensor == name:
                    sized[axis] = off_size if (tensor, axis) == off else batch
            extra = self.values.get(name, {})
            items[name] = {**extra, "shape": sized} if extra else sized
        return items


def tie_batch(
    runs: OriginalRuns,
    layouts: Sequence[CaseLayout],
    chosen: Sequence[Pair],
    candidates: Sequence[Pair],
) -> BatchEvidence:
    """The candidates the original ties to the batch of ``chosen``, with the first layout it runs with.

    With no candidate and one layout, the runs could change nothing: the original is not run."""
    if not candidates and len(layouts) == 1:
        return BatchEvidence(shapes=layouts[0].shapes)
    if runs.session is None:
        why = (
            f"not tied to the batch: the original was not run ({runs.why_not}); if it is, add it to set_batch's inputs"
        )
        return BatchEvidence(untied={name: why for name, _ in candidates})
    for layout in layouts:
        b1, b2 = _sizes(layout, [*chosen, *candidates])
        for base in (list(candidates), []):
            axes = [*chosen, *base]
            if _ok(runs.run(layout.items(b1, axes))) and _ok(runs.run(layout.items(b2, axes))):
                evidence = BatchEvidence(shapes=layout.shapes, batched=True, sizes=(b1, b2))
                for c in candidates:
                    found = _tie(runs, layout, chosen, base, c, (b1, b2))
                    if isinstance(found, Tie):
                        evidence.ties.append(found)
                    else:
                        evidence.untied[c[0]] = found
                return evidence
    why = "not tied to the batch: the original runs at no batch above 1 here, so no run can tell"
    return BatchEvidence(untied={name: why for name, _ in candidates}, shapes=layouts[0].shapes, batched=False)


def _tie(
    runs: OriginalRuns, layout: CaseLayout, chosen: Sequence[Pair], base: list[Pair], c: Pair, sizes: tuple[int, int]
) -> Tie | str:
    """The tie of ``c`` to the batch, or why it is not the batch."""
    b1, b2 = sizes
    axes = [*chosen, *base, *([] if c in base else [c])]
    if not (_ok(runs.run(layout.items(b1, axes))) and _ok(runs.run(layout.items(b2, axes)))):
        return f"not the batch: the original fails with its axis 0 at the batch ({b1} and {b2})"
    off = runs.run(layout.items(b2, axes, off=c, off_size=b1))
    if off is None or off.ok:
        return f"not tied to the batch: the original runs with its axis 0 at {b1} while the batch is {b2}"
    others = ", ".join(f"{name}[{axis}]" for name, axis in chosen)
    return Tie(
        c[0],
        c[1],
        f"the original runs with it at the batch ({b1} and {b2}) but fails with it at {b1} while the batch ({others}) "
        f"is {b2}: {off.failure}",
    )


def refuted(runs: OriginalRuns, layout: CaseLayout, chosen: Sequence[Pair], extra: Pair) -> str | None:
    """Why ``extra`` is not the batch, when the runs show it: the original runs with ``chosen`` at two
    batches above 1 but fails with ``extra`` there too (a recurrent state whose op keeps a batch of 1)."""
    b1, b2 = _sizes(layout, [*chosen, extra])
    if not all(_ok(runs.run(layout.items(b, chosen))) for b in (b1, b2)):
        return None
    with_it = runs.run(layout.items(b2, [*chosen, extra]))
    if with_it is None or with_it.ok:
        return None
    return f"the original runs at batch {b1} and {b2} without it, and fails with it at {b2}: {with_it.failure}"


def _ok(ran: Ran | None) -> bool:
    return ran is not None and ran.ok


def _sizes(layout: CaseLayout, batch_axes: Sequence[Pair]) -> tuple[int, int]:
    """Two batch sizes above 1 that no other axis of the case has, so that a mismatch is the batch's."""
    used = {
        size
        for name, shape in layout.shapes.items()
        for axis, size in enumerate(shape)
        if (name, axis) not in batch_axes
    }
    free = [size for size in BATCHES if size not in used] + [max(used | {1}) + 1, max(used | {1}) + 2]
    return free[0], free[1]


__all__ = ["BatchEvidence", "CaseLayout", "Tie", "refuted", "tie_batch"]
