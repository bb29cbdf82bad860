"""Runs of the original model on onnxruntime's CPU provider, for ``init``'s evidence.

``init`` asks the original itself what the graph alone cannot say: which inputs must share the batch
(a run fails when they differ), and whether it runs at the batch at all (else the run case compares
per sample). Each case is run once; a model onnxruntime cannot load gives no evidence (None).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchspec.ort.sessions import RunFailure, Session, make_feeds

#: case items as a run case writes them: a shape list, or {shape, low, high, value, fill}
Items = dict[str, Any]


@dataclass(frozen=True)
class Ran:
    """One run: the outputs' shapes, or why onnxruntime failed (its message, shortened)."""

    shapes: dict[str, tuple[int, ...]] | None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.shapes is not None


class OriginalRuns:
    """The original model in one CPU session; ``session`` is None when onnxruntime cannot load it."""

    def __init__(self, model_path: Path) -> None:
        self.path = model_path
        self.done: dict[str, Ran] = {}
        self.session: Session | None
        try:
            self.session = Session(model_path, "CPUExecutionProvider", optimization="basic")
        except RunFailure as exc:
            self.session, self.why_not = None, exc.message
        else:
            self.why_not = ""

    def run(self, items: Items) -> Ran | None:
        """The run of one case (cached); None without a session."""
        if self.session is None:
            return None
        key = json.dumps(items, sort_keys=True)
        if key not in self.done:
            self.done[key] = self._run(self.session, items)
        return self.done[key]

    def _run(self, session: Session, items: Items) -> Ran:
        try:
            feeds = make_feeds(items, session.inputs, lambda name: Path(name))
            outputs, _ = session.run(feeds)
        except RunFailure as exc:
            return Ran(None, short(exc.message, str(self.path)))
        except MemoryError:
            return Ran(None, "out of memory")
        return Ran({name: tuple(value.shape) for name, value in outputs.items()})


def short(message: str, path: str, limit: int = 160) -> str:
    """onnxruntime's reason without the provider and the model's path, on one line of ``limit``."""
    text = message.replace(f"onnxruntime failed to run {path}", "").removeprefix("CPUExecutionProvider: ")
    text = " ".join(text.split()).lstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["Items", "OriginalRuns", "Ran", "short"]
