"""Runs of the original model on onnxruntime's CPU provider, for ``init``'s evidence.

``init`` asks the original itself what the graph alone cannot say: which inputs must share the batch
(a run fails when they differ), and whether it runs at the batch at all (else the run case compares
per sample); ``derive`` asks A and B the sizes they were traced at. Each case is run once. A model
onnxruntime cannot load, or whose weights are over ``RUN_LIMIT_BYTES`` (reading them would cost more
than the rest of the command), gives no evidence (None), and the caller says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from patchspec.model.graph import all_graphs
from patchspec.ort.run.feeds import make_feeds
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import Session

#: the original is run only when its weights are at most this large (1 GiB)
RUN_LIMIT_BYTES = 1 << 30

#: case items as a run case writes them: a shape list, or {shape, low, high, value, fill}
Items = dict[str, Any]


@dataclass(frozen=True)
class Ran:
    """One run: the outputs' shapes, or why onnxruntime failed (its message, shortened)."""

    shapes: dict[str, tuple[int, ...]] | None
    failure: str | None = None
    node: str | None = None  # the node onnxruntime named in its failure, if any

    @property
    def ok(self) -> bool:
        return self.shapes is not None


class OriginalRuns:
    """The original model in one CPU session, built on the first run that needs it (most models
    need none: building it costs more than set_batch's evaluation on a 56,000-node graph, and
    onnxruntime holds its own copy of the weights); ``session`` is None when onnxruntime cannot load it."""

    def __init__(self, model_path: Path, graph: onnx.ModelProto | None = None) -> None:
        """``graph``: the model as read (weights not loaded), to measure them before a session loads them."""
        self.path = model_path
        self.done: dict[str, Ran] = {}
        self._size = weight_bytes(graph) if graph is not None else 0
        self._built = False
        self._session: Session | None = None
        self._why_not = ""
        #: onnxruntime's reason when it tried to load the original and could not ("" otherwise)
        self.load_failure = ""

    @property
    def session(self) -> Session | None:
        """The session (built now if it is not yet), or None: ``why_not`` says why."""
        if not self._built:
            self._built = True
            self._session, self._why_not = self._build()
        return self._session

    @property
    def why_not(self) -> str:
        """Why the original cannot be run here ("" when it can); builds the session to know."""
        return self._why_not if self.session is None else ""

    def _build(self) -> tuple[Session | None, str]:
        if self._size > RUN_LIMIT_BYTES:
            return None, (
                f"its weights ({self._size / 2**30:.1f} GiB) are over the {RUN_LIMIT_BYTES >> 30} GiB patchspec runs here"
            )
        try:
            # the graph as exported, no optimizer pass: whether it runs at a size is all that is asked,
            # and a 56,000-node LLM graph builds its session in half the time (init: 13.9 s -> 7.1 s CPU)
            return Session(self.path, "CPUExecutionProvider", optimization="disabled"), ""
        except RunFailure as exc:
            self.load_failure = exc.message
            return None, exc.message

    def run(self, items: Items) -> Ran | None:
        """The run of one case (cached); None without a session."""
        session = self.session
        if session is None:
            return None
        key = json.dumps(items, sort_keys=True)
        if key not in self.done:
            self.done[key] = self._run(session, items)
        return self.done[key]

    def _run(self, session: Session, items: Items) -> Ran:
        try:
            feeds = make_feeds(items, session.inputs, lambda name: Path(name))
            outputs, _ = session.run(feeds)
        except RunFailure as exc:
            return Ran(None, short(exc), exc.node)
        except MemoryError:
            return Ran(None, "out of memory")
        # outputs are arrays: a ZipMap's sequence of maps comes as one row per element (Session.run)
        return Ran({name: tuple(int(d) for d in value.shape) for name, value in outputs.items()})


def weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of every initializer, stored in the file or outside it, from dims and types alone."""
    total = 0
    for graph in all_graphs(model.graph):
        for tensor in graph.initializer:
            try:
                item = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
            except (KeyError, TypeError, ValueError):  # strings, undefined: no fixed size
                continue
            total += int(np.prod(tensor.dims, dtype=np.int64)) * item
    return total


#: onnxruntime's framing around the reason: its error code, the node (said once already), the source line
_BOILERPLATE = re.compile(
    r"\[ONNXRuntimeError\] : \d+ : \w+ : |Non-zero status code returned while running \w+ node\. "
    r"Name:'[^']*' Status Message: |/\S+\.(?:cc|h):\d+ (?:[\w:<>,* ]+\([^)]*\) )?"
)


def short(failure: RunFailure, limit: int = 200) -> str:
    """onnxruntime's reason (the failure's ``detail`` and ``node``, without its own framing) on one line."""
    text = " ".join(_BOILERPLATE.sub("", failure.detail).split()).lstrip(": ")
    if failure.node:
        text = f"at node '{failure.node}': {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["RUN_LIMIT_BYTES", "Items", "OriginalRuns", "Ran", "short", "weight_bytes"]
