"""How set_batch walks the model: as exported, again after each repair, and with the batch's other names.

``follow_batch`` gives the walk set_batch acts on (a dynamic batch that runs as it is is left alone);
``Repairs`` changes what a walk proves must change before any constant is decided (a Reshape that is
a transpose at batch 1, a Loop state of one sample, an output flattened with the batch) and walks the
model again; ``other_batch_names`` finds inputs that carry the batch under another dim name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from patchspec import api

if TYPE_CHECKING:  # annotations only: onnx is imported where a model is patched
    import onnx

    #: a walk of the model and the note when it does not run at batch 1 (``follow_batch``)
    _Followed = tuple[api.BatchTrace, str | None]

#: Reshapes made Transposes and Loop states tiled at most (each round walks the model again: a Reshape
#: that a folded one upstream hid is found in the next)
MOST_REPAIRS = 32


@dataclass
class Repairs:
    """What set_batch changes in the graph before it decides the constants, each change followed by a new
    walk: Reshapes that are a transpose at batch 1, Loop states of one sample, flattened outputs."""

    label: str  # names the new constants and nodes (``batch_4``)
    follow: Callable[[], _Followed]  # walks the model as it now is
    reshaped: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    ordered: list[str] = field(default_factory=list)

    def make(self, model: onnx.ModelProto, followed: _Followed) -> _Followed:
        """Repair ``model`` where the walk ``followed`` says, walking it again after each round; the last walk.

        A walk that refused, left a point undecided or lost an output may have met a graph whose nodes are out of order
        (onnxruntime runs it, onnx's checker refuses it, the walk reads a name before its node makes it):
        the nodes are put in order and the model walked again (looked for only then: 0.2 s at 56,000 nodes)."""
        trace = followed[0]
        lost = any(trace.ranks(info.name)[1] is None for info in model.graph.output)
        moved = api.sort_nodes(model.graph) if trace.refusals or trace.undecided or lost else 0
        if moved:
            self.ordered.append(
                f"put the graph's nodes in the order they run ({moved} moved): the export wrote some before what they read"
            )
            followed = self.follow()
            trace = followed[0]
        while (trace.transposes or trace.loop_states) and len(self.reshaped + self.states) < MOST_REPAIRS:
            self.reshaped += api.transpose_batch_reshapes(model, trace.transposes)
            self.states += api.tile_inputs(model, trace.loop_states, self.label)
            followed = self.follow()
            trace = followed[0]
        flattened = [] if trace.refusals else api.keep_flattened_batch(model, trace.flattens)
        if flattened:  # the outputs' shapes changed: follow the batch through the model as it now is
            self.reshaped += flattened
            followed = self.follow()
        return followed

    def count(self) -> str:
        """``, 3 Reshapes changed to keep samples apart, 1 Loop state repeated to the batch``, or ''."""
        text = f", {len(self.reshaped)} Reshape{'s' * (len(self.reshaped) != 1)} changed to keep samples apart"
        states = f", {len(self.states)} Loop state{'s' * (len(self.states) != 1)} repeated to the batch"
        return text * bool(self.reshaped) + states * bool(self.states)


def follow_batch(
    model: onnx.ModelProto,
    batch: api.BatchAxes,
    inputs: dict[str, onnx.ValueInfoProto],
    b2: int,
    symbolic: bool,
    decided: api.BatchTrace | None = None,
) -> tuple[api.BatchTrace, str | None]:
    """The trace set_batch acts on, and a note when the model as exported does not run at batch 1.

    A batch that is already dynamic was exported to run at any batch: when the model runs at the new
    one as it is, no constant is touched (at batch 1 a channel of 1 looks like the batch; only a model
    that fails, or runs without carrying the batch through (``api.not_as_exported``), is decided
    constant by constant). An export traced at a batch above 1 may not run at 1 (hummingbird's
    ``Squeeze`` without axes drops the batch there, and a ``Transpose`` after it fails): when it
    cannot run at batch 1 and runs from batch 2 to the new one as it is (every output evaluated at
    every point, nothing refused), that is the model the user has, and the note says where batch 1
    fails. One that runs at batch 1 and mixes samples above it (traced at 1) is refused as before."""
    dims = [(api.read_dims(inputs[name]) or [0])[axis] for name, axis in batch.axes]
    if all(not isinstance(dim, int) for dim in dims):
        names = {d for d in dims if isinstance(d, str)}
        as_is = api.trace_batch(model, batch.axes, batch.old_size, b2, symbolic=symbolic, decide=False)
        if not as_is.refusals and not api.not_as_exported(model, as_is, names):
            return (as_is if not as_is.coupled else _uncoupled(model, batch, b2, symbolic, as_is)), None
        fails_at_one = any(as_is.at(info.name)[0].shape is None for info in model.graph.output)
        if batch.old_size == 1 and as_is.refusals and fails_at_one:  # batch 2 itself: judged from 2 and 8
            from_two = api.trace_batch(model, batch.axes, 2, b2 if b2 > 2 else 8, symbolic=symbolic, decide=False)
            runs = all(from_two.reached(info.name, everywhere=True) for info in model.graph.output)
            if runs and not from_two.refusals and not api.not_as_exported(model, from_two, names):
                return from_two, _not_at_one(as_is)
    if decided is not None:  # traced with these axes already (other_batch_names)
        return decided, None
    return api.trace_batch(model, batch.axes, batch.old_size, b2, symbolic=symbolic), None


def _uncoupled(
    model: onnx.ModelProto, batch: api.BatchAxes, b2: int, symbolic: bool, as_is: api.BatchTrace
) -> api.BatchTrace:
    """A dynamic batch whose samples an op couples as exported: where a constant baked at the exported batch
    causes it (a Reshape's ``[1, -1, C]`` folds the batch beside a sequence a mean then runs over), the walk
    that decides the constants couples fewer and refuses nothing; that walk, else ``as_is``."""
    decided = api.trace_batch(model, batch.axes, batch.old_size, b2, symbolic=symbolic)
    fewer = len(decided.coupled) < len(as_is.coupled) and decided.rewrites
    return decided if fewer and not decided.refusals and not decided.undecided else as_is


def _not_at_one(as_is: api.BatchTrace) -> str:
    """Where the model as exported stops at batch 1 (the evaluation's first point)."""
    node = as_is.evaluator.stopped_at(0) if as_is.evaluator is not None else None
    if node is None:
        return f"as exported, the model does not run at batch 1: {as_is.refusals[0]}"
    shapes = ", ".join(str(list(as_is.at(name)[0].shape or ())) for name in node.input if name)
    where = f"{node.op_type} '{node.name or node.output[0]}' cannot take its inputs there ({shapes})"
    return f"as exported, the model does not run at batch 1: {where}; it was judged from batch 2"


@dataclass(frozen=True)
class OtherNames:
    """Inputs whose axis 0 has a batch name of its own: ``found`` (``mask[0] ('unk__6135')``), the axes
    with them all (``axes``), whether the evaluation proves them the batch, and what the details say."""

    found: list[str]
    axes: tuple[tuple[str, int], ...]
    proved: bool
    hint: str
    trace: api.BatchTrace  # the model traced with them all (follow_batch takes it rather than trace again)


def other_batch_names(
    model: onnx.ModelProto,
    batch: api.BatchAxes,
    inputs: dict[str, onnx.ValueInfoProto],
    size: int | str,
    b2: int,
    trace: api.BatchTrace,
) -> OtherNames | None:
    """Inputs whose axis 0 has a name of its own (tf2onnx's ``unk__6135`` beside ``unk__6134``).

    Each exporter may name the batch once per input. The detected batch is the first input's name
    only. The others are proved to be the batch too when the model, evaluated with them moving with
    the batch, runs at the new batch where with sizes of their own (``trace``) it did not (two images
    of a Siamese model subtracted from each other), or where with sizes of their own the evaluation
    stopped before any output (features concatenated beside the batch's): set_batch then sets them all,
    says so, and refuses what the model does with them all as it would for one input. Else
    the details only say that they keep a name of their own, with the entry that would set them."""
    names = {(api.read_dims(inputs[name]) or [None])[axis] for name, axis in batch.axes}
    chosen = {name for name, _ in batch.axes}
    left = [
        (name, 0)
        for name, info in inputs.items()
        if name not in chosen and (dims := api.read_dims(info)) and isinstance(dims[0], str) and dims[0] not in names
    ]
    if not left:
        return None
    every = (*batch.axes, *left)
    together = api.trace_batch(model, list(every), batch.old_size, b2, symbolic=isinstance(size, str))
    stops_alone = _stops_alone(model, trace, together)
    if together.refusals and not stops_alone:
        return None
    proved = bool(trace.refusals) or len(together.undecided) < len(trace.undecided) or stops_alone
    listed: api.FlowValue = (
        [name for name, _ in every] if all(axis == 0 for _, axis in every) else {name: axis for name, axis in every}
    )
    fix = api.SpecFix("set_batch", (("size", size), ("inputs", listed)))
    found = [f"{name}[0] ('{(api.read_dims(inputs[name]) or [''])[0]}')" for name, _ in left]
    one = len(found) == 1
    if proved:
        hint = (
            f"{', '.join(found)} name{'s' * one} the batch under another name: the model runs at the new batch "
            f"with {'it' if one else 'them'} at the batch's size, not with {'its' if one else 'their'} own, so "
            f"set_batch sets {'it' if one else 'them'} too; to say so in the spec (or list other inputs):\n"
        )
    else:
        hint = (
            f"{', '.join(found)} keep{'s' * one} a batch name of {'its' if one else 'their'} own; if "
            f"{'it carries' if one else 'they carry'} the batch too, use instead:\n"
        )
    return OtherNames(found, every, proved, hint + api.spec_lines(fix), together)


def _stops_alone(model: onnx.ModelProto, alone: api.BatchTrace, together: api.BatchTrace) -> bool:
    """Whether the evaluation with the other names at sizes of their own reaches no graph output and
    reaches fewer tensors than with them moving with the batch (ICLabel concatenates three inputs'
    features): they meet the batch, so what the evaluation with them all refuses stands."""
    if any(alone.reached(info.name) for info in model.graph.output):
        return False
    names = [name for node in model.graph.node for name in node.output if name]
    return sum(map(together.reached, names)) > sum(map(alone.reached, names))


__all__ = ["MOST_REPAIRS", "OtherNames", "Repairs", "follow_batch", "other_batch_names"]
