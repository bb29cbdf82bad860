"""The ``set_batch`` patch type: a static or symbolic batch, with shapes and shape constants to match.

1. Choose the batch axes: ``inputs``, or the documented detection (``patchspec.api.batch_axes``).
2. Follow the batch (``patchspec.api.trace_batch``): the graph is evaluated, shapes and small
   values, at the old batch, the new one and a third (and a point that moves other symbolic dims).
   Each Reshape, Expand, Slice and Resize whose data carries the batch is checked, at two batches
   both above 1, to keep every sample's elements together; a constant element proved to be the
   batch is rewritten (to the new size; for a symbolic batch to ``-1``, ``0`` or "end"),
   evaluating on with the rewrite. So are the constants that make a tensor at the exported batch
   which then meets the batch: a recurrent op's starting state, a class token a Concat joins, an
   arange over the batch (a Range of constants) that a Concat or arithmetic meets. A batch already
   dynamic is left alone when the model runs at the new batch as it is.
3. Refuse (exit 4, nothing written) what the evaluation proves: a node that cannot run at the new
   batch, a Slice that drops samples, an op that mixes them after a Squeeze, an If or Loop whose
   condition follows the batch. What it cannot settle is reported undecided, with the spec lines
   that settle it by hand.
4. Set the batch on the chosen axes, re-derive every other shape (``rederive_shapes``), give
   Squeezes that dropped a batch of 1 their axes, and correct output declarations from the trace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Annotated, TypedDict

from patchspec import COUPLED, UNDECIDED, Param, ParamProblem, PatchContext, PatchResult, PatchType, api, hookimpl

from ._set_batch_walks import Repairs, follow_batch, other_batch_names

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # annotations only: onnx and numpy are imported where a model is patched
    import onnx


class SetBatchParams(TypedDict):
    """The params as ``apply`` receives them; ``Param`` makes the schema the spec is checked with."""

    size: Annotated[
        int | str,
        Param(
            "the new batch: a positive integer (static, below 2**31) or a name (symbolic, e.g. N)",
            # 2**63-1 overflowed the tracker's int64 arithmetic (exit 5): a batch that large is never meant
            schema={
                "anyOf": [{"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, {"type": "string", "minLength": 1}]
            },
        ),
    ]
    inputs: NotRequired[
        Annotated[
            list[str] | dict[str, int],
            Param(
                "inputs that carry the batch: a list of names (batch on axis 0) or a mapping "
                "{name: axis}; default: detected from the first input",
                schema={
                    "anyOf": [
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                        {"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer"}},
                    ]
                },
            ),
        ]
    ]


class SetBatchPatch(PatchType[SetBatchParams]):
    name = "set_batch"
    description = (
        "Set the batch size (static or symbolic) on the inputs that carry it, re-derive every "
        "other shape, and rewrite shape constants that provably bake in the old batch."
    )
    shorthand = "size"

    def check_params(self, params: SetBatchParams) -> Iterator[ParamProblem]:
        size = params.get("size")
        if isinstance(size, str) and size.strip() != size:
            yield ("size",), f"a symbolic batch name has no surrounding spaces, got {size!r}"
        inputs = params.get("inputs")
        if isinstance(inputs, list) and len(set(inputs)) != len(inputs):
            twice = sorted({n for n in inputs if inputs.count(n) > 1})
            yield ("inputs",), f"each input is listed once, got {', '.join(map(repr, twice))} more than once"

    def check_model(self, params: SetBatchParams, model: onnx.ModelProto) -> Iterator[ParamProblem]:
        """An input named in ``inputs`` that the model lacks is a spec mistake (exit 2), found by validate too."""
        inputs = params.get("inputs")
        names = list(inputs) if isinstance(inputs, (list, dict)) else []
        graph_inputs = list(api.fed_inputs(model.graph))
        for name in names:
            if name not in graph_inputs:
                key = ("inputs", names.index(name)) if isinstance(inputs, list) else ("inputs", name)
                yield (
                    key,
                    (
                        f"input '{name}' is not a graph input of this model{api.did_you_mean(name, graph_inputs)}; "
                        f"its inputs are: {', '.join(graph_inputs)}"
                    ),
                )

    def apply(self, model: onnx.ModelProto, params: SetBatchParams, context: PatchContext) -> PatchResult:
        size = params["size"]
        batch = choose_batch_axes(model, params, context)
        inputs = api.fed_inputs(model.graph)
        _refuse_name_in_use(size, inputs, batch, context)
        if all((api.read_dims(inputs[name]) or [])[axis:][:1] == [size] for name, axis in batch.axes):
            return already_at(model, batch, size, _where(batch), context)
        batch, inlined = prepared(model, batch)
        inputs = api.fed_inputs(model.graph)  # the inliner made a new graph: its inputs are new objects
        symbolic = isinstance(size, str)
        same = not symbolic and size == batch.old_size  # constants are baked for this size already
        b2 = batch.old_size + 6 if isinstance(size, str) or same else size
        trace, not_at_one = follow_batch(model, batch, inputs, b2, symbolic)
        others = None if "inputs" in params else other_batch_names(model, batch, inputs, size, b2, trace)
        if others is not None and others.proved:  # the batch under other names too: set on them all
            batch = api.BatchAxes(others.axes, batch.old_size, batch.notes + (others.hint,), batch.unread)
            (trace, not_at_one), others = follow_batch(model, batch, inputs, b2, symbolic, others.trace), None
        repairs = Repairs(f"batch_{size}", partial(follow_batch, model, batch, inputs, b2, symbolic))
        trace, not_at_one = (trace, not_at_one) if same else repairs.make(model, (trace, not_at_one))
        if trace.refusals and not same:
            refuse(trace, size, _where(batch), context, others.hint if others else None)
        rewrites: list[api.Rewrite] = [] if same else trace.rewrites
        undecided: list[api.Undecided] = [] if same else trace.undecided
        changed = api.rewrite_batch_constants(model, rewrites, f"batch_{size}")
        squeezes = [] if same else api.explicit_squeezes(model, trace.squeezes)
        tiled = [] if same else api.tile_inputs(model, trace.tilings, f"batch_{size}")
        changed += [] if same else api.compute_shapes(model, trace.computed, f"batch_{size}")
        changed += [] if same else api.count_samples(model, trace.countings, f"batch_{size}")
        corrected = set_and_declare(model, batch, trace, size, context)
        counts = summary_counts(changed, squeezes, undecided, len(others.found) if others else 0, corrected, tiled)
        counts += repairs.count()
        notes = tuple(undecided_text(point) for point in undecided)
        found = told_coupled(trace, size)
        coupled = tuple(f"couples samples: {line}" for line in found)
        _record(context, undecided, coupled, found)
        details = (
            batch.notes
            + ((not_at_one,) if not_at_one else ())
            + ((trace.fitted.note(),) if trace.fitted else ())
            + ((others.hint,) if others else ())
            + tuple(repairs.ordered + repairs.reshaped + changed)
            + tuple(squeezes)
            + tuple(repairs.states + tiled)
            + tuple(corrected)
            + coupled
            + notes
        )
        summary = _summary_line(size, batch, counts, inlined, bool(not_at_one and symbolic), found)
        return PatchResult(True, summary, details)


def _record(context: PatchContext, undecided: list[api.Undecided], told: tuple[str, ...], coupled: list[str]) -> None:
    """What apply and the verifiers read after the patch: the undecided points (``--no-verify`` refuses
    them; only a verifier measures what a coupling costs, so the first is one) and the couplings."""
    context.state.get(UNDECIDED).extend(point.message for point in undecided)
    context.state.get(UNDECIDED).extend(told[:1])
    context.state.get(COUPLED).extend(coupled)


def set_and_declare(
    model: onnx.ModelProto, batch: api.BatchAxes, trace: api.BatchTrace, size: int | str, context: PatchContext
) -> list[str]:
    """Write the size on the batch axes, re-derive every shape, and declare what the trace found on the
    outputs; returns the declarations corrected."""
    inputs = api.fed_inputs(model.graph)
    declared = {info.name: api.read_dims(info) for info in model.graph.output}
    names = {dim for name, axis in batch.axes if isinstance(dim := (api.read_dims(inputs[name]) or [])[axis], str)}
    pins = context.state.get(api.PINNED_DIMS)
    for name, axis in batch.axes:
        api.write_dim(api.shape_dims(inputs[name])[axis], size)
        pins.get(name, {}).pop(axis, None)
    for info in inputs.values():  # an exporter's -1 (paddle2onnx) is an unknown dim: written as one
        for dim in info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else ():
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.Clear()
    api.rederive_shapes(model, context.state)  # pins is the state's own dict: the batch axes popped above
    corrected = api.declare_from_trace(model, trace, size, declared, names)
    api.apply_pins(model.graph, pins)
    return corrected


def _summary_line(
    size: int | str, batch: api.BatchAxes, counts: str, inlined: dict[str, int], not_at_one: bool, coupled: list[str]
) -> str:
    """``batch 4 on x[0]; 3 shape constants rewritten, ...``: what set_batch did, at any verbosity."""
    if inlined:
        calls = sum(inlined.values())
        counts += f", {calls} call{'s' * (calls != 1)} of model-local functions inlined"
    if not_at_one:  # the written model, like the original, fails at batch 1
        counts += "; like the original, it does not run at batch 1 (-v says where)"
    return f"batch {size} on {_where(batch)}; {counts}{coupling_summary(coupled)}"


def _inlined_note(calls: dict[str, int]) -> str:
    """What the details say of the model-local functions expanded before the batch was followed."""
    named = ", ".join(f"{name} ({count})" for name, count in calls.items())
    return f"model-local functions inlined (onnx's inliner), so that the batch is followed through them: {named}"


def _where(batch: api.BatchAxes) -> str:
    """``x[0], h[1]``: the batch axes as the summary names them."""
    return ", ".join(f"{name}[{axis}]" for name, axis in batch.axes)


def already_at(
    model: onnx.ModelProto, batch: api.BatchAxes, size: int | str, where: str, context: PatchContext
) -> PatchResult:
    """The batch is already ``size``: nothing to rewrite, but whether the samples are coupled is still
    told (and --no-verify refuses it), and an export's false output declaration is still corrected."""
    inputs = api.fed_inputs(model.graph)
    as_is = api.trace_batch(model, batch.axes, batch.old_size, batch.old_size + 6, decide=False)
    # the batch stays; whether its samples are independent is still told, and --no-verify refuses it
    found = told_coupled(as_is, size)
    context.state.get(COUPLED).extend(found)
    context.state.get(UNDECIDED).extend(f"couples samples: {c}" for c in found[:1])
    declared = {info.name: api.read_dims(info) for info in model.graph.output}
    names = {d for name, axis in batch.axes if isinstance(d := (api.read_dims(inputs[name]) or [])[axis], str)}
    before = [info.SerializeToString() for info in (*model.graph.output, *model.graph.value_info)]
    corrected = api.declare_from_trace(model, as_is, size, declared, names)  # an export's false output rank
    changed = before != [info.SerializeToString() for info in (*model.graph.output, *model.graph.value_info)]
    fixed = f"; {len(corrected)} output declaration{'s' * (len(corrected) != 1)} corrected" if corrected else ""
    summary = f"batch already {size} on {where}{fixed}{coupling_summary(found)}"
    coupled = tuple(f"couples samples: {c}" for c in found)
    return PatchResult(changed, summary, batch.notes + tuple(corrected) + coupled)


def summary_counts(
    changed: list[str],
    squeezes: list[str],
    undecided: list[api.Undecided],
    left: int,
    corrected: list[str],
    tiled: list[str] | None = None,
) -> str:
    """``3 shape constants rewritten, 1 undecided (-v lists them), ...``: what the summary line counts."""
    counts = f"{len(changed)} shape constant{'s' * (len(changed) != 1)} rewritten"
    if squeezes:
        counts += f", {len(squeezes)} Squeeze{'s' * (len(squeezes) != 1)} given axes"
    if tiled:
        counts += f", {len(tiled)} input{'s' * (len(tiled) != 1)} repeated to the batch"
    if undecided:
        fixes = ", with the spec lines that fix them" if any(point.fix for point in undecided) else ""
        counts += f", {len(undecided)} undecided (-v lists them{fixes})"
    if left:
        counts += f", {left} other input{'s' * (left > 1)} left with a batch of its own (-v)"
    if corrected:
        counts += f", {len(corrected)} output declaration{'s' * (len(corrected) != 1)} corrected"
    return counts


def told_coupled(trace: api.BatchTrace, size: int | str) -> list[str]:
    """What couples the samples at ``size``: nothing at a static batch of 1 (one sample has no other to
    depend on, though a constant baked at 1 mixes samples at any larger batch the trace tried)."""
    return [] if size == 1 else list(trace.coupled)


def coupling_summary(coupled: list[str]) -> str:
    """What the summary line says, at any verbosity, of ops that couple the samples: a batch is then not
    N independent samples, and a per-sample comparison measures by how much."""
    if not coupled:
        return ""
    more = f" (and {len(coupled) - 1} more, -v lists them)" if len(coupled) > 1 else ""
    return f"; the samples are not independent: {coupled[0]}{more}"


def undecided_text(point: api.Undecided) -> str:
    """An undecided point for the details, with the patch that settles it as lines to paste."""
    if point.fix is None:
        return point.message
    return f"{point.message}; to fix it by hand, add:\n{api.spec_lines(point.fix)}"


def refuse(trace: api.BatchTrace, size: int | str, where: str, context: PatchContext, names_hint: str | None) -> None:
    """Stop: the evaluation proves the model cannot run at the new batch, or drops or mixes samples there."""
    first, *rest = trace.refusals
    more = "".join(f"\n  also: {line}" for line in rest[:9])
    if len(rest) > 9:
        more += f"\n  and {len(rest) - 9} more"
    at = f"batch {size}" if isinstance(size, int) else f"a batch other than {trace.b1}"
    if names_hint:  # the batch has other names (other_batch_names): with them all, the model runs
        context.fail(f"{first}{more}\nnothing is written", hint=names_hint)
    constant = any("constant shape" in line for line in trace.refusals)
    how = " (replace_initializer for a constant that holds the batch)" if constant else ""
    context.fail(
        f"{first}{more}\nthe model cannot run correctly at {at} on {where} as it was exported, so nothing is written",
        hint=f"fix the named nodes with patches listed before set_batch{how}, or keep the exported batch and "
        "run one sample at a time",
    )


# -- which axes carry the batch ---------------------------------------------------------------------------
def choose_batch_axes(model: onnx.ModelProto, params: SetBatchParams, context: PatchContext) -> api.BatchAxes:
    try:
        return api.batch_axes(model, params.get("inputs"))
    except api.BatchAxesError as exc:
        context.fail(exc.message, key=exc.key, hint=exc.hint)


def prepared(model: onnx.ModelProto, batch: api.BatchAxes) -> tuple[api.BatchAxes, dict[str, int]]:
    """The model made fit to follow the batch node by node: model-local functions inlined (the evaluation
    follows the batch through their bodies), with a note. Returns the calls inlined."""
    inlined = api.inline_local_functions(model)
    if not inlined:
        return batch, inlined
    return api.BatchAxes(batch.axes, batch.old_size, (_inlined_note(inlined), *batch.notes), batch.unread), inlined


def _refuse_name_in_use(
    size: int | str, inputs: dict[str, onnx.ValueInfoProto], batch: api.BatchAxes, context: PatchContext
) -> None:
    """A symbolic batch named like another input axis would claim the two are equal."""
    if not isinstance(size, str):
        return
    chosen = set(batch.axes)
    clashes = [
        f"{name}[{axis}]"
        for name, info in inputs.items()
        for axis, dim in enumerate(api.read_dims(info) or [])
        if dim == size and (name, axis) not in chosen
    ]
    if clashes:
        context.fail(
            f"'{size}' already names {', '.join(clashes)}, which is not a batch axis here",
            key=("size",),
            hint="choose another batch name, or list those axes in 'inputs'",
        )


@hookimpl
def register_patch_types(register: Callable[[type], None]) -> None:
    register(SetBatchPatch)
